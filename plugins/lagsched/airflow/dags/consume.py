"""lagsched_consume: keep as many long-lived consumer slots running as the topics' linker_workers ask for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, Param, dag, task

from lagsched.airflow.assets import SLOT_ENDED, WORKERS_CHANGED
from lagsched.airflow.operators import LagschedSparkSubmitOperator
from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID
from lagsched.jobs import CONSUME_JOB

POOL = "lagsched_consume"
#: The safety net: a slot that failed for good (retries spent) is started again within this.
REFILL_CRON = "*/15 * * * *"

DOC = """
### lagsched consume

Keeps each cluster's consumer slots running. Slots live long (the cluster's `slot_budget_s` in
the Variable `lagsched_clusters`, an hour by default), and each run starts only the slots that are
needed and not running, so runs never wait on each other:

1. **plan_slots**: for every configured cluster (Variable `lagsched_clusters`; absent = the
   cluster `lagsched_kafka` with every topic), or only the one in the `cluster` param, the slots
   needed: the largest `linker_workers` of its enabled topics (a topic's lanes go to distinct
   slots), at most the cluster's `max_slots` (default 4). Of slots `<cluster>-slot-1..n` it keeps
   those whose lock in Redis is free (no process runs them);
2. **consume** (mapped, one task per slot to start, in the pool `lagsched_consume`):
   `spark-submit lagsched/jobs/consume.py --slot <cluster>-slot-<n> --cluster <cluster> --budget-s ...`.
   The slot claims its share of its topics, commits the claimed records to the cluster's Iceberg
   table exactly once (the cluster's `sink`, docs/lake.md), follows `linker_workers` as it
   changes, and ends at its budget, or at a batch boundary once the cluster needs fewer than n
   slots (a scale-down). Its end updates the asset `lagsched://consume/slot_ended`.

**When it runs** (a handful of runs an hour per cluster, not one per slot batch):
- on the asset `lagsched://scaling/workers_changed` (the evaluator changed a topic's
  `linker_workers`, or an override did): a scale-up's slots start within seconds;
- on the asset `lagsched://consume/slot_ended`: a slot that reached its budget is started again
  at once (its rows went to the cluster's other slots meanwhile);
- every 15 minutes, as a safety net (a slot whose retries failed), and at once the first time it
  is unpaused; after that, **Trigger** it to start the slots now.
A run with nothing to start ends at once (the consume task is skipped).

A second start of a running slot (two runs racing, a hand-started slot) leaves at once with exit
status 0 and touches nothing of the running one. A failed slot is retried (twice, 30 s apart); exit
status 3 (the slot lost a claim or its lock to another process) is a failure like any other, and
the retry claims again under a new epoch.

**Pool** `lagsched_consume` (Admin > Pools): its size bounds how many slots run at once across
all clusters; `lagsched-dev stack up --airflow` creates it with 3 slots. Keep the sum of the clusters'
`max_slots` within it: slots beyond the pool wait for a free pool slot.

**Spark**: the master is the `lagsched_spark` Connection's host (`local[1]`: each slot is its own
driver; `spark://...`, `yarn`), the lake's jars come from `LAGSCHED_SPARK_JARS`. The
Connections `lagsched_kafka` (or the cluster's own Kafka Connection), `lagsched_mysql` and
`lagsched_redis` reach the job through its process environment, never through rendered fields.

Marking a slot task failed (or any kill) asks its driver to finish its batch and stop: nothing is
lost or consumed twice either way (docs/consumer.md). Paused at creation: unpause it to consume.
"""


@dag(
    dag_id="lagsched_consume",
    schedule=AssetOrTimeSchedule(
        # run_immediately: the first unpause ever starts the slots at once, not at the next mark.
        timetable=CronTriggerTimetable(REFILL_CRON, timezone="UTC", run_immediately=True),
        assets=(WORKERS_CHANGED | SLOT_ENDED),
    ),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    # Each run holds its slots for their whole life; runs started later must not queue behind it.
    max_active_runs=64,
    is_paused_upon_creation=True,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "cluster": Param(
            "", type="string", description="Registry cluster to consume; empty = every cluster in lagsched_clusters."
        ),
        "budget_s": Param(
            None,
            type=["null", "integer"],
            minimum=10,
            maximum=86_400,
            description="Seconds each started slot runs; empty = the cluster's slot_budget_s (default 3600).",
        ),
    },
)
def lagsched_consume() -> None:
    @task(execution_timeout=timedelta(minutes=2))
    def plan_slots(mysql_conn_id: str = MYSQL_CONN_ID, redis_conn_id: str = REDIS_CONN_ID) -> list[dict[str, Any]]:
        from airflow.sdk import Variable, get_current_context

        from lagsched.airflow.tasks import fail_fast, run_consume_plan, run_resolve_clusters

        params = get_current_context()["params"]
        budget = params.get("budget_s")
        with fail_fast():
            clusters = run_resolve_clusters(Variable.get("lagsched_clusters", default=None), str(params["cluster"]))
            return run_consume_plan(
                clusters,
                {"budget_s": None if budget is None else float(budget)},
                mysql_conn_id=mysql_conn_id,
                redis_conn_id=redis_conn_id,
            )

    LagschedSparkSubmitOperator.partial(
        task_id="consume",
        application=CONSUME_JOB,
        pool=POOL,
        outlets=[SLOT_ENDED],
        # The longest budget (a day) plus Spark's start and the last batch.
        execution_timeout=timedelta(hours=24, minutes=15),
        map_index_template="{{ task.slot }}",
    ).expand_kwargs(plan_slots())
