"""Confluent's wire format, read a column at a time: a zero byte, the writer schema's id in 4 bytes
(big-endian), then the datum (Avro binary, or JSON text for JSON Schema). Pure.

A batch's values arrive as one Arrow binary column; `frame_column` reads every value's header with
numpy over the column's buffers (no Python object per record) and says, per value, whether it is
framed, which schema id it carries, and where its datum starts. A value that is not framed (too
short, another first byte) is a permanent problem of that record (a dead letter, never a retry);
a null value is a tombstone, neither.

Example:
    >>> import pyarrow as pa
    >>> frames = frame_column(pa.array([b"\\x00\\x00\\x00\\x00\\x07abc", b"{}", None], pa.binary()))
    >>> frames.schema_ids.tolist(), frames.framed.tolist(), frames.tombstone.tolist()
    ([7, -1, -1], [True, False, False], [False, False, True])
    >>> [frames.problem(i) for i in range(3)]
    [None, 'not in the wire format (first byte 0x7b, not 0x00)', None]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["HEADER_BYTES", "MAGIC", "Frames", "frame_column", "value_spans"]

MAGIC = 0
HEADER_BYTES = 5


@dataclass(frozen=True, slots=True)
class Frames:
    """The headers of a column of values.

    Attributes:
        schema_ids: each value's schema id; -1 where it is not framed or is null.
        framed: whether the value is in the wire format (a zero byte and an id, then the datum).
        tombstone: whether the value is null (a delete on a compacted topic).
        first_byte: each value's first byte (-1 for an empty or null value), for the error message.
        starts, ends: where each value's datum starts and ends in `data`.
        data: the column's value bytes (one buffer: the datums are slices of it).
    """

    schema_ids: np.ndarray
    framed: np.ndarray
    tombstone: np.ndarray
    first_byte: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    data: np.ndarray

    def __len__(self) -> int:
        return len(self.framed)

    def problem(self, i: int) -> str | None:
        """Why value `i` is not in the wire format, or None (framed, or a tombstone)."""
        if self.framed[i] or self.tombstone[i]:
            return None
        size = int(self.ends[i] - self.starts[i])  # an unframed value's datum is all of it
        if self.first_byte[i] == MAGIC:
            return f"not in the wire format ({size} bytes: too short for a schema id)"
        if self.first_byte[i] < 0:
            return "not in the wire format (an empty value)"
        return f"not in the wire format (first byte 0x{int(self.first_byte[i]):02x}, not 0x00)"


def value_spans(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the column's data bytes, each value's start, each value's end): a binary column's values
    as ranges of one buffer (a null value is an empty range)."""
    data, begin, end, nulls = _spans(values)
    return data, begin, np.where(nulls, begin, end)


def _spans(values: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(data bytes, begins, ends, nulls) of a binary (or large binary) column, from its buffers."""
    offset_type: type[np.signedinteger[Any]]
    if pa.types.is_large_binary(values.type):
        offset_type = np.int64
    elif pa.types.is_binary(values.type):
        offset_type = np.int32
    else:
        raise TypeError(f"a binary column, not {values.type}")
    n = len(values)
    _validity, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(
        offsets_buf, dtype=offset_type, count=n + 1, offset=values.offset * np.dtype(offset_type).itemsize
    )
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    nulls = values.is_null().to_numpy(zero_copy_only=False)
    return data, offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64), nulls


def frame_column(values: pa.Array) -> Frames:
    """The wire-format headers of a binary (or large binary) column, read with numpy."""
    n = len(values)
    data, begin, end, nulls = _spans(values)
    length = np.where(nulls, 0, end - begin)
    has_byte = length >= 1
    first = np.full(n, -1, np.int64)
    first[has_byte] = data[begin[has_byte]]
    framed = (first == MAGIC) & (length >= HEADER_BYTES)
    ids = np.full(n, -1, np.int64)
    at = begin[framed]
    ids[framed] = (
        (data[at + 1].astype(np.int64) << 24)
        | (data[at + 2].astype(np.int64) << 16)
        | (data[at + 3].astype(np.int64) << 8)
        | data[at + 4].astype(np.int64)
    )
    return Frames(
        schema_ids=ids,
        framed=framed,
        tombstone=nulls,
        first_byte=first,
        starts=np.where(framed, begin + HEADER_BYTES, begin),
        ends=end,
        data=data,
    )
