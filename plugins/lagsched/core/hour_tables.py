"""Which tables of a cluster get hourly asset events, and with what lateness (docs/completeness.md). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from lagsched.core.completeness import HourTable
from lagsched.core.routing import TopicRoute

__all__ = ["hour_tables"]


def hour_tables(
    cluster: str,
    *,
    catalog: str,
    namespace: str,
    shared_table: str,
    routed: Mapping[str, TopicRoute | None],
    allowed_lateness_s: int,
) -> list[HourTable]:
    """The tables of one cluster whose hours are announced: the shared table (its unrouted topics)
    and each typed table; ``routed`` maps each registered topic to its route (None: unrouted). The
    dead-letter table has none: it holds what could not be read, whatever its hour."""
    unrouted = tuple(sorted(t for t, r in routed.items() if r is None))
    out = [HourTable(cluster, catalog, namespace, shared_table, unrouted, allowed_lateness_s)] if unrouted else []
    for topic, route in sorted(routed.items()):
        if route is not None:
            lateness = allowed_lateness_s if route.allowed_lateness_s is None else route.allowed_lateness_s
            out.append(HourTable(cluster, catalog, route.namespace, route.table, (topic,), lateness))
    return out
