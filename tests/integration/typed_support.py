"""Typed-table helpers for the integration tests: Avro records in Confluent's wire format, schemas
registered in the stack's registry, and the exactly-once check over a typed and the dead-letter table."""

from __future__ import annotations

import io
from typing import Any


def framed(schema_id: int, body: bytes, magic: bytes = b"\x00") -> bytes:
    """A value in Confluent's wire format: the magic byte, the schema id (4 bytes), the datum."""
    return magic + schema_id.to_bytes(4, "big") + body


def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def offsets(rows: Any, topic: str, partition: int, *columns: str) -> list[int]:
    """The offsets of ``topic[partition]`` in ``rows``, whose topic, partition and offset are ``columns``."""
    t, p, o = (rows.column(c).to_pylist() for c in columns)
    return [offset for a, b, offset in zip(t, p, o, strict=True) if (a, b) == (topic, partition)]


def read_table(consumer: Any, identifier: str) -> Any:
    """A lake table (``catalog.namespace.table``) through pyiceberg."""
    from lagsched.adapters.lake_reader import open_catalog

    return open_catalog(consumer.lake, consumer.mysql).load_table(identifier.split(".", 1)[1])


def dead_letters(consumer: Any) -> Any:
    """The cluster's dead-letter table's rows (empty before it exists)."""
    from pyiceberg.exceptions import NoSuchTableError

    from lagsched.adapters.lake_sink import dead_letter_table

    try:
        return read_table(consumer, dead_letter_table(consumer.lake)).scan().to_arrow()
    except NoSuchTableError:
        import pyarrow as pa

        from lagsched.core.typed_rows import DEAD_LETTER_SCHEMA

        return pa.Table.from_batches([], DEAD_LETTER_SCHEMA)


def assert_once_over_both(typed: Any, dead: Any, topic: str, latest: dict[int, int]) -> None:
    """Every offset of every partition of ``topic`` in exactly one of its typed table and the dead letters."""
    for p, end in latest.items():
        here = offsets(typed, topic, p, "_kafka_topic", "_kafka_partition", "_kafka_offset")
        there = offsets(dead, topic, p, "topic", "partition", "offset")
        both = sorted(here + there)
        twice = sorted({o for o in both if both.count(o) > 1}) if len(set(both)) != len(both) else []
        assert not twice, f"{topic}[{p}]: offsets in the lake twice: {twice[:10]}"
        assert both == list(range(end)), f"{topic}[{p}]: {len(both)} offsets of {end} landed"


#: An Avro record of every type a typed table maps (docs/routing.md), a map included (read datum by datum).
EVERY_TYPE: dict[str, Any] = {
    "type": "record",
    "name": "Every",
    "namespace": "t.types",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "score", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "sku", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "ship_to", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"], "default": None}]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "clock", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
    ],
}  # fmt: skip


def every_type(i: int) -> dict[str, Any]:
    """Record ``i`` of `EVERY_TYPE` (fastavro's Python values)."""
    import datetime as dt
    import decimal
    import uuid

    return {
        "id": i, "qty": -i, "price": i / 4, "score": 0.5, "ok": i % 2 == 0, "sku": f"s{i}é",
        "blob": bytes([i % 256]) * (i % 5), "note": None if i % 2 else f"n{i}", "status": ("NEW", "PAID")[i % 2],
        "tags": [f"t{j}" for j in range(i % 3)], "amount": decimal.Decimal(i * 101).scaleb(-2),
        "hash": i.to_bytes(4, "big"), "ship_to": {"city": f"c{i}", "zip": None if i % 3 else i},
        "day": dt.date(2026, 1, 1) + dt.timedelta(days=i),
        "at": dt.datetime(2026, 6, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=i),
        "local": dt.datetime(2026, 6, 1) + dt.timedelta(microseconds=i),
        "clock": dt.time(12, 0, 0, i % 1_000_000), "uid": str(uuid.UUID(int=i)), "attrs": {"a": i, "b": -i},
    }  # fmt: skip
