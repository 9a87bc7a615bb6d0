from lagsched.airflow.dags import lagsched_maintenance
