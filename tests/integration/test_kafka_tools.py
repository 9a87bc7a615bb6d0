"""Kafka's own CLI tools, run from the jars `make deps` fetched, agree with the broker."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from lagsched_dev.cli import main
from lagsched_dev.kafka_tools import (
    GroupNotFoundError,
    KafkaToolError,
    consumer_groups_describe,
    consumer_perf_test,
    run_tool,
)

VALUE = b"x" * 100
KEY = b"kkkk"


def produce(kafka_config: dict[str, Any], topic: str, per_partition: dict[int, int]) -> None:
    producer = Producer({**kafka_config, "linger.ms": 20, "acks": "all", "enable.idempotence": True})
    for partition, count in per_partition.items():
        for _ in range(count):
            producer.produce(topic, key=KEY, value=VALUE, partition=partition)
    assert producer.flush(30) == 0


def commit(kafka_config: dict[str, Any], group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for a group without members, as lagsched mirrors its own."""
    admin = AdminClient(kafka_config)
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])]
    result = admin.alter_consumer_group_offsets(request)[group].result(timeout=30)
    assert [tp.error for tp in result.topic_partitions] == [None] * len(offsets)


@pytest.fixture
def group(kafka_config: dict[str, Any]) -> Any:
    """A fresh consumer group name; the group is deleted afterwards."""
    name = f"lagsched-tools-{uuid.uuid4().hex[:8]}"
    yield name
    admin = AdminClient(kafka_config)  # kept referenced until the future resolves
    admin.delete_consumer_groups([name], request_timeout=30)[name].exception(timeout=30)


def test_describe_reports_the_committed_offsets_and_lag(
    new_topic: Any, kafka_config: dict[str, Any], group: str
) -> None:
    topic = new_topic(4)
    produce(kafka_config, topic, {0: 120, 1: 100, 2: 7, 3: 50})
    commit(kafka_config, group, {(topic, 0): 10, (topic, 1): 100, (topic, 2): 0})

    rows = consumer_groups_describe(kafka_config["bootstrap.servers"], group)

    admin = AdminClient(kafka_config)
    specs = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(4)}
    log_end = {tp.partition: f.result().offset for tp, f in admin.list_offsets(specs, request_timeout=15).items()}
    assert log_end == {0: 120, 1: 100, 2: 7, 3: 50}
    # Partition 3 has no committed offset (and the group no member): the tool leaves it out.
    assert [(r.group, r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag) for r in rows] == [
        (group, topic, p, committed, log_end[p], log_end[p] - committed) for p, committed in [(0, 10), (1, 100), (2, 0)]
    ]
    assert all(r.consumer_id is None and r.host is None and r.client_id is None for r in rows)


def test_describe_an_unknown_group_fails_with_the_tools_own_message(kafka_config: dict[str, Any]) -> None:
    # The tool itself exits 0 after printing "Error: ... GroupIdNotFoundException".
    missing = f"lagsched-no-such-group-{uuid.uuid4().hex[:8]}"
    with pytest.raises(GroupNotFoundError, match=f"Group {missing} not found"):
        consumer_groups_describe(kafka_config["bootstrap.servers"], missing)


def test_perf_test_reads_a_small_topic(new_topic: Any, kafka_config: dict[str, Any], group: str) -> None:
    topic = new_topic(2)
    produce(kafka_config, topic, {0: 3000, 1: 2000})

    result = consumer_perf_test(kafka_config["bootstrap.servers"], topic, 5000, group=group)

    assert result.complete
    assert result.records == 5000
    # The tool counts key and value bytes, in MiB with four decimals.
    assert result.megabytes == pytest.approx(5000 * (len(KEY) + len(VALUE)) / 2**20, abs=1e-4)
    assert result.fetch_records_per_s > 0 and result.records_per_s > 0
    assert result.fetch_ms > 0 and result.rebalance_ms >= 0
    # The rates are the tool's own figures: records over its fetch time and over its whole run.
    assert result.fetch_records_per_s == pytest.approx(result.records / (result.fetch_ms / 1000), rel=0.01)
    assert result.wall_s * 1000 > result.fetch_ms


def test_perf_test_short_of_records_is_incomplete(new_topic: Any, kafka_config: dict[str, Any], group: str) -> None:
    topic = new_topic(1)
    produce(kafka_config, topic, {0: 300})

    # The idle timeout also covers joining the group and the first fetch: generous on a busy machine.
    result = consumer_perf_test(kafka_config["bootstrap.servers"], topic, 1000, idle_timeout_ms=5000, group=group)

    assert not result.complete
    assert result.records == 300


def test_missing_jars_say_run_make_deps(tmp_path: Path) -> None:
    with pytest.raises(KafkaToolError, match=r"no kafka-tools-\*\.jar\); run `make deps`"):
        consumer_groups_describe("127.0.0.1:1", "g", jars=tmp_path)


def test_missing_java_says_run_make_deps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KafkaToolError, match=r"java is not installed .*run `make deps`"):
        consumer_groups_describe("127.0.0.1:1", "g")


def test_a_failing_tool_reports_its_exit_status_and_stderr(kafka_config: dict[str, Any]) -> None:
    with pytest.raises(KafkaToolError, match=r"exited with status 1:\n  no-such-option is not a recognized option$"):
        run_tool("consumer-perf-test", ["--bootstrap-server", kafka_config["bootstrap.servers"], "--no-such-option"])


def test_a_tool_past_its_timeout_is_killed_with_a_clear_error(new_topic: Any, kafka_config: dict[str, Any]) -> None:
    topic = new_topic(1)  # empty: the perf test would wait its 60 s idle timeout
    with pytest.raises(KafkaToolError, match="did not finish within 3 s"):
        consumer_perf_test(kafka_config["bootstrap.servers"], topic, 10, idle_timeout_ms=60_000, timeout_s=3)


def test_cli_passthrough_runs_the_real_tool_against_the_stack(
    new_topic: Any, kafka_config: dict[str, Any], group: str, capfd: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(1)
    produce(kafka_config, topic, {0: 40})
    commit(kafka_config, group, {(topic, 0): 15})

    # No --bootstrap-server: the passthrough adds the local stack's.
    assert main(["kafka-tool", "consumer-groups", "--", "--describe", "--group", group]) == 0

    out = capfd.readouterr().out
    row = next(line.split() for line in out.splitlines() if line.startswith(group))
    assert row[:6] == [group, topic, "0", "15", "40", "25"]
