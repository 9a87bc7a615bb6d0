"""Which tables of a cluster get hourly asset events, and with what lateness (docs/completeness.md). Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from lagsched.core.completeness import HourTable, table_lateness
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
    log_append_time: Collection[str] = (),
) -> list[HourTable]:
    """The tables of one cluster whose hours are announced: the shared table (its unrouted topics)
    and each typed table; ``routed`` maps each registered topic to its route (None: unrouted);
    ``log_append_time``: the topics whose timestamps the broker sets (`table_lateness`). The
    dead-letter table has none: it holds what could not be read, whatever its hour."""
    unrouted = tuple(sorted(t for t, r in routed.items() if r is None))
    out = []
    if unrouted:
        lateness = table_lateness(None, allowed_lateness_s, (t in log_append_time for t in unrouted))
        out.append(HourTable(cluster, catalog, namespace, shared_table, unrouted, lateness))
    for topic, route in sorted(routed.items()):
        if route is not None:
            lateness = table_lateness(route.allowed_lateness_s, allowed_lateness_s, [topic in log_append_time])
            out.append(HourTable(cluster, catalog, route.namespace, route.table, (topic,), lateness))
    return out
