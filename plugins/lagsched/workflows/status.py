"""The status read model: what is happening in one cluster, for the page, the CLI and the metrics.

Reads only. Sources:

* MySQL: the registry's enabled topics and their ``linker_workers`` (`lagsched.adapters.topics`),
  every partition row's committed offset and claim (`lagsched.adapters.status_queries`), recent
  ``scaling_decisions``, recorded ``retention_gaps``, and the active manual overrides
  (`lagsched.adapters.overrides`, when that module and its table exist);
* Redis: the live worker slots (`lagsched.adapters.slots.SlotRegistry`) and the lag monitor's
  stored measurements (`lagsched.adapters.lag_store.LagStore`): the newest `LagRecord` of each
  topic gives its lag, lost records, time lag and state; the sample windows give per-partition
  figures for the metrics endpoint.

``now`` is a parameter (an aware datetime): slot liveness and override expiry are judged at it, so
tests pass fixed times. Lease liveness is the database's own judgement, as in the claim protocol.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lagsched.adapters.alert_figures import (
    read_dead_letters,
    read_planned_slots,
    read_table_care,
    read_table_commits,
    read_thresholds,
)
from lagsched.adapters.decisions import recent_decisions
from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.late_records import late_totals
from lagsched.adapters.mysql import aware_utc
from lagsched.adapters.slots import SlotLock, SlotRegistry, slot_id_for, token_worker
from lagsched.adapters.status_queries import (
    clusters,
    overrides_if_migrated,
    partition_lines,
    retention_gaps,
)
from lagsched.adapters.topics import TopicRow, load_topics
from lagsched.adapters.watermarks import topic_watermarks
from lagsched.core.config import Settings
from lagsched.core.names import validate_cluster_name, validate_topic_name
from lagsched.core.status import (
    ClusterStatus,
    HistoryPoint,
    MeasuredOffsets,
    Metric,
    PartitionFigures,
    PartitionLine,
    SlotView,
    TopicView,
    find_anomalies,
    linker_workers_steps,
    measured_offsets,
    metric_families,
    partition_figures,
    topic_state,
)
from lagsched.core.thresholds import ClusterThresholds, TopicThresholds
from lagsched.core.times import epoch_s

__all__ = ["cluster_status", "lag_history", "list_clusters", "metrics", "partition_metrics"]

log = logging.getLogger(__name__)

#: Slot names the consume DAG gives (``<cluster>-slot-<n>``) are recognised up to this n.
SLOT_NAMES_TRIED = 256
#: The evaluator's default slot timeout (`lagsched.airflow.tasks.run_evaluation`): live means the same here.
DEFAULT_SLOT_TIMEOUT_S = 60.0


def list_clusters(mysql: Any) -> list[str]:
    """Registry clusters with an enabled topic, sorted."""
    return clusters(mysql)


def _slot_names(cluster: str) -> dict[str, str]:
    # Slot ids are uuid5 of the slot's name, so the consume DAG's names can be recognised.
    return {slot_id_for(f"{cluster}-slot-{n}"): f"{cluster}-slot-{n}" for n in range(SLOT_NAMES_TRIED)}


def _slot_order(slot_id: str, names: Mapping[str, str]) -> tuple[int, int, str]:
    # The consume DAG's slots by number (slot-2 before slot-10), then unnamed ones by id.
    name = names.get(slot_id)
    return (0, int(name.rsplit("-", 1)[1]), slot_id) if name else (1, 0, slot_id)


def _utc(value: datetime) -> datetime:
    # DATETIME columns come back naive, holding UTC wall time (sessions run in UTC).
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _override_dicts(mysql: Any, cluster: str, now: datetime) -> tuple[list[dict[str, Any]], str | None]:
    """Active overrides as JSON dicts, and a note when they could not be read."""
    rows = overrides_if_migrated(mysql, cluster, now)
    if rows is None:
        return [], "manual overrides are not available: run the lagsched_setup DAG to apply migration V006"
    out = []
    for row in rows:
        d = dataclasses.asdict(row)
        out.append({k: (_utc(v).isoformat() if isinstance(v, datetime) else v) for k, v in d.items()})
    return out, None


def cluster_status(
    mysql: Any,
    redis: Any,
    cluster: str,
    now: datetime,
    *,
    slot_timeout_s: float = DEFAULT_SLOT_TIMEOUT_S,
    decisions_limit: int = 50,
    gaps_limit: int = 100,
) -> ClusterStatus:
    """The status of `cluster` at `now`.

    Args:
        mysql: an open lagsched MySQL connection (`lagsched.adapters.mysql.connect`).
        redis: a ``redis.Redis`` (`lagsched.adapters.redis_store.redis_client`).
        cluster: registry cluster name.
        now: the instant slot liveness and override expiry are judged at, timezone-aware (a naive
            datetime is refused).
        slot_timeout_s: a slot silent this long is not live (the evaluator's default).
        decisions_limit: newest decisions listed.
        gaps_limit: newest retention gaps listed.
    """
    validate_cluster_name(cluster)
    now = aware_utc(now)
    topics = load_topics(mysql, cluster)
    parts = partition_lines(mysql, cluster)
    decisions = recent_decisions(mysql, cluster, limit=decisions_limit)
    gaps = retention_gaps(mysql, cluster, limit=gaps_limit)
    overrides, note = _override_dicts(mysql, cluster, now)

    store = LagStore(redis, cluster)
    names = [t.name for t in topics]
    watermarks = topic_watermarks(mysql, cluster, names)
    records = store.read_lag_records(names)
    measured = _measured(store, [(p.topic, p.row.partition_id) for p in parts])

    registry = SlotRegistry(redis, cluster=cluster)
    live = registry.live_slots(now, slot_timeout_s)
    claims_by_slot: dict[str, list[PartitionLine]] = {}
    owners: dict[str, set[str]] = {}
    for p in parts:
        holder = p.row.claimed_by
        if holder is None or not p.live:
            continue  # a row whose lease ran out is free: its last holder holds nothing
        claims_by_slot.setdefault(holder, []).append(p)
        owners.setdefault(p.topic, set()).add(holder)
    slot_names = _slot_names(cluster)
    slot_ids = sorted(set(live) | set(claims_by_slot), key=lambda s: _slot_order(s, slot_names))
    holders = SlotLock(redis).holders(slot_ids)
    slots = tuple(
        SlotView(
            s,
            slot_names.get(s),
            registry.last_seen(s),
            s in live,
            tuple(claims_by_slot.get(s, ())),
            token_worker(holders[s]) if s in holders else None,
        )
        for s in slot_ids
    )

    override_by_topic = {str(o.get("topic_id")): o for o in overrides}
    # Before the lag monitor's first measurement stored the thresholds, the settings' defaults apply.
    thresholds = read_thresholds(redis, cluster) or ClusterThresholds(Settings().measurements_stale_after_s)
    views = [
        _topic_view(
            t,
            records.get(t.name),
            tuple(sorted(owners.get(t.name, ()), key=lambda s: _slot_order(s, slot_names))),
            override_by_topic.get(t.topic_id),
            thresholds.for_topic(t.name, t.partition_count, t.max_workers),
            watermark_ms=watermarks.get(t.name),
        )
        for t in topics
    ]
    anomalies = find_anomalies(views, measured, parts, live)  # it keeps the rows under a live lease
    return ClusterStatus(
        cluster=cluster,
        at=now,
        topics=tuple(views),
        slots=slots,
        decisions=tuple(decisions),
        overrides=tuple(overrides),
        retention_gaps=tuple(gaps),
        anomalies=tuple(anomalies),
        slot_timeout_s=slot_timeout_s,
        notes=() if note is None else (note,),
        stale_after_s=thresholds.stale_after_s,
        planned_slots=read_planned_slots(redis, cluster),
        table_commits=read_table_commits(redis, cluster),
        table_care=read_table_care(redis, cluster),
        dead_letters=read_dead_letters(redis, cluster),
        late_records=late_totals(mysql, cluster),
    )


def _topic_view(
    t: TopicRow,
    history: Sequence[LagRecord] | None,
    owners: tuple[str, ...],
    override: dict[str, Any] | None,
    thresholds: TopicThresholds,
    *,
    watermark_ms: int | None = None,
) -> TopicView:
    """One topic's row of the status: its registry row and its newest lag record (zeros before the first)."""
    newest = history[-1] if history else None
    return TopicView(
        topic_id=t.topic_id,
        name=t.name,
        partitions=t.partition_count,
        lag=None if newest is None else newest.lag,
        lost=0 if newest is None else newest.lost,
        time_lag_s=0.0 if newest is None else newest.time_lag_s,
        ingress_rate=0.0 if newest is None else newest.ingress_rate,
        consumption_rate=0.0 if newest is None else newest.consumption_rate,
        measured_at=None if newest is None else newest.at,
        linker_workers=t.linker_workers,
        owners=owners,
        state=topic_state(None if newest is None else newest.state),
        state_reason="" if newest is None else newest.state_reason,
        override=override,
        held_by_transaction=0 if newest is None else newest.held_by_transaction,
        transaction_open_s=0.0 if newest is None else newest.transaction_open_s,
        max_workers=thresholds.max_workers,
        time_lag_slo_s=thresholds.time_lag_slo_s,
        open_transaction_bound_s=thresholds.open_transaction_bound_s,
        watermark_ms=watermark_ms,
        watermark_slo_s=thresholds.watermark_slo_s,
    )


def _measured(store: LagStore, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], MeasuredOffsets]:
    """Each partition's committed offset and high watermark at its newest measurement.

    Both come from the monitor's stored windows, i.e. from one moment: the committed offsets MySQL
    holds now are newer than any stored watermark, and comparing the two made every partition a
    consumer had moved since the measurement look "ahead of the log end" (issue 17).
    """
    # One round trip for both kinds of window.
    windows = store.read_windows(
        [store.latest_key(t, p) for t, p in partitions] + [store.committed_key(t, p) for t, p in partitions]
    )
    latest, committed = windows[: len(partitions)], windows[len(partitions) :]
    out: dict[tuple[str, int], MeasuredOffsets] = {}
    for tp, lw, cw in zip(partitions, latest, committed, strict=True):
        m = measured_offsets(lw.samples, cw.samples)
        if m is not None:
            out[tp] = m
    return out


def lag_history(
    redis: Any,
    cluster: str,
    topic: str,
    *,
    mysql: Any | None = None,
    now: datetime | None = None,
    decisions_limit: int = 500,
) -> dict[str, Any]:
    """A topic's chart data: lag and time lag per stored measurement, and ``linker_workers`` as steps.

    The measurements are the lag monitor's records in Redis (they expire after ``sample_ttl_s``);
    the ``linker_workers`` line comes from ``scaling_decisions`` (needs ``mysql``; without it the
    line is empty) over the same span, ending at ``now`` (default: the newest measurement) with
    the value the registry holds. Each step carries the decision's rule and reason.
    """
    validate_cluster_name(cluster)
    validate_topic_name(topic)
    store = LagStore(redis, cluster)
    records = store.read_lag_records([topic])[topic]
    points = [HistoryPoint(r.at, r.lag, r.time_lag_s, r.lost, topic_state(r.state)) for r in records]
    out: dict[str, Any] = {
        "cluster": cluster,
        "topic": topic,
        "points": [p.as_dict() for p in points],
        "linker_workers_steps": [],
        "decisions": [],
    }
    if mysql is None:
        return out
    current = next((t.linker_workers for t in load_topics(mysql, cluster) if t.name == topic), None)
    decisions = recent_decisions(mysql, cluster, topic=topic, limit=decisions_limit)
    end = epoch_s(now) if now is not None else (points[-1].at if points else None)  # the points' axis
    start = points[0].at if points else None
    if current is not None and start is not None and end is not None:
        steps = linker_workers_steps(decisions, current, start, max(start, end))
        out["linker_workers_steps"] = [s.as_dict() for s in steps]
    out["linker_workers"] = current
    out["decisions"] = [d.as_dict() | {"t": d.decided_at} for d in decisions if start is None or d.decided_at >= start]
    return out


def partition_metrics(redis: Any, cluster: str, partitions: Mapping[str, int]) -> list[PartitionFigures]:
    """Per-partition lag and time lag at the newest measurement, from the stored sample windows.

    ``partitions`` maps topic name -> partition count. Partitions with no committed sample yet are
    left out (see `lagsched.core.status.partition_figures`).
    """
    store = LagStore(redis, cluster)
    tps = [(t, p) for t, n in sorted(partitions.items()) for p in range(n)]
    latest = store.read_windows([store.latest_key(t, p) for t, p in tps])
    committed = store.read_windows([store.committed_key(t, p) for t, p in tps])
    out = []
    for (t, p), lw, cw in zip(tps, latest, committed, strict=True):
        fig = partition_figures(t, p, lw.samples, cw.samples)
        if fig is not None:
            out.append(fig)
    return out


def metrics(
    mysql: Any, redis: Any, now: datetime, *, cluster_names: Iterable[str] | None = None, slot_timeout_s: float = 60.0
) -> list[Metric]:
    """The Prometheus metric families of every cluster (or of ``cluster_names``) at ``now``."""
    names = list(cluster_names) if cluster_names is not None else list_clusters(mysql)
    read: list[tuple[ClusterStatus, list[PartitionFigures]]] = []
    for cluster in names:
        st = cluster_status(mysql, redis, cluster, now, slot_timeout_s=slot_timeout_s, decisions_limit=1, gaps_limit=1)
        read.append((st, partition_metrics(redis, cluster, {t.name: t.partitions for t in st.topics})))
    return metric_families(read)
