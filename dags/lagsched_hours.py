"""lagsched_hours: one partitioned asset event per completed hour of each table (docs/completeness.md)."""

from lagsched.airflow.dags.hours import lagsched_hours

lagsched_hours()
