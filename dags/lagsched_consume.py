"""lagsched_consume: keep as many long-lived consumer slots running as linker_workers asks for."""

from lagsched.airflow.dags.consume import lagsched_consume

lagsched_consume()
