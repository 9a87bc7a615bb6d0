"""JSON values (plain, or the datums of Confluent's JSON Schema format) into an Arrow table. Pure.

The fast path: the values, one per line, through Arrow's JSON reader with the table's schema as an
explicit schema (strings for dates and timestamps, cast after: Arrow's reader parses neither), so
no Python object is made per record. One line per value keeps the rows aligned by construction: a
value holding a line break, or an empty one, goes to the careful path from the start.

The careful path (a block the reader refused, or a schema with a map, which it cannot read): each
value alone through the same reader (so a value decodes the same whichever path it takes, as a
redo needs), or for a map schema through Python's json and Arrow's conversion. A value that fails
there is a dead letter with the reason, as is a row that lacks a required property.

Example:
    >>> import numpy as np
    >>> schema = {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}
    >>> values = [b'{"id": 1}', b'{"id": "x"}', b'{"other": 2}', b'{"id": 3, "extra": true}']
    >>> data = np.frombuffer(b"".join(values), np.uint8)
    >>> ends = np.cumsum([len(v) for v in values]); starts = ends - [len(v) for v in values]
    >>> out = JsonDecoder(schema).decode(data, starts, ends)
    >>> out.table.column("id").to_pylist(), out.rows.tolist(), sorted(out.dead)
    ([1, 3], [0, 3], [1, 2])
    >>> out.dead[2]
    "the required property 'id' is missing or null"
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from lagsched.core.decoded import Decoded, gather
from lagsched.core.json_types import arrow_schema

__all__ = ["JsonDecoder"]

_NEWLINE, _RETURN = ord("\n"), ord("\r")
_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, ValueError, TypeError)
_REASON_CHARS = 300


def _transport(kind: pa.DataType) -> pa.DataType:
    """The type Arrow's JSON reader reads into: dates and timestamps as strings; all nullable."""
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(f.name, _transport(f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(pa.field("element", _transport(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(pa.string(), _transport(kind.item_type))
    return kind


def _has_map(kind: pa.DataType) -> bool:
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_map(f.type) for f in kind)
    if pa.types.is_list(kind):
        return _has_map(kind.value_type)
    return False


class JsonDecoder:
    """Decodes JSON object values against one JSON Schema into `schema` (Arrow)."""

    def __init__(self, json_schema: Mapping[str, Any]) -> None:
        self.schema = arrow_schema(json_schema)
        self._transport = pa.schema([pa.field(f.name, _transport(f.type)) for f in self.schema])
        # What the reader produces, then the cast to this (nullable: required is checked per row).
        self._nullable = pa.schema([f.with_nullable(True) for f in self.schema])
        self.required = [f.name for f in self.schema if not f.nullable]
        self.columnar = not any(_has_map(f.type) for f in self.schema)
        self._options = pj.ParseOptions(explicit_schema=self._transport, unexpected_field_behavior="ignore")

    def decode(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Decoded:
        """The values ``data[starts[i]:ends[i]]`` (bytes as uint8) decoded; see `Decoded`."""
        count = len(starts)
        if count == 0:
            return Decoded(self.schema.empty_table(), np.zeros(0, np.int64))
        if self.columnar and _one_line_each(data, starts, ends):
            table = self._read(gather(data, starts, ends, sep=_NEWLINE).tobytes(), count)
            if table is not None:
                missing = self._missing(table)
                if not missing.any():
                    return Decoded(table.cast(self.schema), np.arange(count))
        return self._careful(data, starts, ends)

    def _read(self, lines: bytes, count: int) -> pa.Table | None:
        try:
            table = pj.read_json(
                pa.BufferReader(lines),
                read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(lines) + 1)),
                parse_options=self._options,
            )
            table = table.select(self._transport.names).cast(self._nullable)
        except _ERRORS:
            return None
        return table if table.num_rows == count else None

    def _missing(self, table: pa.Table) -> np.ndarray:
        missing = np.zeros(table.num_rows, bool)
        for name in self.required:
            missing |= table.column(name).is_null().to_numpy(zero_copy_only=False)
        return missing

    def _careful(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Decoded:
        tables: list[pa.Table] = []
        kept: list[int] = []
        dead: dict[int, str] = {}
        for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            raw = data[start:end].tobytes()
            try:
                one = self._one(raw)
            except _ERRORS as exc:
                dead[i] = f"not a value of the table's JSON Schema: {exc}"[:_REASON_CHARS]
                continue
            missing = [name for name in self.required if one.column(name).null_count]
            if missing:
                dead[i] = f"the required property {missing[0]!r} is missing or null"
                continue
            tables.append(one)
            kept.append(i)
        table = pa.concat_tables(tables).cast(self.schema) if tables else self.schema.empty_table()
        return Decoded(table, np.array(kept, np.int64), dead, careful=True)

    def _one(self, raw: bytes) -> pa.Table:
        """One value as a one-row table of the nullable schema, or the error that says why not."""
        if not raw.strip():
            raise ValueError("an empty value")
        if self.columnar:
            # The reader of the fast path, on one line. A line break in valid JSON is whitespace
            # between tokens (in a string it must be escaped), so it may become a space; first
            # make sure the value is valid JSON, or that would mend a broken string.
            if b"\n" in raw or b"\r" in raw:
                json.loads(raw)
            line = raw.replace(b"\r", b" ").replace(b"\n", b" ")
            table = self._read(line + b"\n", 1)
            if table is None:
                pj.read_json(pa.BufferReader(line + b"\n"), parse_options=self._options)  # raises the reason
                raise ValueError("not one JSON object")
            return table
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError(f"not a JSON object but {type(value).__name__}")
        return _cast_transport(pa.Table.from_pylist([value], schema=self._transport), self._nullable)


def _one_line_each(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bool:
    """No value is empty or holds a line break (then one line is one value)."""
    if np.any(ends <= starts):
        return False
    body = gather(data, starts, ends)
    return not bool(np.any((body == _NEWLINE) | (body == _RETURN)))


def _cast_transport(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([pc.cast(c, f.type) for c, f in zip(table.columns, schema, strict=True)], schema=schema)
