"""Whether a new writer schema evolves a typed table, and how. Pure.

A typed table's schema is the union of the writer schemas it accepted. A new writer schema (an
Arrow schema from `lagsched.core.avro_types` or `lagsched.core.json_types`) is compared with the
table's, field by field and by name, nested fields too; the result is the list of changes that
Iceberg's ``UpdateSchema`` applies before the batch's files are committed (field ids kept, old
files still read), or `Incompatible` with the reason, whose records go to the dead-letter table:

=============================================  ======================================================
the writer, against the table                  what happens
=============================================  ======================================================
the same field, the same type                  nothing
a field the table lacks, optional or with a    `AddColumn` (optional: the rows before it have none)
default
a field the table lacks, required, no default  incompatible: rows already in the table have no value
                                               for it (a renamed field needs an ``aliases`` entry)
a field whose alias is a column of the table   `RenameColumn`
a column the writer lacks, or makes optional   `MakeOptional` (if it was required)
int -> long, float -> double, decimal(P, S)    `WidenColumn` (the promotions Iceberg allows)
-> decimal(P', S) with P' > P
a narrower type than the table's (long ->      nothing: its values fit the table's type (Iceberg reads
int, double -> float, a smaller decimal)       the narrower files through the same promotion)
any other change of type (string -> long,      incompatible
a timestamp losing its zone, a struct to a
scalar)
=============================================  ======================================================

Example:
    >>> import pyarrow as pa
    >>> table = pa.schema([pa.field("id", pa.int32(), nullable=False)])
    >>> writer = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("note", pa.string())])
    >>> plan(table, writer)
    [WidenColumn(path=('id',), to=DataType(int64)), AddColumn(path=('note',), type=DataType(string))]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from lagsched.core.avro_types import ALIASES_KEY, DEFAULT_KEY
from lagsched.core.errors import LagschedError

__all__ = ["AddColumn", "Change", "Incompatible", "MakeOptional", "RenameColumn", "WidenColumn", "apply", "plan"]


@dataclass(frozen=True, slots=True)
class AddColumn:
    path: tuple[str, ...]
    type: pa.DataType


@dataclass(frozen=True, slots=True)
class WidenColumn:
    path: tuple[str, ...]
    to: pa.DataType


@dataclass(frozen=True, slots=True)
class MakeOptional:
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RenameColumn:
    path: tuple[str, ...]
    to: str


Change = AddColumn | WidenColumn | MakeOptional | RenameColumn


class Incompatible(LagschedError, ValueError):
    """The writer schema cannot evolve the table; `path` is the field (``address.zip``)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


def plan(table: pa.Schema, writer: pa.Schema) -> list[Change]:
    """The changes that make `table` hold `writer`'s rows (none: it holds them already).

    Raises:
        Incompatible: it cannot (the module's table says when).
    """
    changes: list[Change] = []
    _fields(list(table), list(writer), (), changes)
    return changes


def _fields(table: Sequence[pa.Field], writer: Sequence[pa.Field], parent: tuple[str, ...], out: list[Change]) -> None:
    columns = {f.name: f for f in table}
    seen: set[str] = set()
    for field in writer:
        path = (*parent, field.name)
        column = columns.get(field.name)
        if column is None:
            alias = next((a for a in _aliases(field) if a in columns and a not in seen), None)
            if alias is not None:
                out.append(RenameColumn((*parent, alias), field.name))
                seen.add(alias)
                column = columns[alias]
                _field(column, field, (*parent, alias), out)
                continue
            if not field.nullable and not (field.metadata or {}).get(DEFAULT_KEY):
                raise Incompatible(
                    f"{'.'.join(path)}: a new required field without a default; the rows already in the table have "
                    "no value for it (a renamed field needs the old name in its aliases)",
                    path=".".join(path),
                )
            out.append(AddColumn(path, field.type))
            continue
        seen.add(field.name)
        _field(column, field, path, out)
    for name, column in columns.items():
        if name not in seen and not column.nullable:
            out.append(MakeOptional((*parent, name)))


def _field(column: pa.Field, field: pa.Field, path: tuple[str, ...], out: list[Change]) -> None:
    if field.nullable and not column.nullable:
        out.append(MakeOptional(path))
    _types(column.type, field.type, path, out)


def _types(have: pa.DataType, want: pa.DataType, path: tuple[str, ...], out: list[Change]) -> None:
    where = ".".join(path)
    if pa.types.is_struct(have) and pa.types.is_struct(want):
        _fields(list(have), list(want), path, out)
        return
    if _is_list(have) and _is_list(want):
        have_item, want_item = have.value_field, want.value_field
        _field(have_item, want_item, (*path, "element"), out)
        return
    if pa.types.is_map(have) and pa.types.is_map(want):
        if have.key_type != want.key_type:
            raise Incompatible(f"{where}: map keys of {want.key_type}, the table's are {have.key_type}", path=where)
        _field(have.item_field, want.item_field, (*path, "value"), out)
        return
    if have.equals(want) or _narrower(want, have):
        return
    if _narrower(have, want):
        out.append(WidenColumn(path, want))
        return
    raise Incompatible(f"{where}: {want} where the table has {have}, which Iceberg cannot promote", path=where)


def _is_list(kind: pa.DataType) -> bool:
    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind))


def _narrower(small: pa.DataType, big: pa.DataType) -> bool:
    """Whether every value of `small` is one of `big` by a promotion Iceberg allows."""
    if small.equals(pa.int32()) and big.equals(pa.int64()):
        return True
    if small.equals(pa.float32()) and big.equals(pa.float64()):
        return True
    if pa.types.is_decimal(small) and pa.types.is_decimal(big):
        return bool(small.scale == big.scale and small.precision < big.precision)
    return False


def _aliases(field: pa.Field) -> list[str]:
    raw = (field.metadata or {}).get(ALIASES_KEY)
    return [str(a) for a in json.loads(raw)] if raw else []


def apply(table: pa.Schema, changes: Sequence[Change]) -> pa.Schema:
    """`table` with `changes` made (what Iceberg's schema becomes, in Arrow's terms: for the tests and
    for casting a writer's rows to the table)."""
    fields = list(table)
    # Paths name the columns as the table has them (as Iceberg's UpdateSchema takes them): renames
    # last, the deepest first, so that no path names a column already renamed.
    for change in sorted(changes, key=lambda c: (isinstance(c, RenameColumn), -len(c.path))):
        fields = _apply(fields, change.path, change)
    return pa.schema(fields)


def _apply(fields: list[pa.Field], path: tuple[str, ...], change: Change) -> list[pa.Field]:
    head, rest = path[0], path[1:]
    if not rest and isinstance(change, AddColumn):
        return [*fields, pa.field(head, change.type, nullable=True)]
    out = []
    for field in fields:
        if field.name != head:
            out.append(field)
        elif rest:
            out.append(field.with_type(_apply_type(field.type, rest, change)))
        elif isinstance(change, WidenColumn):
            out.append(field.with_type(change.to))
        elif isinstance(change, MakeOptional):
            out.append(field.with_nullable(True))
        elif isinstance(change, RenameColumn):
            out.append(field.with_name(change.to))
        else:
            out.append(field)
    return out


def _apply_type(kind: pa.DataType, path: tuple[str, ...], change: Change) -> pa.DataType:
    if pa.types.is_struct(kind):
        return pa.struct(_apply(list(kind), path, change))
    if _is_list(kind) and path[0] == "element":
        (updated,) = _apply([kind.value_field], path, change)
        return pa.list_(updated)
    if pa.types.is_map(kind) and path[0] == "value":
        (updated,) = _apply([kind.item_field], path, change)
        return pa.map_(kind.key_field, updated)
    raise ValueError(f"no field {'.'.join(path)} under {kind}")
