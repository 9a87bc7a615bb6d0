"""lagsched_replay: decode a topic's dead letters again into its typed table, from a form in the Airflow UI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.connections import MYSQL_CONN_ID

DOC = """
### lagsched dead-letter replay

Records of a routed topic that could not be decoded are in the cluster's dead-letter table with
the reason (docs/routing.md). Once the cause is fixed (the route's `value_schema` in
`lagsched_clusters`, the schema registry's Connection, a table made to hold a refused schema),
trigger this DAG to decode them again into the topic's typed table:

* `topic` (required) and `cluster`;
* optionally `partitions`, an offset range `[from_offset, to_offset)` and a window of record
  timestamps `[from_time, to_time)` (ISO times with their zone, e.g. `2026-12-01T10:00:00Z`);
* `dry_run`: only report what would land and what would stay dead.

Exactly once: a dead letter is replayed at most once (recorded in `dead_letter_replays` after the
typed table's commit; a replay killed in between finds its rows in the table and only records
them). What still does not decode stays where it is; the task's result (XCom) counts both, with
the reasons.
"""


@dag(
    dag_id="lagsched_replay",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30)},
    params={
        "topic": Param(
            type="string", minLength=1, maxLength=249, pattern=r"^[a-zA-Z0-9._-]+$", title="Topic",
            description="The routed topic whose dead letters to replay.",
        ),
        "cluster": Param("lagsched_kafka", type="string", minLength=1, title="Cluster"),
        "partitions": Param([], type="array", items={"type": "integer", "minimum": 0}, title="Partitions",
                            description="Only these partitions (empty: all)."),
        "from_offset": Param(None, type=["null", "integer"], minimum=0, title="From offset (inclusive)"),
        "to_offset": Param(None, type=["null", "integer"], minimum=0, title="To offset (exclusive)"),
        "from_time": Param(None, type=["null", "string"], title="From time (ISO, with zone)"),
        "to_time": Param(None, type=["null", "string"], title="To time (ISO, with zone, exclusive)"),
        "dry_run": Param(False, type="boolean", title="Dry run", description="Report only; change nothing."),
    },
)  # fmt: skip
def lagsched_replay() -> None:
    @task(execution_timeout=timedelta(hours=1))
    def replay(mysql_conn_id: str = MYSQL_CONN_ID) -> dict[str, Any]:
        from airflow.sdk import Variable, get_current_context

        from lagsched.airflow.replay_tasks import run_replay
        from lagsched.airflow.tasks import fail_fast

        context = get_current_context()
        with fail_fast():
            return run_replay(
                context["params"], Variable.get("lagsched_clusters", default=None), mysql_conn_id=mysql_conn_id
            )

    replay()
