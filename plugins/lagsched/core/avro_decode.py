"""Avro datums of one writer schema into an Arrow table, a block at a time. Pure.

The fast path: the datums (Confluent's 5-byte header cut off) are laid end to end as the one block
of an in-memory Avro object container file whose header carries the writer schema, and polars'
Avro reader turns that block into columns (~0.4 us a record here, against ~4-6 us for fastavro's
reader and a Python dict per record). `lagsched.core.avro_sizes` then proves that every row was
decoded from exactly its own bytes.

The careful path, for a block the fast one refuses (the reader failed, a size does not match, or
the schema holds a map, which polars cannot read): each datum alone through fastavro, which must
consume it to its last byte. A datum that fails there is a dead letter, with fastavro's reason.

Example:
    >>> import io, fastavro, numpy as np
    >>> schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    >>> datums = []
    >>> for n in (1, 2, 3):
    ...     out = io.BytesIO(); fastavro.schemaless_writer(out, schema, {"n": n}); datums.append(out.getvalue())
    >>> datums[1] = datums[1] + b"!"  # one byte too many
    >>> data = np.frombuffer(b"".join(datums), np.uint8)
    >>> ends = np.cumsum([len(d) for d in datums]); starts = ends - [len(d) for d in datums]
    >>> decoded = AvroDecoder(json.dumps(schema)).decode(data, starts, ends)
    >>> decoded.table.column("n").to_pylist(), decoded.rows.tolist(), decoded.dead
    ([1, 3], [0, 2], {1: 'the datum has 1 byte(s) after the record the schema reads'})
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import numpy as np
import pyarrow as pa

from lagsched.core.avro_sizes import encoded_sizes
from lagsched.core.avro_types import arrow_schema, has_maps, inlined, without_logical
from lagsched.core.decoded import Decoded, gather

__all__ = ["AvroDecoder"]

_MAGIC = b"Obj\x01"


def _varint(n: int) -> bytes:
    zigzag = (n << 1) ^ (n >> 63)
    out = bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


class AvroDecoder:
    """Decodes datums written with one writer schema (its JSON text) into `schema` (Arrow)."""

    def __init__(self, writer_text: str) -> None:
        import fastavro

        self.writer = json.loads(writer_text)
        self.schema = arrow_schema(self.writer)
        # fastavro would hand a uuid over as a UUID object; the table holds its text.
        self._parsed = fastavro.parse_schema(without_logical(self.writer, "uuid"))
        self.columnar = not has_maps(self.writer)
        self._sync = os.urandom(16)
        # polars' reader does not resolve a reference to a named type: it gets each inlined.
        meta = {b"avro.schema": json.dumps(inlined(self.writer)).encode(), b"avro.codec": b"null"}
        head = bytearray(_MAGIC + _varint(len(meta)))
        for key, value in meta.items():
            head += _varint(len(key)) + key + _varint(len(value)) + value
        self._header = bytes(head + _varint(0) + self._sync)

    def decode(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Decoded:
        """The datums ``data[starts[i]:ends[i]]`` (bytes as uint8) decoded; see `Decoded`."""
        count = len(starts)
        if count == 0:
            return Decoded(self.schema.empty_table(), np.zeros(0, np.int64))
        if self.columnar:
            table = self._columnar(data, starts, ends)
            if table is not None:
                return Decoded(table, np.arange(count))
        return self._careful(data, starts, ends)

    def _columnar(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Table | None:
        """The block through polars, or None when it fails or a row's size is not its datum's."""
        try:
            table = self.read_block(self.block(data, starts, ends))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            return None
        return table if self.sized(table, starts, ends) else None

    # The fast path's steps, apart so that the decode benchmark times each (lagsched_dev.bench.decode).

    def block(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bytes:
        """The datums as the one block of an in-memory object container file."""
        body = gather(data, starts, ends)
        return b"".join((self._header, _varint(len(starts)), _varint(len(body)), body.tobytes(), self._sync))

    def read_block(self, blob: bytes) -> pa.Table:
        """polars' read of `block`, in the table's Arrow types; raises what polars raises (panics too)."""
        import polars as pl

        return _conform(pl.read_avro(io.BytesIO(blob)).to_arrow(), self.schema)

    def sized(self, table: pa.Table, starts: np.ndarray, ends: np.ndarray) -> bool:
        """Whether every row was decoded from exactly its own datum (`lagsched.core.avro_sizes`) and
        every value fits its column."""
        if table.num_rows != len(starts) or not _holds(table):
            return False
        rows = pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns], fields=list(self.schema))
        return bool(np.array_equal(encoded_sizes(self.writer, rows), (ends - starts).astype(np.int64)))

    def _careful(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Decoded:
        import fastavro

        rows: list[dict[str, Any]] = []
        kept: list[int] = []
        dead: dict[int, str] = {}
        for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            raw = data[start:end].tobytes()
            stream = io.BytesIO(raw)
            try:
                record = fastavro.schemaless_reader(stream, self._parsed, None)
            except Exception as exc:  # noqa: BLE001 - whatever the bytes made the reader raise is the reason
                dead[i] = f"not a datum of schema {self.writer.get('name', '?')}: {type(exc).__name__}: {exc}"[:300]
                continue
            left = len(raw) - stream.tell()
            if left:
                dead[i] = f"the datum has {left} byte(s) after the record the schema reads"
                continue
            rows.append(record)  # type: ignore[arg-type]  # a record schema reads a dict
            kept.append(i)
        table, unfit = _from_rows(rows, self.schema)
        for position in unfit:
            dead[kept[position]] = unfit[position]
        good = [k for j, k in enumerate(kept) if j not in unfit]
        return Decoded(table, np.array(good, np.int64), dead, careful=True)


def _holds(table: pa.Table) -> bool:
    """Whether every value fits its column: polars hands over a decimal wider than the column's
    precision, or a time past midnight, as is (Arrow's full validation catches both; strings and
    the rest need no second look, so only such columns are checked)."""
    for column in table.columns:
        if _checked_type(column.type):
            try:
                column.validate(full=True)
            except pa.ArrowInvalid:
                return False
    return True


def _checked_type(kind: pa.DataType) -> bool:
    if pa.types.is_decimal(kind) or pa.types.is_time(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_checked_type(f.type) for f in kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _checked_type(kind.value_type)
    return False


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """polars' Arrow output in the table's types (enums are dictionaries, strings large or views,
    times and timestamps in the writer's unit)."""
    columns = []
    for target, column in zip(schema, table.columns, strict=True):
        columns.append(_cast(column.combine_chunks(), target.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _cast(column: pa.Array, target: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if pa.types.is_string_view(column.type) or pa.types.is_binary_view(column.type):
        column = column.cast(pa.large_string() if pa.types.is_string_view(column.type) else pa.large_binary())
    if pa.types.is_struct(target) and pa.types.is_struct(column.type):
        children = [_cast(child, f.type) for f, child in zip(target, column.flatten(), strict=True)]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=column.is_null())
    if pa.types.is_list(target) and (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        items = _cast(column.values, target.value_type)
        offsets = column.offsets.cast(pa.int32())
        return pa.ListArray.from_arrays(offsets, items, type=target, mask=column.is_null())
    return column.cast(target)


def _from_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> tuple[pa.Table, dict[int, str]]:
    """fastavro's records as a table; a record the table cannot hold is left out, with the reason."""
    try:
        return pa.Table.from_pylist(rows, schema=schema), {}
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        pass
    good: list[dict[str, Any]] = []
    unfit: dict[int, str] = {}
    for i, row in enumerate(rows):
        try:
            pa.Table.from_pylist([row], schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError) as exc:
            unfit[i] = f"a value the table cannot hold: {exc}"[:300]
        else:
            good.append(row)
    return pa.Table.from_pylist(good, schema=schema), unfit
