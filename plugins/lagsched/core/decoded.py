"""What decoding a block of values gives, whatever the format, and the byte gathering the decoders share. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

__all__ = ["Decoded", "RawDecoder", "gather"]


@dataclass(frozen=True, slots=True)
class Decoded:
    """What a block decoded to.

    Attributes:
        table: the rows that decoded, in the table's Arrow schema, in the order of `rows`.
        rows: each table row's index among the datums given.
        dead: datum index -> why it could not be decoded (a permanent reason: a dead letter).
        careful: whether the datum-by-datum path ran (for the stats: it is ~10x slower).
    """

    table: pa.Table
    rows: np.ndarray
    dead: dict[int, str] = field(default_factory=dict)
    careful: bool = False


def gather(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, sep: int | None = None) -> np.ndarray:
    """The bytes ``data[starts[i]:ends[i]]`` end to end (each followed by the byte `sep`, if given),
    without a Python loop over them.

    >>> data = np.frombuffer(b"..ab...cde", np.uint8)
    >>> gather(data, np.array([2, 7]), np.array([4, 10]), sep=ord("\\n")).tobytes()
    b'ab\\ncde\\n'
    >>> gather(data, np.array([7, 2]), np.array([10, 4])).tobytes()  # out of order: as asked
    b'cdeab'
    """
    lengths = (ends - starts).astype(np.int64)
    if len(starts) == 0 or int(lengths.sum()) == 0:
        return np.full(len(starts), sep, np.uint8) if sep is not None else np.zeros(0, np.uint8)
    if len(starts) == 1 or bool(np.all(starts[1:] >= ends[:-1])):
        return _gather_in_order(data, starts, ends, lengths, sep)
    step = lengths + (0 if sep is None else 1)
    total = int(step.sum())
    # Output byte j of range i reads data[starts[i] + (j - where range i begins in the output)].
    begins = np.concatenate([[0], np.cumsum(step)[:-1]])
    index = np.repeat(starts.astype(np.int64) - begins, lengths) + np.arange(total - (0 if sep is None else len(step)))
    if sep is None:
        return data[index]
    out = np.full(total, sep, np.uint8)
    inside = np.ones(total, bool)
    inside[begins + lengths] = False  # the separators' places
    out[inside] = data[index + np.repeat(np.arange(len(step)), lengths)]
    return out


def _gather_in_order(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, lengths: np.ndarray, sep: int | None
) -> np.ndarray:
    """`gather` of ranges in the order of the data, none overlapping (a column's values, or some of
    them): a mask of the bytes kept, a byte per byte of data. The general way builds an 8-byte index
    per byte gathered: for a block of 100,000 records that is tens of megabytes, which the allocator
    maps fresh (and the kernel faults in) on every call."""
    some = lengths > 0  # a byte starts at most one non-empty range and ends at most one: no index repeats
    # Only the span the ranges cover: a slice's data is all of its buffer.
    first, last = int(starts[some][0]), int(ends[some][-1])
    edges = np.zeros(last - first + 1, np.int8)
    edges[starts[some] - first] += 1
    edges[ends[some] - first] -= 1
    kept: np.ndarray = data[first:last][np.cumsum(edges[:-1], dtype=np.int8).view(bool)]
    if sep is None:
        return kept
    separated: np.ndarray = np.insert(kept, np.cumsum(lengths), np.uint8(sep))
    return separated


class RawDecoder:
    """The ``raw`` value format of a routed topic: the value's bytes as they are, in a ``value`` column.

    >>> data = np.frombuffer(b"abcde", np.uint8)
    >>> RawDecoder().decode(data, np.array([0, 3]), np.array([3, 5])).table.column("value").to_pylist()
    [b'abc', b'de']
    """

    schema = pa.schema([pa.field("value", pa.binary())])

    def decode(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Decoded:
        lengths = (ends - starts).astype(np.int32)
        offsets = np.zeros(len(starts) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = pa.Array.from_buffers(
            pa.binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(gather(data, starts, ends))]
        )
        return Decoded(pa.table({"value": values}, schema=self.schema), np.arange(len(starts)))
