"""Fixtures of the integration tier: the consumer harness (consumer_support.py) and the 3-broker rack
cluster (shared by test_rack.py and test_two_clusters.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_support import ConsumerHarness, class_archive_path, record_class_archive

from lagsched_dev.stack.config import StackConfig


@pytest.fixture
def consumer(
    mysql_db: Any,
    kafka_config: dict[str, Any],
    redis_client: Any,
    cluster: str,
    tmp_path: Path,
    slot_class_archive: Path,  # recorded before the test's slots start, which map it
) -> Iterator[ConsumerHarness]:
    db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    harness = ConsumerHarness(mysql_db, kafka_config, db, cluster, tmp_path)
    yield harness
    harness.stop_all()


@pytest.fixture(scope="session")
def slot_class_archive(stack: StackConfig, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slots' JVM class-data archive (`lagsched.adapters.spark.submit_command`): recorded once per
    machine by a slot of its own, before any test's slot starts, so no test's timing carries the
    recording; every slot then starts on a quarter less CPU. The recording slot gets a database,
    a Redis DB, a cluster and a topic of its own, all removed afterwards."""
    path = class_archive_path()
    if path.is_file():
        return path
    import dataclasses
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    from lagsched.adapters.migrations import migrate
    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config, mysql_params
    from lagsched_dev.loadgen import wait_until_ready

    name = f"lagsched_t_cds_{uuid.uuid4().hex[:8]}"
    topic = name.replace("_", "-")
    config = kafka_config()
    admin_db = connect(mysql_params())
    admin = AdminClient(config)
    with admin_db.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    try:
        params = dataclasses.replace(mysql_params(), database=name)
        conn = connect(params)
        migrate(conn)
        conn.close()
        admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)[topic].result(timeout=30)
        wait_until_ready(config, {topic: 1})
        redis_db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
        harness = ConsumerHarness(params, config, redis_db, f"c-{name[-8:]}", tmp_path_factory.mktemp("class-archive"))
        try:
            record_class_archive(harness, config, topic, path)
        finally:
            harness.stop_all()
    finally:
        admin.delete_topics([topic], operation_timeout=30)
        with admin_db.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin_db.close()
    return path


@pytest.fixture(scope="session")
def rack_cluster(stack: StackConfig) -> Iterator[StackConfig]:
    from lagsched_dev.stack import kafka_cluster
    from lagsched_dev.stack.process import ServiceError

    was_up = all(s.healthy for s in kafka_cluster.status(stack))
    try:
        kafka_cluster.up(stack)
    except ServiceError as exc:
        if not was_up:
            kafka_cluster.down(stack)
        pytest.fail(f"the 3-broker rack cluster could not start: {exc}", pytrace=False)
    yield stack
    if not was_up and not os.environ.get("LAGSCHED_KEEP_STACK"):
        kafka_cluster.down(stack)
