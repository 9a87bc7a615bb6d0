"""lagsched_scaling_evaluator: decide each topic's linker_workers, apply, record and announce."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.airflow.assets import LAG_MEASURED, WORKERS_CHANGED
from lagsched.airflow.dags.common import clusters
from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID

DOC = """
### lagsched scaling evaluator

Runs after every lag measurement (scheduled on the asset `lagsched://lag/measured`, which the
lag monitor updates), for every cluster of the Variable `lagsched_clusters`, or only the one in the
`cluster` param, mapped one task per cluster. It evaluates every enabled topic with the policy of
the Variable `lagsched_settings` (hevo, keda or capacity; see docs/configuration.md) over the lag
history the lag monitor stored in Redis, and for each change:

1. updates `topics.linker_workers` as a compare-and-set (`WHERE linker_workers = <old>`), so two
   evaluators can never both apply a step;
2. records the decision in `scaling_decisions` (time, topic, previous and new linker_workers, lag, time lag,
   slope, fit, policy, rule, reason in words) in the same transaction;
3. publishes it on the Redis channel `lagsched:scaling` so running slots re-claim with the new
   worker count at once;
4. **announce_changes** updates the asset `lagsched://scaling/workers_changed` (its extra lists
   the changes) when any topic's `linker_workers` changed, and is skipped otherwise: the consume
   DAG is scheduled on that asset, so a scale-up starts the missing slots within seconds, while an
   evaluation that changes nothing starts no consume run.

A topic is evaluated at its first run, then once at least `evaluate_every` new measurements arrived
since its last evaluation: since the evaluator runs after each measurement, `evaluate_every` means
exactly that many measurements. History older than 3 x `measure_every_s` is ignored (the monitor is
not running). When slots heartbeat, scale-ups are capped at the cluster's `max_slots` (what the
consume DAG can start; `lagsched_clusters`) or the live slots (slot timeout in the `slot_timeout_s`
param), whichever is more; with no slot registered at all, there is no such cap.

The notifiers of the Variable `lagsched_notifiers` (unset: none) are told, once, about a topic
whose lag rises while it already runs its most workers, and about a manual override ending within
15 minutes, and once more when that clears (docs/notifications.md); a notifier that fails is a
warning, retried on the next run, and never fails the evaluation.

A retry never applies a step twice: decisions are keyed by the run id. A malformed Variable fails
the run at once with the field, the value and what is allowed, and changes nothing.
Failures name the Connection to fix (Admin > Connections); what a retry cannot fix (a wrong
password, a missing or malformed Connection, a bad `cluster` param) fails the run at once, and a
database or Redis that is down or timing out is retried.
See docs/lag.md for the table and the message format.
"""


@dag(
    dag_id="lagsched_scaling_evaluator",
    schedule=[LAG_MEASURED],
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=15)},
    params={
        "cluster": Param(
            "",
            type="string",
            description="Registry cluster (topics.cluster) to evaluate; empty = every configured one.",
        ),
        "slot_timeout_s": Param(
            60.0, type="number", exclusiveMinimum=0, description="A slot silent this long is not live."
        ),
    },
)
def lagsched_scaling_evaluator() -> None:
    @task(execution_timeout=timedelta(minutes=4))
    def evaluate_and_apply(
        cluster: dict[str, Any], mysql_conn_id: str = MYSQL_CONN_ID, redis_conn_id: str = REDIS_CONN_ID
    ) -> dict[str, Any]:
        from airflow.sdk import Variable, get_current_context

        from lagsched.airflow.tasks import fail_fast, run_evaluation

        context = get_current_context()
        params = context["params"]
        with fail_fast():
            return run_evaluation(
                cluster,
                Variable.get("lagsched_settings", default=None),
                # The run id is the same for every try of this run: a retry finds what it applied.
                evaluation_id=str(context["run_id"]),
                slot_timeout_s=float(params["slot_timeout_s"]),
                mysql_conn_id=mysql_conn_id,
                redis_conn_id=redis_conn_id,
                raw_notifiers=Variable.get("lagsched_notifiers", default=None),
                context=context,
            )

    # After every cluster's evaluation succeeded: a failed one fails the run (a red run in the UI);
    # the other clusters' scale-ups then wait for the consume DAG's 15-minute refill.
    @task(execution_timeout=timedelta(seconds=30), outlets=[WORKERS_CHANGED])
    def announce_changes(results: list[dict[str, Any] | None]) -> dict[str, Any]:
        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import AirflowSkipException

        from lagsched.airflow.tasks import changed_workers

        # One read of every cluster's result (a slice). Iterating would read them one by one and
        # end on a read past the last, which Airflow's client logs as an error (apache/airflow#73175).
        changes = changed_workers(results[:])
        if not changes:
            raise AirflowSkipException("no topic's linker_workers changed: no consume run to start")
        extra: dict[str, Any] = {"changes": changes}  # JSON: topic names and linker_workers
        get_current_context()["outlet_events"][WORKERS_CHANGED].extra = extra
        return {"changes": changes}

    announce_changes(evaluate_and_apply.expand(cluster=clusters()))
