"""lagsched_override: pin one topic's linker_workers for a while, from a form in the Airflow UI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.airflow.assets import WORKERS_CHANGED
from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID
from lagsched.core.overrides import DURATION_PATTERN

DOC = """
### lagsched manual override

Trigger it (**Trigger DAG** in the UI, or `airflow dags trigger lagsched_override --conf ...`) to
pin one topic's `linker_workers` for a while, whatever the scaling evaluator would decide:
Tinybird's Black Friday case, where you know a spike is coming and want the workers there before
the lag is.

The form:

* `topic`: a topic of the cluster, as registered by the topic sync;
* `linker_workers`: 1 to the topic's partition count (a worker beyond that would own nothing);
* `duration`: how long, with units: `90m`, `2h`, `1h30m`, `1d` (at most `7d`);
* `reason`: why; recorded with the decision, with your user name and the expiry;
* `cluster`: the registry cluster (default `lagsched_kafka`).

The task checks every value again (a run triggered through the API skips the form) and fails at
once, naming the field, on a bad one: an unknown topic, workers below 1 or above the partition
count, a duration that is not positive or longer than 7 days, an empty reason. Nothing is changed
then. Otherwise, in one MySQL transaction, the override is recorded (`scaling_overrides`), the
topic's `linker_workers` is set and the change is recorded as a scaling decision (rule
`override`); then it is announced on Redis `lagsched:scaling`, so running slots re-claim at once,
and the asset `lagsched://scaling/workers_changed` is updated, so the consume DAG starts the slots
a raised count needs.
A newer override of the same topic replaces an active one.

While the override is active the scaling evaluator holds the topic (rule `override`). When it
expires nothing runs: the evaluator no longer finds it and decides normally at its next run (its
first change is recorded with rule `override_expired`). Cancel early with
`lagsched override --cancel ID`. A retry of this task never applies the override twice (it is
keyed by the run id). See docs/overrides.md.
"""


@dag(
    dag_id="lagsched_override",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    params={
        "topic": Param(
            type="string",
            minLength=1,
            maxLength=249,
            pattern=r"^[a-zA-Z0-9._-]+$",
            title="Topic",
            description="The topic to pin (a registered topic of the cluster).",
        ),
        "linker_workers": Param(
            type="integer",
            minimum=1,
            title="linker_workers",
            description="Workers to pin: 1 to the topic's partition count.",
        ),
        "duration": Param(
            "2h",
            type="string",
            pattern=DURATION_PATTERN,
            title="For how long",
            description="With units: 90m, 2h, 1h30m, 1d (at most 7d). It expires by itself.",
        ),
        "reason": Param(
            type="string",
            minLength=1,
            maxLength=500,
            title="Why",
            description="Recorded with the decision, with your user name and the expiry.",
        ),
        "cluster": Param(
            "lagsched_kafka",
            type="string",
            minLength=1,
            title="Cluster",
            description="Registry cluster (topics.cluster).",
        ),
    },
)
def lagsched_override() -> None:
    # An override moves linker_workers like a decision: the consume DAG starts what it needs.
    @task(execution_timeout=timedelta(minutes=1), outlets=[WORKERS_CHANGED])
    def apply_override(mysql_conn_id: str = MYSQL_CONN_ID, redis_conn_id: str = REDIS_CONN_ID) -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from lagsched.airflow.override_tasks import run_override
        from lagsched.airflow.tasks import fail_fast

        context = get_current_context()
        user = getattr(context.get("dag_run"), "triggering_user_name", None)
        with fail_fast():
            return run_override(
                context["params"],
                created_by=str(user or "airflow"),
                # The same for every try of this run: a retry finds the override its first try made.
                request_id=str(context["run_id"]),
                mysql_conn_id=mysql_conn_id,
                redis_conn_id=redis_conn_id,
            )

    apply_override()
