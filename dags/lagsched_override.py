"""lagsched_override: pin one topic's linker_workers for a while, from a form in the Airflow UI."""

from lagsched.airflow.dags.override import lagsched_override

lagsched_override()
