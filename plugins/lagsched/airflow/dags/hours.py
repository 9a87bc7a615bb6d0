"""lagsched_hours: one partitioned asset event per completed hour of each table (docs/completeness.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import CronPartitionTimetable, PokeReturnValue, dag, task
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowRescheduleException

from lagsched.airflow.assets import TABLE_HOURS, table_asset
from lagsched.core.completeness import parse_hours_start

DOC = """
### lagsched hours

One run per hour (its partition key, `2026-12-02T13:00:00`, is the hour it announces; the run
starts when the hour ends). For every table of `lagsched_clusters` (each cluster's shared table
and each typed table that exists; not the dead-letter tables), one mapped task waits
(`reschedule` mode, no worker slot held; one check at a time over all runs) until the table's
**watermark** passes the hour's end plus the allowed lateness (`allowed_lateness_s`, 300 s unless
set), then succeeds with **one asset event** on the table's asset
(`iceberg://<catalog>/<namespace>/<table>`), keyed by the hour. Its extra: `snapshot_id`,
`rows`, `offsets` (`{topic: {partition: [first, last]}}`), `watermark_ms`, `valid_through`,
`table`, `cluster`, `hour`, `restated`.

* **Exactly once.** Airflow writes a task's events in the transaction that marks it a success;
  a crashed or killed attempt writes none and is retried; a failed run wrote none. Catchup creates
  a run for every hour after an outage. **Clearing a succeeded task emits its hour again**: that
  is the one way to get a second event.
* A stalled or stopped topic holds its table's hours back (the task waits, up to 7 days, then
  fails; clear it to wait again). An idle partition does not (the lag monitor reads its end).
* **Paused when created**: unpause it to start announcing. It announces from `[lagsched]
  hours_start` of Airflow's configuration (`AIRFLOW__LAGSCHED__HOURS_START`, an ISO hour; default
  2026-12-01T00:00:00Z) on; earlier hours: a **backfill** over them.

Downstream: `PartitionedAssetTimetable(assets=table_asset("lagsched.kafka.orders"))`; each run's
`dag_run.partition_key` is the hour (docs/completeness.md has a DAG reading it with pyiceberg).
"""


@dag(
    dag_id="lagsched_hours",
    # Each run announces the hour that ended at its start (run_offset=-1: the 13:00 run is 12:00's).
    schedule=CronPartitionTimetable("0 * * * *", timezone="UTC", run_offset=-1),
    start_date=parse_hours_start(conf.get("lagsched", "hours_start", fallback="")),
    catchup=True,
    is_paused_upon_creation=True,
    # Hours wait for their watermark in reschedule mode; a day of them may wait at once.
    max_active_runs=24,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 3, "retry_delay": timedelta(minutes=1)},
)
def lagsched_hours() -> None:
    @task(execution_timeout=timedelta(minutes=2))
    def tables() -> list[dict[str, Any]]:
        from airflow.sdk import Variable

        from lagsched.airflow.hour_tasks import run_hour_tables
        from lagsched.airflow.tasks import fail_fast

        with fail_fast():
            return run_hour_tables(Variable.get("lagsched_clusters", default=None))

    @task.sensor(
        poke_interval=60,
        timeout=7 * 24 * 3600,
        mode="reschedule",
        outlets=[TABLE_HOURS],
        map_index_template="{{ table_name }}",
        # One check at a time over all runs: Airflow 3.3 links an asset to the alias on its first
        # event, and two first events of one table at once (catchup) collide on that link, failing
        # the task without a retry (duplicate key in asset_alias_asset). A check takes seconds and
        # runs about once per table and hour, so one at a time keeps up with hundreds of tables.
        max_active_tis_per_dag=1,
    )
    def hour_complete(table: dict[str, Any]) -> PokeReturnValue:
        from airflow.sdk import Variable, get_current_context

        from lagsched.airflow.hour_tasks import run_hour_check
        from lagsched.airflow.tasks import fail_fast
        from lagsched.core.completeness import HourTable

        context = get_current_context()
        wanted = HourTable.from_dict(table)
        context["table_name"] = wanted.identifier  # type: ignore[typeddict-unknown-key]
        with fail_fast():
            clusters = Variable.get("lagsched_clusters", default=None)
            found = run_hour_check(table, context["dag_run"].partition_key, clusters)
        if not found["complete"]:
            if found["look_again_at"]:  # the hour (and its lateness) has not even ended: not before then
                raise AirflowRescheduleException(datetime.fromisoformat(found["look_again_at"]))  # type: ignore[no-untyped-call]
            return PokeReturnValue(is_done=False)
        asset = table_asset(wanted.identifier, cluster=wanted.cluster, topics=wanted.topics)
        context["outlet_events"][TABLE_HOURS].add(asset, extra=found["extra"])
        return PokeReturnValue(is_done=True, xcom_value=found["extra"])

    hour_complete.expand(table=tables())
