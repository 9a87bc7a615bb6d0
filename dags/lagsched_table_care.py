from lagsched.airflow.dags import lagsched_table_care
