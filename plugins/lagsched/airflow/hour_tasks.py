"""The task bodies of ``lagsched_hours`` (the tables, one hour of one table) and of
``lagsched_restatements`` (the hours late records landed in): docs/completeness.md."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from lagsched.connections import MYSQL_CONN_ID

__all__ = ["RESTATEMENT_MARGIN", "restatements_wait_until", "run_hour_check", "run_hour_tables", "run_restatements"]

#: How long after its interval a restatement run reads the late records recorded in it: a row's
#: recorded_at is taken when its transaction writes it, and that transaction commits a little later.
RESTATEMENT_MARGIN = timedelta(seconds=60)

log = logging.getLogger(__name__)


class _Catalogs:
    """Each cluster's Iceberg catalog, opened once on first use (pyiceberg, the JDBC catalog in MySQL)."""

    def __init__(self, clusters: Sequence[Any], mysql: Any) -> None:
        from lagsched.airflow.tasks import check_warehouses

        self._clusters = {c.name: c for c in clusters}
        self._warehouses = check_warehouses(clusters)
        self._mysql = mysql
        self._open: dict[str, Any] = {}

    def of(self, cluster: str) -> Any:
        from lagsched.adapters.lake_reader import open_catalog
        from lagsched.core.lake import LakeTable

        if cluster not in self._open:
            config = self._clusters[cluster]
            lake = LakeTable.of(cluster, config.sink_settings(), default_warehouse=self._warehouses[cluster])
            self._open[cluster] = open_catalog(lake, self._mysql)
        return self._open[cluster]

    def load(self, cluster: str, identifier: str) -> Any:
        """The pyiceberg table ``catalog.namespace.table`` of ``cluster``."""
        return self.of(cluster).load_table(identifier.split(".", 1)[1])


def run_hour_tables(
    raw_clusters: str | Mapping[str, Any] | None, *, mysql_conn_id: str = MYSQL_CONN_ID
) -> list[dict[str, Any]]:
    """The tables whose hours are announced, JSON-ready (the mapped checks' arguments)."""
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params
    from lagsched.core.clusters import parse_clusters
    from lagsched.workflows.hours import list_hour_tables

    clusters = parse_clusters(raw_clusters)
    mysql = mysql_params(mysql_conn_id)
    catalogs = _Catalogs(clusters, mysql)
    conn = connect(mysql)
    try:
        tables = list_hour_tables(
            clusters, conn=conn, exists=lambda cluster, name: bool(catalogs.of(cluster.name).table_exists(name))
        )
        return [t.as_dict() for t in tables]
    finally:
        conn.close()


def run_hour_check(
    table: Mapping[str, Any],
    partition_key: str | None,
    raw_clusters: str | Mapping[str, Any] | None,
    *,
    mysql_conn_id: str = MYSQL_CONN_ID,
) -> dict[str, Any]:
    """Where ``table`` stands for the run's hour: ``{"complete": true, "extra": <the event's extra>}``,
    or ``{"complete": false, "needed_ms": <the watermark it waits for>, "watermark_ms": ...,
    "look_again_at": <ISO time, when the hour and its lateness have not even ended yet; else None>}``.

    Raises:
        ConfigError: the run has no hour (it was not started by the hourly partitions).
    """
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params
    from lagsched.core.clusters import parse_clusters
    from lagsched.core.completeness import HourTable, hour_of_key
    from lagsched.core.errors import ConfigError
    from lagsched.workflows.hours import check_hour

    if not partition_key:
        raise ConfigError(
            "this run has no partition key: lagsched_hours announces the hour its run is for; "
            "start runs by its schedule or a backfill, not a plain trigger",
            field="partition_key",
            value=partition_key,
            allowed="an hour like 2026-12-02T13:00:00",
        )
    try:
        hour = hour_of_key(partition_key)
    except ValueError as exc:
        raise ConfigError(str(exc), field="partition_key", value=partition_key, allowed="an hour") from None
    wanted = HourTable.from_dict(table)
    clusters = [c for c in parse_clusters(raw_clusters) if c.name == wanted.cluster]
    if not clusters:
        raise ConfigError(
            f"cluster {wanted.cluster!r} is no longer in lagsched_clusters",
            field="cluster",
            value=wanted.cluster,
            allowed="a configured cluster",
        )
    mysql = mysql_params(mysql_conn_id)
    catalogs = _Catalogs(clusters, mysql)
    conn = connect(mysql)
    try:
        found = check_hour(wanted, hour, conn=conn, load_table=lambda t: catalogs.load(t.cluster, t.identifier))
    finally:
        conn.close()
    log.info("%s", found.describe())
    if found.complete:
        return {"complete": True, "extra": found.event_extra()}
    earliest = datetime.fromtimestamp(found.needed_ms / 1000, UTC)
    later = earliest > datetime.now(UTC) + timedelta(seconds=60)
    return {
        "complete": False,
        "needed_ms": found.needed_ms,
        "watermark_ms": found.watermark_ms,
        "look_again_at": earliest.isoformat() if later else None,
    }


def restatements_wait_until(until: datetime) -> datetime | None:
    """When a restatement run of the interval ending at ``until`` may read it (None: now)."""
    ready = until + RESTATEMENT_MARGIN
    return ready if datetime.now(UTC) < ready else None


def run_restatements(
    raw_clusters: str | Mapping[str, Any] | None,
    since: datetime,
    until: datetime,
    *,
    mysql_conn_id: str = MYSQL_CONN_ID,
) -> list[dict[str, Any]]:
    """The restatements of the late records recorded in ``[since, until)``, JSON-ready: per table
    ``{"table", "cluster", "topics", "extra"}`` (the event's extra)."""
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params
    from lagsched.core.clusters import parse_clusters
    from lagsched.workflows.hours import restatements

    clusters = parse_clusters(raw_clusters)
    mysql = mysql_params(mysql_conn_id)
    catalogs = _Catalogs(clusters, mysql)
    conn = connect(mysql)
    try:
        found = restatements([c.name for c in clusters], since, until, conn=conn, load_table=catalogs.load)
    finally:
        conn.close()
    for r in found:
        log.info(
            "%s: restating %s (late records recorded from %s to %s)",
            r.table, ", ".join(f"{h} ({v['late_records']} late)" for h, v in r.hours.items()),
            since.isoformat(), until.isoformat(),
        )  # fmt: skip
    if not found:
        log.info("no late records recorded from %s to %s: nothing to restate", since.isoformat(), until.isoformat())
    return [
        {
            "table": r.table,
            "cluster": r.cluster,
            "topics": sorted({t for v in r.hours.values() for t in v["topics"]}),
            "extra": r.event_extra(),
        }
        for r in found
    ]
