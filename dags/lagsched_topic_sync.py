from lagsched.airflow.dags import lagsched_topic_sync
