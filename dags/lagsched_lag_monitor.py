from lagsched.airflow.dags import lagsched_lag_monitor
