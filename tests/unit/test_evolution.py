"""Typed tables' schema evolution: which writer schemas evolve a table, how, and which are refused."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lagsched.core.avro_types import arrow_schema
from lagsched.core.evolution import (
    AddColumn,
    Incompatible,
    MakeOptional,
    RenameColumn,
    WidenColumn,
    apply,
    plan,
)

pytestmark = pytest.mark.unit


def order(*fields: dict[str, Any]) -> pa.Schema:
    return arrow_schema({"type": "record", "name": "Order", "fields": list(fields)})


ID = {"name": "id", "type": "long"}
SKU = {"name": "sku", "type": "string"}
QTY = {"name": "qty", "type": "int"}
ADDRESS = {"name": "to", "type": {"type": "record", "name": "A", "fields": [{"name": "city", "type": "string"}]}}


def test_three_compatible_versions_evolve_the_table_and_every_older_writer_still_fits() -> None:
    v1 = order(ID, SKU, QTY, ADDRESS)
    v2 = order(ID, SKU, QTY, ADDRESS, {"name": "note", "type": ["null", "string"], "default": None})
    v3 = order(
        ID,
        {"name": "sku", "type": ["null", "string"]},  # made optional
        {"name": "qty", "type": "long"},  # promoted
        {
            "name": "to",
            "type": {
                "type": "record",
                "name": "A",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}],
            },
        },
        {"name": "note", "type": ["null", "string"], "default": None},
    )
    first = plan(v1, v2)
    assert first == [AddColumn(("note",), pa.string())]
    table = apply(v1, first)
    second = plan(table, v3)
    assert second == [MakeOptional(("sku",)), WidenColumn(("qty",), pa.int64()), AddColumn(("to", "zip"), pa.int32())]
    table = apply(table, second)
    assert [(f.name, str(f.type), f.nullable) for f in table] == [
        ("id", "int64", False),
        ("sku", "string", True),
        ("qty", "int64", False),
        ("to", "struct<city: string not null, zip: int32>", False),
        ("note", "string", True),
    ]
    for older in (v1, v2, v3):
        assert plan(table, older) == []


def test_a_column_a_writer_drops_becomes_optional() -> None:
    assert plan(order(ID, SKU), order(ID)) == [MakeOptional(("sku",))]
    assert apply(order(ID, SKU), [MakeOptional(("sku",))]).field("sku").nullable


def test_a_renamed_field_needs_its_old_name_as_an_alias() -> None:
    with pytest.raises(Incompatible, match="item: a new required field without a default") as caught:
        plan(order(ID, SKU), order(ID, {"name": "item", "type": "string"}))
    assert caught.value.path == "item"
    aliased = order(ID, {"name": "item", "type": "string", "aliases": ["sku"]})
    changes = plan(order(ID, SKU), aliased)
    assert changes == [RenameColumn(("sku",), "item")]
    assert apply(order(ID, SKU), changes).names == ["id", "item"]
    # A required field with a default is an addition, not a rename.
    assert plan(order(ID), order(ID, {"name": "n", "type": "int", "default": 0})) == [AddColumn(("n",), pa.int32())]


@pytest.mark.parametrize(
    ("had", "now", "says"),
    [
        ("string", "long", "int64 where the table has string"),
        ({"type": "long", "logicalType": "timestamp-millis"}, {"type": "long", "logicalType": "local-timestamp-millis"},
         "timestamp[us] where the table has timestamp[us, tz=UTC]"),
        ("int", "double", "double where the table has int32"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
         {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}, "decimal128(12, 3)"),
        ({"type": "array", "items": "int"}, {"type": "array", "items": "string"}, "f.element: string"),
        ({"type": "map", "values": "int"}, {"type": "map", "values": "string"}, "f.value: string"),
        (ADDRESS["type"], "string", "string where the table has struct"),
    ],
)  # fmt: skip
def test_a_change_of_type_iceberg_cannot_promote_is_refused(had: Any, now: Any, says: str) -> None:
    with pytest.raises(Incompatible) as caught:
        plan(order({"name": "f", "type": had}), order({"name": "f", "type": now}))
    assert says in str(caught.value)


def test_narrower_writers_fit_and_wider_ones_widen() -> None:
    dec = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    wide = {"type": "bytes", "logicalType": "decimal", "precision": 14, "scale": 2}
    table = order({"name": "a", "type": "long"}, {"name": "b", "type": "double"}, {"name": "c", "type": wide})
    assert (
        plan(table, order({"name": "a", "type": "int"}, {"name": "b", "type": "float"}, {"name": "c", "type": dec}))
        == []
    )
    small = order({"name": "a", "type": "int"}, {"name": "b", "type": "float"}, {"name": "c", "type": dec})
    assert plan(small, table) == [
        WidenColumn(("a",), pa.int64()),
        WidenColumn(("b",), pa.float64()),
        WidenColumn(("c",), pa.decimal128(14, 2)),
    ]


def test_fields_inside_lists_and_maps_evolve_too() -> None:
    item = {"type": "record", "name": "I", "fields": [{"name": "x", "type": "int"}]}
    item2 = {
        "type": "record",
        "name": "I",
        "fields": [{"name": "x", "type": "long"}, {"name": "y", "type": ["null", "string"]}],
    }
    old = order(
        {"name": "items", "type": {"type": "array", "items": item}},
        {"name": "m", "type": {"type": "map", "values": "int"}},
    )
    new = order(
        {"name": "items", "type": {"type": "array", "items": item2}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
    )
    changes = plan(old, new)
    assert changes == [
        WidenColumn(("items", "element", "x"), pa.int64()),
        AddColumn(("items", "element", "y"), pa.string()),
        WidenColumn(("m", "value"), pa.int64()),
    ]
    assert plan(apply(old, changes), new) == []
