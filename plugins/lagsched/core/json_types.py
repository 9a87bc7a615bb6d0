"""JSON Schemas as the Arrow (and so Iceberg) columns of a typed table. Pure.

For the ``json_schema`` format (the registry's schema of each record) and the ``json`` format (the
route's declared ``value_schema``). The top is an object schema; each property is a column, in the
order the schema lists them. The mapping (docs/lake.md, "Typed tables"):

===========================================  =====================  ===============
JSON Schema                                  Arrow                  Iceberg
===========================================  =====================  ===============
``boolean``                                  bool                   boolean
``integer``                                  int64                  long
``number``                                   float64                double
``string``                                   string                 string
``string``, format ``date-time``             timestamp(us, UTC)     timestamptz
``string``, format ``date``                  date32                 date
``string`` with ``enum``                     string                 string
``object`` with ``properties``               struct                 struct
``object`` with only ``additionalProperties``  map<string, T>       map<string, T>
``array`` with ``items``                     list<T>                list<T>
``["T", "null"]``, ``oneOf``/``anyOf`` of    T                      optional T
one type and ``null``
===========================================  =====================  ===============

A top-level property is required (a column that is never null) when the schema lists it in
``required`` and its type does not allow null; every other property, and every nested one, is
optional (each decoded row is checked for its required columns; nested ones are not checked, so
they stay optional rather than promise what is not checked). ``$ref`` to the document's own
``#/definitions/...`` or ``#/$defs/...`` is followed. Refused (`UnsupportedSchema`, naming the
property): a property without a type, a union of several non-null types, a reference to another
document, a reference that contains itself.

Example:
    >>> arrow_schema({"type": "object", "required": ["id"], "properties": {
    ...     "id": {"type": "integer"}, "page": {"type": ["string", "null"]},
    ...     "at": {"type": "string", "format": "date-time"}}})
    id: int64 not null
    page: string
    at: timestamp[us, tz=UTC]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from lagsched.core.avro_types import UnsupportedSchema

__all__ = ["UnsupportedSchema", "arrow_schema"]

_SCALARS: Mapping[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "string": pa.string(),
}
_FORMATS: Mapping[str, pa.DataType] = {"date-time": pa.timestamp("us", tz="UTC"), "date": pa.date32()}


def arrow_schema(schema: Mapping[str, Any]) -> pa.Schema:
    """The Arrow schema of an object schema.

    Raises:
        UnsupportedSchema: the top is not an object with properties, or a property cannot be a column.
    """
    kind, _nullable = _kind(schema, schema, "(root)", frozenset())
    if kind != "object" or "properties" not in _deref(schema, schema, "(root)", frozenset())[0]:
        raise UnsupportedSchema("a typed table needs an object schema with properties at the top", path="(root)")
    struct = _arrow(schema, schema, "", frozenset())
    return pa.schema(list(struct))


def _deref(node: Any, root: Mapping[str, Any], path: str, seen: frozenset[str]) -> tuple[Any, frozenset[str]]:
    while isinstance(node, Mapping) and "$ref" in node:
        ref = str(node["$ref"])
        if not ref.startswith("#/"):
            raise UnsupportedSchema(f"{path}: a reference to another document ({ref})", path=path)
        if ref in seen:
            raise UnsupportedSchema(f"{path}: {ref} contains itself; a table cannot hold that", path=path)
        seen = seen | {ref}
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        if target is None:
            raise UnsupportedSchema(f"{path}: {ref} is not in the schema", path=path)
        node = target
    return node, seen


def _kind(node: Any, root: Mapping[str, Any], path: str, seen: frozenset[str]) -> tuple[str, bool]:
    """(the one non-null type, whether null is allowed too)."""
    node, seen = _deref(node, root, path, seen)
    if not isinstance(node, Mapping):
        raise UnsupportedSchema(f"{path}: not a schema: {node!r}", path=path)
    for key in ("oneOf", "anyOf"):
        if key in node:
            branches = [_kind(b, root, path, seen) for b in node[key]]
            kinds = {k for k, _n in branches if k != "null"}
            if len(kinds) != 1:
                raise UnsupportedSchema(f"{path}: {key} of {len(kinds)} non-null types", path=path)
            return kinds.pop(), any(k == "null" or n for k, n in branches)
    declared = node.get("type")
    if declared is None and "enum" in node:
        declared = "string"
    if declared is None and "properties" in node:
        declared = "object"
    types = declared if isinstance(declared, list) else [declared]
    if types == ["null"]:
        return "null", True  # a branch of oneOf/anyOf
    others = [str(t) for t in types if t != "null" and t is not None]
    if len(others) != 1:
        what = "no type" if not others else f"{len(others)} non-null types ({', '.join(others)})"
        raise UnsupportedSchema(f"{path}: a property with {what}; a column holds one type", path=path)
    if others[0] not in (*_SCALARS, "object", "array"):
        raise UnsupportedSchema(f"{path}: unknown type {others[0]!r}", path=path)
    return str(others[0]), "null" in types


def _arrow(node: Any, root: Mapping[str, Any], path: str, seen: frozenset[str]) -> pa.DataType:
    kind, _nullable = _kind(node, root, path or "(root)", seen)
    node, seen = _deref(node, root, path or "(root)", seen)
    for key in ("oneOf", "anyOf"):
        if key in node:
            branch = next(b for b in node[key] if _kind(b, root, path, seen)[0] != "null")
            return _arrow(branch, root, path, seen)
    if kind == "object":
        properties = node.get("properties")
        if properties is None:
            values = node.get("additionalProperties")
            if not isinstance(values, Mapping):
                raise UnsupportedSchema(
                    f"{path or '(root)'}: an object with neither properties nor a schema for additionalProperties",
                    path=path,
                )
            _k, nullable = _kind(values, root, f"{path}{{}}", seen)
            value = pa.field("value", _arrow(values, root, f"{path}{{}}", seen), nullable=nullable)
            return pa.map_(pa.field("key", pa.string(), nullable=False), value)
        required = set(node.get("required", ()))
        fields = []
        for name, child in properties.items():
            where = f"{path}.{name}" if path else name
            _k, nullable = _kind(child, root, where, seen)
            optional = nullable or name not in required or bool(path)  # nested: see the module
            fields.append(pa.field(name, _arrow(child, root, where, seen), nullable=optional))
        return pa.struct(fields)
    if kind == "array":
        items = node.get("items")
        if not isinstance(items, Mapping):
            raise UnsupportedSchema(f"{path}: an array without a schema for its items", path=path)
        _k, nullable = _kind(items, root, f"{path}[]", seen)
        return pa.list_(pa.field("element", _arrow(items, root, f"{path}[]", seen), nullable=nullable))
    if kind == "string" and node.get("format") in _FORMATS:
        return _FORMATS[node["format"]]
    return _SCALARS[kind]
