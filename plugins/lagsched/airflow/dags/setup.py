"""lagsched_setup: check the Connections and bring the lagsched schema up to date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import dag, task

from lagsched.connections import KAFKA_CONN_ID, MYSQL_CONN_ID, REDIS_CONN_ID

DOC = """
### lagsched setup

Run this once after installing lagsched, and again after upgrading it. It

1. checks that the Connections `lagsched_kafka`, `lagsched_mysql` and `lagsched_redis` reach their
   services (broker count, MySQL version, Redis version appear in each task's log and XCom);
2. checks that every cluster of the Variable `lagsched_clusters` has a warehouse for its Iceberg
   table: its `sink.warehouse`, else `LAGSCHED_WAREHOUSE` (or `LAGSCHED_HOME`) in the environment of
   Airflow's workers. There is no default: a table under a slot's working directory would be
   deleted with it (docs/install.md);
3. applies the pending schema migrations from `sql/` to the `lagsched_mysql` database.
   Re-running is safe: applied migrations are recorded and skipped.

A failing check names the Connection to fix (Admin > Connections), where it points (host and
port, user; never a password) and what failed. What a retry cannot fix fails at once: a wrong
password or database, a missing or malformed Connection, an invalid Kafka setting, and a Redis
password that the server ignores (it has none set: is this the Redis you meant?). A service that
is down or unreachable is retried twice, 10 s apart.
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
    def check_kafka(kafka_conn_id: str = KAFKA_CONN_ID) -> dict[str, Any]:
        from lagsched.airflow.tasks import fail_fast, run_check_kafka

        with fail_fast():
            return run_check_kafka(kafka_conn_id)

    @task
    def check_redis(redis_conn_id: str = REDIS_CONN_ID) -> dict[str, Any]:
        from lagsched.airflow.tasks import fail_fast, run_check_redis

        with fail_fast():
            return run_check_redis(redis_conn_id)

    @task
    def check_warehouses() -> dict[str, str]:
        from airflow.sdk import Variable

        from lagsched.airflow.tasks import fail_fast, run_check_warehouses

        with fail_fast():
            return run_check_warehouses(Variable.get("lagsched_clusters", default=None))

    @task
    def migrate_schema(mysql_conn_id: str = MYSQL_CONN_ID) -> list[str]:
        from lagsched.airflow.tasks import fail_fast, run_migrations

        with fail_fast():
            return run_migrations(mysql_conn_id)

    [check_kafka(), check_redis(), check_warehouses()] >> migrate_schema()
