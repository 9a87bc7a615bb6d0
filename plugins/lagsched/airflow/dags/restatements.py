"""lagsched_restatements: the hours of each table that late records landed in (docs/completeness.md)."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import CronDataIntervalTimetable, PokeReturnValue, dag, task
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowRescheduleException

from lagsched.airflow.assets import TABLE_RESTATEMENTS, restatement_asset
from lagsched.core.completeness import (
    DEFAULT_RESTATEMENTS_SCHEDULE,
    parse_hours_start,
    parse_restatements_start,
)

DOC = """
### lagsched restatements

A record whose hour of its table was complete before it was committed (its `CreateTime` trails the
table's watermark by more than the allowed lateness) is a **late record**: it lands in its hour
anyway, and is counted (`lagsched_late_records_total`, the page, `lagsched status`).

One run per ten minutes (`[lagsched] restatements_schedule` of Airflow's configuration, a cron
expression; catchup: none is skipped after an outage). Each run reads the late
records recorded in its data interval (by MySQL's clock, a minute after the interval ends) and
emits, for each table they landed in, **one event** on the table's restatements asset
(`iceberg://<catalog>/<namespace>/<table>/restatements`; not partitioned). Its extra:
`hours` (`{hour: {late_records, topics, snapshot_id, rows, offsets}}`: what each hour holds now),
`table`, `cluster`, `recorded_from`, `recorded_until`, `restated: true`. A retried run restates
the same hours; clearing a succeeded run emits its events again.

**Paused when created**, like `lagsched_hours`; it starts from `[lagsched] restatements_start`
(an ISO time; default: `[lagsched] hours_start`).
Downstream: `schedule=[restatement_asset("lagsched.kafka.orders")]`, then redo the hours named in
`triggering_asset_events`.
"""


@dag(
    dag_id="lagsched_restatements",
    schedule=CronDataIntervalTimetable(
        conf.get("lagsched", "restatements_schedule", fallback="") or DEFAULT_RESTATEMENTS_SCHEDULE, timezone="UTC"
    ),
    start_date=parse_restatements_start(
        conf.get("lagsched", "restatements_start", fallback=""),
        parse_hours_start(conf.get("lagsched", "hours_start", fallback="")),
    ),
    catchup=True,
    is_paused_upon_creation=True,
    # One run at a time: Airflow 3.3 links an asset to the alias on its first event, and two first
    # events of one table at once collide on that link (see lagsched_hours).
    max_active_runs=1,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 3, "retry_delay": timedelta(minutes=1)},
)
def lagsched_restatements() -> None:
    # A sensor in reschedule mode, so that it can wait for the margin without holding a worker slot.
    @task.sensor(poke_interval=30, timeout=24 * 3600, mode="reschedule", outlets=[TABLE_RESTATEMENTS])
    def restate() -> PokeReturnValue:
        from airflow.sdk import Variable, get_current_context

        from lagsched.airflow.hour_tasks import restatements_wait_until, run_restatements
        from lagsched.airflow.tasks import fail_fast

        context = get_current_context()
        since: datetime = context["data_interval_start"]  # type: ignore[assignment]
        until: datetime = context["data_interval_end"]  # type: ignore[assignment]
        if (later := restatements_wait_until(until)) is not None:
            raise AirflowRescheduleException(later)  # type: ignore[no-untyped-call]
        with fail_fast():
            found = run_restatements(Variable.get("lagsched_clusters", default=None), since, until)
        for r in found:
            asset = restatement_asset(r["table"], cluster=r["cluster"], topics=r["topics"])
            context["outlet_events"][TABLE_RESTATEMENTS].add(asset, extra=r["extra"])
        return PokeReturnValue(is_done=True, xcom_value=[r["extra"] for r in found])

    restate()
