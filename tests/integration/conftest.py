"""Fixtures of the integration tier: the consumer harness (consumer_support.py) and the 3-broker rack
cluster (shared by test_rack.py and test_two_clusters.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_support import ConsumerHarness, class_archive_path, record_class_archive

from lagsched_dev.stack.config import StackConfig
from scratch import scratch_database, scratch_topics


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
    from lagsched.connections import kafka_config
    from lagsched_dev.bench.claims import migrate_database

    config = kafka_config()
    redis_db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    with scratch_database() as params, scratch_topics(config) as new_topic:
        topic = new_topic(1, prefix="cds")
        harness = ConsumerHarness(
            migrate_database(params),
            config,
            redis_db,
            f"c-{uuid.uuid4().hex[:8]}",
            tmp_path_factory.mktemp("class-archive"),
        )
        try:
            record_class_archive(harness, config, topic, path)
        finally:
            harness.stop_all()
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
