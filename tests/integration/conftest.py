"""Fixtures of the integration tier: the consumer harness (consumer_support.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from consumer_support import ConsumerHarness


@pytest.fixture
def consumer(
    mysql_db: Any, kafka_config: dict[str, Any], redis_client: Any, cluster: str, tmp_path: Path
) -> Iterator[ConsumerHarness]:
    db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    harness = ConsumerHarness(mysql_db, kafka_config, db, cluster, tmp_path)
    yield harness
    harness.stop_all()
