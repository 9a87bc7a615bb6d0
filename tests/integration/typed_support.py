"""Typed-table helpers for the integration tests: Avro records in Confluent's wire format, schemas
registered in the stack's registry, and the exactly-once check over a typed and the dead-letter table."""

from __future__ import annotations

import io
from typing import Any


def framed(schema_id: int, body: bytes, magic: bytes = b"\x00") -> bytes:
    """A value in Confluent's wire format: the magic byte, the schema id (4 bytes), the datum."""
    return magic + schema_id.to_bytes(4, "big") + body


def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def offsets(rows: Any, topic: str, partition: int, *columns: str) -> list[int]:
    """The offsets of ``topic[partition]`` in ``rows``, whose topic, partition and offset are ``columns``."""
    t, p, o = (rows.column(c).to_pylist() for c in columns)
    return [offset for a, b, offset in zip(t, p, o, strict=True) if (a, b) == (topic, partition)]


def read_table(consumer: Any, identifier: str) -> Any:
    """A lake table (``catalog.namespace.table``) through pyiceberg."""
    from lagsched.adapters.lake_reader import open_catalog

    return open_catalog(consumer.lake, consumer.mysql).load_table(identifier.split(".", 1)[1])


def dead_letters(consumer: Any) -> Any:
    """The cluster's dead-letter table's rows (empty before it exists)."""
    from pyiceberg.exceptions import NoSuchTableError

    from lagsched.adapters.lake_sink import dead_letter_table

    try:
        return read_table(consumer, dead_letter_table(consumer.lake)).scan().to_arrow()
    except NoSuchTableError:
        import pyarrow as pa

        from lagsched.core.typed_rows import DEAD_LETTER_SCHEMA

        return pa.Table.from_batches([], DEAD_LETTER_SCHEMA)


def assert_once_over_both(typed: Any, dead: Any, topic: str, latest: dict[int, int]) -> None:
    """Every offset of every partition of ``topic`` in exactly one of its typed table and the dead letters."""
    for p, end in latest.items():
        here = offsets(typed, topic, p, "_kafka_topic", "_kafka_partition", "_kafka_offset")
        there = offsets(dead, topic, p, "topic", "partition", "offset")
        both = sorted(here + there)
        twice = sorted({o for o in both if both.count(o) > 1}) if len(set(both)) != len(both) else []
        assert not twice, f"{topic}[{p}]: offsets in the lake twice: {twice[:10]}"
        assert both == list(range(end)), f"{topic}[{p}]: {len(both)} offsets of {end} landed"
