"""lagsched_replay: decode a topic's dead letters again into its typed table, from a form in the Airflow UI."""

from lagsched.airflow.dags.replay import lagsched_replay

lagsched_replay()
