"""Pure logic: no Kafka, MySQL, Redis, Spark or Airflow imports (tests/unit/test_layering.py checks)."""
