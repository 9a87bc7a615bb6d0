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
    """
    lengths = (ends - starts).astype(np.int64)
    step = lengths + (0 if sep is None else 1)
    total = int(step.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
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
