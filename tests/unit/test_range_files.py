"""The task-side reader-writer's rules, driven by a scripted consumer (the real one is in
tests/integration/test_lake_sink.py and the consumer tests): where a read ends, what it keeps, which
files it writes, and what a failure leaves behind."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaError, Message

from lagsched.adapters.data_files import CREATED_SCHEMA, FileSettings, hour_name
from lagsched.adapters.range_files import TaskResult, write_ranges
from lagsched.core.offsets import OffsetRange

pytestmark = pytest.mark.unit

HOUR_MS = 3_600_000
T0 = 1_780_000_000_000 // HOUR_MS * HOUR_MS  # the start of an hour, in ms


def record(topic: str, partition: int, offset: int, ts_ms: int = T0 + 1) -> Message:
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=f"k{offset}".encode(),
        value=f"v{offset}".encode(),
        headers=[("i", str(offset).encode())],
        timestamp=(1, ts_ms),
    )


def eof(topic: str, partition: int, offset: int) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))


class ScriptedConsumer:
    """Hands out the scripted batches in order, then nothing; records what it was told."""

    def __init__(self, batches: Iterable[Sequence[Message]]) -> None:
        self.batches = list(batches)
        self.assigned: list[tuple[str, int, int]] = []
        self.paused: list[tuple[str, int]] = []
        self.closed = False

    def assign(self, partitions: Sequence[Any]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return list(self.batches.pop(0)) if self.batches else []

    def pause(self, partitions: Sequence[Any]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0  # every look at the clock is a second later: a stall shows in a few polls
        return self.now


@pytest.fixture
def settings(tmp_path: Path) -> FileSettings:
    return FileSettings.of((tmp_path / "t").as_uri(), CREATED_SCHEMA, {"write.parquet.compression-codec": "snappy"})


def run(
    ranges: Sequence[OffsetRange], consumer: ScriptedConsumer, settings: FileSettings, stall_s: float = 30
) -> TaskResult:
    return write_ranges(ranges, {}, settings, stall_s=stall_s, consumer_factory=lambda _c: consumer, clock=Clock())


def rows(result: TaskResult) -> list[tuple[str, int, int]]:
    out = []
    for f in result.files:
        t = pq.read_table(f.location.removeprefix("file://"))
        out += list(zip(t["topic"].to_pylist(), t["partition"].to_pylist(), t["offset"].to_pylist(), strict=True))
    return sorted(out)


def test_records_before_an_end_of_partition_in_the_same_poll_are_kept(settings: FileSettings) -> None:
    consumer = ScriptedConsumer([[record("t", 0, o) for o in range(5)] + [eof("t", 0, 5)]])
    result = run([OffsetRange("t", 0, 0, 5)], consumer, settings)
    assert result.error is None
    assert rows(result) == [("t", 0, o) for o in range(5)]
    assert consumer.assigned == [("t", 0, 0)] and consumer.closed


def test_a_range_ending_on_an_offset_without_a_record_ends_at_the_next_record_or_the_end_of_the_log(
    settings: FileSettings,
) -> None:
    # [0, 6): offset 5 is a transaction marker; the next record (6) is not ours.
    consumer = ScriptedConsumer([[record("t", 0, o) for o in (0, 1, 2, 3, 4, 6, 7)]])
    result = run([OffsetRange("t", 0, 0, 6)], consumer, settings)
    assert rows(result) == [("t", 0, o) for o in range(5)]
    assert ("t", 0) in consumer.paused
    # [0, 6) again, nothing after the marker yet: the end of the partition says so.
    consumer = ScriptedConsumer([[record("t", 0, o) for o in range(5)], [eof("t", 0, 6)]])
    assert rows(run([OffsetRange("t", 0, 0, 6)], consumer, settings)) == [("t", 0, o) for o in range(5)]


def test_holes_are_read_over_and_repeated_or_foreign_records_are_dropped(settings: FileSettings) -> None:
    consumer = ScriptedConsumer(
        [
            [record("t", 1, o) for o in (10, 11, 14)],  # 12, 13 compacted away
            [record("t", 1, o) for o in (11, 14, 15, 16)],  # 11 and 14 again (a re-fetch), then 15
            [record("u", 1, 0)],  # a partition nobody asked for
            [record("t", 1, 17), record("t", 1, 20)],  # 17 is the last of [10, 18); 20 is past it
        ]
    )
    result = run([OffsetRange("t", 1, 10, 18)], consumer, settings)
    assert result.error is None, result.error
    assert rows(result) == [("t", 1, o) for o in (10, 11, 14, 15, 16, 17)]
    assert result.records == {("t", 1): 6}


def test_several_partitions_of_several_topics_in_one_task_each_get_their_own_files(settings: FileSettings) -> None:
    consumer = ScriptedConsumer(
        [
            [record("a", 0, 0), record("a", 0, 1), record("b", 0, 0), record("a", 1, 5)],
            [eof("a", 0, 2), eof("b", 0, 1), record("a", 1, 6), eof("a", 1, 7)],
        ]
    )
    ranges = [OffsetRange("a", 0, 0, 2), OffsetRange("a", 1, 5, 7), OffsetRange("b", 0, 0, 1)]
    result = run(ranges, consumer, settings)
    assert rows(result) == [("a", 0, 0), ("a", 0, 1), ("a", 1, 5), ("a", 1, 6), ("b", 0, 0)]
    assert sorted((f.topic, f.partition, f.first, f.last, f.records) for f in result.files) == [
        ("a", 0, 0, 1, 2),
        ("a", 1, 5, 6, 2),
        ("b", 0, 0, 0, 1),
    ]


def test_records_of_several_hours_go_to_one_file_per_hour_in_offset_order(settings: FileSettings) -> None:
    stamps = [T0 + 1, T0 - 1, T0 + HOUR_MS + 5, T0 + 2, -1]  # -1: a record without a timestamp
    consumer = ScriptedConsumer([[record("t", 0, o, ts) for o, ts in enumerate(stamps)], [eof("t", 0, 5)]])
    result = run([OffsetRange("t", 0, 0, 5)], consumer, settings)
    hour = T0 // HOUR_MS
    by_hour = {f.hour: f for f in result.files}
    assert sorted(by_hour) == [-1, hour - 1, hour, hour + 1]
    assert (by_hour[hour].first, by_hour[hour].last, by_hour[hour].records) == (0, 3, 2)
    assert f"timestamp_hour={hour_name(hour)}" in by_hour[hour].location
    assert "timestamp_hour=1969-12-31-23" in by_hour[-1].location
    table = pq.read_table(by_hour[hour].location.removeprefix("file://"))
    assert table["offset"].to_pylist() == [0, 3]
    assert table["headers"].to_pylist() == [[{"key": "i", "value": b"0"}], [{"key": "i", "value": b"3"}]]


def test_the_files_carry_the_tables_field_ids_and_the_write_properties(settings: FileSettings) -> None:
    consumer = ScriptedConsumer([[record("t", 0, o) for o in range(3)], [eof("t", 0, 3)]])
    (written,) = run([OffsetRange("t", 0, 0, 3)], consumer, settings).files
    meta = pq.ParquetFile(written.location.removeprefix("file://")).metadata
    schema = meta.schema.to_arrow_schema()
    assert [schema.field(c).metadata[b"PARQUET:field_id"] for c in ("topic", "partition", "offset")] == [
        b"1",
        b"2",
        b"3",
    ]
    columns = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i) for i in range(meta.num_columns)}
    assert columns["offset"].compression == "SNAPPY"
    assert columns["offset"].statistics.min == 0 and columns["offset"].statistics.max == 2
    assert not columns["value"].is_stats_set  # payloads carry no statistics
    assert written.size_bytes == Path(written.location.removeprefix("file://")).stat().st_size


def test_a_partition_that_stops_moving_fails_the_task_as_unreachable_and_leaves_no_file(
    settings: FileSettings, tmp_path: Path
) -> None:
    consumer = ScriptedConsumer(
        [[record("t", 0, 0), record("t", 0, 1), record("t", 1, 0)], [eof("t", 1, 1)]]
        + [[Message(error=KafkaError(KafkaError._TRANSPORT))]] * 3
    )
    result = run([OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 1)], consumer, settings, stall_s=10)
    assert result.unreachable and result.files == ()
    assert result.error is not None and "no progress for 10 s reading t[0] at 2 of [0, 5)" in result.error
    assert "_TRANSPORT" in result.error or "Local: Broker transport failure" in result.error
    assert not list(tmp_path.rglob("*.parquet"))  # t[1]'s finished file too: the batch is all or nothing
    assert consumer.closed


def test_a_refused_read_fails_the_task_at_once_naming_the_partition(settings: FileSettings, tmp_path: Path) -> None:
    refused = Message(topic="t", partition=0, offset=0, error=KafkaError(KafkaError._AUTO_OFFSET_RESET))
    consumer = ScriptedConsumer([[record("t", 1, 0)], [refused]])
    result = run([OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 0, 9)], consumer, settings)
    assert not result.unreachable
    assert result.error is not None and result.error.startswith("RangeReadError: reading t[0]:")
    assert not list(tmp_path.rglob("*.parquet"))


def test_an_empty_range_reads_nothing(settings: FileSettings) -> None:
    consumer = ScriptedConsumer([])
    result = run([OffsetRange("t", 0, 7, 7)], consumer, settings)
    assert (result.files, result.error, consumer.assigned) == ((), None, [])


def test_settings_refuse_a_table_that_lost_the_statistics_the_conflict_check_needs() -> None:
    with pytest.raises(ValueError, match=r"\['offset'\]"):
        FileSettings.of("file:/x", CREATED_SCHEMA, {"write.parquet.stats-enabled.column.offset": "false"})
    with pytest.raises(ValueError, match="compression-codec"):
        FileSettings.of("file:/x", CREATED_SCHEMA, {"write.parquet.compression-codec": "lzo"})


def test_same_numbered_partitions_of_two_topics_next_to_each_other_are_told_apart(settings: FileSettings) -> None:
    # Offsets that would pass for one partition's: only the topic tells these records apart.
    consumer = ScriptedConsumer([[record("a", 0, 0), record("b", 0, 1), record("a", 0, 2), record("b", 0, 3)]])
    consumer.batches.append([eof("a", 0, 3), eof("b", 0, 4)])
    result = run([OffsetRange("a", 0, 0, 3), OffsetRange("b", 0, 1, 4)], consumer, settings)
    assert result.error is None, result.error
    assert rows(result) == [("a", 0, 0), ("a", 0, 2), ("b", 0, 1), ("b", 0, 3)]


def test_a_routed_topic_writes_typed_files_and_dead_letters_next_to_the_shared_tables_in_one_task(
    tmp_path: Path, settings: FileSettings
) -> None:
    """A task reading a raw and a routed topic (plain JSON: no registry needed) at once: the routed
    records go to their typed table's folder, one that does not decode to the dead-letter table's,
    a tombstone is a typed row; the raw topic's records go where they always did."""
    import json

    from lagsched.adapters.typed_files import RoutedTables, TableFiles
    from lagsched.core.routing import parse_routes, route_topics

    (route,) = parse_routes(
        [{"topics": ["audit"], "value_format": "json", "key_format": "string",
          "value_schema": {"type": "object", "required": ["who"], "properties": {"who": {"type": "string"}}}}],
        "routes",
    )  # fmt: skip
    routed = route_topics([route], ["audit"], namespace="kafka", shared_table="c")["audit"]
    assert routed is not None
    tables = RoutedTables(
        routes={"audit": routed},
        tables={"lagsched.kafka.audit": TableFiles("lagsched.kafka.audit", (tmp_path / "audit").as_uri())},
        dead_letters=TableFiles("lagsched.kafka.c_dead_letters", (tmp_path / "dead").as_uri()),
    )
    values = [json.dumps({"who": "ann"}).encode(), b"{not json", None, json.dumps({"who": "bo"}).encode()]
    audit = [
        Message(topic="audit", partition=0, offset=i, key=f"k{i}".encode(), value=v, timestamp=(1, T0 + 1))
        for i, v in enumerate(values)
    ]
    consumer = ScriptedConsumer([[*audit, record("raw", 0, 0), eof("audit", 0, 4), eof("raw", 0, 1)]])
    result = write_ranges(
        [OffsetRange("audit", 0, 0, 4), OffsetRange("raw", 0, 0, 1)], {}, settings, routed=tables,
        consumer_factory=lambda _c: consumer, clock=Clock(),
    )  # fmt: skip
    assert result.error is None, result.error
    by_table = {(f.table, f.schema_id): f for f in result.files}
    json_id = routed.local_schema_id
    assert set(by_table) == {(None, None), ("lagsched.kafka.audit", json_id), ("lagsched.kafka.audit", -1),
                             ("lagsched.kafka.c_dead_letters", None)}  # fmt: skip
    typed = pq.read_table(by_table[("lagsched.kafka.audit", routed.local_schema_id)].location.removeprefix("file://"))
    assert typed.column("who").to_pylist() == ["ann", "bo"] and typed.column("_kafka_offset").to_pylist() == [0, 3]
    assert typed.column("_kafka_key").to_pylist() == ["k0", "k3"]
    assert "/audit/data/_kafka_timestamp_hour=" in by_table[("lagsched.kafka.audit", routed.local_schema_id)].location
    stone = pq.read_table(by_table[("lagsched.kafka.audit", -1)].location.removeprefix("file://"))
    assert stone.column("_kafka_tombstone").to_pylist() == [True] and stone.column("_kafka_offset").to_pylist() == [2]
    dead_file = by_table[("lagsched.kafka.c_dead_letters", None)]
    assert "/dead/data/topic=audit/timestamp_hour=" in dead_file.location
    dead = pq.read_table(dead_file.location.removeprefix("file://"))
    assert dead.column("offset").to_pylist() == [1] and dead.column("value").to_pylist() == [b"{not json"]
    assert dead.column("target_table").to_pylist() == ["lagsched.kafka.audit"]
    assert pq.read_schema(dead_file.location.removeprefix("file://")).field("offset").metadata is None  # by name
    assert rows(TaskResult(files=(by_table[(None, None)],))) == [("raw", 0, 0)]
    assert result.records == {("audit", 0): 4, ("raw", 0): 1}


def test_a_routed_task_that_fails_leaves_no_typed_or_dead_letter_file_behind(
    tmp_path: Path, settings: FileSettings
) -> None:
    from lagsched.adapters.typed_files import RoutedTables, TableFiles
    from lagsched.core.routing import parse_routes, route_topics

    routes = parse_routes([{"topics": ["audit"], "value_format": "json", "value_schema": {"type": "object"}}], "r")
    routed = route_topics(routes, ["audit"], namespace="kafka", shared_table="c")["audit"]
    assert routed is not None
    tiny = {"write.parquet.row-group-size-bytes": "1"}
    tables = RoutedTables(
        routes={"audit": routed},
        # Row groups of one byte: each file is on disk from its first records, so the clean-up has work to do.
        tables={"lagsched.kafka.audit": TableFiles("lagsched.kafka.audit", (tmp_path / "audit").as_uri(), tiny)},
        dead_letters=TableFiles("lagsched.kafka.c_dead_letters", (tmp_path / "dead").as_uri(), tiny),
    )
    first = [Message(topic="audit", partition=0, offset=0, key=None, value=b"{}", timestamp=(1, T0 + 1)),
             Message(topic="audit", partition=0, offset=1, key=None, value=b"[", timestamp=(1, T0 + 1))]  # fmt: skip
    # Then offsets out of order: the read fails after the first records were written.
    consumer = ScriptedConsumer([first, [record("audit", 0, 3), record("audit", 0, 2)]])
    result = write_ranges(
        [OffsetRange("audit", 0, 0, 5)], {}, settings, routed=tables, consumer_factory=lambda _c: consumer,
        clock=Clock(),
    )  # fmt: skip
    assert result.error is not None and "out of order" in result.error
    assert not [p for p in tmp_path.rglob("*.parquet")]
