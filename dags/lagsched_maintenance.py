"""lagsched_maintenance: expire dead slots, trim history (retention), report losses and anomalies."""

from lagsched.airflow.dags.maintenance import lagsched_maintenance

lagsched_maintenance()
