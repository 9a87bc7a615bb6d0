"""lagsched_lag_monitor: measure every enabled topic's lag, store the samples, log a summary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.airflow.assets import LAG_MEASURED  # updated by every measurement; the evaluator runs on it
from lagsched.airflow.dags.common import clusters
from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID

DOC = """
### lagsched lag monitor

Every minute, for every cluster of the Variable `lagsched_clusters` (absent: the cluster
`lagsched_kafka`, every topic, through the Connection `lagsched_kafka`), or only the cluster in
the `cluster` param (a name that is not configured: that cluster through `lagsched_kafka`, every
topic), mapped one task per cluster:

0. syncs the topic registry with the cluster's broker: new topics and new partitions get rows, a
   topic deleted on the broker, or outside the cluster's `topics`/`topic_pattern`, is disabled
   with its offsets kept (task `sync_registry`);
1. reads the enabled topics and the pipeline's own committed offsets from the `lagsched_mysql`
   registry (`topics`, `topic_partitions`);
2. reads every partition's latest and log-start offset from the cluster's Kafka Connection, in one
   batched Admin `list_offsets` call per offset kind;
3. computes lag (records), **lost records** (deleted by retention before they were consumed:
   reported, never counted as lag), time lag (seconds, interpolated from the stored samples; exactly
   0 when caught up) and ingress/consumption rates;
4. stores the samples and one lag record per topic in `lagsched_redis` (window and TTL from the
   Variable `lagsched_settings`), where the scaling evaluator reads them;
5. logs a table of the most lagging topics and every topic with lost records; the same summary is
   the task's XCom. Each successful measurement updates the asset `lagsched://lag/measured`, which
   starts the scaling evaluator;
6. tells the notifiers of the Variable `lagsched_notifiers` (unset: none) about each new stalled or
   stopped topic and each new loss of records, once, and once more when it clears
   (docs/notifications.md). A notifier that fails is a warning and is retried on the next run; it
   never fails the measurement.

Settings: the Variables `lagsched_settings` and `lagsched_clusters` (JSON, see docs/configuration.md
and docs/dags.md; absent = defaults), read when the tasks run. A malformed Variable fails the run at
once, naming the field, the value and what is allowed; nothing is measured or stored.

Failures name the Connection to fix (Admin > Connections) and where it points. What a retry
cannot fix fails the run at once, without retries: a wrong password or database, a missing or
malformed Connection, an invalid Kafka setting, a bad `cluster` param, a malformed Variable. A
broker or database that is down, unreachable or timing out is retried (twice, 10 s apart).

The DAG runs every minute; a scheduled run measures a cluster when `measure_every_s` of the
Variable `lagsched_settings` (60 to 86,400, default 60) has passed since its last measurement, and
is skipped otherwise (pink in the grid, no asset update, so no evaluation). A run you trigger
measures at once. See docs/lag.md.
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
            "", type="string", description="Registry cluster (topics.cluster) to measure; empty = every configured one."
        ),
        "top": Param(10, type="integer", minimum=1, description="Topics listed in the summary table."),
    },
)
def lagsched_lag_monitor() -> None:
    @task(execution_timeout=timedelta(seconds=30))
    def sync_registry(cluster: dict[str, Any], mysql_conn_id: str = MYSQL_CONN_ID) -> dict[str, Any]:
        from lagsched.airflow.tasks import fail_fast, run_registry_sync

        with fail_fast():
            run_registry_sync(cluster, mysql_conn_id=mysql_conn_id)
        return cluster  # the measurement of this cluster comes next

    @task(execution_timeout=timedelta(seconds=50), outlets=[LAG_MEASURED])
    def measure_lag(
        cluster: dict[str, Any], mysql_conn_id: str = MYSQL_CONN_ID, redis_conn_id: str = REDIS_CONN_ID
    ) -> dict[str, Any]:
        from airflow.sdk import Variable, get_current_context
        from airflow.sdk.exceptions import AirflowSkipException

        from lagsched.airflow.tasks import fail_fast, run_monitor

        context = get_current_context()
        # A run the schedule started measures when measure_every_s is due; one a user or an asset
        # triggered measures at once.
        scheduled = context["dag_run"].run_type == "scheduled"
        with fail_fast():
            summary = run_monitor(
                cluster,
                Variable.get("lagsched_settings", default=None),
                top=int(context["params"]["top"]),
                when_due=scheduled,
                mysql_conn_id=mysql_conn_id,
                redis_conn_id=redis_conn_id,
                raw_notifiers=Variable.get("lagsched_notifiers", default=None),
                context=context,
            )
        if "skipped" in summary:
            raise AirflowSkipException(f"cluster {summary['cluster']}: {summary['skipped']}")
        return summary

    measure_lag.expand(cluster=sync_registry.expand(cluster=clusters()))
