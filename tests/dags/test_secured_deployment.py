"""The whole pipeline against secured services at once (issue 17, item 5).

Kafka with a SASL_SSL listener (SCRAM-SHA-512), MariaDB requiring TLS for the lagsched user and a
TLS-only Redis with an ACL user (tests/secure_services.py), each with a CA of its own, reached only
through the three Connections as a deployment defines them. Airflow runs the setup, the topic
sync, the lag monitor and the scaling evaluator; `LagschedSparkSubmitOperator` runs a consume slot
(Spark's Kafka source, the Iceberg catalog over TLS); the mirrored consumer group is read over
SASL_SSL; the lagsched page's routes are served in-process. Every record lands once, and none of
the three passwords appears in a task log, the slot's (Spark's) output, or anything the page
serves.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_lag_dags import load_dag, state

from lagsched.jobs import CONSUME_JOB
from lagsched_dev.stack.config import StackConfig
from secure_services import KAFKA_PASSWORD, REDIS_PASSWORD, sasl_ssl_kafka, tls_acl_redis, tls_mariadb

# Starts Spark applications: with the other Spark tests, one at a time (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("spark")

JOB = Path(CONSUME_JOB)
PARTITIONS, RECORDS = 2, 3_000


@dataclass(frozen=True)
class Secured:
    kafka: dict[str, Any]  # the Kafka Connection's extra
    mysql: dict[str, Any]  # the MySQL Connection
    redis: dict[str, Any]  # the Redis Connection

    @property
    def secrets(self) -> dict[str, str]:
        return {"Kafka": KAFKA_PASSWORD, "MySQL": self.mysql["password"], "Redis": REDIS_PASSWORD}


@pytest.fixture(scope="module")
def secured(stack: StackConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with (
        sasl_ssl_kafka(stack) as kafka,
        tls_mariadb(stack) as mysql,
        tls_acl_redis(tmp_path_factory.mktemp("secure-redis")) as redis,
    ):
        yield Secured(kafka, mysql, redis)


def _no_secret_in(where: str, text: str, secured: Secured) -> None:
    for service, secret in secured.secrets.items():
        assert secret not in text, f"the {service} password is in {where}"


def test_a_deployment_with_every_service_secured_measures_scales_consumes_and_leaks_no_secret(
    secured: Secured,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from lagsched.adapters.lag_store import LagRecord, LagStore
    from lagsched.adapters.lake_reader import read_rows
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import redis_client
    from lagsched.airflow.operators import LagschedSparkSubmitOperator
    from lagsched.connections import mysql_params, redis_params
    from lagsched.core.lake import LakeTable

    caplog.set_level("INFO")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_KAFKA", json.dumps({"conn_type": "kafka", "extra": secured.kafka}))
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_MYSQL", json.dumps(secured.mysql))
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_REDIS", json.dumps(secured.redis))
    cluster = f"sec-{uuid.uuid4().hex[:8]}"
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AIRFLOW_VAR_LAGSCHED_CLUSTERS", json.dumps({cluster: {"topics": [topic]}}))
    # A small band, so the measured backlog (plus the rising history below) scales the topic up.
    monkeypatch.setenv(
        "AIRFLOW_VAR_LAGSCHED_SETTINGS",
        json.dumps({"defaults": {"min_lag": 10, "max_lag": 100, "evaluate_every": 1, "scale_up_cooldown_s": 0}}),
    )

    admin = AdminClient(secured.kafka)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)
    producer = Producer(secured.kafka)
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0

    # Airflow: setup (Connection checks, schema over TLS), topic sync, lag monitor, evaluator.
    for dag_id, conf in (
        ("lagsched_setup", None),
        ("lagsched_topic_sync", {"cluster": cluster}),
        ("lagsched_lag_monitor", {"cluster": cluster}),
    ):
        run = load_dag(dag_id).test(run_conf=conf)
        assert state(run) == "success", f"{dag_id}: {run.state}"
    redis = redis_client(redis_params())
    store = LagStore(redis, cluster)
    (measured,) = store.read_lag_records([topic])[topic]
    assert measured.lag == RECORDS  # the monitor read the secured broker and wrote the secured Redis
    now = time.time()
    for i in range(4):  # an older, rising history before the measurement: the evaluator scales up
        store.add_lag_records({topic: LagRecord(now - 60 * (5 - i), lag=500 * (i + 1))})
    run = load_dag("lagsched_scaling_evaluator").test(run_conf={"cluster": cluster})
    assert state(run) == "success", run.state
    mysql = mysql_params()
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT linker_workers FROM topics WHERE cluster = %s AND name = %s", (cluster, topic))
            (workers,) = cur.fetchone()
        conn.commit()
    finally:
        conn.close()
    assert workers == PARTITIONS  # scaled up (capped at the partition count)

    # A consume slot through the operator: Spark's Kafka source over SASL_SSL, the catalog over TLS.
    op = LagschedSparkSubmitOperator(
        task_id="consume",
        application=str(JOB),
        application_args=[
            "--slot",
            f"{cluster}-slot-1",
            "--cluster",
            cluster,
            "--exit-when-idle",
            "--warehouse",
            f"file://{tmp_path}/warehouse",
        ],
        conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
    )
    op.execute({})
    warehouse = f"file://{tmp_path}/warehouse"
    lake = LakeTable.of(cluster, {"warehouse": warehouse}, default_warehouse=warehouse)
    rows = read_rows(lake, mysql, topic=topic)
    offsets = sorted(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True))
    assert offsets == sorted((p, o) for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS))
    group = Consumer({**secured.kafka, "group.id": f"lagsched.{cluster}", "enable.auto.commit": False})
    try:
        committed = group.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        group.close()
    assert [tp.offset for tp in committed] == [RECORDS // PARTITIONS] * PARTITIONS

    # The lagsched page, as Airflow mounts it (the Airflow login is not what is tested here).
    from fastapi.testclient import TestClient

    from lagsched.ui.app import create_app
    from lagsched.ui.auth import require_airflow_view, require_metrics_access

    app = create_app()
    app.dependency_overrides[require_airflow_view] = lambda: None
    app.dependency_overrides[require_metrics_access] = lambda: None
    client = TestClient(app)
    served = []
    routes = ["/", "/api/clusters", f"/api/status?cluster={cluster}", f"/api/history?cluster={cluster}&topic={topic}"]
    for route in [*routes, "/metrics"]:
        response = client.get(route)
        assert response.status_code == 200, (route, response.text[:300])
        served.append(response.text)
    status = json.loads(served[2])
    (view,) = [t for t in status["topics"] if t["name"] == topic]
    assert view["linker_workers"] == PARTITIONS

    out, err = capfd.readouterr()
    _no_secret_in("a task log or the slot's output", caplog.text + out + err, secured)
    _no_secret_in("what the page serves", "\n".join(served), secured)
    assert "consume.py" in caplog.text + out + err  # the slot's output was captured, not lost
