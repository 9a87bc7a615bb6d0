"""A batch of one routed topic's records, split into typed rows and dead letters. Pure.

What a Spark task does with the records of a topic that has a table of its own (a `TopicRoute`):
the values are decoded by the route's format (`lagsched.core.avro_decode`,
`lagsched.core.json_decode`), a writer schema at a time; each typed row keeps the Kafka columns
(`KAFKA_FIELDS`) and the key; a record that cannot be decoded for a permanent reason becomes a
row of the cluster's dead-letter table (`DEAD_LETTER_SCHEMA`) with its raw key, value and headers,
its coordinates, the schema id, the table it was meant for and the reason. Every record of the
batch is in exactly one of the two (`Split.check`), which is what lets its offset advance.

A tombstone (a null value) is not a dead letter: it lands as a typed row whose value columns are
null and whose ``_kafka_tombstone`` is true. So a typed table's value columns are all optional; that a
record has its required fields is checked when it is decoded.

Writer schemas come from `schemas` (the registry client's ``schema``), so this module does no I/O
itself: an unknown schema id (`UnknownSchemaId`) makes dead letters, a registry that cannot answer
(`ConnectionFailure`) propagates, and the task fails as an outage, with nothing written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lagsched.core.arrow_types import HEADERS_TYPE
from lagsched.core.avro_types import UnsupportedSchema
from lagsched.core.decoded import Decoded
from lagsched.core.errors import UnknownSchemaId
from lagsched.core.evolution import Incompatible
from lagsched.core.routing import TopicRoute
from lagsched.core.wire_format import frame_column, value_spans

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "KAFKA_FIELDS",
    "Split",
    "TypedRows",
    "split_batch",
    "typed_schema",
]

#: The columns every typed row keeps, before the key and the value's fields.
KAFKA_FIELDS = (
    pa.field("_kafka_topic", pa.string(), nullable=False),
    pa.field("_kafka_partition", pa.int32(), nullable=False),
    pa.field("_kafka_offset", pa.int64(), nullable=False),
    pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("_kafka_headers", HEADERS_TYPE),
    pa.field("_kafka_tombstone", pa.bool_(), nullable=False),
)
#: A dead letter: the record as Kafka had it, where it was going, and why it did not get there.
DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("schema_id", pa.int64()),
        pa.field("target_table", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
    ]
)
_KEY_TYPES = {"raw": pa.binary(), "string": pa.string()}
#: Names Iceberg gives its metadata columns (a data column of one of them breaks every read of the table).
ICEBERG_RESERVED = frozenset(
    {"_file", "_pos", "_deleted", "_spec_id", "_partition", "_row_id", "_last_updated_sequence_number",
     "_change_type", "_change_ordinal", "_commit_snapshot_id", "_identifier_fields"}
)  # fmt: skip


def typed_schema(value: pa.Schema, key_format: str) -> pa.Schema:
    """A typed table's columns for rows of the writer schema `value` (Arrow): the Kafka columns, the
    key, then the value's fields, each optional (a tombstone has none).

    Raises:
        UnsupportedSchema: a value field has the name of a Kafka column, or the key format is not
            one a typed table holds yet.
    """
    if key_format not in _KEY_TYPES:
        raise UnsupportedSchema(
            f"key_format {key_format!r}: typed tables hold raw and string keys so far", path="_kafka_key"
        )
    taken = {f.name for f in KAFKA_FIELDS} | {"_kafka_key"}
    clash = [f.name for f in value if f.name in taken]
    if clash:
        raise UnsupportedSchema(f"{clash[0]}: a value field of the name of a Kafka column", path=clash[0])
    reserved = [f.name for f in value if f.name.lower() in ICEBERG_RESERVED]
    if reserved:
        raise UnsupportedSchema(f"{reserved[0]}: a name Iceberg keeps for a metadata column", path=reserved[0])
    values = (f.with_type(spark_readable(f.type)).with_nullable(True) for f in value)
    return pa.schema([*KAFKA_FIELDS, pa.field("_kafka_key", _KEY_TYPES[key_format]), *values])


def spark_readable(kind: pa.DataType) -> pa.DataType:
    """``kind`` as a typed table holds it: a time of day (Avro's time-millis, time-micros) becomes
    its microseconds since midnight (long), nested ones too. Spark refuses to load an Iceberg table
    with a ``time`` column at all, and the slots' redo check and the table care read through Spark.

    >>> spark_readable(pa.struct([("at", pa.time64("us")), ("n", pa.int32())]))
    StructType(struct<at: int64, n: int32>)
    """
    if pa.types.is_time(kind):
        return pa.int64()
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(spark_readable(f.type)) for f in kind])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(kind.value_field.with_type(spark_readable(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field, kind.item_field.with_type(spark_readable(kind.item_type)))
    return kind


@dataclass(frozen=True, slots=True)
class TypedRows:
    """Rows of one writer schema (`schema_id`: the registry's, or the route's `TopicRoute.local_schema_id`
    for plain json and raw values; -1: tombstones), in `typed_schema`'s columns."""

    schema_id: int
    batch: pa.RecordBatch
    offsets: np.ndarray


@dataclass(frozen=True, slots=True)
class Split:
    """A batch split: typed rows per writer schema, and the dead letters (None if there are none)."""

    typed: list[TypedRows] = field(default_factory=list)
    dead: pa.RecordBatch | None = None
    #: The writer schemas met, by id (what the driver evolves the table with before the commit).
    writers: dict[int, pa.Schema] = field(default_factory=dict)

    def check(self, offsets: np.ndarray) -> None:
        """Every offset of the batch in exactly one place, or an AssertionError (a bug, never data)."""
        placed = [t.offsets for t in self.typed]
        if self.dead is not None:
            placed.append(self.dead.column("offset").to_numpy())
        together = np.sort(np.concatenate(placed)) if placed else np.zeros(0, np.int64)
        if not np.array_equal(together, np.sort(offsets)):
            raise AssertionError("a record of the batch is not in exactly one table")


#: A writer schema's id -> its decoder (``decode`` and ``schema``: `AvroDecoder`, `JsonDecoder`); raises
#: UnknownSchemaId, UnsupportedSchema, or ConnectionFailure when the registry cannot answer.
Decoders = Callable[[int], Any]


def split_batch(raw: pa.RecordBatch, route: TopicRoute, decoders: Decoders, *, target: str) -> Split:
    """Decode `raw` (the raw table's columns: topic, partition, offset, timestamp, key, value,
    headers; one topic) by `route`; `decoders(schema_id)` gives the decoder of a writer schema
    (asked for the route's `TopicRoute.local_schema_id` for the json and raw formats, whose values
    carry none); `target` names the typed table
    for the dead letters."""
    values = raw.column("value")
    n = raw.num_rows
    reasons: dict[int, str] = {}
    tombstone = values.is_null().to_numpy(zero_copy_only=False)
    keys, key_dead = _keys(raw.column("key"), route.key_format)
    reasons.update(key_dead)
    if route.value_format in ("avro", "json_schema"):
        frames = frame_column(values)
        schema_ids = frames.schema_ids
        for i in np.flatnonzero(~frames.framed & ~frames.tombstone).tolist():
            reasons.setdefault(i, str(frames.problem(i)))
        data, starts, ends = frames.data, frames.starts, frames.ends
    else:
        data, starts, ends = value_spans(values)
        schema_ids = np.where(tombstone, -1, route.local_schema_id)
    typed: list[TypedRows] = []
    writers: dict[int, pa.Schema] = {}
    for schema_id in sorted(set(schema_ids[schema_ids >= 0].tolist())):
        rows = np.flatnonzero((schema_ids == schema_id) & ~_marked(n, reasons))
        try:
            decoder = decoders(int(schema_id))
        except UnknownSchemaId as exc:
            reasons.update({int(i): str(exc) for i in rows})
            continue
        except UnsupportedSchema as exc:
            reasons.update({int(i): f"the writer schema {schema_id} cannot be a table's: {exc}" for i in rows})
            continue
        except Incompatible as exc:
            reason = f"the writer schema {schema_id} is incompatible with {target}: {exc}"
            reasons.update({int(i): reason for i in rows})
            continue
        decoded: Decoded = decoder.decode(data, starts[rows], ends[rows])
        for local, reason in decoded.dead.items():
            reasons[int(rows[local])] = reason
        kept = rows[decoded.rows]
        if len(kept):
            schema = typed_schema(decoder.schema, route.key_format)
            writers[int(schema_id)] = decoder.schema
            typed.append(_typed(raw, keys, kept, schema=schema, schema_id=int(schema_id), values=decoded.table))
    stones = np.flatnonzero(tombstone & ~_marked(n, reasons))
    if len(stones):
        schema = typed_schema(pa.schema([]), route.key_format)
        typed.append(_typed(raw, keys, stones, schema=schema, schema_id=-1, values=None))
    dead = _dead_letters(raw, reasons, schema_ids, target) if reasons else None
    return Split(typed, dead, writers)


def _marked(n: int, reasons: Mapping[int, str]) -> np.ndarray:
    """Which of the batch's `n` records are dead letters already."""
    marked = np.zeros(n, bool)
    marked[list(reasons)] = True
    return marked


def _keys(keys: pa.Array, key_format: str) -> tuple[pa.Array, dict[int, str]]:
    """The key column in the table's type; a string key that is not UTF-8 is a dead letter."""
    if key_format == "raw":
        return keys, {}
    try:
        return keys.cast(pa.string()), {}  # Arrow checks the UTF-8 of the whole column at once
    except pa.ArrowInvalid:
        pass  # a key that is not UTF-8: find which, one by one
    out: list[str | None] = []
    dead: dict[int, str] = {}
    for i, key in enumerate(keys.to_pylist()):
        if key is None:
            out.append(None)
            continue
        try:
            out.append(key.decode("utf-8"))
        except UnicodeDecodeError as exc:
            out.append(None)
            dead[i] = f"the key is not UTF-8 text ({exc.reason} at byte {exc.start})"
    return pa.array(out, pa.string()), dead


def _coordinates(raw: pa.RecordBatch, index: pa.Array) -> list[pa.Array]:
    """The records' topic, partition, offset, timestamp and headers, as both tables hold them."""
    topic = raw.column("topic").take(index)
    if pa.types.is_dictionary(topic.type):
        topic = topic.dictionary_decode()
    return [
        topic.cast(pa.string()),
        raw.column("partition").take(index).cast(pa.int32()),
        raw.column("offset").take(index),
        raw.column("timestamp").take(index),
        raw.column("headers").take(index),
    ]


def _typed(
    raw: pa.RecordBatch, keys: pa.Array, rows: np.ndarray, *, schema: pa.Schema, schema_id: int, values: pa.Table | None
) -> TypedRows:
    """Typed rows: the Kafka columns and the key of `rows`, then the decoded `values` (None: a
    tombstone's, which has no value column; a reader fills them with nulls)."""
    index = pa.array(rows)
    columns = [*_coordinates(raw, index), pa.array(np.full(len(rows), values is None)), keys.take(index)]
    if values is not None:
        held = pa.schema([schema.field(f.name) for f in values.schema])
        columns += [c.combine_chunks() for c in values.cast(held).columns]  # times as microseconds (spark_readable)
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    return TypedRows(schema_id, batch, raw.column("offset").take(index).to_numpy())


def _dead_letters(
    raw: pa.RecordBatch, reasons: Mapping[int, str], schema_ids: np.ndarray, target: str
) -> pa.RecordBatch:
    rows = np.array(sorted(reasons), np.int64)
    index = pa.array(rows)
    topic, partition, offset, timestamp, headers = _coordinates(raw, index)
    ids = schema_ids[rows]
    return pa.RecordBatch.from_arrays(
        [
            topic, partition, offset, timestamp,
            raw.column("key").take(index), raw.column("value").take(index), headers,
            pa.array(np.where(ids >= 0, ids, 0), mask=ids < 0),
            pa.array([target] * len(rows), pa.string()),
            pa.array([reasons[int(i)] for i in rows], pa.string()),
        ],
        schema=DEAD_LETTER_SCHEMA,
    )  # fmt: skip
