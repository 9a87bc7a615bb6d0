"""Fixtures of the integration tier: the consumer harness (consumer_support.py) and the 3-broker rack
cluster (shared by test_rack.py and test_two_clusters.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_support import ConsumerHarness

from lagsched_dev.stack.config import StackConfig


@pytest.fixture
def consumer(
    mysql_db: Any, kafka_config: dict[str, Any], redis_client: Any, cluster: str, tmp_path: Path
) -> Iterator[ConsumerHarness]:
    db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    harness = ConsumerHarness(mysql_db, kafka_config, db, cluster, tmp_path)
    yield harness
    harness.stop_all()


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
