"""lagsched_topic_sync: register every configured cluster's topics (and their partitions) from its broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from lagsched.airflow.dags.common import clusters
from lagsched.connections import MYSQL_CONN_ID

DOC = """
### lagsched topic sync

Every ten minutes, and whenever triggered (say after creating topics), for every cluster of the
Variable `lagsched_clusters` (absent: the cluster `lagsched_kafka`, every topic), or only the one in
the `cluster` param, mapped one task per cluster, it brings the topic registry (`lagsched_mysql`,
table `topics`) in step with the cluster's broker (its Kafka Connection, `kafka_conn_id`):

* a topic the cluster manages (its `topics` list or `topic_pattern`; neither = every topic) that is
  new on the broker gets a row and one row per partition; new partitions get rows;
* a registered topic deleted on the broker, **or no longer managed** (the filter was narrowed), is
  disabled: its row and offsets are kept, the monitor stops measuring it and the slots stop
  consuming it; if it comes back (the same Kafka topic id), it is re-enabled with its offsets;
* a topic deleted and created again under the same name is registered as a new topic without
  offsets (its old row stays, disabled).

The lag monitor runs the same sync before each measurement; this DAG is for a sync on demand and
for clusters the monitor does not measure often. XCom: what changed, per cluster.
A malformed `lagsched_clusters` fails the run at once naming the field; a broker or database that
is down is retried (twice, 10 s apart).
"""


@dag(
    dag_id="lagsched_topic_sync",
    schedule="*/10 * * * *",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    doc_md=DOC,
    tags=["lagsched"],
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    params={
        "cluster": Param(
            "", type="string", description="Registry cluster to sync; empty = every cluster in lagsched_clusters."
        ),
    },
)
def lagsched_topic_sync() -> None:
    @task(execution_timeout=timedelta(minutes=2))
    def sync_registry(cluster: dict[str, Any], mysql_conn_id: str = MYSQL_CONN_ID) -> dict[str, Any]:
        from lagsched.airflow.tasks import fail_fast, run_registry_sync

        with fail_fast():
            return run_registry_sync(cluster, mysql_conn_id=mysql_conn_id)

    sync_registry.expand(cluster=clusters())
