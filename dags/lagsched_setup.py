"""lagsched_setup: check the Connections and bring the lagsched schema up to date."""

from lagsched.airflow.dags.setup import lagsched_setup

lagsched_setup()
