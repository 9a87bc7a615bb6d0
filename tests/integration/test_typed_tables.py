"""Typed tables on the real stack: routed topics decoded through the real schema registry into tables
of their own, an evolution, poison records in the dead-letter table, exactly once over both
(docs/routing.md, docs/lake.md "Several tables").

One slot run asserts what a user checks first: the typed columns read back with pyiceberg, the
schema that grew half-way (older rows read the new column as null), tombstones, an incompatible
writer schema and every kind of poison record in the dead-letter table with its reason, and every
offset of every partition in exactly one of the two tables.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from consumer_support import ConsumerHarness, latest_offsets
from typed_support import assert_once_over_both, avro, dead_letters, framed, read_table

from lagsched.core.errors import ConfigError
from lagsched.core.routing import table_for_topic
from lagsched_dev.stack.config import StackConfig

pytestmark = pytest.mark.integration

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "t.lagsched",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "sku", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [{"name": "qty", "type": "int"}]}}},
    ],
}  # fmt: skip
#: v2 adds an optional field: compatible, the table evolves.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],
}
#: v3 turns amount into a string: incompatible, its records are dead letters.
ORDER_V3 = {**ORDER_V1, "fields": [{**f, "type": "string"} if f["name"] == "amount" else f for f in ORDER_V1["fields"]]}
CLICK = {
    "type": "object",
    "required": ["page"],
    "properties": {
        "page": {"type": "string"}, "ms": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
    },
}  # fmt: skip


def order(i: int, *, coupon: bool = False) -> dict[str, Any]:
    record = {
        "id": i, "sku": f"sku-{i % 7}", "amount": i * 1.5, "at": 1_780_000_000_000 + i,
        "note": None if i % 3 else f"note {i}", "status": "PAID" if i % 2 else "NEW",
        "lines": [{"qty": q} for q in range(i % 3)],
    }  # fmt: skip
    if coupon:
        record["coupon"] = f"C{i}"
    return record


def produce(kafka_config: dict[str, Any], topic: str, records: list[tuple[int, bytes | None, bytes | None]]) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka_config)
    for partition, key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0


def test_routed_topics_land_typed_evolve_and_keep_every_poison_record_exactly_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], redis_client: Any
) -> None:
    from lagsched.adapters.schema_registry import RegistryClient
    from lagsched.connections import schema_registry_params

    registry = RegistryClient(schema_registry_params())
    orders, clicks = new_topic(2), new_topic(1)
    subject = f"{orders}-value"
    v1 = registry.register(subject, json.dumps(ORDER_V1))
    v2 = registry.register(subject, json.dumps(ORDER_V2))
    v3 = registry.register(f"{orders}-other-value", json.dumps(ORDER_V3))
    click_id = registry.register(f"{clicks}-value", json.dumps(CLICK), "JSON")
    unknown = max(v1, v2, v3, click_id) + 100_000

    batch: list[tuple[int, bytes | None, bytes | None]] = []
    for i in range(300):
        batch.append((i % 2, f"k{i}".encode(), framed(v1, avro(ORDER_V1, order(i)))))
    poison = {
        "magic": (0, b"p1", framed(v1, avro(ORDER_V1, order(1)), magic=b"\x01")),
        "unknown": (1, b"p2", framed(unknown, avro(ORDER_V1, order(2)))),
        "short": (0, b"p3", b"\x00\x00"),
        "corrupt": (1, b"p4", framed(v1, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")),
    }
    batch += list(poison.values())
    batch.append((0, b"gone", None))  # a tombstone: a typed row, not a dead letter
    for i in range(300, 500):
        batch.append((i % 2, f"k{i}".encode(), framed(v2, avro(ORDER_V2, order(i, coupon=True)))))
    for i in range(500, 520):
        batch.append((i % 2, f"k{i}".encode(), framed(v3, avro(ORDER_V3, {**order(i), "amount": "lots"}))))
    produce(kafka_config, orders, batch)
    page_views = [(0, None, framed(click_id, json.dumps({"page": f"/p{i}", "ms": i}).encode())) for i in range(50)]
    page_views.append((0, None, framed(click_id, b'{"ms": 1}')))  # no page: required, a dead letter
    produce(kafka_config, clicks, page_views)

    for topic in (orders, clicks):
        consumer.register(topic)
    routes = [
        {"topics": [orders], "value_format": "avro", "key_format": "string", "table": "orders"},
        {"topics": [clicks], "value_format": "json_schema"},
    ]
    slot = consumer.run(
        "typed", "--routes", json.dumps(routes), "--exit-when-idle", "--max-records", "150", timeout=300
    )

    # [typed] the Avro fields are columns; the table grew by v2's field, the rows before it read null.
    table = read_table(consumer, f"lagsched.{consumer.lake.namespace}.orders")
    rows = table.scan().to_arrow()
    names = rows.schema.names
    assert names[:7] == [
        "_kafka_topic",
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_timestamp",
        "_kafka_headers",
        "_kafka_tombstone",
        "_kafka_key",
    ], names
    assert {"id", "sku", "amount", "at", "note", "status", "lines", "coupon"} <= set(names), names
    typed = rows.filter(pc.invert(rows.column("_kafka_tombstone"))).sort_by("id")
    assert typed.num_rows == 500, slot.tail()
    assert typed.column("id").to_pylist() == list(range(500))
    assert typed.column("coupon").to_pylist() == [None] * 300 + [f"C{i}" for i in range(300, 500)]
    assert typed.column("status").to_pylist()[:2] == ["NEW", "PAID"]
    assert typed.column("lines").to_pylist()[2] == [{"qty": 0}, {"qty": 1}]
    assert typed.column("_kafka_key").to_pylist()[:2] == ["k0", "k1"]
    assert str(typed.schema.field("at").type) == "timestamp[us, tz=UTC]"
    stones = rows.filter(rows.column("_kafka_tombstone").combine_chunks())
    assert stones.column("_kafka_key").to_pylist() == ["gone"] and stones.column("id").to_pylist() == [None]
    schemas = sorted(table.schemas())
    assert len(schemas) == 2, schemas  # created with v1, evolved once for v2
    # Each commit says how many of its rows each writer schema wrote (-1: tombstones).
    per_schema: dict[str, int] = {}
    for snapshot in table.snapshots():
        for schema_id, n in json.loads(snapshot.summary.get("lagsched.schema-ids") or "{}").items():
            per_schema[schema_id] = per_schema.get(schema_id, 0) + n
    assert per_schema == {str(v1): 300, str(v2): 200, "-1": 1}, per_schema

    # [dead letters] every poison record and the incompatible schema's, with the reason, raw bytes kept.
    dead = dead_letters(consumer)
    by_key = {k: r for k, r in zip(dead.column("key").to_pylist(), dead.column("reason").to_pylist(), strict=True)}
    assert "not in the wire format (first byte 0x01" in by_key[b"p1"], by_key[b"p1"]
    assert f"no schema with id {unknown}" in by_key[b"p2"], by_key[b"p2"]
    assert by_key[b"p3"] and by_key[b"p4"]
    incompatible = [r for k, r in by_key.items() if k and k.startswith(b"k5")]
    assert len(incompatible) == 20 and all("incompatible" in r and "amount" in r for r in incompatible), incompatible
    assert set(dead.column("target_table").to_pylist()) >= {f"lagsched.{consumer.lake.namespace}.orders"}
    (original,) = [v for k, v in zip(dead.column("key").to_pylist(), dead.column("value").to_pylist(), strict=True)
                   if k == b"p4"]  # fmt: skip
    assert original == poison["corrupt"][2]

    # [exactly once] every offset of every partition is in exactly one of the two tables.
    clicks_rows = (
        read_table(consumer, f"lagsched.{consumer.lake.namespace}.{table_for_topic(clicks)}").scan().to_arrow()
    )
    assert sorted(clicks_rows.column("page").to_pylist()) == sorted(f"/p{i}" for i in range(50))
    assert_once_over_both(rows, dead, orders, latest_offsets(kafka_config, orders, 2))
    assert_once_over_both(clicks_rows, dead, clicks, latest_offsets(kafka_config, clicks, 1))

    # The dead letters are counted per topic for /metrics, the page and `lagsched status` (and the alert).
    from lagsched.adapters.alert_figures import read_dead_letters

    assert read_dead_letters(redis_client, consumer.cluster) == {orders: 4 + 20, clicks: 1}

    # The shared table of raw records got none of them.
    assert consumer.sink_table().num_rows == 0


TICK_V1 = {"type": "record", "name": "Tick", "namespace": "t.outage", "fields": [{"name": "n", "type": "long"}]}
TICK_V2 = {**TICK_V1, "fields": [*TICK_V1["fields"], {"name": "more", "type": ["null", "string"], "default": None}]}


@pytest.mark.serial  # stops the stack's schema registry
@pytest.mark.timeout(600)
def test_the_registry_down_mid_run_makes_no_dead_letter_resolved_schemas_still_land_and_the_slot_catches_up(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], stack: StackConfig
) -> None:
    from consumer_support import wait_until

    from lagsched.adapters.schema_registry import RegistryClient
    from lagsched.connections import schema_registry_params
    from lagsched_dev.stack.services import SchemaRegistry

    registry = RegistryClient(schema_registry_params())
    topic = new_topic(1)
    v1 = registry.register(f"{topic}-value", json.dumps(TICK_V1))
    v2 = registry.register(f"{topic}-value", json.dumps(TICK_V2))

    def send(first: int, count: int, schema_id: int, schema: dict[str, Any]) -> None:
        produce(
            kafka_config,
            topic,
            [(0, None, framed(schema_id, avro(schema, {"n": n}))) for n in range(first, first + count)],
        )

    def typed_rows() -> int:
        from pyiceberg.exceptions import NoSuchTableError
        from sqlalchemy.exc import ProgrammingError

        try:
            return int(
                read_table(consumer, f"lagsched.{consumer.lake.namespace}.{table_for_topic(topic)}")
                .scan()
                .to_arrow()
                .num_rows
            )
        except (NoSuchTableError, ProgrammingError):  # not created yet (nor the catalog's own tables)
            return 0

    send(0, 100, v1, TICK_V1)
    consumer.register(topic)
    routes = json.dumps([{"topics": [topic], "value_format": "avro"}])
    slot = consumer.start("outage", "--routes", routes, "--outage-s", "240", "--budget-s", "400")
    wait_until(lambda: typed_rows() == 100, 240, "the first records in the typed table")

    service = SchemaRegistry(stack)
    assert service.stop()
    try:
        # A schema the workers resolved before keeps decoding while the registry is down.
        send(100, 50, v1, TICK_V1)
        wait_until(lambda: typed_rows() == 150, 120, "records of a resolved schema during the outage")
        # A schema never resolved: the batch fails as an outage and is ridden through, never a dead letter.
        send(150, 50, v2, TICK_V2)
        time.sleep(15)
        assert slot.proc.poll() is None, slot.tail()
        assert typed_rows() == 150
        assert dead_letters(consumer).num_rows == 0
        assert "schema_registry" in slot.log.read_text(), slot.tail()
    finally:
        service.start()
    wait_until(lambda: typed_rows() == 200, 240, "the records of the new schema after the registry came back")
    slot.terminate()
    assert slot.wait(120) == 0, slot.tail()
    rows = read_table(consumer, f"lagsched.{consumer.lake.namespace}.{table_for_topic(topic)}").scan().to_arrow()
    assert sorted(rows.column("n").to_pylist()) == list(range(200))
    assert_once_over_both(rows, dead_letters(consumer), topic, latest_offsets(kafka_config, topic, 1))


def test_every_avro_type_plain_json_and_raw_values_and_every_key_format_read_back_from_their_tables(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """Each Avro type as Iceberg holds it, read back by pyiceberg through the name mapping (files
    without field ids); a plain-JSON route against its declared schema; a raw route's bytes. The
    keys: Avro records whose schema evolves (and a primitive Avro key the table cannot take), plain
    JSON keys against a declared schema, JSON Schema keys through the registry."""
    import datetime as dt
    import decimal
    import uuid

    from typed_support import EVERY_TYPE, every_type

    from lagsched.adapters.schema_registry import RegistryClient
    from lagsched.connections import schema_registry_params

    every, audit, blobs = new_topic(1), new_topic(1), new_topic(1)
    registry = RegistryClient(schema_registry_params())
    schema_id = registry.register(f"{every}-value", json.dumps(EVERY_TYPE))
    key_v1 = {"type": "record", "name": "EveryKey", "fields": [{"name": "shop", "type": "string"}]}
    key_v2 = {**key_v1, "fields": [*key_v1["fields"], {"name": "region", "type": ["null", "string"], "default": None}]}
    k1, k2 = (registry.register(f"{every}-key", json.dumps(k)) for k in (key_v1, key_v2))
    k_text = registry.register(f"{every}-other-key", json.dumps("string"))  # not a record: cannot join the struct

    def every_key(i: int) -> bytes | None:
        if i < 20:
            return framed(k1, avro(key_v1, {"shop": f"s{i}"}))
        if i < 35:
            return framed(k2, avro(key_v2, {"shop": f"s{i}", "region": f"r{i}"}))
        return {35: framed(k_text, avro("string", "k35")), 36: framed(k_text, avro("string", "k36")),  # type: ignore[arg-type]
                37: None, 38: b"junk", 39: framed(k1, b"\x7f")}[i]  # fmt: skip

    produce(
        kafka_config, every, [(0, every_key(i), framed(schema_id, avro(EVERY_TYPE, every_type(i)))) for i in range(40)]
    )
    produce(kafka_config, audit, [
        (0, str(i).encode(), json.dumps({"who": f"u{i}", "n": i, "at": "2026-06-01T00:00:00Z"}).encode())
        for i in range(10)
    ] + [(0, b"10", b'{"n": "not a number"}'), (0, b'"eleven"', b'{"who": "u11"}')])  # fmt: skip
    blob_key = {"type": "object", "properties": {"k": {"type": "string"}, "n": {"type": "integer"}}}
    json_key = registry.register(f"{blobs}-key", json.dumps(blob_key), "JSON")
    produce(kafka_config, blobs, [(0, framed(json_key, json.dumps({"k": "a", "n": i}).encode()), bytes(range(i)))
                                  for i in range(5)])  # fmt: skip
    for topic in (every, audit, blobs):
        consumer.register(topic)
    routes = [
        {"topics": [every], "value_format": "avro", "key_format": "avro"},
        {"topics": [audit], "value_format": "json", "value_schema": {"type": "object", "required": ["who"],
         "properties": {"who": {"type": "string"}, "n": {"type": "integer"},
                        "at": {"type": "string", "format": "date-time"}}},
         "key_format": "json", "key_schema": {"type": "integer"}},
        {"topics": [blobs], "value_format": "raw", "table": "blobs", "key_format": "json_schema"},
    ]  # fmt: skip
    # Batches of at most 15 records a partition: several small files in one hour, for the table care below.
    consumer.run("types", "--routes", json.dumps(routes), "--exit-when-idle", "--max-records", "15", timeout=300)
    ns = f"lagsched.{consumer.lake.namespace}"

    table = read_table(consumer, f"{ns}.{table_for_topic(every)}")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert {k: types[k] for k in ("id", "qty", "price", "score", "ok", "sku", "blob", "status", "amount", "hash",
                                  "day", "at", "local", "clock", "uid")} == {
        "id": "long", "qty": "int", "price": "double", "score": "float", "ok": "boolean", "sku": "string",
        "blob": "binary", "status": "string", "amount": "decimal(12, 2)", "hash": "fixed[4]", "day": "date",
        "at": "timestamptz", "local": "timestamp", "clock": "long", "uid": "string",
    }  # fmt: skip
    assert types["tags"].startswith("list<string") and types["attrs"].startswith("map<string, long")
    # The key schema evolved too: v2's optional field added to the key's struct.
    assert [f.name for f in table.schema().find_field("_kafka_key").field_type.fields] == ["shop", "region"]
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == [*range(35), 37]
    assert rows[3]["_kafka_key"] == {"shop": "s3", "region": None} and rows[30]["_kafka_key"] == {
        "shop": "s30", "region": "r30"
    }  # fmt: skip
    assert rows[-1]["_kafka_key"] is None  # a null key is no dead letter
    r = rows[7]
    assert (r["qty"], r["price"], r["ok"], r["sku"], r["blob"], r["note"], r["status"]) == (
        -7, 1.75, False, "s7é", bytes([7]) * 2, None, "PAID",
    )  # fmt: skip
    assert r["tags"] == ["t0"] and r["amount"] == decimal.Decimal("7.07") and r["hash"] == (7).to_bytes(4, "big")
    assert r["ship_to"] == {"city": "c7", "zip": None} and rows[9]["ship_to"] == {"city": "c9", "zip": 9}
    assert r["day"] == dt.date(2026, 1, 8) and r["at"] == dt.datetime(2026, 6, 1, 0, 0, 0, 7000, tzinfo=dt.UTC)
    # A time of day as its microseconds since midnight: Spark cannot load a table with Iceberg's time type.
    assert r["local"] == dt.datetime(2026, 6, 1, 0, 0, 0, 7) and r["clock"] == 12 * 3600 * 10**6 + 7
    assert r["uid"] == str(uuid.UUID(int=7)) and dict(r["attrs"]) == {"a": 7, "b": -7}
    summaries = [s.summary.additional_properties for s in table.snapshots()]
    key_ids = [json.loads(s["lagsched.key-schema-ids"]) for s in summaries if "lagsched.key-schema-ids" in s]
    assert sum(ids.get(str(k1), 0) for ids in key_ids) == 20 and sum(ids.get(str(k2), 0) for ids in key_ids) == 15

    dead = dead_letters(consumer)
    every_dead = {r["offset"]: r["reason"] for r in dead.to_pylist() if r["topic"] == every}
    assert sorted(every_dead) == [35, 36, 38, 39], every_dead
    assert every_dead[35].startswith(f"the key's writer schema {k_text} is incompatible with {ns}.")
    assert every_dead[38] == "the key is not in the wire format (first byte 0x6a, not 0x00)"
    assert every_dead[39].startswith("the key: ")
    assert_once_over_both(table.scan().to_arrow(), dead, every, latest_offsets(kafka_config, every, 1))

    audit_rows = read_table(consumer, f"{ns}.{table_for_topic(audit)}").scan().to_arrow().sort_by("_kafka_offset")
    assert audit_rows.column("who").to_pylist() == [f"u{i}" for i in range(10)]
    assert audit_rows.column("_kafka_key").to_pylist() == list(range(10))
    assert audit_rows.schema.field("at").type == pa.timestamp("us", tz="UTC")
    audit_dead = {r["offset"]: r["reason"] for r in dead.to_pylist() if r["topic"] == audit}
    assert sorted(audit_dead) == [10, 11] and audit_dead[11].startswith("the key: "), audit_dead

    raw_rows = read_table(consumer, f"{ns}.blobs").scan().to_arrow().sort_by("_kafka_offset")
    assert raw_rows.column("value").to_pylist() == [bytes(range(i)) for i in range(5)]
    assert raw_rows.column("_kafka_key").to_pylist() == [{"k": "a", "n": i} for i in range(5)]

    # Table care finds the cluster's typed and dead-letter tables (two days on: every snapshot is old)
    # and expires them down to the kept ones; the rows stay.
    import subprocess
    from datetime import UTC, datetime, timedelta

    from consumer_support import TEST_JVM, class_archive_path

    from lagsched.adapters.spark import submit_command
    from lagsched.jobs import TABLE_CARE_JOB

    later = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    argv = ["--cluster", consumer.cluster, "--warehouse", consumer.lake.warehouse, "--now", later]
    done = subprocess.run(
        submit_command(TABLE_CARE_JOB, argv, java_options=TEST_JVM, class_archive=str(class_archive_path())),
        env=consumer.env(), capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    cared = {t["table"]: t for t in json.loads(done.stdout.strip().splitlines()[-1])["tables"]}
    typed_names = {f"{ns}.{table_for_topic(every)}", f"{ns}.{table_for_topic(audit)}", f"{ns}.blobs"}
    assert typed_names | {f"{ns}.{consumer.lake.table}_dead_letters"} == set(cared), sorted(cared)
    for name in typed_names:
        compaction = cared[name]["compaction"]
        assert (
            compaction["files_after"] <= compaction["files_before"]
            and compaction["max_files_per_partition_after"] <= 1.5
        )
        assert cared[name]["expire_snapshots"]["snapshots_left"] <= cared[name]["expire_snapshots"]["snapshots_before"]
    # The Avro table's small files of one hour (its hours hold one topic) merged; rewritten with field ids, still read.
    merged = cared[f"{ns}.{table_for_topic(every)}"]["compaction"]
    assert merged["files_before"] >= 3 and merged["files_after"] < merged["files_before"], merged
    assert "skipped" not in cared[f"{ns}.{consumer.lake.table}_dead_letters"]["compaction"]
    compacted = read_table(consumer, f"{ns}.{table_for_topic(every)}").scan().to_arrow()
    assert compacted.num_rows == 36 and sorted(compacted.column("id").to_pylist()) == [*range(35), 37]
    assert_once_over_both(compacted, dead_letters(consumer), every, latest_offsets(kafka_config, every, 1))


def test_replay_lands_fixed_dead_letters_once_even_when_killed_after_its_commit(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """Records missing a property the route's schema required are dead letters; the route's schema
    is fixed (the property optional), and the replay lands them: a dry run first changes nothing,
    a replay killed between its commit and its record is run again and lands nothing twice, a
    third finds them all replayed; a record still wrong stays a dead letter with its reason."""
    from lagsched.adapters.mysql import connect
    from lagsched.core.routing import parse_routes, route_topics
    from lagsched.workflows.replay import ReplayRequest, replay_dead_letters

    topic = new_topic(1)
    good = [json.dumps({"who": f"u{i}", "n": i}).encode() for i in range(5)]
    no_who = [json.dumps({"n": 100 + i}).encode() for i in range(3)]
    produce(kafka_config, topic, [(0, None, v) for v in [*good, *no_who, b'{"who": "z", "n": "x"}']])
    consumer.register(topic)

    def route(required: list[str]) -> dict[str, Any]:
        schema = {"type": "object", "required": required,
                  "properties": {"who": {"type": "string"}, "n": {"type": "integer"}}}  # fmt: skip
        return {"topics": [topic], "value_format": "json", "value_schema": schema, "table": "audit"}

    consumer.run("replay", "--routes", json.dumps([route(["who", "n"])]), "--exit-when-idle", timeout=300)
    assert dead_letters(consumer).num_rows == 4
    ns = consumer.lake.namespace
    fixed = route_topics(parse_routes([route(["n"])], "routes"), [topic], namespace=ns, shared_table="x")[topic]

    def replay(**options: Any) -> Any:
        conn = connect(consumer.mysql)
        try:
            request = ReplayRequest.of({"cluster": consumer.cluster, "topic": topic, **options})
            return replay_dead_letters(request, lake=consumer.lake, mysql=consumer.mysql, conn=conn, route=fixed)
        finally:
            conn.close()

    def typed_offsets() -> list[int]:
        rows = read_table(consumer, f"lagsched.{ns}.audit").scan().to_arrow()
        return sorted(rows.column("_kafka_offset").to_pylist())

    dry = replay(dry_run=True)
    assert (dry.dead_letters, dry.landed, dry.still_dead) == (4, 3, 1), dry
    assert typed_offsets() == [0, 1, 2, 3, 4]

    class Killed(Exception):
        pass

    def killed(_report: Any) -> None:
        raise Killed

    conn = connect(consumer.mysql)
    try:
        request = ReplayRequest.of({"cluster": consumer.cluster, "topic": topic})
        with pytest.raises(Killed):
            replay_dead_letters(request, lake=consumer.lake, mysql=consumer.mysql, conn=conn, route=fixed,
                                commit_hook=killed)  # fmt: skip
    finally:
        conn.close()
    assert typed_offsets() == [0, 1, 2, 3, 4, 5, 6, 7]  # committed, not recorded as replayed

    again = replay()
    assert (again.landed, again.found_in_table, again.still_dead) == (0, 3, 1), again
    assert typed_offsets() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert list(again.reasons.values()) == [1] and "n" in next(iter(again.reasons))
    third = replay()
    assert (third.replayed_before, third.landed, third.found_in_table) == (3, 0, 0), third
    rows = read_table(consumer, f"lagsched.{ns}.audit").scan().to_arrow().sort_by("_kafka_offset")
    assert rows.column("who").to_pylist()[5:] == [None, None, None]
    assert rows.column("n").to_pylist()[5:] == [100, 101, 102]
    # A bad request names its field and changes nothing.
    with pytest.raises(ConfigError, match="from_offset 5 is not below to_offset 2"):
        ReplayRequest.of({"cluster": consumer.cluster, "topic": topic, "from_offset": 5, "to_offset": 2})
