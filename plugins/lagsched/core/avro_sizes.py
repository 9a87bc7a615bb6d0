"""How many bytes each decoded Avro datum takes in Avro's binary encoding, a column at a time. Pure.

Why: the columnar reader (`lagsched.core.avro_decode`) decodes the datums of one schema id as one
block, and a block has no boundaries between datums. A datum one byte too long or too short (a
buggy producer, a value of another schema under this id) would shift every datum after it: the
reader then reads the next records from the wrong bytes, often without an error (measured: 98 of
100 such blocks decoded "fine"). So each decoded row's canonical size is computed from the decoded
columns and compared with the length of its datum:

    the reader consumes c_i >= size_i bytes for row i (a canonical encoding is the shortest), rows
    are read one after another within the block, and the block holds sum(len_i) bytes. If
    size_i == len_i for every i, then sum(c_i) <= sum(len_i) = sum(size_i) <= sum(c_i), so every
    c_i == len_i: each row was decoded from exactly its own bytes.

A mismatch (a corrupt datum, or a valid but non-canonical encoding such as an array written in
several blocks) sends the group to the datum-by-datum reader, which tells the two apart.

The canonical sizes (what Avro's Java library and fastavro write): a long or int is a zigzag
varint; float 4, double 8, boolean 1; string and bytes a varint length and the bytes; fixed its
size; an enum its symbol's index as a varint; a union the branch index (a varint) and the value;
an array or map its item count as a varint, the items, and a 0 (just the 0 when empty); a decimal
on bytes the shortest two's-complement bytes of its unscaled value.

Example:
    >>> import pyarrow as pa
    >>> encoded_sizes("long", pa.array([0, -1, 64, -65, 2**40])).tolist()
    [1, 1, 2, 2, 6]
    >>> encoded_sizes(["null", "string"], pa.array(["héllo", None])).tolist()
    [8, 1]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lagsched.core.avro_types import full_name, lookup

__all__ = ["encoded_sizes", "varint_sizes"]

#: 7, 14, ..., 63 bits: a varint of k bytes holds values below 2**(7k).
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_FIXED_SIZES = {"boolean": 1, "float": 4, "double": 8, "null": 0}
_TIMESTAMP_SCALES = {"timestamp-millis": 1000, "local-timestamp-millis": 1000, "time-millis": 1000}


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of each value's zigzag varint (Avro's int and long encoding).

    >>> varint_sizes(np.array([0, 63, -64, 64, -(2**63)])).tolist()
    [1, 1, 1, 2, 10]
    """
    signed = values.astype(np.int64)
    zigzag = (signed.astype(np.uint64) << np.uint64(1)) ^ (signed >> np.int64(63)).astype(np.uint64)
    return (np.searchsorted(_VARINT_LIMITS, zigzag, side="right") + 1).astype(np.int64)


def encoded_sizes(avro: Any, column: pa.Array, named: Mapping[str, Any] | None = None) -> np.ndarray:
    """Each row's canonical encoded size (int64) for `column` decoded from the Avro type `avro`.

    `column` is as `lagsched.core.avro_types.arrow_schema` types it (timestamps in microseconds,
    enums as their symbols); `named` holds the named types defined so far (filled as they are met).
    """
    found: dict[str, Any] = {} if named is None else dict(named)
    return _sizes(avro, column, found, "")


def _sizes(avro: Any, column: pa.Array, named: dict[str, Any], namespace: str) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(avro, str) and (found := lookup(avro, named, namespace)) is not None:
        avro = named[found]
    if isinstance(avro, list):
        return _union(avro, column, named, namespace)
    if isinstance(avro, str):
        return _primitive(avro, None, column)
    if not isinstance(avro, Mapping):
        raise ValueError(f"not an Avro type: {avro!r}")
    kind = avro.get("type")
    if isinstance(kind, Mapping | list):
        return _sizes(kind, column, named, namespace)
    if kind in ("record", "enum", "fixed"):
        return _named_sizes(avro, column, named, namespace)
    if kind == "array":
        return _collection(column, _sizes(avro["items"], column.values, named, namespace))
    if kind == "map":
        keys, items = column.keys, column.items
        inner = _sizes("string", keys, named, namespace) + _sizes(avro["values"], items, named, namespace)
        return _collection(column, inner)
    return _primitive(str(kind), avro.get("logicalType"), column)


def _primitive(kind: str, logical: Any, column: pa.Array) -> np.ndarray:
    if kind in _FIXED_SIZES:
        return np.full(len(column), _FIXED_SIZES[kind], np.int64)
    if kind in ("int", "long"):
        return varint_sizes(_raw_integers(column, logical))
    if kind in ("string", "bytes"):
        if logical == "decimal" and kind == "bytes":
            lengths = _decimal_lengths(column)
        else:
            lengths = _ints(pc.fill_null(pc.binary_length(column), 0))
        return np.asarray(varint_sizes(lengths) + lengths, np.int64)
    raise ValueError(f"not an Avro type: {kind!r}")


def _named_sizes(avro: Mapping[str, Any], column: pa.Array, named: dict[str, Any], namespace: str) -> np.ndarray:
    """A record, enum or fixed (recorded under its names for the references after it)."""
    full = full_name(str(avro["name"]), str(avro.get("namespace", namespace)))
    named[full] = avro
    kind = avro["type"]
    if kind == "fixed":
        return np.full(len(column), int(avro["size"]), np.int64)
    if kind == "enum":
        index = pc.index_in(column, value_set=pa.array(list(avro["symbols"]), pa.string()))
        return varint_sizes(pc.fill_null(index, 0).to_numpy(zero_copy_only=False))
    assert isinstance(column, pa.StructArray)
    total = np.zeros(len(column), np.int64)
    for spec, child in zip(avro["fields"], column.flatten(), strict=True):
        total += _sizes(spec["type"], child, named, full.rpartition(".")[0])
    return total


def _union(branches: list[Any], column: pa.Array, named: dict[str, Any], namespace: str) -> np.ndarray:
    """A union with null (the only kind a typed table holds): the branch index, then the value."""
    null_at = branches.index("null")
    other = 1 - null_at
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    inner = _sizes(branches[other], column, named, namespace)
    index = np.where(valid, varint_sizes(np.array([other]))[0], varint_sizes(np.array([null_at]))[0])
    return np.asarray(index + np.where(valid, inner, 0), np.int64)


def _collection(column: pa.Array, item_sizes: np.ndarray) -> np.ndarray:
    """An array's or map's rows: a count, the items and a closing 0; an empty one is just the 0."""
    offsets = column.offsets.to_numpy().astype(np.int64)
    counts = np.diff(offsets)
    summed = np.concatenate([[0], np.cumsum(item_sizes)])
    items = summed[offsets[1:]] - summed[offsets[:-1]]
    return np.where(counts > 0, varint_sizes(counts) + items + 1, 1)


def _raw_integers(column: pa.Array, logical: Any) -> np.ndarray:
    """The integers the datum held: a date's days, a time's or timestamp's units (the column has
    microseconds; millisecond types are scaled back)."""
    kind = column.type
    if pa.types.is_timestamp(kind) or pa.types.is_time(kind) or pa.types.is_date(kind):
        width = pa.int64() if not pa.types.is_date32(kind) else pa.int32()
        raw = pc.fill_null(column.view(width) if hasattr(column, "view") else column.cast(width), 0)
        return np.asarray(_ints(raw) // _TIMESTAMP_SCALES.get(str(logical), 1), np.int64)
    return _ints(pc.fill_null(column, 0))


def _ints(column: pa.Array) -> np.ndarray:
    return np.asarray(column.to_numpy(zero_copy_only=False), np.int64)


def _decimal_lengths(column: pa.Array) -> np.ndarray:
    """Bytes of each unscaled value in the shortest two's complement (as Java's BigInteger writes it)."""
    scale = column.type.scale
    out = np.zeros(len(column), np.int64)
    for i, value in enumerate(column.to_pylist()):
        if value is not None:
            unscaled = int(value.scaleb(scale))
            out[i] = (unscaled.bit_length() + 8) // 8 if unscaled >= 0 else ((~unscaled).bit_length() + 8) // 8
    return out
