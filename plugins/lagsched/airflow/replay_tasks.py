"""The replay DAG's task body: check the form again, find the topic's route and tables, replay.

A run triggered through the API or the CLI skips the form's checks, so `ReplayRequest.of` checks
every value again; a bad one (or a topic without a route) raises `ConfigError`, which
`lagsched.airflow.tasks.fail_fast` turns into a failed run without retries, nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagsched.connections import MYSQL_CONN_ID

__all__ = ["run_replay"]


def run_replay(
    params: Mapping[str, Any], raw_clusters: str | Mapping[str, Any] | None, *, mysql_conn_id: str = MYSQL_CONN_ID
) -> dict[str, Any]:
    """Replay the dead letters ``params`` name (`lagsched.workflows.replay`); the report."""
    from lagsched.adapters.mysql import connect
    from lagsched.airflow.tasks import check_warehouses
    from lagsched.connections import mysql_params, schema_registry_params
    from lagsched.core.clusters import parse_clusters
    from lagsched.core.lake import LakeTable
    from lagsched.workflows.replay import ReplayRequest, replay_dead_letters, routes_of

    request = ReplayRequest.of(params)
    clusters = parse_clusters(raw_clusters)
    route = routes_of(clusters, request.cluster, request.topic)
    (cluster,) = [c for c in clusters if c.name == request.cluster]
    warehouse = check_warehouses([cluster])[cluster.name]
    lake = LakeTable.of(cluster.name, cluster.sink_settings(), default_warehouse=warehouse)
    registry = schema_registry_params() if route is not None and route.needs_registry else None
    mysql = mysql_params(mysql_conn_id)
    conn = connect(mysql)
    try:
        report = replay_dead_letters(request, lake=lake, mysql=mysql, conn=conn, route=route, registry=registry)
    finally:
        conn.close()
    return report.as_dict()
