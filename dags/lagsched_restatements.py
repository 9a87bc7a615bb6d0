"""lagsched_restatements: the hours of each table that late records landed in (docs/completeness.md)."""

from lagsched.airflow.dags.restatements import lagsched_restatements

lagsched_restatements()
