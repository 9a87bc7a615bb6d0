"""The lake: which Apache Iceberg table a cluster's records land in, and what a commit says. Pure.

One table per Kafka cluster, partitioned by ``topic`` and the hour of the record timestamp
(docs/lake.md says why): a slot's batch spans several topics and lands in **one** Spark write and
**one** Iceberg commit, and a reader filtering on ``topic`` reads only that topic's files, as if it
were a table of its own.

Each commit records the offset ranges it holds in the snapshot summary under ``lagsched.ranges``
(`encode_ranges`), so the table itself says which offsets it holds.

Example:
    >>> lake = LakeTable.of("lagsched_kafka", {}, default_warehouse="file:///srv/lake")
    >>> lake.identifier, lake.warehouse
    ('lagsched.kafka.lagsched_kafka', 'file:///srv/lake')
    >>> encode_ranges({("orders", 1): (0, 500), ("orders", 0): (10, 20)})
    '{"orders":{"0":[10,20],"1":[0,500]}}'
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lagsched.core.errors import ConfigError

__all__ = [
    "DEFAULT_CATALOG",
    "DEFAULT_NAMESPACE",
    "RANGES_PROPERTY",
    "SINK_FIELDS",
    "TABLE_PROPERTIES",
    "WAREHOUSE_SCHEMES",
    "WAREHOUSE_SETTINGS",
    "LakeTable",
    "add_job_arguments",
    "decode_ranges",
    "default_warehouse",
    "encode_ranges",
    "from_job_arguments",
    "job_args",
    "table_name_for",
]

DEFAULT_CATALOG = "lagsched"
DEFAULT_NAMESPACE = "kafka"
#: Snapshot summary key of the offset ranges a commit holds: ``{topic: {partition: [start, end]}}``.
RANGES_PROPERTY = "lagsched.ranges"
#: Snapshot summary key: the largest record timestamp (ms) committed per partition of the commit,
#: ``{topic: {partition: ms}}`` (docs/completeness.md).
MAX_TIMESTAMPS_PROPERTY = "lagsched.max-timestamps"
#: Snapshot summary key: the table's watermark once the commit's offsets are stored (ms since the
#: epoch, as Iceberg's Kafka Connect sink names it ``kafka.connect.valid-through-ts``): every record
#: with an earlier timestamp, of every partition the table holds, is in the table. Absent when some
#: partition is known by neither rule of docs/completeness.md.
VALID_THROUGH_PROPERTY = "lagsched.valid-through-ts"
#: Snapshot summary key: the commit's late records, ``{topic: {hour: records}}`` (hours as Airflow's
#: partition keys): records of hours already complete before the commit (docs/completeness.md).
LATE_RECORDS_PROPERTY = "lagsched.late-records"
#: File systems the slots and the table care write through (Hadoop's; ``s3a`` is S3 and S3-compatible stores).
WAREHOUSE_SCHEMES = ("file", "s3a", "hdfs")
SINK_FIELDS = ("warehouse", "catalog", "namespace", "table", "s3_endpoint")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

#: Set when a table is created (docs/lake.md explains each).
TABLE_PROPERTIES: Mapping[str, str] = {
    "format-version": "2",
    # Each Spark task writes the records of one Kafka partition, so every data file covers one
    # partition's offsets: its column bounds are exact, which the commit's conflict check relies on.
    # No shuffle either: the read's parallelism is the write's (compaction merges the files later).
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    # The slot's write path, profiled (docs/consumer-benchmark.md): Iceberg's default zstd took ~9%
    # of the write tasks' time, Parquet's 2 MiB dictionaries (every key and offset of a
    # 100,000-record file fits one, all unique) and min/max statistics of key and value ~15%.
    # Snappy gives up fast on incompressible payloads (compaction can rewrite with zstd); a 64 KiB
    # dictionary still encodes low-cardinality columns (topic, partition, header keys) and falls
    # back to plain encoding early for the rest. Offsets keep their statistics (the conflict check).
    "write.parquet.compression-codec": "snappy",
    "write.parquet.dict-size-bytes": str(64 * 1024),
    "write.parquet.stats-enabled.column.key": "false",
    "write.parquet.stats-enabled.column.value": "false",
    # Several slots commit to one table at once; Iceberg retries a commit that lost the race, with
    # backoff capped at 2 s (its default, 60 s, idles a slot for a minute after a few lost races) and
    # for 30 s at most (default 30 minutes): well within a slot's lease (60 s), which the slot's
    # keeper renews meanwhile anyway. A commit still failing then fails the batch, which is redone.
    "commit.retry.num-retries": "20",
    "commit.retry.min-wait-ms": "50",
    "commit.retry.max-wait-ms": "2000",
    "commit.retry.total-timeout-ms": "30000",
    # One metadata file per commit: keep the newest, delete older ones as commits go.
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "50",
    # Bounds of payloads are useless for pruning and bloat manifests; offsets keep exact bounds.
    "write.metadata.metrics.column.key": "counts",
    "write.metadata.metrics.column.value": "counts",
}


def table_name_for(cluster: str) -> str:
    """A cluster name as an Iceberg table name (``[a-zA-Z0-9._-]`` -> ``_`` for ``.`` and ``-``).

    >>> table_name_for("eu-west.1")
    'eu_west_1'
    """
    name = re.sub(r"[^A-Za-z0-9_]", "_", cluster)
    return name if re.match(r"[A-Za-z_]", name) else f"c_{name}"


#: What a deployment sets so that the slots know where tables go (docs/install.md).
WAREHOUSE_SETTINGS = (
    "the cluster's sink.warehouse in the Variable lagsched_clusters, or LAGSCHED_WAREHOUSE "
    "(or LAGSCHED_HOME, for file://$LAGSCHED_HOME/warehouse) in the environment of Airflow's workers"
)


def default_warehouse(env: Mapping[str, str]) -> str:
    """``LAGSCHED_WAREHOUSE``, else ``file://$LAGSCHED_HOME/warehouse`` (the local stack sets LAGSCHED_HOME).

    >>> default_warehouse({"LAGSCHED_HOME": "/srv/lagsched/"})
    'file:///srv/lagsched/warehouse'

    Raises:
        ConfigError: neither is set. There is no default beside the working directory: the operator
            runs each slot in a scratch folder it deletes when the run ends, so a table created there
            would vanish after its offsets were committed.
    """
    if env.get("LAGSCHED_WAREHOUSE"):
        return env["LAGSCHED_WAREHOUSE"]
    if env.get("LAGSCHED_HOME"):
        return f"file://{env['LAGSCHED_HOME'].rstrip('/')}/warehouse"
    raise ConfigError(
        f"no warehouse for the lake's tables: set {WAREHOUSE_SETTINGS}",
        field="sink.warehouse",
        value=None,
        allowed=WAREHOUSE_SETTINGS,
    )


@dataclass(frozen=True, slots=True)
class LakeTable:
    """Where one cluster's records land.

    Attributes:
        warehouse: the catalog's warehouse URI (``file://``, ``s3a://bucket/path``, ``hdfs://``): new
            tables are created under it; an existing table keeps the location it was created at.
        catalog: the Iceberg catalog's name (Spark's catalog name, the JDBC catalog's ``catalog_name``).
        namespace: the table's namespace (database).
        table: the table's name.
        s3_endpoint: an S3-compatible endpoint for ``s3a://`` warehouses (None: AWS S3).
    """

    warehouse: str
    catalog: str = DEFAULT_CATALOG
    namespace: str = DEFAULT_NAMESPACE
    table: str = "lagsched_kafka"
    s3_endpoint: str | None = None

    @property
    def identifier(self) -> str:
        """``catalog.namespace.table``, as Spark SQL names it."""
        return f"{self.catalog}.{self.namespace}.{self.table}"

    @property
    def scheme(self) -> str:
        return urlsplit(self.warehouse).scheme

    @classmethod
    def of(cls, cluster: str, sink: Mapping[str, Any] | None, *, default_warehouse: str) -> LakeTable:
        """A cluster's ``sink`` object from ``lagsched_clusters``, validated, defaults filled in.

        Raises:
            ConfigError: naming every bad field (``<cluster>.sink.<field>``), its value and what is allowed.
        """
        body = dict(sink or {})
        problems = sink_problems(cluster, body)
        if problems:
            listed = "; ".join(f"{path} = {value!r}: expected {allowed}" for path, value, allowed in problems)
            path, value, allowed = problems[0]
            raise ConfigError(f"invalid sink settings: {listed}", field=path, value=value, allowed=allowed)
        return cls(
            warehouse=body.get("warehouse") or default_warehouse,
            catalog=body.get("catalog", DEFAULT_CATALOG),
            namespace=body.get("namespace", DEFAULT_NAMESPACE),
            table=body.get("table") or table_name_for(cluster),
            s3_endpoint=body.get("s3_endpoint"),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "warehouse": self.warehouse,
            "catalog": self.catalog,
            "namespace": self.namespace,
            "table": self.table,
            "s3_endpoint": self.s3_endpoint,
        }


def sink_problems(cluster: str, body: Any) -> list[tuple[str, object, str]]:
    """Every problem of a cluster's ``sink`` object as ``(field path, value, what is allowed)``."""
    where = f"{cluster}.sink"
    if not isinstance(body, Mapping):
        return [(where, body, "an object with " + ", ".join(SINK_FIELDS))]
    problems: list[tuple[str, object, str]] = []
    for key in body:
        if key not in SINK_FIELDS:
            problems.append((f"{where}.{key}", body[key], f"one of the fields {', '.join(SINK_FIELDS)}"))
    warehouse = body.get("warehouse")
    if warehouse is not None:
        parts = urlsplit(warehouse) if isinstance(warehouse, str) else None
        if parts is None or parts.scheme not in WAREHOUSE_SCHEMES or not (parts.netloc or parts.path.strip("/")):
            problems.append(
                (f"{where}.warehouse", warehouse, "a URI of " + ", ".join(f"{s}://" for s in WAREHOUSE_SCHEMES))
            )
    for key in ("catalog", "namespace", "table"):
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not _IDENT.fullmatch(value)):
            problems.append(
                (f"{where}.{key}", value, "a name of 1 to 128 characters [A-Za-z0-9_], not starting with a digit")
            )
    endpoint = body.get("s3_endpoint")
    if endpoint is not None:
        parts = urlsplit(endpoint) if isinstance(endpoint, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
            problems.append((f"{where}.s3_endpoint", endpoint, "an http(s)://host[:port] URL, or null for AWS S3"))
    return problems


def job_args(sink: Mapping[str, str]) -> list[str]:
    """A cluster's ``sink`` settings as ``lagsched/jobs/consume.py`` options; absent fields keep the job's defaults.

    >>> job_args({"warehouse": "s3a://b/lake", "s3_endpoint": "http://127.0.0.1:19000"})
    ['--warehouse', 's3a://b/lake', '--s3-endpoint', 'http://127.0.0.1:19000']
    """
    return [arg for key in SINK_FIELDS if sink.get(key) for arg in (f"--{key.replace('_', '-')}", sink[key])]


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The Spark jobs' options naming the table (consume.py, table_care.py); `job_args` writes them."""
    parser.add_argument(
        "--warehouse",
        help="the Iceberg catalog's warehouse: file://, s3a:// or hdfs:// (default: $LAGSCHED_WAREHOUSE, else "
        "file://$LAGSCHED_HOME/warehouse; with neither, the job refuses to start)",
    )
    parser.add_argument("--catalog", help=f"the Iceberg catalog's name (default: {DEFAULT_CATALOG})")
    parser.add_argument("--namespace", help=f"the table's namespace (default: {DEFAULT_NAMESPACE})")
    parser.add_argument("--table", help="the table's name (default: the cluster's name, . and - as _)")
    parser.add_argument("--s3-endpoint", help="an S3-compatible store's URL for s3a:// warehouses (default: AWS S3)")


def from_job_arguments(cluster: str, args: argparse.Namespace, env: Mapping[str, str]) -> LakeTable:
    """The table `add_job_arguments`' options name, defaults filled in (`default_warehouse` when no
    ``--warehouse`` is given).

    Raises:
        ConfigError: a bad option, or no warehouse anywhere.
    """
    given = {key: getattr(args, key) for key in SINK_FIELDS if getattr(args, key, None) is not None}
    warehouse = given.get("warehouse") or default_warehouse(env)
    return LakeTable.of(cluster, given, default_warehouse=warehouse)


def encode_ranges(ranges: Mapping[tuple[str, int], tuple[int, int]]) -> str:
    """The ``lagsched.ranges`` summary value: ``{topic: {partition: [start, end]}}``, compact, sorted."""
    nested: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), (start, end) in sorted(ranges.items()):
        nested.setdefault(topic, {})[str(partition)] = [start, end]
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def decode_ranges(value: str | None) -> dict[tuple[str, int], tuple[int, int]]:
    """The inverse of `encode_ranges`; an absent or malformed value holds no ranges.

    >>> decode_ranges('{"orders":{"0":[10,20]}}')
    {('orders', 0): (10, 20)}
    """
    if not value:
        return {}
    try:
        nested = json.loads(value)
        return {(topic, int(p)): (int(r[0]), int(r[1])) for topic, parts in nested.items() for p, r in parts.items()}
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        return {}
