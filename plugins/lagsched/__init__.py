"""lagsched: a lag-aware scheduler for Kafka consumers, orchestrated by Airflow."""

__version__ = "0.1.0"
