"""lagsched_table_care: compact, expire and clean each cluster's Iceberg table, every hour."""

from lagsched.airflow.dags.table_care import lagsched_table_care

lagsched_table_care()
