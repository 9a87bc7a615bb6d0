"""The ``lagsched_hours`` DAG's task bodies (docs/completeness.md): the tables, and one hour of one table."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lagsched.connections import MYSQL_CONN_ID

__all__ = ["run_hour_check", "run_hour_tables"]

log = logging.getLogger(__name__)


def run_hour_tables(
    raw_clusters: str | Mapping[str, Any] | None, *, mysql_conn_id: str = MYSQL_CONN_ID
) -> list[dict[str, Any]]:
    """The tables whose hours are announced, JSON-ready (the mapped checks' arguments)."""
    from lagsched.adapters.lake_reader import open_catalog
    from lagsched.adapters.mysql import connect
    from lagsched.airflow.tasks import check_warehouses
    from lagsched.connections import mysql_params
    from lagsched.core.clusters import parse_clusters
    from lagsched.core.lake import LakeTable
    from lagsched.workflows.hours import list_hour_tables

    clusters = parse_clusters(raw_clusters)
    warehouses = check_warehouses(clusters)
    mysql = mysql_params(mysql_conn_id)
    catalogs: dict[str, Any] = {}

    def exists(cluster: Any, name: str) -> bool:
        if cluster.name not in catalogs:
            lake = LakeTable.of(cluster.name, cluster.sink_settings(), default_warehouse=warehouses[cluster.name])
            catalogs[cluster.name] = open_catalog(lake, mysql)
        return bool(catalogs[cluster.name].table_exists(name))

    conn = connect(mysql)
    try:
        return [t.as_dict() for t in list_hour_tables(clusters, conn=conn, exists=exists)]
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
    from lagsched.adapters.lake_reader import open_catalog
    from lagsched.adapters.mysql import connect
    from lagsched.airflow.tasks import check_warehouses
    from lagsched.connections import mysql_params
    from lagsched.core.clusters import parse_clusters
    from lagsched.core.completeness import HourTable, hour_of_key
    from lagsched.core.errors import ConfigError
    from lagsched.core.lake import LakeTable
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
    warehouse = check_warehouses(clusters)[wanted.cluster]
    lake = LakeTable.of(wanted.cluster, clusters[0].sink_settings(), default_warehouse=warehouse)
    mysql = mysql_params(mysql_conn_id)

    def load(t: HourTable) -> Any:
        return open_catalog(lake, mysql).load_table(f"{t.namespace}.{t.table}")

    conn = connect(mysql)
    try:
        found = check_hour(wanted, hour, conn=conn, load_table=load)
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
