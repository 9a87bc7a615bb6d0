"""Kafka's own storage tool formats a node's log dir with the id the stack passes, whatever its
first character: ids are URL-safe base64, and one in 64 random ones starts with ``-``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lagsched_dev.stack.config import load
from lagsched_dev.stack.services import Kafka

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("cluster_id", ["-K7bfJ3vQhO2y3xvWl1Q1A", "q7bfJ3vQhO2y3xvWl1Q1Ag"])
def test_the_storage_tool_takes_the_cluster_id_as_given(tmp_path: Path, cluster_id: str) -> None:
    stack = load()
    if not any(stack.kafka_jars.glob("kafka_2.13-*.jar")):
        pytest.fail(f"no Kafka jars in {stack.kafka_jars}; run `make deps` first")
    node = Kafka(replace(stack, home=tmp_path, kafka_jars_override=stack.kafka_jars))
    config = node._write_config()
    node._format_storage(config, cluster_id, "--standalone")
    meta = (tmp_path / "kafka" / "data" / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in meta
