"""JSON values into typed columns: the JSON Schema mapping, and the columnar read that decodes a
value the same way whichever path it takes, with every poison value a dead letter."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lagsched.core.avro_types import UnsupportedSchema
from lagsched.core.json_decode import JsonDecoder
from lagsched.core.json_types import arrow_schema

pytestmark = pytest.mark.unit

CLICK = {
    "type": "object",
    "required": ["id", "page", "at"],
    "$defs": {"where": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}}},
    "properties": {
        "id": {"type": "integer"},
        "page": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": ["string", "null"], "format": "date"},
        "ms": {"type": "number"},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["view", "buy"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"$ref": "#/$defs/where"},
        "ref": {"oneOf": [{"type": "null"}, {"type": "string"}]},
    },
}


def test_the_type_mapping() -> None:
    schema = arrow_schema(CLICK)
    where = pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int64())])
    assert {f.name: (f.type, f.nullable) for f in schema} == {
        "id": (pa.int64(), False),
        "page": (pa.string(), False),
        "at": (pa.timestamp("us", tz="UTC"), False),
        "day": (pa.date32(), True),
        "ms": (pa.float64(), True),
        "ok": (pa.bool_(), True),
        "kind": (pa.string(), True),
        "tags": (pa.list_(pa.field("element", pa.string(), nullable=False)), True),
        "where": (where, True),
        "ref": (pa.string(), True),
    }
    attrs = {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": {"type": "integer"}}}}
    assert arrow_schema(attrs).field("a").type == pa.map_(
        pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64(), nullable=False)
    )


@pytest.mark.parametrize(
    ("prop", "says"),
    [
        ({}, "a property with no type"),
        ({"type": ["string", "integer"]}, "2 non-null types"),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf of 2 non-null types"),
        ({"$ref": "other.json#/x"}, "a reference to another document"),
        ({"$ref": "#/$defs/nowhere"}, "is not in the schema"),
        ({"type": "object"}, "neither properties nor a schema for additionalProperties"),
        ({"type": "array"}, "an array without a schema for its items"),
        ({"type": "decimal"}, "unknown type 'decimal'"),
    ],
)
def test_what_a_table_cannot_hold_is_refused_naming_the_property(prop: dict[str, Any], says: str) -> None:
    with pytest.raises(UnsupportedSchema) as caught:
        arrow_schema({"type": "object", "properties": {"p": prop}})
    assert says in str(caught.value)
    assert caught.value.path.startswith("p")
    loop = {"type": "object", "$defs": {"n": {"$ref": "#/$defs/n"}}, "properties": {"p": {"$ref": "#/$defs/n"}}}
    with pytest.raises(UnsupportedSchema, match="contains itself"):
        arrow_schema(loop)
    with pytest.raises(UnsupportedSchema, match="an object schema with properties at the top"):
        arrow_schema({"type": "string"})


def click(rnd: random.Random, i: int) -> dict[str, Any]:
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rnd.randrange(10**13))
    value: dict[str, Any] = {"id": i, "page": f"/p/{rnd.randrange(100)}é", "at": at.isoformat()}
    if rnd.random() < 0.7:
        value["day"] = rnd.choice([None, (dt.date(2020, 1, 1) + dt.timedelta(days=rnd.randrange(3000))).isoformat()])
        value["ms"] = rnd.uniform(-1e6, 1e6)
        value["ok"] = rnd.random() < 0.5
        value["kind"] = rnd.choice(["view", "buy"])
        value["tags"] = [f"t{j}" for j in range(rnd.randrange(3))]
        value["where"] = {"city": "Köln", "zip": rnd.randrange(99999)}
        value["ref"] = rnd.choice([None, "ad"])
        value["unknown"] = {"ignored": True}
    return value


def laid_out(values: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lengths = np.array([len(v) for v in values], np.int64)
    ends = np.cumsum(lengths + 5)
    return np.frombuffer(b"".join(b"\x00HEAD" + v for v in values), np.uint8), ends - lengths, ends


def test_a_value_decodes_the_same_in_a_block_and_alone() -> None:
    rnd = random.Random(42)
    values = [json.dumps(click(rnd, i)).encode() for i in range(400)]
    decoder = JsonDecoder(CLICK)
    block = decoder.decode(*laid_out(values))
    assert not block.careful and block.dead == {}
    assert block.table.schema == decoder.schema
    alone = pa.concat_tables([decoder.decode(*laid_out([v])).table for v in values[:60]])
    assert alone.equals(block.table.slice(0, 60))
    first = block.table.slice(0, 1).to_pylist()[0]
    want = click(random.Random(42), 0)
    assert first["at"] == dt.datetime.fromisoformat(want["at"])
    assert first["id"] == 0 and first["page"] == want["page"]


POISON = {
    "not json": b"{id: 1}",
    "a json array": b"[1, 2]",
    "a string where an integer goes": b'{"id": "7", "page": "/", "at": "2026-01-01T00:00:00Z"}',
    "an integer past int64": b'{"id": 99999999999999999999, "page": "/", "at": "2026-01-01T00:00:00Z"}',
    "a timestamp without its offset": b'{"id": 1, "page": "/", "at": "2026-01-01T00:00:00"}',
    "a date that is not one": b'{"id": 1, "page": "/", "at": "2026-01-01T00:00:00Z", "day": "2026-13-01"}',
    "a required property missing": b'{"id": 1, "at": "2026-01-01T00:00:00Z"}',
    "a required property null": b'{"id": 1, "page": null, "at": "2026-01-01T00:00:00Z"}',
    "empty": b"",
    "a raw line break in a string": b'{"id": 1, "page": "a\nb", "at": "2026-01-01T00:00:00Z"}',
    "two objects": b'{"id": 1, "page": "/", "at": "2026-01-01T00:00:00Z"} {"id": 2}',
}


@pytest.mark.parametrize("kind", sorted(POISON))
def test_a_poison_value_is_a_dead_letter_and_its_neighbours_land_as_they_would_alone(kind: str) -> None:
    rnd = random.Random(kind)
    values = [json.dumps(click(rnd, i)).encode() for i in range(50)]
    clean = JsonDecoder(CLICK).decode(*laid_out(values)).table
    values.insert(17, POISON[kind])
    out = JsonDecoder(CLICK).decode(*laid_out(values))
    assert list(out.dead) == [17], out.dead
    assert out.rows.tolist() == [i for i in range(51) if i != 17]
    assert out.table.equals(clean)


def test_nan_lands_as_a_double_as_pythons_json_writes_it() -> None:
    value = json.dumps({"id": 1, "page": "/", "at": "2026-01-01T00:00:00Z", "ms": float("nan")}).encode()
    assert b"NaN" in value
    out = JsonDecoder(CLICK).decode(*laid_out([value]))
    assert out.dead == {} and np.isnan(out.table.column("ms")[0].as_py())


def test_line_breaks_between_tokens_are_whitespace() -> None:
    pretty = json.dumps({"id": 5, "page": "/x", "at": "2026-01-01T00:00:00+01:00"}, indent=2).encode()
    out = JsonDecoder(CLICK).decode(*laid_out([pretty]))
    assert out.dead == {}
    assert out.table.to_pylist()[0]["at"] == dt.datetime(2025, 12, 31, 23, tzinfo=dt.UTC)


def test_a_schema_with_a_map_is_read_value_by_value() -> None:
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "attrs": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    values = [json.dumps({"id": i, "attrs": {f"k{j}": "v" for j in range(i % 3)}}).encode() for i in range(5)]
    values.append(b'{"id": 9, "attrs": {"k": 1}}')  # not a string
    out = JsonDecoder(schema).decode(*laid_out(values))
    assert out.careful and list(out.dead) == [5]
    assert [dict(r["attrs"]) for r in out.table.to_pylist()] == [
        {},
        {"k0": "v"},
        {"k0": "v", "k1": "v"},
        {},
        {"k0": "v"},
    ]
