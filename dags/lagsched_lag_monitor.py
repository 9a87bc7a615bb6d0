"""lagsched_lag_monitor: measure every enabled topic's lag, store the samples, log a summary."""

from lagsched.airflow.dags.lag_monitor import lagsched_lag_monitor

lagsched_lag_monitor()
