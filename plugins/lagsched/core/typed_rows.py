"""A batch of one routed topic's records, split into typed rows and dead letters. Pure.

What a Spark task does with the records of a topic that has a table of its own (a `TopicRoute`):
the values are decoded by the route's format (`lagsched.core.avro_decode`,
`lagsched.core.json_decode`), a writer schema at a time; each typed row keeps the Kafka columns
(`KAFKA_FIELDS`) and the key, itself decoded by the route's key format where it has a schema
(`lagsched.core.key_decode`), so the rows of a batch are split per (value, key) writer schema; a
record that cannot be decoded for a permanent reason becomes a row of the cluster's dead-letter
table (`DEAD_LETTER_SCHEMA`) with its raw key, value and headers, its coordinates, the schema id,
the table it was meant for and the reason. Every record of the
batch is in exactly one of the two (`Split.check`), which is what lets its offset advance.

A tombstone (a null value) is not a dead letter: it lands as a typed row whose value columns are
null and whose ``_kafka_tombstone`` is true. So a typed table's value columns are all optional; that a
record has its required fields is checked when it is decoded.

Writer schemas come from `schemas` (the registry client's ``schema``), so this module does no I/O
itself: an unknown schema id (`UnknownSchemaId`) makes dead letters, a registry that cannot answer
(`ConnectionFailure`) propagates, and the task fails as an outage, with nothing written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lagsched.core.arrow_types import HEADERS_TYPE
from lagsched.core.avro_types import UnsupportedSchema
from lagsched.core.decoded import Decoded
from lagsched.core.errors import UnknownSchemaId
from lagsched.core.evolution import Incompatible
from lagsched.core.routing import REGISTRY_FORMATS, TopicRoute
from lagsched.core.wire_format import frame_column, value_spans

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "KAFKA_FIELDS",
    "KEY",
    "VALUE",
    "Split",
    "TypedRows",
    "split_batch",
    "typed_schema",
    "writer_columns",
]

#: The two parts of a record a writer schema is for (a decision is per table, part and schema id).
VALUE, KEY = "value", "key"

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
#: The key column's type for the key formats that need no schema; other keys take their writer schema's.
FIXED_KEY_TYPES = {"raw": pa.binary(), "string": pa.string()}
#: Names Iceberg gives its metadata columns (a data column of one of them breaks every read of the table).
ICEBERG_RESERVED = frozenset(
    {"_file", "_pos", "_deleted", "_spec_id", "_partition", "_row_id", "_last_updated_sequence_number",
     "_change_type", "_change_ordinal", "_commit_snapshot_id", "_identifier_fields"}
)  # fmt: skip


def typed_schema(value: pa.Schema, key: pa.DataType | None) -> pa.Schema:
    """A typed table's columns for rows of the writer schema `value` (Arrow) and keys of type `key`
    (None: rows without a ``_kafka_key`` column, as keys of no writer schema are, null keys of a
    decoded key format): the Kafka columns, the key, then the value's fields, each optional (a
    tombstone has none).

    Raises:
        UnsupportedSchema: a value field has the name of a Kafka column or of an Iceberg metadata column.
    """
    taken = {f.name for f in KAFKA_FIELDS} | {"_kafka_key"}
    clash = [f.name for f in value if f.name in taken]
    if clash:
        raise UnsupportedSchema(f"{clash[0]}: a value field of the name of a Kafka column", path=clash[0])
    reserved = [f.name for f in value if f.name.lower() in ICEBERG_RESERVED]
    if reserved:
        raise UnsupportedSchema(f"{reserved[0]}: a name Iceberg keeps for a metadata column", path=reserved[0])
    values = (f.with_type(spark_readable(f.type)).with_nullable(True) for f in value)
    keys = [] if key is None else [pa.field("_kafka_key", spark_readable(key))]
    return pa.schema([*KAFKA_FIELDS, *keys, *values])


def writer_columns(route: TopicRoute, part: str, decoder: Any) -> pa.Schema:
    """The typed table's columns a writer schema of `part` needs (what a decision on it evolves the
    table to hold): a value schema's fields (and the key column, when its type is fixed by the key
    format), or a key schema's key column. `decoder`: the schema's (`typed_files.decoder_for`)."""
    if part == KEY:
        return typed_schema(pa.schema([]), decoder.key_type)
    return typed_schema(decoder.schema, FIXED_KEY_TYPES.get(route.key_format))


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
    for plain json and raw values; -1: tombstones) and one key writer schema (`key_schema_id`; -1:
    keys of no writer schema: a raw or string key, a null key), in `typed_schema`'s columns."""

    schema_id: int
    batch: pa.RecordBatch
    offsets: np.ndarray
    key_schema_id: int = -1


@dataclass(frozen=True, slots=True)
class Split:
    """A batch split: typed rows per writer schema, and the dead letters (None if there are none)."""

    typed: list[TypedRows] = field(default_factory=list)
    dead: pa.RecordBatch | None = None
    #: The writer schemas met, by (part, id), as the table columns each needs (`writer_columns`):
    #: what the table is evolved with before the commit.
    writers: dict[tuple[str, int], pa.Schema] = field(default_factory=dict)

    def check(self, offsets: np.ndarray) -> None:
        """Every offset of the batch in exactly one place, or an AssertionError (a bug, never data)."""
        placed = [t.offsets for t in self.typed]
        if self.dead is not None:
            placed.append(self.dead.column("offset").to_numpy())
        together = np.sort(np.concatenate(placed)) if placed else np.zeros(0, np.int64)
        if not np.array_equal(together, np.sort(offsets)):
            raise AssertionError("a record of the batch is not in exactly one table")


#: (part, writer schema id) -> its decoder (``decode`` and ``schema``: `AvroDecoder`, `JsonDecoder`;
#: for keys ``key_type``: `KeyDecoder`); raises UnknownSchemaId, UnsupportedSchema, Incompatible
#: (refused for the table), or ConnectionFailure when the registry cannot answer.
Decoders = Callable[[str, int], Any]


def split_batch(raw: pa.RecordBatch, route: TopicRoute, decoders: Decoders, *, target: str) -> Split:
    """Decode `raw` (the raw table's columns: topic, partition, offset, timestamp, key, value,
    headers; one topic) by `route`; `decoders(part, schema_id)` gives the decoder of a writer schema
    (asked for the route's `TopicRoute.local_schema_id` for the json and raw formats, whose values
    carry none); `target` names the typed table for the dead letters. Keys are decoded first: a
    record whose key cannot be is a dead letter, whatever its value."""
    values = raw.column("value")
    n = raw.num_rows
    reasons: dict[int, str] = {}
    writers: dict[tuple[str, int], pa.Schema] = {}
    keys = _keys(raw.column("key"), route, decoders, reasons, writers, target=target)
    tombstone = values.is_null().to_numpy(zero_copy_only=False)
    if route.value_format in REGISTRY_FORMATS:
        frames = frame_column(values)
        schema_ids = frames.schema_ids
        for i in np.flatnonzero(~frames.framed & ~frames.tombstone).tolist():
            reasons.setdefault(i, str(frames.problem(i)))
        data, starts, ends = frames.data, frames.starts, frames.ends
    else:
        data, starts, ends = value_spans(values)
        schema_ids = np.where(tombstone, -1, route.local_schema_id)
    typed: list[TypedRows] = []
    for schema_id, decoder, rows, decoded in _each_writer(
        schema_ids, (data, starts, ends), part=VALUE, decoders=decoders, reasons=reasons, target=target
    ):
        kept = rows[decoded.rows]
        if len(kept):
            writers[(VALUE, schema_id)] = writer_columns(route, VALUE, decoder)
            typed += _typed(raw, keys, kept, value_schema=decoder.schema, schema_id=schema_id, values=decoded.table)
    stones = np.flatnonzero(tombstone & ~_marked(n, reasons))
    if len(stones):
        typed += _typed(raw, keys, stones, value_schema=pa.schema([]), schema_id=-1, values=None)
    dead = _dead_letters(raw, reasons, schema_ids, target) if reasons else None
    return Split(typed, dead, writers)


def _each_writer(
    ids: np.ndarray,
    spans: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    part: str,
    decoders: Decoders,
    reasons: dict[int, str],
    target: str,
) -> Iterator[tuple[int, Any, np.ndarray, Decoded]]:
    """For each writer schema id of `ids` (-1: none), in order: (the id, its decoder, its records
    not dead letters yet, what they decoded to). A schema that cannot be read into the table, and
    each datum that does not decode, are put in `reasons` (dead letters) on the way. ``spans``: the
    datums' bytes, starts and ends."""
    data, starts, ends = spans
    for schema_id in np.unique(ids[ids >= 0]).tolist():
        rows = np.flatnonzero((ids == schema_id) & ~_marked(len(ids), reasons))
        try:
            decoder = decoders(part, schema_id)
        except (UnknownSchemaId, UnsupportedSchema, Incompatible) as exc:
            reasons.update({int(i): _refusal(exc, part, schema_id, target) for i in rows})
            continue
        decoded: Decoded = decoder.decode(data, starts[rows], ends[rows])
        for local, reason in decoded.dead.items():
            reasons[int(rows[local])] = reason
        yield schema_id, decoder, rows, decoded


def _refusal(exc: Exception, part: str, schema_id: int, target: str) -> str:
    """The dead letters' reason when a writer schema cannot be read into the table."""
    whose = "the key's writer schema" if part == KEY else "the writer schema"
    if isinstance(exc, UnsupportedSchema):
        return f"{whose} {schema_id} cannot be a table's: {exc}"
    if isinstance(exc, Incompatible):
        return f"{whose} {schema_id} is incompatible with {target}: {exc}"
    return f"the key: {exc}" if part == KEY else str(exc)


def _marked(n: int, reasons: Mapping[int, str]) -> np.ndarray:
    """Which of the batch's `n` records are dead letters already."""
    marked = np.zeros(n, bool)
    marked[list(reasons)] = True
    return marked


@dataclass(frozen=True, slots=True)
class _Keys:
    """A batch's keys as the table holds them.

    Attributes:
        ids: each record's key writer schema id; -1: none (a raw or string key, a null key).
        fixed: the whole key column, for the formats that need no schema (raw, string); else None.
        decoded: key writer schema id -> (the column of its keys, each record's row in it).
        types: key writer schema id -> its key column's type.
    """

    ids: np.ndarray
    fixed: pa.Array | None = None
    decoded: dict[int, tuple[pa.Array, np.ndarray]] = field(default_factory=dict)
    types: dict[int, pa.DataType] = field(default_factory=dict)

    def column(self, rows: np.ndarray, key_id: int) -> tuple[pa.DataType | None, pa.Array | None]:
        """The key column's type and values for `rows`, all of key writer schema `key_id`."""
        if self.fixed is not None:
            return self.fixed.type, self.fixed.take(pa.array(rows))
        if key_id < 0:
            return None, None
        column, position = self.decoded[key_id]
        return self.types[key_id], column.take(pa.array(position[rows]))


def _keys(
    keys: pa.Array,
    route: TopicRoute,
    decoders: Decoders,
    reasons: dict[int, str],
    writers: dict[tuple[str, int], Any],
    *,
    target: str,
) -> _Keys:
    """The keys decoded by the route's key format; a key that cannot be makes its record a dead letter
    (in `reasons`); the key writer schemas met go to `writers`."""
    n = len(keys)
    if route.key_format in FIXED_KEY_TYPES:
        fixed, dead = _fixed_keys(keys, route.key_format)
        reasons.update(dead)
        return _Keys(np.full(n, -1, np.int64), fixed=fixed)
    if route.key_format in REGISTRY_FORMATS:
        frames = frame_column(keys)
        ids = frames.schema_ids
        for i in np.flatnonzero(~frames.framed & ~frames.tombstone).tolist():
            reasons.setdefault(i, f"the key is {frames.problem(i)}")
        data, starts, ends = frames.data, frames.starts, frames.ends
    else:  # json: plain JSON text read against the route's key_schema
        data, starts, ends = value_spans(keys)
        ids = np.where(keys.is_null().to_numpy(zero_copy_only=False), -1, route.local_key_schema_id)
    out = _Keys(ids)
    for key_id, decoder, rows, decoded in _each_writer(
        ids, (data, starts, ends), part=KEY, decoders=decoders, reasons=reasons, target=target
    ):
        position = np.full(n, -1, np.int64)
        position[rows[decoded.rows]] = np.arange(len(decoded.rows))
        out.decoded[key_id] = (decoded.table.column(0).combine_chunks(), position)
        out.types[key_id] = decoder.key_type
        if len(decoded.rows):
            writers[(KEY, key_id)] = writer_columns(route, KEY, decoder)
    return out


def _fixed_keys(keys: pa.Array, key_format: str) -> tuple[pa.Array, dict[int, str]]:
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
    raw: pa.RecordBatch,
    keys: _Keys,
    rows: np.ndarray,
    *,
    value_schema: pa.Schema,
    schema_id: int,
    values: pa.Table | None,
) -> list[TypedRows]:
    """Typed rows, one set per key writer schema: the Kafka columns and the key of `rows`, then
    the decoded `values` (row i of it is record ``rows[i]``'s; None: tombstones, which have no
    value column; a reader fills them with nulls)."""
    out = []
    key_ids = keys.ids[rows]
    for key_id in np.unique(key_ids).tolist():
        local = np.flatnonzero(key_ids == key_id)
        some = rows[local]
        key_type, key_column = keys.column(some, key_id)
        schema = typed_schema(value_schema, key_type)
        index = pa.array(some)
        columns = [*_coordinates(raw, index), pa.array(np.full(len(some), values is None))]
        if key_column is not None:
            columns.append(key_column.cast(schema.field("_kafka_key").type))  # times as microseconds
        if values is not None:
            held = pa.schema([schema.field(f.name) for f in values.schema])
            taken = values if len(local) == values.num_rows else values.take(pa.array(local))
            columns += [c.combine_chunks() for c in taken.cast(held).columns]  # times as microseconds (spark_readable)
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        out.append(TypedRows(schema_id, batch, raw.column("offset").take(index).to_numpy(), key_schema_id=key_id))
    return out


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
