"""lagsched_table_care: compact, expire and clean each cluster's Iceberg table, every hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.airflow.callbacks import table_care_failed, table_care_succeeded
from lagsched.airflow.operators import LagschedSparkSubmitOperator
from lagsched.jobs import TABLE_CARE_JOB

DOC = """
### lagsched table care

Every hour, for every cluster of `lagsched_clusters` (or the one in the `cluster` param), one Spark
job (`lagsched/jobs/table_care.py`, on the Spark Connection `lagsched_spark` like the consumer slots)
that, on the cluster's Iceberg table:

1. **compacts** the small files of closed time partitions (hours that ended at least
   `closed_after_minutes` ago) to `target_file_mb` (Iceberg's `rewrite_data_files`);
2. **expires snapshots** older than `snapshot_max_age_hours`, keeping at least `snapshots_to_keep`;
3. **deletes orphan files** (written, never committed: a killed slot's) older than `orphan_min_age_hours`;
4. **rewrites the manifests** when there are more than `max_manifests`.

Settings: the Variable `lagsched_table_care` (JSON, every field optional; docs/table-care.md). Each
step is one Iceberg commit: readers see the table before or after it, never between. The task log
ends with a JSON line of what each step did (files before and after, seconds). The `now` param
acts as of another time (ISO), e.g. to compact the current hour after a backfill.
"""


@dag(
    dag_id="lagsched_table_care",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    params={
        "cluster": Param("", type="string", description="Cluster whose table to care for; empty = every cluster."),
        "now": Param("", type="string", description="Act as of this ISO time; empty = now."),
    },
)
def lagsched_table_care() -> None:
    @task(execution_timeout=timedelta(minutes=2))
    def plan_tables() -> list[dict[str, Any]]:
        from airflow.sdk import Variable, get_current_context

        from lagsched.airflow.tasks import fail_fast, run_table_care_plan

        params = get_current_context()["params"]
        with fail_fast():
            return run_table_care_plan(
                Variable.get("lagsched_clusters", default=None),
                Variable.get("lagsched_table_care", default=None),
                str(params["cluster"]),
                str(params["now"]),
            )

    LagschedSparkSubmitOperator.partial(
        task_id="care",
        application=TABLE_CARE_JOB,
        name="lagsched-table-care",
        execution_timeout=timedelta(minutes=50),
        map_index_template="{{ task.application_args[1] }}",
        # Each attempt's outcome, for the alert on failing table care (docs/alerts.md).
        on_success_callback=table_care_succeeded,
        on_retry_callback=table_care_failed,
        on_failure_callback=table_care_failed,
    ).expand_kwargs(plan_tables())
