"""Arrow <-> Iceberg schemas (JSON form) and the name mapping that keeps every name a field had."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lagsched.core.iceberg_types import arrow_schema, iceberg_schema, name_mapping
from lagsched.core.typed_rows import DEAD_LETTER_SCHEMA, typed_schema

EVERY_TYPE = pa.schema(
    [
        pa.field("b", pa.bool_(), nullable=False),
        pa.field("i", pa.int32()),
        pa.field("l", pa.int64()),
        pa.field("f", pa.float32()),
        pa.field("d", pa.float64()),
        pa.field("s", pa.string()),
        pa.field("raw", pa.binary()),
        pa.field("fixed", pa.binary(16)),
        pa.field("money", pa.decimal128(12, 2)),
        pa.field("day", pa.date32()),
        pa.field("t", pa.time64("us")),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("local", pa.timestamp("us")),
        pa.field("lines", pa.list_(pa.field("element", pa.struct([("qty", pa.int32())])))),
        pa.field("tags", pa.map_(pa.string(), pa.int64())),
        pa.field("address", pa.struct([pa.field("zip", pa.string(), nullable=False), ("city", pa.string())])),
    ]
)


def ids(node: object) -> list[int]:
    """Every field id in an Iceberg schema's JSON."""
    found: list[int] = []
    if isinstance(node, dict):
        for key in ("id", "element-id", "key-id", "value-id"):
            if key in node:
                found.append(int(node[key]))
        for value in node.values():
            found += ids(value)
    elif isinstance(node, list):
        for value in node:
            found += ids(value)
    return found


@pytest.mark.parametrize("schema", [EVERY_TYPE, typed_schema(EVERY_TYPE, pa.string()), DEAD_LETTER_SCHEMA])
def test_every_type_goes_to_iceberg_and_back_with_unique_ids(schema: pa.Schema) -> None:
    iceberg = iceberg_schema(schema)
    numbers = ids(iceberg)
    assert sorted(numbers) == list(range(1, len(numbers) + 1))
    back = arrow_schema(json.loads(json.dumps(iceberg)))
    assert back.names == schema.names
    for want, got in zip(schema, back, strict=True):
        assert got.nullable == want.nullable, want.name
        assert got.type.equals(want.type, check_metadata=False) or str(got.type) == str(want.type), (want, got)


def test_field_ids_go_into_the_parquet_metadata_when_asked() -> None:
    back = arrow_schema(iceberg_schema(EVERY_TYPE), field_ids=True)
    assert back.field("b").metadata == {b"PARQUET:field_id": b"1"}
    assert back.field("lines").type.value_field.metadata[b"PARQUET:field_id"]
    assert arrow_schema(iceberg_schema(EVERY_TYPE)).field("b").metadata is None


def test_types_iceberg_lacks_are_refused() -> None:
    with pytest.raises(ValueError, match="uint8"):
        iceberg_schema(pa.schema([("u", pa.uint8())]))


def test_the_name_mapping_keeps_old_names_nested_and_follows_new_fields() -> None:
    v1 = iceberg_schema(pa.schema([("id", pa.int64()), ("address", pa.struct([("zip", pa.string())]))]))
    first = json.loads(name_mapping(v1))
    assert first == [
        {"field-id": 1, "names": ["id"]},
        {"field-id": 2, "names": ["address"], "fields": [{"field-id": 3, "names": ["zip"]}]},
    ]
    # Iceberg renamed zip to postcode (its id kept) and added a column: files written before still read.
    renamed = json.loads(json.dumps(v1))
    renamed["fields"][1]["type"]["fields"][0]["name"] = "postcode"
    renamed["fields"].append({"id": 4, "name": "note", "required": False, "type": "string"})
    second = json.loads(name_mapping(renamed, json.dumps(first)))
    assert second[1]["fields"] == [{"field-id": 3, "names": ["postcode", "zip"]}]
    assert second[2] == {"field-id": 4, "names": ["note"]}
    # A mapping is stable: applied again, nothing changes.
    assert json.loads(name_mapping(renamed, json.dumps(second))) == second
