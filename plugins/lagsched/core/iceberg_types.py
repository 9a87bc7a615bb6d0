"""Arrow schemas as Iceberg schemas (its JSON form) and back, and a table's name mapping. Pure.

A typed table is created from the Arrow columns of its first writer schema
(`lagsched.core.typed_rows.typed_schema`) and evolved with the columns of later ones
(`lagsched.core.evolution`); the driver hands Iceberg the JSON form (``SchemaParser.fromJson``)
and reads the table's schema back as Arrow to compare the next writer schema with it.

The tasks write a typed table's files without Parquet field ids: a batch's writer schema may be
newer than the table when its files are written (the table evolves before the commit). Iceberg
reads such files through the table's name mapping (``schema.name-mapping.default``), which
`name_mapping` keeps: every name a field ever had, so files written before a rename still read.

Example:
    >>> import pyarrow as pa
    >>> s = iceberg_schema(pa.schema([pa.field("id", pa.int64(), nullable=False),
    ...                               pa.field("tags", pa.list_(pa.string()))]))
    >>> [(f["id"], f["name"], f["required"]) for f in s["fields"]], s["fields"][1]["type"]["element-id"]
    ([(1, 'id', True), (2, 'tags', False)], 3)
    >>> arrow_schema(s).field("tags").type
    ListType(list<element: string>)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

__all__ = ["arrow_schema", "arrow_type", "iceberg_schema", "iceberg_type", "name_mapping"]

_TO_ICEBERG: tuple[tuple[pa.DataType, str], ...] = (
    (pa.bool_(), "boolean"),
    (pa.int32(), "int"),
    (pa.int64(), "long"),
    (pa.float32(), "float"),
    (pa.float64(), "double"),
    (pa.string(), "string"),
    (pa.large_string(), "string"),
    (pa.binary(), "binary"),
    (pa.large_binary(), "binary"),
    (pa.date32(), "date"),
    (pa.time64("us"), "time"),
    (pa.timestamp("us", tz="UTC"), "timestamptz"),
    (pa.timestamp("us"), "timestamp"),
)
_TO_ARROW: Mapping[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "uuid": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIXED = re.compile(r"fixed\[(\d+)\]")


class _Ids:
    """Field ids in the order Iceberg's own conversions give them (a struct's fields, then nested)."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def iceberg_schema(arrow: pa.Schema) -> dict[str, Any]:
    """``arrow`` as an Iceberg schema (JSON form), ids from 1; a non-nullable field is required.

    Raises:
        ValueError: a type Iceberg has no equal of (unsigned integers, nanoseconds...).
    """
    ids = _Ids()
    return {"type": "struct", "schema-id": 0, "fields": _struct_fields(list(arrow), ids)}


def iceberg_type(kind: pa.DataType) -> Any:
    """One Arrow type as an Iceberg type (JSON form); nested ids from 1 (Iceberg gives new ones when
    a column is added).

    >>> iceberg_type(pa.decimal128(12, 2)), iceberg_type(pa.map_(pa.string(), pa.int32()))["type"]
    ('decimal(12, 2)', 'map')
    """
    return _type(kind, _Ids())


def _struct_fields(fields: list[pa.Field], ids: _Ids) -> list[dict[str, Any]]:
    numbered = [(ids.next(), f) for f in fields]  # a struct's own fields first, as Iceberg numbers them
    return [{"id": i, "name": f.name, "required": not f.nullable, "type": _type(f.type, ids)} for i, f in numbered]


def _type(kind: pa.DataType, ids: _Ids) -> Any:
    if pa.types.is_dictionary(kind):
        return _type(kind.value_type, ids)
    for arrow, name in _TO_ICEBERG:
        if kind.equals(arrow):
            return name
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision}, {kind.scale})"
    if pa.types.is_fixed_size_binary(kind):
        return f"fixed[{kind.byte_width}]"
    if pa.types.is_struct(kind):
        return {"type": "struct", "fields": _struct_fields(list(kind), ids)}
    if pa.types.is_map(kind):
        key_id, value_id = ids.next(), ids.next()
        return {
            "type": "map",
            "key-id": key_id,
            "key": _type(kind.key_type, ids),
            "value-id": value_id,
            "value-required": not kind.item_field.nullable,
            "value": _type(kind.item_type, ids),
        }
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element_id = ids.next()
        return {
            "type": "list",
            "element-id": element_id,
            "element-required": not kind.value_field.nullable,
            "element": _type(kind.value_type, ids),
        }
    raise ValueError(f"{kind}: Iceberg has no type for it")


def arrow_schema(schema: Mapping[str, Any], *, field_ids: bool = False) -> pa.Schema:
    """An Iceberg schema (JSON form) as Arrow; ``field_ids``: each field carries its id as Parquet's
    ``PARQUET:field_id`` metadata (the files of a table read by id)."""
    return pa.schema([_arrow_field(f, field_ids) for f in schema["fields"]])


def arrow_type(kind: Any, *, field_ids: bool = False) -> pa.DataType:
    """One Iceberg type (JSON form) as Arrow.

    >>> arrow_type("decimal(9, 2)"), arrow_type("fixed[16]"), arrow_type("timestamptz")
    (Decimal128Type(decimal128(9, 2)), FixedSizeBinaryType(fixed_size_binary[16]), TimestampType(timestamp[us, tz=UTC]))
    """
    if isinstance(kind, str):
        if kind in _TO_ARROW:
            return _TO_ARROW[kind]
        decimal, fixed = _DECIMAL.fullmatch(kind), _FIXED.fullmatch(kind)
        if decimal:
            return pa.decimal128(int(decimal[1]), int(decimal[2]))
        if fixed:
            return pa.binary(int(fixed[1]))
        raise ValueError(f"the table has a column of type {kind}, which lagsched does not write")
    if kind["type"] == "struct":
        return pa.struct([_arrow_field(f, field_ids) for f in kind["fields"]])
    if kind["type"] == "list":
        element = _field("element", kind["element"], kind["element-id"], kind["element-required"], field_ids)
        return pa.list_(element)
    if kind["type"] == "map":
        key = _field("key", kind["key"], kind["key-id"], True, field_ids)
        value = _field("value", kind["value"], kind["value-id"], kind["value-required"], field_ids)
        return pa.map_(key, value)
    raise ValueError(f"the table has a column of type {kind['type']}, which lagsched does not write")


def _arrow_field(f: Mapping[str, Any], field_ids: bool) -> pa.Field:
    return _field(f["name"], f["type"], f["id"], f["required"], field_ids)


def _field(name: str, kind: Any, field_id: int, required: bool, field_ids: bool) -> pa.Field:
    metadata = {"PARQUET:field_id": str(field_id)} if field_ids else None
    return pa.field(name, arrow_type(kind, field_ids=field_ids), nullable=not required, metadata=metadata)


def name_mapping(schema: Mapping[str, Any], previous: str | None = None) -> str:
    """The table's name mapping (``schema.name-mapping.default``, Iceberg's JSON form) for `schema`,
    keeping every name the `previous` mapping gave a field id: a file written before a column was
    renamed still has the old name, which must still lead to the column.

    >>> s = {"type": "struct", "fields": [{"id": 1, "name": "b", "required": False, "type": "long"}]}
    >>> name_mapping(s, '[{"field-id": 1, "names": ["a"]}]')
    '[{"field-id": 1, "names": ["b", "a"]}]'
    """
    known: dict[int, list[str]] = {}
    for entry in _entries(json.loads(previous) if previous else []):
        known.setdefault(int(entry["field-id"]), []).extend(entry.get("names", []))
    return json.dumps(_mapped(schema["fields"], known))


def _entries(mapping: list[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for entry in mapping:
        if "field-id" in entry:
            yield entry
        yield from _entries(entry.get("fields") or [])


def _mapped(fields: list[Mapping[str, Any]], known: Mapping[int, list[str]]) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        names = [f["name"], *(n for n in dict.fromkeys(known.get(int(f["id"]), ())) if n != f["name"])]
        entry: dict[str, Any] = {"field-id": int(f["id"]), "names": names}
        nested = _nested(f["type"], known)
        if nested:
            entry["fields"] = nested
        out.append(entry)
    return out


def _nested(kind: Any, known: Mapping[int, list[str]]) -> list[dict[str, Any]]:
    """The mapping of a type's inner fields (a struct's, a list's element, a map's key and value)."""
    if isinstance(kind, str):
        return []
    if kind["type"] == "struct":
        return _mapped(kind["fields"], known)
    if kind["type"] == "list":
        return _mapped([{"id": kind["element-id"], "name": "element", "type": kind["element"]}], known)
    if kind["type"] == "map":
        return _mapped(
            [
                {"id": kind["key-id"], "name": "key", "type": kind["key"]},
                {"id": kind["value-id"], "name": "value", "type": kind["value"]},
            ],
            known,
        )
    return []
