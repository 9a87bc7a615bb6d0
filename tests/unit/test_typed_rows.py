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
from lagsched.core.key_decode import KeyDecoder, wrap_avro, wrap_json_schema
from lagsched.core.routing import TopicRoute
from lagsched.core.typed_rows import (
    DEAD_LETTER_SCHEMA,
    KAFKA_FIELDS,
    KEY,
    VALUE,
    split_batch,
    typed_schema,
    writer_columns,
)

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
    """Decoders as `typed_files.decoder_for` builds them, from schemas by id (one id may be a key's
    schema and a value's, as a registry handing out one id per content does)."""
    by_id = {int(k.removeprefix("id")): v for k, v in schemas.items()}

    def decoder(part: str, schema_id: int) -> Any:
        if schema_id not in by_id:
            raise UnknownSchemaId(f"the schema registry has no schema with id {schema_id}", schema_id=schema_id)
        if part == KEY:
            return KeyDecoder(AvroDecoder(json.dumps(wrap_avro(by_id[schema_id]))))
        return AvroDecoder(json.dumps(by_id[schema_id]))

    return decoder


def avro_key(schema_id: int, schema: Any, key: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), key)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


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
    assert sorted(split.writers) == [(VALUE, 1), (VALUE, 2)]
    assert split.writers[(VALUE, 2)].field("_kafka_key").type == pa.string()  # a string key: fixed by the format

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
    split = split_batch(raw, route, lambda _part, _id: JsonDecoder(schema), target="lagsched.web.clicks")
    split.check(raw.column("offset").to_numpy())
    assert [t.schema_id for t in split.typed] == [route.local_schema_id, -1] and route.local_schema_id > 0
    assert split.typed[0].batch.column("id").to_pylist() == [1]
    assert split.typed[0].batch.column("_kafka_key").type == pa.binary()
    assert split.dead is not None and split.dead.column("offset").to_pylist() == [101, 103]


def test_a_value_field_named_like_a_kafka_column_is_refused() -> None:
    with pytest.raises(UnsupportedSchema, match="_kafka_offset: a value field of the name of a Kafka column"):
        typed_schema(pa.schema([pa.field("_kafka_offset", pa.int64())]), pa.binary())
    with pytest.raises(UnsupportedSchema, match="_kafka_key: a value field of the name of a Kafka column"):
        typed_schema(pa.schema([pa.field("_kafka_key", pa.int64())]), None)
    # Iceberg's metadata columns: a data column of such a name fails every read of the table.
    with pytest.raises(UnsupportedSchema, match="_partition: a name Iceberg keeps for a metadata column"):
        typed_schema(pa.schema([pa.field("_partition", pa.int32())]), pa.binary())


KEY_V1 = {"type": "record", "name": "OrderKey", "fields": [{"name": "shop", "type": "string"}]}
KEY_V2 = {
    "type": "record",
    "name": "OrderKey",
    "fields": [{"name": "shop", "type": "string"}, {"name": "region", "type": ["null", "string"], "default": None}],
}


def test_avro_keys_of_two_writer_schemas_split_the_rows_and_each_is_a_writer_of_its_own() -> None:
    route = TopicRoute("orders", "shop", "orders", "avro", "avro")
    values = [framed(1, V1, {"id": i}) for i in range(6)]
    keys: list[bytes | None] = [
        avro_key(11, KEY_V1, {"shop": "a"}),
        avro_key(12, KEY_V2, {"shop": "b", "region": "eu"}),
        None,  # no key: a row whose _kafka_key is null, not a dead letter
        b"plain",  # not the wire format
        avro_key(99, KEY_V1, {"shop": "c"}),  # an id the registry does not have
        avro_key(11, KEY_V1, {"shop": "d"})[:-1],  # a key cut short
    ]
    raw = raw_batch(values, keys)
    split = split_batch(raw, route, registry(id1=V1, id11=KEY_V1, id12=KEY_V2), target="lagsched.shop.orders")
    split.check(raw.column("offset").to_numpy())
    rows = {(t.schema_id, t.key_schema_id): t for t in split.typed}
    assert sorted(rows) == [(1, -1), (1, 11), (1, 12)]
    assert rows[(1, 11)].batch.column("_kafka_key").to_pylist() == [{"shop": "a"}]
    assert rows[(1, 11)].batch.column("id").to_pylist() == [0]
    assert rows[(1, 12)].batch.column("_kafka_key").to_pylist() == [{"shop": "b", "region": "eu"}]
    assert rows[(1, -1)].offsets.tolist() == [102] and "_kafka_key" not in rows[(1, -1)].batch.schema.names
    # Three writers: the value's columns without a key column, and each key schema's key column alone.
    assert sorted(split.writers) == [(KEY, 11), (KEY, 12), (VALUE, 1)]
    assert "_kafka_key" not in split.writers[(VALUE, 1)].names
    assert split.writers[(KEY, 12)].field("_kafka_key").type == pa.struct(
        [pa.field("shop", pa.string(), nullable=False), pa.field("region", pa.string())]
    )
    assert split.dead is not None
    dead = {row["offset"]: row for row in split.dead.to_pylist()}
    assert sorted(dead) == [103, 104, 105]
    assert dead[103]["reason"] == "the key is not in the wire format (first byte 0x70, not 0x00)"
    assert dead[104]["reason"] == "the key: the schema registry has no schema with id 99"
    assert dead[105]["reason"].startswith("the key: not a datum of schema lagsched_key")
    assert dead[103]["key"] == b"plain" and dead[103]["schema_id"] == 1  # the value's writer schema


def test_a_key_of_a_primitive_schema_is_a_column_of_its_type_and_may_share_an_id_with_the_value() -> None:
    route = TopicRoute("orders", "shop", "orders", "avro", "avro")
    # A registry handing out one id per content: id 1 is the value schema and id 7 a "string" key.
    raw = raw_batch([framed(1, V1, {"id": 1}), framed(1, V1, {"id": 2})], [avro_key(7, "string", "k1"), None])
    split = split_batch(raw, route, registry(id1=V1, id7="string"), target="lagsched.shop.orders")
    assert split.dead is None
    assert {(t.schema_id, t.key_schema_id) for t in split.typed} == {(1, 7), (1, -1)}
    keyed = next(t for t in split.typed if t.key_schema_id == 7)
    assert keyed.batch.column("_kafka_key").to_pylist() == ["k1"]
    # A key and a value schema of one id: what the schema is for tells the two decisions apart.
    shared = raw_batch([framed(1, V1, {"id": 3})], [avro_key(1, V1, {"id": 30})])
    split = split_batch(shared, route, registry(id1=V1), target="lagsched.shop.orders")
    assert sorted(split.writers) == [(KEY, 1), (VALUE, 1)]
    assert split.typed[0].batch.column("_kafka_key").to_pylist() == [{"id": 30}]


def test_a_key_schema_refused_for_the_table_sends_its_records_to_the_dead_letters() -> None:
    from lagsched.core.evolution import Incompatible

    route = TopicRoute("orders", "shop", "orders", "avro", "avro")
    decoders = registry(id1=V1, id7="string")

    def refusing(part: str, schema_id: int) -> Any:
        if part == KEY:
            raise Incompatible("_kafka_key: string cannot become struct", path="_kafka_key")
        return decoders(part, schema_id)

    raw = raw_batch([framed(1, V1, {"id": 1})], [avro_key(7, "string", "k1")])
    split = split_batch(raw, route, refusing, target="lagsched.shop.orders")
    assert split.typed == [] and split.dead is not None
    assert split.dead.column("reason").to_pylist() == [
        "the key's writer schema 7 is incompatible with lagsched.shop.orders: _kafka_key: string cannot become struct"
    ]


def test_plain_json_keys_of_any_type_and_json_schema_object_keys() -> None:
    value_schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    text_key = TopicRoute(
        "clicks", "web", "clicks", "json", "json", value_schema=json.dumps(value_schema),
        key_schema=json.dumps({"type": "integer"}),
    )  # fmt: skip

    def json_decoders(key_schema: Any) -> Any:
        def decoder(part: str, _id: int) -> Any:
            if part == KEY:
                return KeyDecoder(JsonDecoder(wrap_json_schema(key_schema)), json_text=True)
            return JsonDecoder(value_schema)

        return decoder

    raw = raw_batch([b'{"id": 1}', b'{"id": 2}', b'{"id": 3}', None], [b"41", b'"x"', b"null", b"44"])
    split = split_batch(raw, text_key, json_decoders({"type": "integer"}), target="lagsched.web.clicks")
    split.check(raw.column("offset").to_numpy())
    rows = {t.schema_id: t for t in split.typed}
    assert rows[text_key.local_schema_id].batch.column("_kafka_key").to_pylist() == [41]
    assert rows[-1].batch.column("_kafka_key").to_pylist() == [44]  # a tombstone keeps its key
    assert all(t.key_schema_id == text_key.local_key_schema_id > 0 for t in split.typed)
    assert split.dead is not None and split.dead.column("offset").to_pylist() == [101, 102]
    assert all(r.startswith("the key: ") for r in split.dead.column("reason").to_pylist())

    object_key = {
        "type": "object",
        "properties": {"user": {"$ref": "#/definitions/user"}},
        "definitions": {"user": {"type": "string"}},
    }
    route = TopicRoute("clicks", "web", "clicks", "json", "json", value_schema=json.dumps(value_schema),
                       key_schema=json.dumps(object_key))  # fmt: skip
    raw = raw_batch([b'{"id": 1}'], [b'{"user": "ann"}'])
    split = split_batch(raw, route, json_decoders(object_key), target="lagsched.web.clicks")
    assert split.dead is None and split.typed[0].batch.column("_kafka_key").to_pylist() == [{"user": "ann"}]
    wanted = writer_columns(route, KEY, KeyDecoder(JsonDecoder(wrap_json_schema(object_key)), json_text=True))
    assert wanted.names == [*(f.name for f in KAFKA_FIELDS), "_kafka_key"]
