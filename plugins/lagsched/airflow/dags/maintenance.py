"""lagsched_maintenance: expire dead slots, trim history (retention), report retention losses and anomalies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID

DOC = """
### lagsched maintenance

Hourly, for every cluster of the Variable `lagsched_clusters` (absent: `lagsched_kafka`):

1. **expires dead slots**: slots silent for more than `slot_horizon_s` leave the live set in Redis
   (a slot that stops cleanly leaves at once; a crashed one stays until this);
2. **trims history**: the Redis lag history of topics no longer enabled (deleted, or outside the
   cluster's topic filter), which would otherwise wait for its TTL;
3. **applies retention** (the Variable `lagsched_retention`, JSON, every field optional;
   docs/dags.md): deletes `scaling_decisions` older than `decisions_days` (30; each topic's newest
   decision and an active override's are kept), `retention_gaps` older than `gaps_days` (30) and
   overrides that ended more than `overrides_days` (30) ago, `batch_rows` (5,000) rows per DELETE,
   and the Redis entries of dead slots (their racks); the log and the XCom say how many rows each
   table lost;
4. **reports** retention losses (records deleted by retention before a slot read them: those the
   slots skipped, per partition, and those still ahead of the committed offsets) and
   anomalies (a committed offset beyond the broker's high watermark: a topic re-created behind the
   registry's back, or offsets set by hand). They appear as `RETENTION LOSS` and `ANOMALY`
   warning lines in the task log, and in the XCom.

Logic: `lagsched.workflows.maintenance`. Failures name the Connection to fix; a service that is
down is retried (twice, 1 min apart). A malformed `lagsched_clusters` or `lagsched_retention`
fails the run at once, before anything is deleted.
"""


@dag(
    dag_id="lagsched_maintenance",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},
    params={
        "slot_horizon_s": Param(
            3600, type="number", minimum=60, description="Slots silent longer than this are dropped from the live set."
        ),
    },
)
def lagsched_maintenance() -> None:
    @task(execution_timeout=timedelta(minutes=10))
    def maintain(mysql_conn_id: str = MYSQL_CONN_ID, redis_conn_id: str = REDIS_CONN_ID) -> dict[str, Any]:
        from airflow.sdk import Variable, get_current_context

        from lagsched.airflow.tasks import fail_fast, run_maintenance, run_resolve_clusters

        params = get_current_context()["params"]
        with fail_fast():
            return run_maintenance(
                run_resolve_clusters(Variable.get("lagsched_clusters", default=None)),
                slot_horizon_s=float(params["slot_horizon_s"]),
                raw_retention=Variable.get("lagsched_retention", default=None),
                mysql_conn_id=mysql_conn_id,
                redis_conn_id=redis_conn_id,
            )

    maintain()
