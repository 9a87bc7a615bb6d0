"""A downstream task's way into a lagsched table: pyiceberg through the lagsched Connections (docs/completeness.md)."""

from __future__ import annotations

from typing import Any

from lagsched.connections import MYSQL_CONN_ID

__all__ = ["hour_filter", "load_table"]


def load_table(identifier: str, *, mysql_conn_id: str = MYSQL_CONN_ID) -> Any:
    """The pyiceberg table ``catalog.namespace.table`` of a cluster in ``lagsched_clusters``.

    Raises:
        ConfigError: no configured cluster writes that table.
    """
    from airflow.sdk import Variable

    from lagsched.adapters.lake_reader import open_catalog
    from lagsched.airflow.tasks import check_warehouses
    from lagsched.connections import mysql_params
    from lagsched.core.clusters import parse_clusters
    from lagsched.core.errors import ConfigError
    from lagsched.core.lake import LakeTable

    parts = identifier.split(".")
    if len(parts) != 3:
        raise ConfigError(f"{identifier!r}: name a table catalog.namespace.table", field="identifier", value=identifier)
    clusters = parse_clusters(Variable.get("lagsched_clusters", default=None))
    warehouses = check_warehouses(clusters)
    for cluster in clusters:
        lake = LakeTable.of(cluster.name, cluster.sink_settings(), default_warehouse=warehouses[cluster.name])
        if lake.catalog == parts[0]:
            catalog = open_catalog(lake, mysql_params(mysql_conn_id))
            if catalog.table_exists(f"{parts[1]}.{parts[2]}"):
                return catalog.load_table(f"{parts[1]}.{parts[2]}")
    raise ConfigError(
        f"no cluster of lagsched_clusters has the table {identifier}",
        field="identifier",
        value=identifier,
        allowed="a table lagsched writes",
    )


def hour_filter(table: Any, partition_key: str) -> str:
    """pyiceberg's row filter of the hour an hourly partition key names, on the table's timestamp
    column (``timestamp`` in a shared table, ``_kafka_timestamp`` in a typed one)."""
    from lagsched.adapters import lake_hours
    from lagsched.core.completeness import hour_of_key

    return lake_hours.hour_filter(table, hour_of_key(partition_key))
