"""Avro schemas as the Arrow (and so Iceberg) columns of a typed table. Pure.

The mapping (docs/lake.md, "Typed tables"; an Avro field is required unless it is a union with
null, which makes it optional):

=====================================  =========================  ==================
Avro                                   Arrow                      Iceberg
=====================================  =========================  ==================
boolean                                bool                       boolean
int                                    int32                      int
long                                   int64                      long
float / double                         float32 / float64          float / double
string                                 string                     string
bytes                                  binary                     binary
fixed(n)                               fixed_size_binary(n)       fixed[n]
enum                                   string (the symbol)        string
record                                 struct                     struct
array<T>                               list<T>                    list<T>
map<T>                                 map<string, T>             map<string, T>
[null, T] (either order)               T, nullable                optional T
decimal(p, s) on bytes or fixed        decimal128(p, s), p <= 38  decimal(p, s)
uuid (on string)                       string                     string
date                                   date32                     date
time-millis / time-micros              time64(us)                 long: µs since midnight (*)
timestamp-millis / -micros             timestamp(us, UTC)         timestamptz
local-timestamp-millis / -micros       timestamp(us)              timestamp
=====================================  =========================  ==================

(*) A typed table holds a time of day as its microseconds since midnight
(`lagsched.core.typed_rows.spark_readable`): Spark refuses to load an Iceberg table with a ``time``
column at all, and the slots' redo check and the table care read through Spark.

A logical type Avro does not define is read as its underlying type (as the Avro spec says).
Refused, with the field's path (`UnsupportedSchema`: the records become dead letters naming it): a
union of two or more non-null types, a record that contains itself, a decimal of more than 38
digits, timestamps in nanoseconds.

Example:
    >>> arrow_schema({"type": "record", "name": "Order", "fields": [
    ...     {"name": "id", "type": "long"},
    ...     {"name": "note", "type": ["null", "string"], "default": None},
    ...     {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]})
    id: int64 not null
    note: string
      -- field metadata --
      lagsched.default: '1'
    at: timestamp[us, tz=UTC] not null
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from lagsched.core.errors import LagschedError

__all__ = ["UnsupportedSchema", "arrow_schema", "full_name", "has_maps", "inlined", "lookup", "without_logical"]

_PRIMITIVES: Mapping[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
_TIMES = {"time-millis": "int", "time-micros": "long"}
_TIMESTAMPS = {
    "timestamp-millis": "UTC",
    "timestamp-micros": "UTC",
    "local-timestamp-millis": None,
    "local-timestamp-micros": None,
}
MAX_DECIMAL_DIGITS = 38


class UnsupportedSchema(LagschedError, ValueError):
    """A writer schema a typed table cannot hold; `path` is the field (``address.lines[]``)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


def arrow_schema(avro: Any) -> pa.Schema:
    """The Arrow schema of a record schema (parsed JSON), fields in the writer's order.

    Raises:
        UnsupportedSchema: the schema is not a record, or a field has a type the table cannot hold.
    """
    named: dict[str, Any] = {}
    root = _resolve(avro, named, "", "(root)")
    if not isinstance(root, Mapping) or root.get("type") != "record":
        raise UnsupportedSchema("a typed table needs a record schema at the top", path="(root)")
    struct = _arrow(root, named, "", "", frozenset())
    return pa.schema(list(struct))


def has_maps(avro: Any) -> bool:
    """Whether the schema holds a map anywhere (the columnar reader cannot read maps)."""
    if isinstance(avro, Mapping):
        return avro.get("type") == "map" or any(
            has_maps(v) for k, v in avro.items() if k in ("type", "items", "values", "fields")
        )
    if isinstance(avro, list):
        return any(has_maps(v) for v in avro)
    return False


def inlined(avro: Any) -> Any:
    """The schema with every reference to a named type replaced by a copy of its definition under a
    name of its own (``Address`` again becomes ``Address_2``): the same binary encoding, for readers
    that do not resolve references (polars' does not).

    >>> h = {"type": "fixed", "name": "H", "size": 2}
    >>> r = {"type": "record", "name": "R", "fields": [{"name": "x", "type": h}, {"name": "y", "type": "H"}]}
    >>> inlined(r)["fields"][1]
    {'name': 'y', 'type': {'type': 'fixed', 'name': 'H_2', 'size': 2}}
    """
    named: dict[str, Any] = {}
    copies: dict[str, int] = {}

    def walk(node: Any, namespace: str) -> Any:
        if isinstance(node, str):
            full = lookup(node, named, namespace)
            if full is None:
                return node
            copies[full] = copies.get(full, 1) + 1
            copy = dict(named[full])
            copy["name"] = f"{str(copy['name']).rpartition('.')[2]}_{copies[full]}"
            if full.rpartition(".")[0]:
                copy["namespace"] = full.rpartition(".")[0]
            return walk_definition(copy, namespace, record=False)
        if isinstance(node, list):
            return [walk(branch, namespace) for branch in node]
        if isinstance(node, Mapping):
            if node.get("type") in ("record", "enum", "fixed"):
                return walk_definition(node, namespace, record=True)
            out = dict(node)
            for key in ("items", "values"):
                if key in out:
                    out[key] = walk(out[key], namespace)
            if isinstance(out.get("type"), Mapping | list | str) and out.get("type") not in _PRIMITIVES:
                out["type"] = walk(out["type"], namespace)
            return out
        return node

    def walk_definition(node: Mapping[str, Any], namespace: str, *, record: bool) -> Any:
        full = full_name(str(node["name"]), str(node.get("namespace", namespace)))
        if record:
            named[full] = node
        out = dict(node)
        if node.get("type") == "record":
            inner = full.rpartition(".")[0]
            out["fields"] = [{**f, "type": walk(f["type"], inner)} for f in node.get("fields", ())]
        return out

    return walk(avro, "")


def without_logical(avro: Any, logical: str) -> Any:
    """The schema with one logical type taken off (its values read as the underlying type).

    >>> without_logical({"type": "string", "logicalType": "uuid"}, "uuid")
    {'type': 'string'}
    """
    if isinstance(avro, list):
        return [without_logical(b, logical) for b in avro]
    if isinstance(avro, Mapping):
        out = {k: without_logical(v, logical) for k, v in avro.items() if not (k == "logicalType" and v == logical)}
        if "fields" in avro:
            out["fields"] = [{**f, "type": without_logical(f["type"], logical)} for f in avro["fields"]]
        return out
    return avro


def full_name(name: str, namespace: str) -> str:
    """A named type's full name: `name` if it has a dot, else in `namespace` (Avro's rule).

    >>> full_name("Address", "t.shop"), full_name("x.Address", "t.shop"), full_name("A", "")
    ('t.shop.Address', 'x.Address', 'A')
    """
    return name if "." in name or not namespace else f"{namespace}.{name}"


def lookup(reference: str, named: Mapping[str, Any], namespace: str) -> str | None:
    """The full name of the type `reference` names among those defined so far (`named`), or None."""
    return next((n for n in (full_name(reference, namespace), reference) if n in named), None)


def _resolve(avro: Any, named: dict[str, Any], namespace: str, path: str) -> Any:
    """A type with a named reference replaced by its definition (definitions are recorded as met)."""
    if isinstance(avro, str) and avro not in _PRIMITIVES and avro != "null":
        found = lookup(avro, named, namespace)
        if found is None:
            raise UnsupportedSchema(f"{path}: unknown type {avro!r}", path=path)
        return named[found]
    return avro


def _arrow(avro: Any, named: dict[str, Any], namespace: str, path: str, inside: frozenset[str]) -> pa.DataType:
    avro = _resolve(avro, named, namespace, path or "(root)")
    if isinstance(avro, str):
        if avro == "null":
            raise UnsupportedSchema(f"{path or '(root)'}: a field of type null holds nothing", path=path)
        return _PRIMITIVES[avro]
    if isinstance(avro, list):
        return _union(avro, named, namespace, path, inside)[0]
    if not isinstance(avro, Mapping):
        raise UnsupportedSchema(f"{path or '(root)'}: not an Avro type: {avro!r}", path=path)
    kind = avro.get("type")
    if kind in ("record", "enum", "fixed"):
        return _named_type(avro, named, namespace, path, inside)
    if kind == "array":
        nullable, item = _field_type(avro["items"], named, namespace, f"{path}[]", inside)
        return pa.list_(pa.field("element", item, nullable=nullable))
    if kind == "map":
        nullable, value = _field_type(avro["values"], named, namespace, f"{path}{{}}", inside)
        return pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", value, nullable=nullable))
    if kind in _PRIMITIVES:
        return _logical(str(kind), avro.get("logicalType"), avro, path)
    return _arrow(kind, named, namespace, path, inside)  # {"type": "string"} or {"type": "Named"}


def _named_type(
    avro: Mapping[str, Any], named: dict[str, Any], namespace: str, path: str, inside: frozenset[str]
) -> pa.DataType:
    """A record, enum or fixed, recorded under its full name for the references after it."""
    kind = avro["type"]
    full = full_name(str(avro.get("name", "")), str(avro.get("namespace", namespace)))
    if kind == "record" and full in inside:
        raise UnsupportedSchema(f"{path}: record {full} contains itself; a table cannot hold that", path=path)
    named[full] = avro
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return _decimal(avro, path) if avro.get("logicalType") == "decimal" else pa.binary(int(avro["size"]))
    fields = []
    for field in avro.get("fields", ()):
        name = str(field["name"])
        child = f"{path}.{name}" if path else name
        nullable, value = _field_type(field["type"], named, full.rpartition(".")[0], child, inside | {full})
        fields.append(pa.field(name, value, nullable=nullable, metadata=_field_metadata(field)))
    return pa.struct(fields)


#: Field metadata keys the schema's evolution reads (`lagsched.core.evolution`).
DEFAULT_KEY = b"lagsched.default"
ALIASES_KEY = b"lagsched.aliases"


def _field_metadata(field: Mapping[str, Any]) -> dict[bytes, bytes] | None:
    """Whether the field has a default, and its aliases: what tells an added field from a renamed one."""
    meta = {}
    if "default" in field:
        meta[DEFAULT_KEY] = b"1"
    if field.get("aliases"):
        meta[ALIASES_KEY] = json.dumps([str(a) for a in field["aliases"]]).encode()
    return meta or None


def _logical(kind: str, logical: Any, avro: Mapping[str, Any], path: str) -> pa.DataType:
    if logical == "decimal" and kind == "bytes":
        return _decimal(avro, path)
    if logical == "date" and kind == "int":
        return pa.date32()
    if _TIMES.get(logical) == kind:
        return pa.time64("us")
    if logical in _TIMESTAMPS and kind == "long":
        return pa.timestamp("us", tz=_TIMESTAMPS[logical])
    if logical in ("timestamp-nanos", "local-timestamp-nanos") and kind == "long":
        raise UnsupportedSchema(f"{path}: timestamps in nanoseconds (Iceberg v2 holds microseconds)", path=path)
    return _PRIMITIVES[kind]  # uuid on string, and logical types Avro does not define


def _decimal(avro: Mapping[str, Any], path: str) -> pa.DataType:
    precision, scale = int(avro.get("precision", 0)), int(avro.get("scale", 0))
    if not 1 <= precision <= MAX_DECIMAL_DIGITS or not 0 <= scale <= precision:
        raise UnsupportedSchema(
            f"{path}: decimal({precision}, {scale}); a table holds 1 to {MAX_DECIMAL_DIGITS} digits, "
            "scale <= precision",
            path=path,
        )
    return pa.decimal128(precision, scale)


def _field_type(
    avro: Any, named: dict[str, Any], namespace: str, path: str, inside: frozenset[str]
) -> tuple[bool, pa.DataType]:
    """(nullable, type): a union with null is the other branch, nullable."""
    resolved = _resolve(avro, named, namespace, path)
    if isinstance(resolved, list):
        value, nullable = _union(resolved, named, namespace, path, inside)
        return nullable, value
    return False, _arrow(resolved, named, namespace, path, inside)


def _union(
    branches: list[Any], named: dict[str, Any], namespace: str, path: str, inside: frozenset[str]
) -> tuple[pa.DataType, bool]:
    others = [b for b in branches if b != "null"]
    if len(others) != 1 or len(branches) > 2:
        raise UnsupportedSchema(
            f"{path}: a union of {len(others)} non-null types ({', '.join(map(_type_name, others))}); "
            "a table column holds one type (a union with null is an optional column)",
            path=path,
        )
    return _arrow(others[0], named, namespace, path, inside), len(branches) == 2


def _type_name(avro: Any) -> str:
    if isinstance(avro, Mapping):
        return str(avro.get("name") or avro.get("type"))
    return str(avro)
