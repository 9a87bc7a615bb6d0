"""lagsched_topic_sync: register every configured cluster's topics (and their partitions) from its broker."""

from lagsched.airflow.dags.topic_sync import lagsched_topic_sync

lagsched_topic_sync()
