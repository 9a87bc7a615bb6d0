"""Avro into typed columns: the type mapping, the columnar decode proved row by row against the
datum-by-datum reader, and corrupt datums that never shift their neighbours."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import random
import uuid
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from lagsched.core.avro_decode import AvroDecoder
from lagsched.core.avro_types import UnsupportedSchema, arrow_schema, without_logical

pytestmark = pytest.mark.unit

ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "t.shop",
    "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"], "default": None}],
}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "t.shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "score", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "sku", "type": "string"},
        {"name": "blob", "type": "bytes"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "later", "type": ["long", "null"]},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "ship_to", "type": ADDRESS},
        {"name": "bill_to", "type": ["null", "Address"], "default": None},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "points", "type": {"type": "array", "items": ["null", "long"]}},
    ],
}
WITH_MAP = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "id", "type": "long"}, {"name": "attrs", "type": {"type": "map", "values": "string"}}],
}


def test_the_type_mapping() -> None:
    schema = arrow_schema(ORDER)
    address = pa.struct([pa.field("city", pa.string(), nullable=False), pa.field("zip", pa.int32())])
    expected = {
        "id": (pa.int64(), False),
        "qty": (pa.int32(), False),
        "price": (pa.float64(), False),
        "score": (pa.float32(), False),
        "ok": (pa.bool_(), False),
        "sku": (pa.string(), False),
        "blob": (pa.binary(), False),
        "note": (pa.string(), True),
        "later": (pa.int64(), True),
        "status": (pa.string(), False),
        "tags": (pa.list_(pa.field("element", pa.string(), nullable=False)), False),
        "amount": (pa.decimal128(12, 2), False),
        "hash": (pa.binary(4), False),
        "ship_to": (address, False),
        "bill_to": (address, True),
        "day": (pa.date32(), False),
        "at": (pa.timestamp("us", tz="UTC"), False),
        "at_us": (pa.timestamp("us", tz="UTC"), False),
        "local": (pa.timestamp("us"), False),
        "clock": (pa.time64("us"), False),
        "uid": (pa.string(), False),
        "points": (pa.list_(pa.field("element", pa.int64(), nullable=True)), False),
    }
    assert {f.name: (f.type, f.nullable) for f in schema} == expected
    attrs = arrow_schema(WITH_MAP).field("attrs").type
    assert attrs == pa.map_(
        pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False)
    )


@pytest.mark.parametrize(
    ("field_type", "says"),
    [
        (["null", "string", "long"], "a union of 2 non-null types (string, long)"),
        (["string", "long"], "a union of 2 non-null types"),
        ({"type": "long", "logicalType": "timestamp-nanos"}, "nanoseconds"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}, "decimal(40, 2)"),
        ("Nowhere", "unknown type 'Nowhere'"),
        ({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}, "contains itself"),
    ],
)
def test_what_a_table_cannot_hold_is_refused_naming_the_field(field_type: Any, says: str) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "f", "type": field_type}]}
    with pytest.raises(UnsupportedSchema) as caught:
        arrow_schema(schema)
    assert says in str(caught.value)
    assert caught.value.path.startswith("f")
    with pytest.raises(UnsupportedSchema, match="a record schema at the top"):
        arrow_schema("string")


def order(rnd: random.Random, i: int) -> dict[str, Any]:
    def text() -> str:
        return "".join(rnd.choice("abcé€😀 ") for _ in range(rnd.randrange(0, 12)))

    address = {"city": text(), "zip": rnd.choice([None, rnd.randrange(-(2**31), 2**31)])}
    return {
        "id": rnd.choice([0, -1, 63, 64, -(2**63), 2**63 - 1, rnd.randrange(-(2**40), 2**40)]),
        "qty": rnd.randrange(-(2**31), 2**31),
        "price": rnd.uniform(-1e9, 1e9),
        "score": 1.5,
        "ok": rnd.random() < 0.5,
        "sku": text(),
        "blob": rnd.randbytes(rnd.randrange(0, 200)),
        "note": rnd.choice([None, text()]),
        "later": rnd.choice([None, rnd.randrange(-(10**12), 10**12)]),
        "status": rnd.choice(["NEW", "PAID", "SHIPPED"]),
        "tags": [text() for _ in range(rnd.randrange(0, 4))],
        "amount": decimal.Decimal(rnd.randrange(-(10**12) + 1, 10**12)).scaleb(-2),
        "hash": rnd.randbytes(4),
        "ship_to": address,
        "bill_to": rnd.choice([None, address]),
        "day": dt.date(2000, 1, 1) + dt.timedelta(days=rnd.randrange(20000)),
        "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=rnd.randrange(10**10)),
        "at_us": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rnd.randrange(10**13)),
        "local": dt.datetime(2026, 1, 1) + dt.timedelta(milliseconds=rnd.randrange(10**10)),
        "clock": dt.time(rnd.randrange(24), rnd.randrange(60), rnd.randrange(60), rnd.randrange(1000) * 1000),
        "uid": str(uuid.UUID(int=rnd.getrandbits(128))),
        "points": [rnd.choice([None, rnd.randrange(-1000, 1000)]) for _ in range(rnd.randrange(0, 5))],
    }


def encode(schema: Any, records: list[dict[str, Any]]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for record in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        out.append(buf.getvalue())
    return out


def laid_out(datums: list[bytes], gap: bytes = b"\x00\x00\x00\x00\x01") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The datums as a value column holds them: each after a 5-byte header, end to end."""
    data = b"".join(gap + d for d in datums)
    lengths = np.array([len(d) for d in datums], np.int64)
    ends = np.cumsum(lengths + len(gap))
    return np.frombuffer(data, np.uint8), ends - lengths, ends


def as_read(schema: Any, datums: list[bytes]) -> pa.Table:
    """What fastavro reads, datum by datum, in the table's Arrow schema: the reference (a uuid read
    as the string it is encoded as, not as Python's UUID)."""
    parsed = fastavro.parse_schema(without_logical(schema, "uuid"))
    rows = [fastavro.schemaless_reader(io.BytesIO(d), parsed, None) for d in datums]
    return pa.Table.from_pylist(rows, schema=arrow_schema(schema))


def test_the_columnar_decode_is_the_datum_by_datum_decode() -> None:
    rnd = random.Random(41)
    datums = encode(ORDER, [order(rnd, i) for i in range(600)])
    decoded = AvroDecoder(json.dumps(ORDER)).decode(*laid_out(datums))
    assert not decoded.careful, "the columnar path refused canonical datums"
    assert decoded.dead == {}
    assert decoded.rows.tolist() == list(range(600))
    assert decoded.table.equals(as_read(ORDER, datums))


def test_a_schema_with_a_map_is_read_datum_by_datum_with_the_same_result() -> None:
    records = [{"id": i, "attrs": {f"k{j}": "v" * j for j in range(i % 4)}} for i in range(50)]
    datums = encode(WITH_MAP, records)
    decoded = AvroDecoder(json.dumps(WITH_MAP)).decode(*laid_out(datums))
    assert decoded.careful and decoded.dead == {}
    assert decoded.table.equals(as_read(WITH_MAP, datums))


@pytest.mark.parametrize("seed", range(40))
def test_a_datum_of_the_wrong_length_never_shifts_its_neighbours(seed: int) -> None:
    """One datum a few bytes too long or too short in a block: measured, polars then decodes the
    datums after it from the wrong bytes, mostly without an error. Every other row must come out as
    written, and the bad one is a dead letter."""
    rnd = random.Random(seed)
    datums = encode(ORDER, [order(rnd, i) for i in range(300)])
    reference = as_read(ORDER, datums)
    bad = rnd.randrange(len(datums))
    cut = rnd.choice([-3, -2, -1, 1, 2, 7])
    datums[bad] = datums[bad][:cut] if cut < 0 else datums[bad] + rnd.randbytes(cut)
    decoded = AvroDecoder(json.dumps(ORDER)).decode(*laid_out(datums))
    assert set(decoded.dead) == {bad}, decoded.dead
    assert decoded.rows.tolist() == [i for i in range(300) if i != bad]
    keep = pa.array([i != bad for i in range(300)])
    assert decoded.table.equals(reference.filter(keep))


def test_a_valid_but_unusual_encoding_is_decoded_not_a_dead_letter() -> None:
    """An array written in two blocks (legal Avro; Java's encoder does it for long arrays) is not
    the canonical size, so the block goes datum by datum, and the record lands."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "xs", "type": {"type": "array", "items": "long"}}]}
    canonical = encode(schema, [{"xs": [1, 2, 3]}])[0]
    two_blocks = bytes([2 * 2, 2, 4, 2 * 1, 6, 0])  # count 2: 1, 2; count 1: 3; end
    decoded = AvroDecoder(json.dumps(schema)).decode(*laid_out([canonical, two_blocks]))
    assert decoded.careful and decoded.dead == {}
    assert decoded.table.column("xs").to_pylist() == [[1, 2, 3], [1, 2, 3]]


def test_a_value_the_table_cannot_hold_is_a_dead_letter_and_the_rest_land() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}}],
    }
    fits, too_wide = decimal.Decimal("12.34"), decimal.Decimal("123456.78")  # 8 digits in a decimal(4, 2)
    wider = json.loads(json.dumps(schema).replace('"precision": 4', '"precision": 12'))  # what wrote them
    datums = encode(wider, [{"d": fits}, {"d": too_wide}, {"d": fits}])
    decoded = AvroDecoder(json.dumps(schema)).decode(*laid_out(datums))
    assert list(decoded.dead) == [1]
    assert "a value the table cannot hold" in decoded.dead[1]
    assert decoded.table.column("d").to_pylist() == [fits, fits]


def test_garbage_under_a_good_schema_id_is_a_dead_letter() -> None:
    rnd = random.Random(7)
    datums = encode(ORDER, [order(rnd, i) for i in range(20)])
    datums[5] = b'{"json": "not avro"}'
    datums[9] = b""
    decoded = AvroDecoder(json.dumps(ORDER)).decode(*laid_out(datums))
    assert set(decoded.dead) == {5, 9}
    assert all(reason.startswith("not a datum of schema Order") for reason in decoded.dead.values())
    assert decoded.table.num_rows == 18
