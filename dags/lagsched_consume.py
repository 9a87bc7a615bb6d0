"""lagsched_consume: run as many consumer slots as the topics' linker_workers ask for, run after run."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.operators import LagschedSparkSubmitOperator

# Next to dags/ in the repository (jobs/consume.py); a path computation, no I/O.
JOB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "jobs", "consume.py")
POOL = "lagsched_consume"

DOC = """
### lagsched consume

Continuous (a new run starts when the previous one ends; one run at a time). Each run

1. **plan_slots**: for every configured cluster (Variable `lagsched_clusters`; absent = the
   cluster `lagsched_kafka` with every topic), or only the one in the `cluster` param, counts the
   slots needed: the largest `linker_workers` of its enabled topics (a topic's lanes go to distinct
   slots), at most the cluster's `max_slots` (default 4). With nothing to consume it looks again
   every 5 s for up to `idle_wait_s` before the run ends empty;
2. **consume** (mapped, one task per slot, in the pool `lagsched_consume`): `spark-submit
   jobs/consume.py --slot <cluster>-slot-<n> --cluster <cluster> --budget-s <budget_s>`. Each slot
   claims its share of its topics, commits the claimed records to the cluster's Iceberg table
   exactly once (the cluster's `sink` in `lagsched_clusters`, docs/lake.md) and exits after
   `budget_s` at a batch boundary; then the next run plans again.

So raising a topic's `linker_workers` (the evaluator, an override) above the slot count starts
more slots at the next run, and lowering it starts fewer (a slot left with nothing to own also ends
its run early). A failed slot is retried (twice, 30 s apart); exit status 3 (the slot lost a claim
to another slot) is a failure like any other, and the retry claims again under a new epoch.

**Pool** `lagsched_consume` (Admin > Pools): its size bounds how many slots run at once across
all clusters; `lagsched stack up --airflow` creates it with 3 slots. Keep every cluster's
`max_slots` within it: slots beyond the pool wait for a free pool slot (up to a whole budget).

**Spark**: the master is the `lagsched_spark` Connection's host (`local[1]`: each slot is its own
driver; `spark://...`, `yarn`), the Kafka connector jars come from `LAGSCHED_SPARK_JARS`. The
Connections `lagsched_kafka` (or the cluster's own Kafka Connection), `lagsched_mysql` and
`lagsched_redis` reach the job through its process environment, never through rendered fields.

Marking a slot task failed (or any kill) asks its driver to finish its batch and stop: nothing is
lost or consumed twice either way (docs/consumer.md). Paused at creation: unpause it to consume.
"""


@dag(
    dag_id="lagsched_consume",
    schedule="@continuous",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    is_paused_upon_creation=True,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "cluster": Param(
            "", type="string", description="Registry cluster to consume; empty = every cluster in lagsched_clusters."
        ),
        "budget_s": Param(
            120, type="integer", minimum=10, maximum=3600, description="Seconds each slot runs before the next plan."
        ),
        # At most 4 min: plan_slots has 5 min to finish.
        "idle_wait_s": Param(
            60, type="integer", minimum=0, maximum=240, description="With nothing to consume, look again this long."
        ),
    },
)
def lagsched_consume() -> None:
    @task(execution_timeout=timedelta(minutes=5))
    def plan_slots() -> list[dict[str, Any]]:
        from airflow.sdk import Variable, get_current_context

        from lagsched.tasks import fail_fast, run_consume_plan, run_resolve_clusters

        params = get_current_context()["params"]
        with fail_fast():
            clusters = run_resolve_clusters(Variable.get("lagsched_clusters", default=None), str(params["cluster"]))
            return run_consume_plan(
                clusters,
                {"budget_s": float(params["budget_s"])},
                idle_wait_s=float(params["idle_wait_s"]),
            )

    LagschedSparkSubmitOperator.partial(
        task_id="consume",
        application=JOB,
        pool=POOL,
        # The budget is at most an hour; the rest is Spark's start and the last batch.
        execution_timeout=timedelta(hours=1, minutes=15),
        map_index_template="{{ task.slot }}",
    ).expand_kwargs(plan_slots())


lagsched_consume()
