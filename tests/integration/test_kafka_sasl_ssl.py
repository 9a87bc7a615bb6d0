"""A Kafka Connection with SASL_SSL (SCRAM-SHA-512, a CA of its own) through the whole pipeline.

A second Kafka node (the stack's own service class, in a folder of its own) gets a SASL_SSL
listener with a certificate signed by a CA made here and a SCRAM-SHA-512 user; its PLAINTEXT
listener stays for the broker's own use. The Connection is written in confluent-kafka's words
(``sasl.username``, ``sasl.password``, ``ssl.ca.location``), as the DAGs use it. Before, the README
said those settings reach Spark's Kafka source unchanged: Kafka's Java client knows none of them,
so a slot could not read a secured cluster. Checked here: the Admin calls (lag), a consume slot
(Spark's Kafka source) landing every record once and mirroring its offsets, a wrong password
failing at once naming the Connection, and no secret in the slot's log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_support import ConsumerHarness, assert_exactly_once, produce

from lagsched.adapters.health import check_kafka
from lagsched.adapters.kafka_admin import admin_client, read_offsets
from lagsched.core.errors import ConnectionFailure
from lagsched_dev.stack.config import StackConfig
from secure_services import KAFKA_PASSWORD, sasl_ssl_kafka

# Starts Spark applications: with the other Spark tests, one at a time (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("spark")

PASSWORD = KAFKA_PASSWORD


@pytest.fixture(scope="module")
def secure_kafka(stack: StackConfig) -> Iterator[dict[str, Any]]:
    """The SASL_SSL node's Kafka Connection extra (confluent-kafka's words); stopped at the end."""
    with sasl_ssl_kafka(stack) as extra:
        yield extra


def test_lag_reads_and_a_slot_consume_a_sasl_ssl_cluster(
    secure_kafka: dict[str, Any], mysql_db: Any, redis_client: Any, cluster: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    assert check_kafka(secure_kafka)  # the setup check, over SASL_SSL
    topic = f"secure-{tmp_path.name[-8:]}".replace("_", "-")
    creator = AdminClient(secure_kafka)  # kept: a destroyed client fails its pending futures
    creator.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    produce(secure_kafka, topic, 3_000, partitions=2)
    offsets = read_offsets(admin_client(secure_kafka), {topic: 2})[topic]
    assert [o.latest for o in offsets] == [1_500, 1_500]

    harness = ConsumerHarness(mysql_db, secure_kafka, 15, cluster, tmp_path)
    try:
        topic_id = harness.register(topic)
        env = harness.env()
        env["AIRFLOW_CONN_LAGSCHED_KAFKA"] = json.dumps({"conn_type": "kafka", "extra": secure_kafka})
        slot = harness.start("secure", "--exit-when-idle", env=env)
        code = slot.wait(300)
        assert code == 0, slot.tail()
        assert harness.committed(topic_id) == {0: 1_500, 1: 1_500}
        assert_exactly_once(harness.sink_table(), topic, {0: 1_500, 1: 1_500})
        log = slot.log.read_text(errors="replace")
        assert PASSWORD not in log, "the SASL password is in the slot's log"
    finally:
        harness.stop_all()
    # The mirrored consumer group (confluent-kafka, over SASL_SSL too) holds the same offsets.
    from confluent_kafka import Consumer, TopicPartition

    group = Consumer({**secure_kafka, "group.id": f"lagsched.{cluster}", "enable.auto.commit": False})
    try:
        committed = group.committed([TopicPartition(topic, p) for p in range(2)], timeout=30)
    finally:
        group.close()
    assert [tp.offset for tp in committed] == [1_500, 1_500]


def test_a_wrong_scram_password_fails_at_once_naming_the_connection(secure_kafka: dict[str, Any]) -> None:
    with pytest.raises(ConnectionFailure) as refused:
        check_kafka({**secure_kafka, "sasl.password": "not-the-password"}, timeout_s=10)
    assert refused.value.permanent
    assert "not-the-password" not in str(refused.value) and PASSWORD not in str(refused.value)
