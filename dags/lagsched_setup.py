"""lagsched_setup: check the Connections and bring the lagsched schema up to date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

DOC = """
### lagsched setup

Run this once after installing lagsched, and again after upgrading it. It

1. checks that the Connections `lagsched_kafka`, `lagsched_mysql` and `lagsched_redis` reach their
   services (broker count, MySQL version, Redis version appear in each task's log and XCom);
2. applies the pending schema migrations from `sql/` to the `lagsched_mysql` database.
   Re-running is safe: applied migrations are recorded and skipped.

A failing check names the Connection to fix (Admin > Connections).
"""


@dag(
    dag_id="lagsched_setup",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
)
def lagsched_setup() -> None:
    @task
    def check_kafka() -> dict[str, Any]:
        from lagsched.adapters.health import check_kafka
        from lagsched.connections import kafka_config

        return check_kafka(kafka_config())

    @task
    def check_redis() -> dict[str, Any]:
        from lagsched.adapters.health import check_redis
        from lagsched.connections import redis_params

        return check_redis(redis_params())

    @task
    def migrate_schema() -> list[str]:
        import logging

        from lagsched.adapters.health import check_mysql
        from lagsched.adapters.migrations import migrate
        from lagsched.adapters.mysql import connect
        from lagsched.connections import mysql_params

        params = mysql_params()
        logging.getLogger(__name__).info("MySQL: %s", check_mysql(params))
        conn = connect(params)
        try:
            applied = migrate(conn)
        finally:
            conn.close()
        logging.getLogger(__name__).info("applied %d migration(s): %s", len(applied), applied or "none pending")
        return applied

    [check_kafka(), check_redis()] >> migrate_schema()


lagsched_setup()
