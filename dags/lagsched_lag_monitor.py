"""lagsched_lag_monitor: measure every enabled topic's lag, store the samples, log a summary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

DOC = """
### lagsched lag monitor

Every minute, for the cluster in the `cluster` param (the registry's `topics.cluster`), it

0. syncs the topic registry with the broker: new topics and new partitions get rows, a topic
   deleted on the broker is disabled with its offsets kept (task `sync_registry`);
1. reads the enabled topics and the pipeline's own committed offsets from the `lagsched_mysql`
   registry (`topics`, `topic_partitions`);
2. reads every partition's latest and log-start offset from `lagsched_kafka`, in one batched
   Admin `list_offsets` call per offset kind;
3. computes lag (records), **lost records** (deleted by retention before they were consumed:
   reported, never counted as lag), time lag (seconds, interpolated from the stored samples; exactly
   0 when caught up) and ingress/consumption rates;
4. stores the samples and one lag record per topic in `lagsched_redis` (window and TTL from the
   Variable), where the scaling evaluator reads them;
5. logs a table of the most lagging topics and every topic with lost records; the same summary is
   the task's XCom.

Settings: the Variable `lagsched_settings` (JSON, see docs/configuration.md; absent = defaults),
read when the task runs. A malformed Variable fails the run at once, naming the field, the value
and what is allowed; nothing is measured or stored.

Failures name the Connection to fix (Admin > Connections) and where it points. What a retry
cannot fix fails the run at once, without retries: a wrong password or database, a missing or
malformed Connection, an invalid Kafka setting, a bad `cluster` param, a malformed Variable. A
broker or database that is down, unreachable or timing out is retried (twice, 10 s apart).

The schedule is fixed in this file (every minute): a schedule cannot read a Variable at parse
time. If you change `measure_every_s`, change the schedule to match. See docs/lag.md.
"""


@dag(
    dag_id="lagsched_lag_monitor",
    schedule="* * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    params={
        "cluster": Param(
            "lagsched_kafka", type="string", description="Registry cluster name (topics.cluster) to measure."
        ),
        "top": Param(10, type="integer", minimum=1, description="Topics listed in the summary table."),
    },
)
def lagsched_lag_monitor() -> None:
    @task(execution_timeout=timedelta(seconds=30))
    def sync_registry() -> dict[str, Any]:
        from airflow.sdk import get_current_context

        from lagsched.tasks import fail_fast, run_registry_sync

        with fail_fast():
            return run_registry_sync(str(get_current_context()["params"]["cluster"]))

    @task(execution_timeout=timedelta(seconds=50))
    def measure_lag() -> dict[str, Any]:
        from airflow.sdk import Variable, get_current_context

        from lagsched.tasks import fail_fast, run_monitor

        params = get_current_context()["params"]
        with fail_fast():
            return run_monitor(
                str(params["cluster"]), Variable.get("lagsched_settings", default=None), top=int(params["top"])
            )

    sync_registry() >> measure_lag()


lagsched_lag_monitor()
