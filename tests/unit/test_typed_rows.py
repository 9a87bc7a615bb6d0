"""A routed topic's batch split into typed rows and dead letters: every record in exactly one place."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from lagsched.core.avro_decode import AvroDecoder
from lagsched.core.avro_types import UnsupportedSchema
from lagsched.core.errors import UnknownSchemaId
from lagsched.core.json_decode import JsonDecoder
from lagsched.core.routing import TopicRoute
from lagsched.core.typed_rows import DEAD_LETTER_SCHEMA, KAFKA_FIELDS, split_batch, typed_schema

pytestmark = pytest.mark.unit

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}],
}
UNION = {"type": "record", "name": "U", "fields": [{"name": "x", "type": ["string", "long"]}]}


def framed(schema_id: int, schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


def raw_batch(values: list[bytes | None], keys: list[bytes | None] | None = None) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["orders"])),
            pa.array(np.full(n, 3, np.int32)),
            pa.array(np.arange(100, 100 + n, dtype=np.int64)),
            pa.array(np.arange(n, dtype=np.int64) * 1_000_000).view(pa.timestamp("us", tz="UTC")),
            pa.array(keys if keys is not None else [b"k"] * n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([[{"key": "h", "value": b"v"}]] * n, HEADERS),
        ],
        names=["topic", "partition", "offset", "timestamp", "key", "value", "headers"],
    )


def registry(**schemas: Any) -> Any:
    by_id = {int(k.removeprefix("id")): v for k, v in schemas.items()}

    def decoder(schema_id: int) -> AvroDecoder:
        if schema_id not in by_id:
            raise UnknownSchemaId(f"the schema registry has no schema with id {schema_id}", schema_id=schema_id)
        return AvroDecoder(json.dumps(by_id[schema_id]))

    return decoder


ROUTE = TopicRoute("orders", "shop", "orders", "avro", "string")


def test_every_record_lands_in_exactly_one_place_with_the_reason_for_the_dead() -> None:
    values = [
        framed(1, V1, {"id": 1}),
        framed(2, V2, {"id": 2, "note": "n"}),
        None,  # a tombstone
        b'{"id": 4}',  # not the wire format
        framed(99, V1, {"id": 5}),  # an id the registry does not have
        framed(1, V1, {"id": 6})[:-1] + b"",  # a datum cut short
        framed(1, V1, {"id": 7}),
        framed(3, UNION, {"x": "a"}),  # a schema a table cannot hold
        framed(1, V1, {"id": 9}),
    ]
    keys: list[bytes | None] = [b"k"] * len(values)
    keys[8] = b"\xff\xfe"  # not UTF-8
    raw = raw_batch(values, keys)
    split = split_batch(raw, ROUTE, registry(id1=V1, id2=V2, id3=UNION), target="lagsched.shop.orders")
    split.check(raw.column("offset").to_numpy())
    by_id = {t.schema_id: t for t in split.typed}
    assert sorted(by_id) == [-1, 1, 2]
    assert by_id[1].offsets.tolist() == [100, 106]
    assert by_id[1].batch.column("id").to_pylist() == [1, 7]
    assert by_id[1].batch.column("_kafka_key").to_pylist() == ["k", "k"]
    assert by_id[2].batch.column("note").to_pylist() == ["n"]
    assert by_id[-1].offsets.tolist() == [102] and by_id[-1].batch.column("_kafka_tombstone").to_pylist() == [True]
    assert by_id[1].batch.schema.names[: len(KAFKA_FIELDS) + 1] == [*(f.name for f in KAFKA_FIELDS), "_kafka_key"]
    assert by_id[1].batch.column("_kafka_topic").to_pylist() == ["orders", "orders"]
    assert sorted(split.writers) == [1, 2]

    assert split.dead is not None and split.dead.schema == DEAD_LETTER_SCHEMA
    dead = {row["offset"]: row for row in split.dead.to_pylist()}
    assert sorted(dead) == [103, 104, 105, 107, 108]
    assert dead[103]["reason"] == "not in the wire format (first byte 0x7b, not 0x00)"
    assert dead[103]["schema_id"] is None and dead[103]["value"] == b'{"id": 4}'
    assert dead[104]["reason"].endswith("has no schema with id 99") and dead[104]["schema_id"] == 99
    assert dead[105]["reason"].startswith("not a datum of schema Order")
    assert "cannot be a table's" in dead[107]["reason"] and "a union of 2 non-null types" in dead[107]["reason"]
    assert dead[108]["reason"].startswith("the key is not UTF-8 text")
    assert {r["target_table"] for r in dead.values()} == {"lagsched.shop.orders"}
    assert all(r["headers"] == [{"key": "h", "value": b"v"}] for r in dead.values())


def test_plain_json_values_have_no_schema_id() -> None:
    schema = {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}
    route = TopicRoute("clicks", "web", "clicks", "json", "raw", value_schema=json.dumps(schema))
    raw = raw_batch([b'{"id": 1}', b'{"id": "x"}', None, b"\x00\x00\x00\x00\x01{}"])
    split = split_batch(raw, route, lambda _id: JsonDecoder(schema), target="lagsched.web.clicks")
    split.check(raw.column("offset").to_numpy())
    assert [t.schema_id for t in split.typed] == [route.local_schema_id, -1] and route.local_schema_id > 0
    assert split.typed[0].batch.column("id").to_pylist() == [1]
    assert split.typed[0].batch.column("_kafka_key").type == pa.binary()
    assert split.dead is not None and split.dead.column("offset").to_pylist() == [101, 103]


def test_a_value_field_named_like_a_kafka_column_is_refused() -> None:
    with pytest.raises(UnsupportedSchema, match="_kafka_offset: a value field of the name of a Kafka column"):
        typed_schema(pa.schema([pa.field("_kafka_offset", pa.int64())]), "raw")
    with pytest.raises(UnsupportedSchema, match="raw and string keys so far"):
        typed_schema(pa.schema([]), "avro")
    # Iceberg's metadata columns: a data column of such a name fails every read of the table.
    with pytest.raises(UnsupportedSchema, match="_partition: a name Iceberg keeps for a metadata column"):
        typed_schema(pa.schema([pa.field("_partition", pa.int32())]), "raw")
