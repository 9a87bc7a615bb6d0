"""Keys of one writer schema decoded into the one column a typed table keeps them in, ``_kafka_key``. Pure.

A key's schema is often not a record: Confluent's serializers write a ``"string"`` or ``"long"``
Avro key, or a JSON Schema ``{"type": "string"}`` key, as readily as a record. So the key is read
as the one field ``key`` of a record (object) around its schema (`wrap_avro`, `wrap_json_schema`)
by the value decoders (`lagsched.core.avro_decode`, `lagsched.core.json_decode`), and that field
is the column. An Avro datum of a record of one field is that field's datum, byte for byte, so the
Avro bytes are read as they are; a JSON key's text is put inside ``{"key": ...}`` (`wrap_json_text`).
A record (object) key is thus a struct column of its fields, any other key a column of its type.

Example:
    >>> import io, json, fastavro
    >>> from lagsched.core.avro_decode import AvroDecoder
    >>> out = io.BytesIO(); fastavro.schemaless_writer(out, "long", 42)
    >>> keys = KeyDecoder(AvroDecoder(json.dumps(wrap_avro("long"))))
    >>> data = np.frombuffer(out.getvalue(), np.uint8)
    >>> keys.key_type, keys.decode(data, np.array([0]), np.array([len(data)])).table.column(0).to_pylist()
    (DataType(int64), [42])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from lagsched.core.decoded import Decoded

__all__ = ["KEY_FIELD", "KeyDecoder", "wrap_avro", "wrap_json_schema", "wrap_json_text"]

#: The field a key is read as (inside the record its schema is wrapped in).
KEY_FIELD = "key"
_OPEN, _CLOSE = b'{"key":', b"}"


def wrap_avro(schema: Any) -> dict[str, Any]:
    """An Avro key schema (parsed JSON) as a record of the one field `KEY_FIELD`."""
    return {"type": "record", "name": "lagsched_key", "fields": [{"name": KEY_FIELD, "type": schema}]}


def wrap_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema of keys as an object schema of the one property `KEY_FIELD` (required: a key
    that is JSON ``null`` text has no value to hold). Its definitions stay at the top, where a
    ``#/...`` reference inside it looks for them."""
    wrapped: dict[str, Any] = {k: v for k, v in schema.items() if k in ("definitions", "$defs")}
    inner = {k: v for k, v in schema.items() if k not in ("definitions", "$defs", "$schema", "$id")}
    wrapped.update({"type": "object", "properties": {KEY_FIELD: inner}, "required": [KEY_FIELD]})
    return wrapped


def wrap_json_text(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The JSON texts ``data[starts[i]:ends[i]]`` each inside ``{"key": ...}``, as (bytes, starts, ends).

    >>> data = np.frombuffer(b'"ab"7', np.uint8)
    >>> out, s, e = wrap_json_text(data, np.array([0, 4]), np.array([4, 5]))
    >>> [out[a:b].tobytes() for a, b in zip(s, e)]
    [b'{"key":"ab"}', b'{"key":7}']
    """
    lengths = (ends - starts).astype(np.int64)
    size = lengths + len(_OPEN) + len(_CLOSE)
    new_ends = np.cumsum(size)
    new_starts = new_ends - size
    out = np.empty(int(size.sum()), np.uint8)
    total = int(lengths.sum())
    # Byte j of text i goes to new_starts[i] + len(_OPEN) + j; it comes from starts[i] + j.
    within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[np.repeat(new_starts + len(_OPEN), lengths) + within] = data[np.repeat(starts, lengths) + within]
    for offset, byte in enumerate(_OPEN):
        out[new_starts + offset] = byte
    out[new_ends - 1] = _CLOSE[0]
    return out, new_starts, new_ends


class KeyDecoder:
    """Decodes keys of one writer schema into one column (``table`` of `Decoded`: the column alone).

    ``values`` decodes the wrapped schema (`wrap_avro`, `wrap_json_schema`); ``json_text``: the keys
    are JSON text, to be wrapped as the schema was."""

    def __init__(self, values: Any, *, json_text: bool = False) -> None:
        self._values, self._json_text = values, json_text
        self.key_type: pa.DataType = values.schema.field(KEY_FIELD).type

    def decode(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Decoded:
        if self._json_text:
            data, starts, ends = wrap_json_text(data, starts, ends)
        out: Decoded = self._values.decode(data, starts, ends)
        column = out.table.column(KEY_FIELD).combine_chunks() if out.table.num_rows else pa.array([], self.key_type)
        dead = {i: f"the key: {reason}" for i, reason in out.dead.items()}
        return Decoded(pa.table({KEY_FIELD: column}), out.rows, dead, out.careful)
