"""Hourly housekeeping: expire dead slots, trim history, report retention losses and anomalies.

One `maintain` call, for the configured clusters:

1. **Dead slots**: drops slots silent for more than ``slot_horizon_s`` from the live set in Redis
   (`SlotRegistry.prune`; a slot that stops cleanly leaves at once, a crashed one stays there
   until pruned). The horizon is far above any reader's liveness timeout, so a live slot is never
   pruned.
2. **History in Redis**: deletes the lag history (offset samples, lag records, evaluation marks)
   of topics that are no longer enabled in the cluster's registry (deleted on the broker, or
   outside the cluster's topic filter). Everything there also expires on its own after
   ``sample_ttl_s``; this frees it now and keeps the evaluator from ever reading a stale window.
3. **History in MySQL**: deletes ``scaling_decisions`` and ``retention_gaps`` rows older than
   ``keep_days``, in batches. The newest decision of each topic is always kept (the evaluator's
   cooldown reads it). Old gaps no longer count in the monitor's ``lost`` figure: after
   ``keep_days`` a loss is history, and it stays in this DAG's earlier logs and XComs.
4. **Report**: retention losses recorded by the slots within ``report_window_s`` (per topic and
   partition: records, gaps, last seen), records retention deleted before they were consumed that
   are still ahead of the committed offsets (the same figure the monitor reports), and
   **anomalies**: partitions whose committed offset is beyond the broker's high watermark (a topic
   re-created behind the registry's back, or offsets stored by hand; their lag is unknown).

``now`` is a parameter (the task passes the wall clock; tests pass fixed times).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lagsched.adapters.kafka_admin import OffsetsAdmin, list_partitions, read_offsets
from lagsched.adapters.lag_store import DEFAULT_PREFIX
from lagsched.adapters.slots import SlotRegistry
from lagsched.adapters.topics import load_partitions, load_topics, transaction
from lagsched.core.clusters import ClusterConfig
from lagsched.core.lag import PartitionOffsets, measure_lag

__all__ = [
    "HISTORY_KINDS",
    "ClusterReport",
    "MaintenanceReport",
    "maintain",
    "prune_history_tables",
    "recent_retention_losses",
    "trim_redis_history",
]

log = logging.getLogger(__name__)

#: The per-topic key kinds of `lagsched.adapters.lag_store` (``<prefix><cluster>:<kind>:<topic>``).
HISTORY_KINDS = ("latest", "committed", "lag", "evaluated")
_BATCH = 5000


@dataclass(frozen=True, slots=True)
class ClusterReport:
    """What maintenance found and did for one cluster.

    Attributes:
        cluster: registry cluster name.
        redis_keys_deleted: history keys of topics no longer enabled, deleted.
        retention_losses: recent gaps, per ``topic[partition]``: ``records``, ``gaps``, ``last``.
        lost_pending: topic -> records deleted by retention before they were consumed, still
            ahead of the committed offsets (the next slot will skip and record them).
        anomalies: topic -> partition -> ``{committed, latest, ahead}``.
    """

    cluster: str
    redis_keys_deleted: int = 0
    retention_losses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    lost_pending: Mapping[str, int] = field(default_factory=dict)
    anomalies: Mapping[str, Mapping[str, Mapping[str, int]]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "redis_keys_deleted": self.redis_keys_deleted,
            "retention_losses": {k: dict(v) for k, v in self.retention_losses.items()},
            "lost_pending": dict(self.lost_pending),
            "anomalies": {t: {p: dict(v) for p, v in ps.items()} for t, ps in self.anomalies.items()},
        }


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    """The result of one `maintain` call (JSON via `as_dict`, readable via `table`)."""

    at: float
    slots_pruned: int
    decisions_deleted: int
    gaps_deleted: int
    clusters: tuple[ClusterReport, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": datetime.fromtimestamp(self.at, tz=UTC).isoformat(),
            "slots_pruned": self.slots_pruned,
            "decisions_deleted": self.decisions_deleted,
            "retention_gaps_deleted": self.gaps_deleted,
            "clusters": [c.as_dict() for c in self.clusters],
        }

    def table(self) -> str:
        lines = [
            f"maintenance at {datetime.fromtimestamp(self.at, tz=UTC):%Y-%m-%d %H:%M:%S} UTC: "
            f"{self.slots_pruned} dead slot(s) pruned, {self.decisions_deleted} old decision(s) and "
            f"{self.gaps_deleted} old retention gap(s) deleted"
        ]
        for c in self.clusters:
            lines.append(f"cluster {c.cluster}: {c.redis_keys_deleted} history key(s) of removed topics deleted")
            if c.retention_losses:
                lines.append("  RETENTION LOSSES recorded by the slots (records deleted before they were read):")
                for where, loss in sorted(c.retention_losses.items()):
                    lines.append(
                        f"    {where}: {loss['records']:,} record(s) in {loss['gaps']} gap(s), last {loss['last']}"
                    )
            for topic, lost in sorted(c.lost_pending.items()):
                lines.append(f"  RETENTION LOSS ahead of the committed offsets: {topic}: {lost:,} record(s)")
            for topic, parts in sorted(c.anomalies.items()):
                for p, a in sorted(parts.items()):
                    lines.append(
                        f"  ANOMALY {topic}[{p}]: committed offset {a['committed']:,} is {a['ahead']:,} beyond the "
                        f"high watermark {a['latest']:,} (lag unknown: re-created topic or offsets set by hand)"
                    )
            if not (c.retention_losses or c.lost_pending or c.anomalies):
                lines.append("  no retention loss, no anomaly")
        return "\n".join(lines)


def trim_redis_history(redis: Any, cluster: str, keep: Sequence[str], *, prefix: str = DEFAULT_PREFIX) -> int:
    """Delete the lag history keys of ``cluster``'s topics not in ``keep``; returns how many.

    Only keys of the lag store's own shape (``<prefix><cluster>:<kind>:<topic>``, kind in
    `HISTORY_KINDS`) are considered, so slot keys and other clusters' keys are never touched.
    """
    wanted = set(keep)
    doomed: list[str] = []
    for raw in redis.scan_iter(match=f"{prefix}{cluster}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        parts = key[len(prefix) :].split(":")
        if len(parts) == 3 and parts[0] == cluster and parts[1] in HISTORY_KINDS and parts[2] not in wanted:
            doomed.append(key)
    for i in range(0, len(doomed), 500):
        redis.delete(*doomed[i : i + 500])
    return len(doomed)


def prune_history_tables(conn: Any, before: datetime) -> tuple[int, int]:
    """Delete decisions and retention gaps older than ``before`` (UTC), in batches.

    Returns (decisions, gaps) deleted. Each topic's newest decision is kept whatever its age.
    """
    cutoff = before.astimezone(UTC).replace(tzinfo=None)
    decisions = 0
    while True:
        with transaction(conn) as cur:
            # MySQL cannot DELETE from a table it reads in a subquery; pick the ids first.
            cur.execute(
                "SELECT d.decision_id FROM scaling_decisions d"
                " JOIN (SELECT topic_id, MAX(decision_id) AS newest FROM scaling_decisions GROUP BY topic_id) k"
                " ON k.topic_id = d.topic_id"
                " WHERE d.decided_at < %s AND d.decision_id <> k.newest ORDER BY d.decision_id LIMIT %s",
                (cutoff, _BATCH),
            )
            ids = [int(r[0]) for r in cur.fetchall()]
            if ids:
                marks = ", ".join(["%s"] * len(ids))
                cur.execute(f"DELETE FROM scaling_decisions WHERE decision_id IN ({marks})", ids)  # noqa: S608
        decisions += len(ids)
        if len(ids) < _BATCH:
            break
    gaps = 0
    while True:
        with transaction(conn) as cur:
            deleted = cur.execute("DELETE FROM retention_gaps WHERE detected_at < %s LIMIT %s", (cutoff, _BATCH))
        gaps += int(deleted)
        if deleted < _BATCH:
            break
    return decisions, gaps


def recent_retention_losses(conn: Any, cluster: str, since: datetime) -> dict[str, dict[str, Any]]:
    """Gaps the slots recorded since ``since``, per ``topic[partition]``: records, gaps, last time."""
    with transaction(conn) as cur:
        cur.execute(
            "SELECT t.name, g.partition_id, SUM(g.records), COUNT(*), MAX(g.detected_at)"
            " FROM retention_gaps g JOIN topics t ON t.topic_id = g.topic_id"
            " WHERE t.cluster = %s AND g.detected_at >= %s"
            " GROUP BY t.name, g.partition_id",
            (cluster, since.astimezone(UTC).replace(tzinfo=None)),
        )
        rows = cur.fetchall()
    return {
        f"{name}[{int(p)}]": {"records": int(records), "gaps": int(count), "last": f"{last:%Y-%m-%d %H:%M:%S} UTC"}
        for name, p, records, count, last in rows
    }


def _offsets_report(
    conn: Any, admin: OffsetsAdmin, cluster: str, timeout_s: float
) -> tuple[list[str], dict[str, int], dict[str, dict[str, dict[str, int]]]]:
    topics = load_topics(conn, cluster)
    partitions = load_partitions(conn, [t.topic_id for t in topics])
    counts = list_partitions(admin, [t.name for t in topics], timeout_s=timeout_s, ignore_missing=True)
    broker = read_offsets(admin, counts, timeout_s=timeout_s)
    lost: dict[str, int] = {}
    anomalies: dict[str, dict[str, dict[str, int]]] = {}
    for t in topics:
        if t.name not in broker:
            continue
        committed = {p.partition_id: p.committed_offset for p in partitions.get(t.topic_id, ())}
        offsets = [
            PartitionOffsets(t.name, b.partition, b.latest, b.log_start, committed.get(b.partition))
            for b in broker[t.name]
        ]
        lags = measure_lag(offsets, "latest")  # the policy only matters without an offset: no loss then
        if total := sum(p.lost for p in lags):
            lost[t.name] = total
        bad = {str(p.partition): {"committed": int(p.committed or 0), "latest": p.latest, "ahead": p.ahead}
               for p in lags if p.is_anomaly}  # fmt: skip
        if bad:
            anomalies[t.name] = bad
    return [t.name for t in topics], lost, anomalies


def maintain(
    clusters: Sequence[ClusterConfig],
    *,
    mysql: Any,
    redis: Any,
    admins: Mapping[str, OffsetsAdmin],
    now: float,
    keep_days: float = 30.0,
    slot_horizon_s: float = 3600.0,
    report_window_s: float = 3600.0,
    timeout_s: float = 10.0,
) -> MaintenanceReport:
    """Run every step of the module doc for ``clusters``.

    Args:
        clusters: the configured clusters (their history is trimmed, their losses reported).
        mysql: an open lagsched MySQL connection.
        redis: a ``redis.Redis`` client on lagsched's Redis DB.
        admins: cluster name -> Admin client of its broker.
        now: seconds since the epoch (UTC).
        keep_days: decisions and retention gaps older than this are deleted (at least 1).
        slot_horizon_s: slots silent longer than this are dropped from the live set (at least 60).
        report_window_s: retention losses recorded within this are reported.
    """
    if keep_days < 1:
        raise ValueError(f"keep_days={keep_days}: keep at least 1 day of decisions and retention gaps")
    if slot_horizon_s < 60:
        raise ValueError(f"slot_horizon_s={slot_horizon_s}: use at least 60 s, far above any slot timeout")
    at = datetime.fromtimestamp(now, tz=UTC)
    pruned = SlotRegistry(redis).prune(at, slot_horizon_s)
    if pruned:
        log.info("pruned %d slot(s) silent for more than %.0f s", pruned, slot_horizon_s)
    decisions, gaps = prune_history_tables(mysql, at - timedelta(days=keep_days))
    reports = []
    for c in clusters:
        enabled, lost, anomalies = _offsets_report(mysql, admins[c.name], c.name, timeout_s)
        reports.append(
            ClusterReport(
                cluster=c.name,
                redis_keys_deleted=trim_redis_history(redis, c.name, enabled),
                retention_losses=recent_retention_losses(mysql, c.name, at - timedelta(seconds=report_window_s)),
                lost_pending=lost,
                anomalies=anomalies,
            )
        )
    return MaintenanceReport(now, pruned, decisions, gaps, tuple(reports))
