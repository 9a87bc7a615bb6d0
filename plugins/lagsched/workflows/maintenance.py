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
3. **Report**: retention losses: records the slots found deleted by retention and skipped (from
   ``retention_gaps``, per topic and partition, so far) and records deleted before they were
   consumed that are still ahead of the committed offsets (the monitor's figure, which the next
   slot will skip); and **anomalies**: partitions whose committed offset is beyond the broker's
   high watermark (a topic re-created behind the registry's back, or offsets stored by hand; their
   lag is unknown).

4. **Retention** (`lagsched.core.retention`, the Variable ``lagsched_retention``): deletes
   ``scaling_decisions`` older than ``decisions_days`` (each topic's newest decision and those of
   active overrides kept: the evaluator's cooldown and ``override_expired`` rule read them),
   ``retention_gaps`` older than ``gaps_days`` and ``scaling_overrides`` that ended more than
   ``overrides_days`` ago (an active one never), in batches of ``batch_rows``, through each
   table's own repository. This runs before the report, so the retention losses it counts (like
   the page's) cover the retained ``gaps_days``.
5. **Dead slots' leftovers in Redis**: entries of per-slot hashes that carry no TTL
   (the racks of `lagsched.adapters.slots.SlotRacks`) whose slot is gone (not
   in the live set, no heartbeat key, no lock; `SlotRegistry.drop_leftovers`). A slot's heartbeat
   key and its lock expire on their own (TTL of the slot timeout), and the live set is pruned in
   step 1, so nothing else of a dead slot stays.

``now`` is a parameter (the task passes the wall clock; tests pass fixed times).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lagsched.adapters.decisions import delete_old_decisions
from lagsched.adapters.gaps import delete_old_gaps, lost_records
from lagsched.adapters.kafka_admin import OffsetsAdmin, list_partitions, read_offsets
from lagsched.adapters.lag_store import trim_history
from lagsched.adapters.mysql import aware_utc
from lagsched.adapters.overrides import active_overrides, delete_ended_overrides
from lagsched.adapters.slots import SlotRacks, SlotRegistry
from lagsched.adapters.topics import load_topics_with_partitions
from lagsched.core.clusters import ClusterConfig
from lagsched.core.lag import PartitionOffsets, measure_lag
from lagsched.core.retention import RetentionSettings

__all__ = [
    "ClusterReport",
    "MaintenanceReport",
    "apply_retention",
    "maintain",
]

log = logging.getLogger(__name__)

DEFAULT_RETENTION = RetentionSettings()


@dataclass(frozen=True, slots=True)
class ClusterReport:
    """What maintenance found and did for one cluster.

    Attributes:
        cluster: registry cluster name.
        redis_keys_deleted: history keys of topics no longer enabled, deleted.
        retention_losses: topic -> partition -> records the slots found deleted and skipped, so far.
        lost_pending: topic -> records deleted by retention before they were consumed, still
            ahead of the committed offsets (the next slot will skip and record them).
        anomalies: topic -> partition -> ``{committed, latest, ahead}``.
    """

    cluster: str
    redis_keys_deleted: int = 0
    retention_losses: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    lost_pending: Mapping[str, int] = field(default_factory=dict)
    anomalies: Mapping[str, Mapping[str, Mapping[str, int]]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "redis_keys_deleted": self.redis_keys_deleted,
            "retention_losses": {t: dict(v) for t, v in self.retention_losses.items()},
            "lost_pending": dict(self.lost_pending),
            "anomalies": {t: {p: dict(v) for p, v in ps.items()} for t, ps in self.anomalies.items()},
        }


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    """The result of one `maintain` call (JSON via `as_dict`, readable via `table`)."""

    at: datetime
    slots_pruned: int
    clusters: tuple[ClusterReport, ...]
    #: table -> rows deleted by retention (`apply_retention`).
    rows_deleted: Mapping[str, int] = field(default_factory=dict)
    #: rack entries of dead slots deleted (`lagsched.adapters.slots.SlotRacks`).
    slot_entries_deleted: int = 0
    retention: RetentionSettings = field(default_factory=RetentionSettings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "slots_pruned": self.slots_pruned,
            "slot_entries_deleted": self.slot_entries_deleted,
            "rows_deleted": dict(self.rows_deleted),
            "retention": self.retention.as_dict(),
            "clusters": [c.as_dict() for c in self.clusters],
        }

    def table(self) -> str:
        r = self.retention
        kept = {
            "scaling_decisions": r.decisions_days,
            "retention_gaps": r.gaps_days,
            "scaling_overrides": r.overrides_days,
        }
        lines = [
            f"maintenance at {self.at:%Y-%m-%d %H:%M:%S} UTC: "
            f"{self.slots_pruned} dead slot(s) pruned, {self.slot_entries_deleted} entry(ies) of dead slots deleted",
            "retention: "
            + ", ".join(
                f"{table} lost {self.rows_deleted.get(table, 0):,} row(s) (kept {kept[table]:g} days)" for table in kept
            ),
        ]
        for c in self.clusters:
            lines.append(f"cluster {c.cluster}: {c.redis_keys_deleted} history key(s) of removed topics deleted")
            for topic, parts in sorted(c.retention_losses.items()):
                detail = ", ".join(f"p{p}: {n:,}" for p, n in sorted(parts.items(), key=lambda kv: int(kv[0])))
                lines.append(
                    f"  RETENTION LOSS skipped by the slots (deleted before they were read): {topic}: "
                    f"{sum(parts.values()):,} record(s) ({detail})"
                )
            for topic, lost in sorted(c.lost_pending.items()):
                lines.append(f"  RETENTION LOSS ahead of the committed offsets: {topic}: {lost:,} record(s)")
            for topic, bad in sorted(c.anomalies.items()):
                for p, a in sorted(bad.items()):
                    lines.append(
                        f"  ANOMALY {topic}[{p}]: committed offset {a['committed']:,} is {a['ahead']:,} beyond the "
                        f"high watermark {a['latest']:,} (lag unknown: re-created topic or offsets set by hand)"
                    )
            if not (c.retention_losses or c.lost_pending or c.anomalies):
                lines.append("  no retention loss, no anomaly")
        return "\n".join(lines)


def apply_retention(mysql: Any, retention: RetentionSettings, now: datetime) -> dict[str, int]:
    """Delete the history `retention` no longer keeps at ``now`` (aware); returns table -> rows deleted.

    Ended overrides go first; the decisions that applied overrides still active are kept
    whatever their age (an active override's row names the decision that applied it).
    """
    at = aware_utc(now)
    cutoffs = retention.cutoffs(at)
    batch = retention.batch_rows
    deleted = {"scaling_overrides": delete_ended_overrides(mysql, cutoffs["scaling_overrides"], batch_rows=batch)}
    pinned = [o.decision_id for o in active_overrides(mysql, None, at) if o.decision_id is not None]
    deleted["scaling_decisions"] = delete_old_decisions(
        mysql, cutoffs["scaling_decisions"], batch_rows=batch, keep=pinned
    )
    deleted["retention_gaps"] = delete_old_gaps(mysql, cutoffs["retention_gaps"], batch_rows=batch)
    for table, n in deleted.items():
        log.info(
            "retention: %s lost %d row(s) (cutoff %s UTC)",
            table, n, f"{cutoffs[table]:%Y-%m-%d %H:%M:%S}",
        )  # fmt: skip
    return deleted


def _offsets_report(
    conn: Any, admin: OffsetsAdmin, cluster: str, timeout_s: float
) -> tuple[list[str], dict[str, dict[str, int]], dict[str, int], dict[str, dict[str, dict[str, int]]]]:
    _, registered = load_topics_with_partitions(conn, cluster)
    topics = [t for t, _ in registered]
    partitions = {t.topic_id: parts for t, parts in registered}
    skipped = lost_records(conn, [t.topic_id for t in topics])
    losses = {t.name: {str(p): n for p, n in skipped[t.topic_id].items()} for t in topics if t.topic_id in skipped}
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
    return [t.name for t in topics], losses, lost, anomalies


def maintain(
    clusters: Sequence[ClusterConfig],
    *,
    mysql: Any,
    redis: Any,
    admins: Mapping[str, OffsetsAdmin],
    now: datetime,
    slot_horizon_s: float = 3600.0,
    timeout_s: float = 10.0,
    retention: RetentionSettings = DEFAULT_RETENTION,
) -> MaintenanceReport:
    """Run every step of the module doc for ``clusters``.

    Args:
        clusters: the configured clusters (their history is trimmed, their losses reported).
        mysql: an open lagsched MySQL connection.
        redis: a ``redis.Redis`` client on lagsched's Redis DB.
        admins: cluster name -> Admin client of its broker.
        now: the time of the run, timezone-aware (a naive datetime is refused).
        slot_horizon_s: slots silent longer than this are dropped from the live set (at least 60).
        timeout_s: broker request timeout.
        retention: how long history is kept (`lagsched.core.retention`; default 30 days each).
    """
    if slot_horizon_s < 60:
        raise ValueError(f"slot_horizon_s={slot_horizon_s}: use at least 60 s, far above any slot timeout")
    at = aware_utc(now)
    # Every cluster with slots in Redis: one taken out of lagsched_clusters still has its set pruned.
    registries = SlotRegistry.every_cluster(redis)
    pruned = sum(registry.prune(at, slot_horizon_s) for registry in registries)
    if pruned:
        log.info("pruned %d slot(s) silent for more than %.0f s", pruned, slot_horizon_s)
    # The per-slot hashes with no TTL: only the racks.
    leftovers = sum(registry.drop_leftovers(SlotRacks(redis, registry.namespace).key) for registry in registries)
    if leftovers:
        log.info("deleted %d rack entry(ies) of dead slots", leftovers)
    rows_deleted = apply_retention(mysql, retention, at)
    reports = []
    for c in clusters:
        enabled, losses, lost, anomalies = _offsets_report(mysql, admins[c.name], c.name, timeout_s)
        reports.append(
            ClusterReport(
                cluster=c.name,
                redis_keys_deleted=trim_history(redis, c.name, enabled),
                retention_losses=losses,
                lost_pending=lost,
                anomalies=anomalies,
            )
        )
    return MaintenanceReport(at, pruned, tuple(reports), rows_deleted, leftovers, retention)
