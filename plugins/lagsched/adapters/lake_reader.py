"""Read the lake's Iceberg tables without Spark: pyiceberg through the same JDBC catalog tables.

This is how any engine other than Spark sees the table (the demo's summary, the benchmarks and the
tests judge exactly once with it): the catalog's rows in the lagsched MySQL database point at the
current metadata file, and pyiceberg reads the snapshot's manifests and data files itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from lagsched.connections import MySQLParams
from lagsched.core.lake import RANGES_PROPERTY, LakeTable, decode_ranges

__all__ = ["TableStats", "load_table", "open_catalog", "read_rows", "table_stats"]


def open_catalog(lake: LakeTable, mysql: MySQLParams) -> Any:
    """A pyiceberg ``SqlCatalog`` over the JDBC catalog's tables (it never creates or alters them)."""
    try:
        from pyiceberg.catalog.sql import SqlCatalog
    except ImportError as e:  # an optional dependency: the slots write without it
        raise ImportError("reading the lake without Spark needs pyiceberg: pip install 'lagsched[lake]'") from e

    uri = (
        f"mysql+pymysql://{quote(mysql.user, safe='')}:{quote(mysql.password, safe='')}"
        f"@{mysql.host}:{mysql.port}/{quote(mysql.database, safe='')}"
    )
    tls = dict(mysql.tls)
    if tls:
        # PyMySQL's TLS arguments as SQLAlchemy's URL query (ssl_ca, ssl_cert, ssl_key, ssl_check_hostname).
        uri += "?" + "&".join(f"ssl_{k}={quote(str(v).lower() if isinstance(v, bool) else str(v), safe='/')}"
                              for k, v in sorted(tls.items()))  # fmt: skip
    properties: dict[str, str] = {"uri": uri, "warehouse": lake.warehouse, "init_catalog_tables": "false"}
    if lake.scheme == "s3a":
        from lagsched.adapters.s3a import pyiceberg_s3_properties

        properties.update(pyiceberg_s3_properties(lake.s3_endpoint))
    return SqlCatalog(lake.catalog, **properties)


def load_table(lake: LakeTable, mysql: MySQLParams) -> Any:
    return open_catalog(lake, mysql).load_table(f"{lake.namespace}.{lake.table}")


def read_rows(
    lake: LakeTable,
    mysql: MySQLParams,
    *,
    columns: tuple[str, ...] = ("topic", "partition", "offset"),
    topic: str | None = None,
) -> Any:
    """The table's rows (a pyarrow Table) as of its current snapshot; only ``topic``'s if given."""
    from lagsched.core.names import validate_topic_name

    table = load_table(lake, mysql)
    # pyiceberg's filter string; a legal topic name ([a-zA-Z0-9._-]) needs no escaping.
    row_filter = "True" if topic is None else f"topic == '{validate_topic_name(topic)}'"
    return table.scan(row_filter=row_filter, selected_fields=columns).to_arrow()


@dataclass(frozen=True, slots=True)
class TableStats:
    """What an operator asks of the table: its size in files and snapshots.

    Attributes:
        data_files: live data files of the current snapshot.
        data_bytes: their total size.
        median_file_bytes: the median data file size (0 when empty).
        snapshots: snapshots the table's metadata keeps (current and older, for time travel).
        records: rows in the current snapshot.
        ranges: offset ranges recorded by the kept snapshots' commits, per (topic, partition).
    """

    data_files: int
    data_bytes: int
    median_file_bytes: int
    snapshots: int
    records: int
    ranges: Mapping[tuple[str, int], list[tuple[int, int]]]


def table_stats(lake: LakeTable, mysql: MySQLParams) -> TableStats:
    table = load_table(lake, mysql)
    sizes: list[int] = []
    records = 0
    for task in table.scan().plan_files():
        sizes.append(int(task.file.file_size_in_bytes))
        records += int(task.file.record_count)
    sizes.sort()
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        value = summary.additional_properties.get(RANGES_PROPERTY) if summary is not None else None
        for key, span in decode_ranges(value).items():
            ranges.setdefault(key, []).append(span)
    return TableStats(
        data_files=len(sizes),
        data_bytes=sum(sizes),
        median_file_bytes=sizes[len(sizes) // 2] if sizes else 0,
        snapshots=len(table.metadata.snapshots),
        records=records,
        ranges={k: sorted(v) for k, v in ranges.items()},
    )
