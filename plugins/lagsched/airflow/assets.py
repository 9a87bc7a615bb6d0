"""The Airflow assets that chain lagsched's DAGs, defined once (docs/dags.md).

* `LAG_MEASURED`: the lag monitor stored a measurement; the scaling evaluator runs on it.
* `WORKERS_CHANGED`: some topic's ``linker_workers`` changed (an evaluation or an override); the
  consume DAG runs on it and starts the slots a scale-up needs.
* `SLOT_ENDED`: a consumer slot ended (its time budget, a scale-down, a second start of a running
  slot); the consume DAG runs on it and starts again whatever is still needed.
* `TABLE_HOURS`: the alias ``lagsched_hours`` emits each table's hourly events through; each
  event lands on the table's own asset, `table_asset` (docs/completeness.md), which downstream DAGs
  schedule on.
* `TABLE_RESTATEMENTS`: the alias ``lagsched_restatements`` emits through; each event lands on the
  table's restatements asset, `restatement_asset` (not partitioned: it names the hours restated).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow.sdk import Asset, AssetAlias

__all__ = [
    "LAG_MEASURED",
    "SLOT_ENDED",
    "TABLE_HOURS",
    "TABLE_RESTATEMENTS",
    "WORKERS_CHANGED",
    "restatement_asset",
    "table_asset",
]

LAG_MEASURED = Asset("lagsched://lag/measured")
WORKERS_CHANGED = Asset("lagsched://scaling/workers_changed")
SLOT_ENDED = Asset("lagsched://consume/slot_ended")
TABLE_HOURS = AssetAlias("lagsched_table_hours")
TABLE_RESTATEMENTS = AssetAlias("lagsched_table_restatements")


def table_asset(identifier: str, *, cluster: str | None = None, topics: Iterable[str] = ()) -> Asset:
    """The Airflow asset of an Iceberg table lagsched writes, by its ``catalog.namespace.table``
    (``lagsched.kafka.orders``): named so, with the URI ``iceberg://<catalog>/<namespace>/<table>``.

    Downstream DAGs schedule on it (``PartitionedAssetTimetable(assets=table_asset(...))``); the
    cluster and topics, when given, are the asset's extra as the Assets view shows it.
    """
    extra: dict[str, Any] = {} if cluster is None else {"cluster": cluster, "topics": sorted(topics)}
    return Asset(name=identifier, uri="iceberg://" + "/".join(_parts(identifier)), extra=extra)


def restatement_asset(identifier: str, *, cluster: str | None = None, topics: Iterable[str] = ()) -> Asset:
    """The restatements asset of a table: ``<catalog.namespace.table>/restatements``, with the URI
    ``iceberg://<catalog>/<namespace>/<table>/restatements``. Its events (not partitioned) name the
    hours of the table that late records landed in after they were announced (docs/completeness.md)."""
    extra: dict[str, Any] = {} if cluster is None else {"cluster": cluster, "topics": sorted(topics)}
    return Asset(
        name=f"{identifier}/restatements",
        uri="iceberg://" + "/".join(_parts(identifier)) + "/restatements",
        extra=extra,
    )


def _parts(identifier: str) -> list[str]:
    parts = identifier.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"{identifier!r}: a table is named catalog.namespace.table, e.g. lagsched.kafka.orders")
    return parts
