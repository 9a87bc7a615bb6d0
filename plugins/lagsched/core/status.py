"""The status read model's values and rules: what the lagsched page, ``lagsched status`` and the
Prometheus endpoint show, with no client library in sight.

`lagsched.workflows.status` reads MySQL and Redis and builds these values; everything that can be
decided without I/O is here so it is unit-tested: a topic's state, the anomalies worth an
operator's look, the ``linker_workers`` step line of the charts, and the Prometheus text format.

Times are seconds since the epoch (UTC) throughout; `lagsched.core.times.iso` renders them for JSON.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lagsched.core.claims import PartitionRow
from lagsched.core.decisions import DecisionRow
from lagsched.core.lag import OPEN_TRANSACTION_WARN_S, OffsetSample, estimate_time_lag, is_old_open_transaction
from lagsched.core.times import iso

__all__ = [
    "COUNTERS",
    "METRIC_HELP",
    "STATES",
    "Anomaly",
    "ClusterStatus",
    "GapView",
    "HistoryPoint",
    "MeasuredOffsets",
    "Metric",
    "PartitionFigures",
    "PartitionLine",
    "SlotView",
    "TableCareRuns",
    "TopicView",
    "WorkersStep",
    "escape_label_value",
    "find_anomalies",
    "linker_workers_steps",
    "measured_offsets",
    "metric_families",
    "partition_figures",
    "render_prometheus",
    "topic_state",
]

#: A topic's pipeline state, as the lag monitor records it on each `LagRecord` (Burrow's terms).
STATES = ("ok", "stalled", "stopped")


def topic_state(state: str | None) -> str:
    """The state to show: the recorded one, ``ok`` when none was recorded or it is unknown to us.

    Records written before the monitor tracked stuck pipelines carry no state; they were not
    judged, and showing them as stuck would be an alarm nobody raised.

    >>> topic_state(None), topic_state("stalled"), topic_state("weird")
    ('ok', 'stalled', 'ok')
    """
    return state if state in STATES else "ok"


@dataclass(frozen=True, slots=True)
class PartitionLine:
    """One partition's line of the status (the page, ``lagsched status``): its ``topic_partitions``
    row, with what is not a column of it beside it.

    Attributes:
        topic: the topic's name (from the join with ``topics``).
        row: the row; the status read loads ``committed_offset``, ``claimed_by`` (the slot named,
            whose lease may have run out: see ``live``), ``lease_expires_at`` and the pending batch,
            not ``claim_epoch`` or ``last_picked_at``.
        live: the row was held when read: a holder whose lease was live by the database's clock
            (`lagsched.core.claims.PartitionRow.holder_at`). A dead lease means the row is free.
    """

    topic: str
    row: PartitionRow
    live: bool

    def as_dict(self) -> dict[str, Any]:
        """The line as the JSON routes and ``lagsched status --json`` give it (under its holder)."""
        pending = self.row.pending
        return {
            "topic": self.topic,
            "partition": self.row.partition_id,
            "committed_offset": self.row.committed_offset,
            "lease_expires_at": iso(self.row.lease_expires_at),
            "live": self.live,
            "pending": None if pending is None else list(pending),
        }


@dataclass(frozen=True, slots=True)
class SlotView:
    """A worker slot: live by its heartbeat, or still named as a holder on some row.

    Attributes:
        slot_id: the slot's UUID.
        name: its configured name when known (``<cluster>-slot-<n>`` of the consume DAG), else None.
        last_seen: its last heartbeat, None when it never beat or left.
        live: its heartbeat is within the timeout.
        claims: the rows of the cluster it holds, by topic then partition.
        host: the worker running it (its lock's holder, `lagsched.adapters.slots.worker_name`),
            None when no process holds its lock.
    """

    slot_id: str
    name: str | None
    last_seen: float | None
    live: bool
    claims: tuple[PartitionLine, ...] = ()
    host: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "slot_id": self.slot_id,
            "name": self.name,
            "last_seen": iso(self.last_seen),
            "live": self.live,
            "host": self.host,
            "claims": [c.as_dict() for c in self.claims],
        }


@dataclass(frozen=True, slots=True)
class GapView:
    """Records ``[from_offset, to_offset)`` of a partition that retention deleted before they were read."""

    topic: str
    partition: int
    from_offset: int
    to_offset: int
    records: int
    slot_id: str
    detected_at: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from_offset": self.from_offset,
            "to_offset": self.to_offset,
            "records": self.records,
            "slot_id": self.slot_id,
            "detected_at": iso(self.detected_at),
        }


@dataclass(frozen=True, slots=True)
class Anomaly:
    """Something an operator should look at, in words.

    Attributes:
        kind: ``lost_records`` | ``offset_ahead`` | ``not_measured`` | ``holder_not_live``.
        topic: the topic concerned.
        partition: the partition, when it is about one.
        detail: what was seen and what it means.
        seen_at: when the figures it rests on were read (a lag measurement's time for
            ``lost_records`` and ``offset_ahead``); None when it is about the read itself.
    """

    kind: str
    topic: str
    partition: int | None
    detail: str
    seen_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "partition": self.partition,
            "detail": self.detail,
            "seen_at": iso(self.seen_at),
        }


@dataclass(frozen=True, slots=True)
class TopicView:
    """One enabled topic: its figures at the newest measurement and its scaling state.

    Attributes:
        topic_id: registry id.
        name: topic name.
        partitions: partitions registered.
        lag: records behind at the newest measurement (lost records excluded); None when never measured.
        lost: records lost to retention at the newest measurement.
        time_lag_s: age of the oldest unread record at the newest measurement, seconds.
        ingress_rate: records/s produced (newest measurement's window).
        consumption_rate: records/s committed by the pipeline (same window).
        measured_at: time of the newest measurement, None when never measured.
        linker_workers: slots that consume it now.
        owners: live slots holding its rows now (slot ids, sorted).
        state: ``ok`` | ``stalled`` | ``stopped`` (the lag monitor's judgement).
        state_reason: why, in words (empty when ok).
        override: the active manual override, as its JSON dict, or None.
        held_by_transaction: offsets an open transaction holds behind the last stable offsets
            (not yet readable, not counted in ``lag``), at the newest measurement.
        transaction_open_s: how long that hold has stood, seconds (0: none).
        max_workers: the most workers the evaluator gives it (`lagsched.core.thresholds`).
        time_lag_slo_s: its time-lag SLO (``time_lag_slo_s``).
        open_transaction_bound_s: how long an open transaction may hold it (``open_transaction_bound_s``).
        watermark_ms: its watermark: every record with an earlier timestamp is committed
            (docs/completeness.md; None: some partition is known by neither rule yet).
        watermark_slo_s: how far the watermark may trail the clock (``watermark_slo_s``).
    """

    topic_id: str
    name: str
    partitions: int
    lag: int | None
    lost: int
    time_lag_s: float
    ingress_rate: float
    consumption_rate: float
    measured_at: float | None
    linker_workers: int
    owners: tuple[str, ...]
    state: str = "ok"
    state_reason: str = ""
    override: Mapping[str, Any] | None = None
    held_by_transaction: int = 0
    transaction_open_s: float = 0.0
    max_workers: int | None = None
    time_lag_slo_s: float = 600.0
    open_transaction_bound_s: float = OPEN_TRANSACTION_WARN_S
    watermark_ms: int | None = None
    watermark_slo_s: float = 3600.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic_id": self.topic_id,
            "name": self.name,
            "partitions": self.partitions,
            "lag": self.lag,
            "lost": self.lost,
            "time_lag_s": round(self.time_lag_s, 3),
            "ingress_rate": round(self.ingress_rate, 3),
            "consumption_rate": round(self.consumption_rate, 3),
            "measured_at": iso(self.measured_at),
            "linker_workers": self.linker_workers,
            "owners": list(self.owners),
            "state": self.state,
            "state_reason": self.state_reason,
            "override": None if self.override is None else dict(self.override),
            "held_by_transaction": self.held_by_transaction,
            "transaction_open_s": round(self.transaction_open_s, 1),
            "max_workers": self.max_workers,
            "time_lag_slo_s": self.time_lag_slo_s,
            "open_transaction_bound_s": self.open_transaction_bound_s,
            "watermark": None if self.watermark_ms is None else iso(self.watermark_ms / 1000),
            "watermark_slo_s": self.watermark_slo_s,
        }


@dataclass(frozen=True, slots=True)
class TableCareRuns:
    """The cluster's table care runs of one outcome (``ok``, ``failed``): how many, and when the
    latest ended (epoch seconds; None when none did)."""

    outcome: str
    runs: int
    last_at: float | None


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """Everything the page shows about one cluster at one instant (`as_dict` is the JSON of ``/api/status``)."""

    cluster: str
    at: datetime
    topics: tuple[TopicView, ...]
    slots: tuple[SlotView, ...]
    decisions: tuple[DecisionRow, ...]
    overrides: tuple[Mapping[str, Any], ...] = ()
    retention_gaps: tuple[GapView, ...] = ()
    anomalies: tuple[Anomaly, ...] = ()
    slot_timeout_s: float = 60.0
    notes: tuple[str, ...] = field(default=())
    #: What the alert rules read besides the topics (`lagsched.adapters.alert_figures`): when a
    #: measurement is stale, the slots the consume DAG planned (None: never planned), the slots'
    #: table commits by ``(table, outcome)``, and the table care runs by outcome.
    stale_after_s: float = 600.0
    planned_slots: int | None = None
    table_commits: Mapping[tuple[str, str], int] = field(default_factory=dict)
    table_care: tuple[TableCareRuns, ...] = ()
    #: Records committed to the cluster's dead-letter table so far, per topic (docs/routing.md).
    dead_letters: Mapping[str, int] = field(default_factory=dict)
    #: Late records so far, per table: committed into hours already complete (docs/completeness.md).
    late_records: Mapping[str, int] = field(default_factory=dict)

    @property
    def stuck(self) -> tuple[TopicView, ...]:
        """Topics the lag monitor judged stalled or stopped."""
        return tuple(t for t in self.topics if t.state != "ok")

    @property
    def live_slots(self) -> tuple[SlotView, ...]:
        return tuple(s for s in self.slots if s.live)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "at": iso(self.at),
            "slot_timeout_s": self.slot_timeout_s,
            "topics": [t.as_dict() for t in self.topics],
            "slots": [s.as_dict() for s in self.slots],
            "live_slots": len(self.live_slots),
            "decisions": [d.as_dict() for d in self.decisions],
            "overrides": [dict(o) for o in self.overrides],
            "stuck": [{"topic": t.name, "state": t.state, "reason": t.state_reason} for t in self.stuck],
            "retention_gaps": [g.as_dict() for g in self.retention_gaps],
            "anomalies": [a.as_dict() for a in self.anomalies],
            "open_transactions": [
                {
                    "topic": t.name,
                    "held_by_transaction": t.held_by_transaction,
                    "open_s": round(t.transaction_open_s, 1),
                }
                for t in self.topics
                if is_old_open_transaction(t.held_by_transaction, t.transaction_open_s, t.open_transaction_bound_s)
            ],
            "dead_letters": dict(sorted(self.dead_letters.items())),
            "late_records": dict(sorted(self.late_records.items())),
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class PartitionFigures:
    """One partition's lag and time lag at the newest measurement, from the stored sample windows.

    Attributes:
        topic: topic name.
        partition: partition number.
        latest: high watermark at the newest measurement.
        committed: the pipeline's committed offset at that measurement.
        lag: ``latest - committed`` (never below 0).
        time_lag_s: age of the oldest unread record, seconds (`lagsched.core.lag.estimate_time_lag`).
        at: time of the measurement.
    """

    topic: str
    partition: int
    latest: int
    committed: int
    lag: int
    time_lag_s: float
    at: float


def partition_figures(
    topic: str,
    partition: int,
    latest_window: Sequence[OffsetSample],
    committed_window: Sequence[OffsetSample],
) -> PartitionFigures | None:
    """A partition's figures from its (time, offset) windows, oldest first; None when either is empty.

    A partition with no committed sample (nothing
    committed yet) has no lag figure here: its lag depends on the topic's ``no_offset_policy``,
    which only the monitor applies, so the endpoint leaves it out rather than guess.
    """
    if not latest_window or not committed_window:
        return None
    head, pos = latest_window[-1], committed_window[-1]
    lag = max(0, head.offset - pos.offset)
    time_lag = estimate_time_lag(latest_window, committed=pos.offset, at=head.at, latest=head.offset)
    return PartitionFigures(topic, partition, head.offset, pos.offset, lag, time_lag, head.at)


@dataclass(frozen=True, slots=True)
class MeasuredOffsets:
    """A partition's committed offset and high watermark as one lag measurement read them.

    The lag monitor reads the committed offsets from MySQL *before* it asks the broker for the
    watermarks, so at one measurement a consumer that keeps up is never ahead of the log end. A
    committed offset read now set against a watermark up to a minute old is: every partition that
    consumed since the measurement would look "ahead". So ``offset_ahead`` compares these two.

    Attributes:
        at: the measurement's time (epoch seconds).
        committed: the pipeline's committed offset it read.
        latest: the high watermark it read.
    """

    at: float
    committed: int
    latest: int


def measured_offsets(
    latest_window: Sequence[OffsetSample], committed_window: Sequence[OffsetSample]
) -> MeasuredOffsets | None:
    """The newest measurement's pair of readings, from a partition's stored windows (oldest first).

    None when either window is empty, or when the newest samples are of different measurements
    (the newest one found no committed offset): readings of different moments are not compared.

    >>> measured_offsets([OffsetSample(60.0, 500)], [OffsetSample(0.0, 90), OffsetSample(60.0, 480)])
    MeasuredOffsets(at=60.0, committed=480, latest=500)
    >>> measured_offsets([OffsetSample(60.0, 500)], [OffsetSample(0.0, 90)]) is None
    True
    """
    if not latest_window or not committed_window:
        return None
    head, pos = latest_window[-1], committed_window[-1]
    if head.at != pos.at:
        return None
    return MeasuredOffsets(head.at, pos.offset, head.offset)


@dataclass(frozen=True, slots=True)
class WorkersStep:
    """A point of the ``linker_workers`` step line: from ``at`` on, ``linker_workers``; ``reason`` says why."""

    at: float
    linker_workers: int
    rule: str = ""
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "t": self.at,
            "linker_workers": self.linker_workers,
            "rule": self.rule,
            "reason": self.reason,
        }


def linker_workers_steps(decisions: Sequence[DecisionRow], current: int, start: float, end: float) -> list[WorkersStep]:
    """The ``linker_workers`` of one topic over ``[start, end]`` as a step line, from its decisions.

    ``decisions`` are the topic's, in any order. The line starts at ``start`` with the value in
    force then (the newest value of an earlier decision, or the ``previous_linker_workers`` of the first one
    after ``start``, or ``current`` when there is none), steps at each decision inside the window,
    and ends at ``end`` with ``current``, the value the registry holds now (or, for a window that
    ends before a later decision, the value that decision replaced).

    >>> from dataclasses import replace
    >>> from lagsched.core.decisions import EXAMPLE
    >>> d = [replace(EXAMPLE, decided_at=50.0, previous_linker_workers=1, linker_workers=3)]
    >>> [(s.at, s.linker_workers) for s in linker_workers_steps(d, 3, 0.0, 100.0)]
    [(0.0, 1), (50.0, 3), (100.0, 3)]
    """
    ordered = sorted(decisions, key=lambda d: (d.decided_at, d.decision_id))
    before = [d for d in ordered if d.decided_at <= start]
    inside = [d for d in ordered if start < d.decided_at <= end]
    after = [d for d in ordered if d.decided_at > end]
    # A window that ends before a later decision ends at the value that decision replaced.
    last = after[0].previous_linker_workers if after else current
    if before:
        first = before[-1].linker_workers
    elif inside:
        first = inside[0].previous_linker_workers
    else:
        first = last
    steps = [WorkersStep(start, first)]
    steps += [WorkersStep(d.decided_at, d.linker_workers, d.rule, d.reason) for d in inside]
    if end > steps[-1].at:
        steps.append(WorkersStep(end, last))
    return steps


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One lag measurement of a topic, for the charts."""

    at: float
    lag: int
    time_lag_s: float
    lost: int
    state: str = "ok"

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "t": self.at,
            "lag": self.lag,
            "time_lag_s": round(self.time_lag_s, 3),
            "lost": self.lost,
            "state": self.state,
        }


def find_anomalies(
    topics: Sequence[TopicView],
    measured: Mapping[tuple[str, int], MeasuredOffsets],
    partitions: Iterable[PartitionLine],
    live_slots: Iterable[str],
) -> list[Anomaly]:
    """What the status read model flags, in a fixed order (topic, then kind).

    * ``lost_records``: the newest measurement counts records retention deleted before the
      pipeline read them (see the retention gaps for where);
    * ``offset_ahead``: at a partition's newest measurement (``measured``), the committed offset
      was beyond the high watermark read right after it: stored by hand, or the topic was
      re-created under the same name without a sync. Its lag is unknown. Both readings are of the
      same moment (see `MeasuredOffsets`), so a consumer that keeps up is never flagged;
    * ``not_measured``: an enabled topic with no stored measurement (the monitor has not run since
      it was registered, or the broker no longer has it);
    * ``holder_not_live``: a row whose lease is still live while its holder's heartbeat is not: the
      slot died and the row stays blocked until the lease runs out.
    """
    out: list[Anomaly] = []
    live = set(live_slots)
    blocked: dict[str, list[PartitionLine]] = {}
    for c in partitions:
        if c.live and c.row.claimed_by is not None and c.row.claimed_by not in live:
            blocked.setdefault(c.topic, []).append(c)
    for t in sorted(topics, key=lambda t: t.name):
        if t.measured_at is None:
            out.append(
                Anomaly("not_measured", t.name, None, "no lag measurement stored: is the lag monitor DAG running?")
            )
        if t.lost:
            out.append(
                Anomaly(
                    "lost_records",
                    t.name,
                    None,
                    f"{t.lost:,} record(s) deleted by retention before they were consumed",
                    t.measured_at,
                )
            )
        for p in range(t.partitions):
            m = measured.get((t.name, p))
            if m is not None and m.committed > m.latest:
                out.append(
                    Anomaly(
                        "offset_ahead",
                        t.name,
                        p,
                        f"at the measurement of {iso(m.at)} the committed offset {m.committed:,} was "
                        f"{m.committed - m.latest:,} beyond the high watermark {m.latest:,}: lag unknown "
                        "(offsets stored by hand, or the topic was re-created without a sync)",
                        m.at,
                    )
                )
        for c in sorted(blocked.get(t.name, []), key=lambda c: c.row.partition_id):
            out.append(
                Anomaly(
                    "holder_not_live",
                    t.name,
                    c.row.partition_id,
                    f"held by slot {c.row.claimed_by}, whose heartbeat stopped; free when its lease ends at "
                    f"{iso(c.row.lease_expires_at)}",
                )
            )
    return out


# -- Prometheus text format ------------------------------------------------------------------------

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric family: its samples are (labels, value)."""

    name: str
    help: str
    kind: str  # "gauge" | "counter"
    samples: tuple[tuple[Mapping[str, str], float], ...]

    def __post_init__(self) -> None:
        if not _METRIC_NAME.fullmatch(self.name):
            raise ValueError(f"metric name {self.name!r} is not legal in Prometheus")
        if self.kind not in ("gauge", "counter"):
            raise ValueError(f"metric kind {self.kind!r}: use 'gauge' or 'counter'")
        for labels, _ in self.samples:
            for k in labels:
                if not _LABEL_NAME.fullmatch(k) or k.startswith("__"):
                    raise ValueError(f"label name {k!r} of {self.name} is not legal in Prometheus")


def escape_label_value(value: str) -> str:
    r"""A label value escaped for the text format: backslash, double quote and newline.

    >>> escape_label_value('a"b\\c\nd')
    'a\\"b\\\\c\\nd'
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))


def render_prometheus(metrics: Iterable[Metric]) -> str:
    """The Prometheus text exposition format (version 0.0.4) of ``metrics``, ending in a newline.

    >>> print(render_prometheus([Metric("x_total", "Things.", "counter", (({"t": "a"}, 2.0),))]), end="")
    # HELP x_total Things.
    # TYPE x_total counter
    x_total{t="a"} 2
    """
    lines: list[str] = []
    for m in metrics:
        lines.append(f"# HELP {m.name} {_escape_help(m.help)}")
        lines.append(f"# TYPE {m.name} {m.kind}")
        for labels, value in m.samples:
            if labels:
                body = ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in sorted(labels.items()))
                lines.append(f"{m.name}{{{body}}} {_value(value)}")
            else:
                lines.append(f"{m.name} {_value(value)}")
    return "\n".join(lines) + "\n" if lines else ""


_Samples = list[tuple[dict[str, str], float]]

#: Every family ``/metrics`` serves, in the order served, with its help text; gauges but for
#: `COUNTERS` (docs/ui.md lists them with their labels). Names follow Prometheus' conventions, base
#: units in the name (``_seconds``, ``_timestamp_seconds``), ``_total`` on a counter and on no gauge,
#: which ``promtool check metrics`` confirms (tests/unit/test_metrics_lint.py).
METRIC_HELP: dict[str, str] = {
    "lagsched_partition_lag_records": "Records behind per partition at the newest measurement.",
    "lagsched_partition_time_lag_seconds": "Age of the oldest unread record per partition.",
    "lagsched_topic_lag_records": "Records behind per topic (lost records excluded).",
    "lagsched_topic_time_lag_seconds": "Age of the oldest unread record of the topic (worst partition).",
    "lagsched_topic_lost_records": "Records deleted by retention before they were consumed.",
    "lagsched_topic_linker_workers": "Worker slots the topic is scaled to (linker_workers).",
    "lagsched_topic_owners": "Live slots holding the topic's partitions now.",
    "lagsched_topic_consume_rate_records_per_second": "Records/s committed by the pipeline.",
    "lagsched_topic_ingress_rate_records_per_second": "Records/s produced into the topic.",
    "lagsched_topic_state": "1 for the topic's pipeline state (ok, stalled, stopped), else 0.",
    "lagsched_topic_measured_timestamp_seconds": "When the topic was last measured (epoch seconds).",
    "lagsched_topic_transaction_held_offsets": (
        "Offsets behind the last stable offsets (an open transaction): not readable yet, not lag."
    ),
    "lagsched_topic_open_transaction_seconds": (
        "How long an open transaction has held the topic's last stable offset (0: none)."
    ),
    "lagsched_live_slots": "The cluster's worker slots with a heartbeat within the timeout.",
    "lagsched_slot_claimed_partitions": "Partitions each slot holds with a live lease.",
    "lagsched_topic_max_workers": "The most workers the evaluator gives the topic (max_workers, capped by partitions).",
    "lagsched_topic_time_lag_slo_seconds": "The topic's time-lag SLO (time_lag_slo_s of lagsched_settings).",
    "lagsched_topic_watermark_timestamp_seconds": (
        "The topic's watermark: every record with an earlier timestamp is committed (docs/completeness.md)."
    ),
    "lagsched_topic_watermark_slo_seconds": (
        "How far the topic's watermark may trail the clock (watermark_slo_s of lagsched_settings)."
    ),
    "lagsched_topic_open_transaction_bound_seconds": (
        "How long an open transaction may hold the topic (open_transaction_bound_s of lagsched_settings)."
    ),
    "lagsched_measurements_stale_after_seconds": (
        "Age at which a topic's newest measurement is stale (stale_after_s of lagsched_settings)."
    ),
    "lagsched_planned_slots": "Slots the consume DAG last planned for the cluster (need and standby).",
    "lagsched_table_commits_total": "Batches the cluster's slots committed to its table.",
    "lagsched_table_commit_failures_total": (
        "Table commits that failed: refused (another holder committed the ranges) or error (outcome unknown)."
    ),
    "lagsched_table_care_runs_total": "Table care task attempts by outcome (ok, failed).",
    "lagsched_dead_letters_total": (
        "Records of the topic committed to the cluster's dead-letter table: they could not be decoded into "
        "its typed table (docs/routing.md)."
    ),
    "lagsched_late_records_total": (
        "Records committed to the table into hours already complete (past the allowed lateness): their hours "
        "are restated (docs/completeness.md)."
    ),
    "lagsched_table_care_last_run_timestamp_seconds": "When the latest table care attempt of each outcome ended.",
}

#: The families of `METRIC_HELP` that are counters: they only grow (from 0, or after Redis lost them).
COUNTERS = frozenset(
    {
        "lagsched_table_commits_total",
        "lagsched_table_commit_failures_total",
        "lagsched_table_care_runs_total",
        "lagsched_dead_letters_total",
        "lagsched_late_records_total",
    }
)


def _cluster_samples(st: ClusterStatus, add: Callable[[str, dict[str, str], float], None]) -> None:
    """The samples of the families with one series per cluster (or per table, per outcome)."""
    cl = {"cluster": st.cluster}
    add("lagsched_live_slots", cl, len(st.live_slots))
    add("lagsched_measurements_stale_after_seconds", cl, st.stale_after_s)
    if st.planned_slots is not None:
        add("lagsched_planned_slots", cl, st.planned_slots)
    # Every outcome of a table that has any, 0 included: increase() sees a counter's first step
    # only from a sample before it, so a failure series born at 1 would never raise the alert.
    for table in sorted({table for table, _ in st.table_commits}):
        add("lagsched_table_commits_total", {**cl, "table": table}, st.table_commits.get((table, "ok"), 0))
        for reason in ("refused", "error"):
            n = st.table_commits.get((table, reason), 0)
            add("lagsched_table_commit_failures_total", {**cl, "table": table, "reason": reason}, n)
    for topic, n in sorted(st.dead_letters.items()):
        add("lagsched_dead_letters_total", {**cl, "topic": topic}, n)
    for table, n in sorted(st.late_records.items()):
        add("lagsched_late_records_total", {**cl, "table": table}, n)
    for care in st.table_care:
        add("lagsched_table_care_runs_total", {**cl, "outcome": care.outcome}, care.runs)
        if care.last_at is not None:
            add("lagsched_table_care_last_run_timestamp_seconds", {**cl, "outcome": care.outcome}, care.last_at)


def metric_families(clusters: Iterable[tuple[ClusterStatus, Sequence[PartitionFigures]]]) -> list[Metric]:
    """The ``/metrics`` families of some clusters: each one's status and its partitions' figures.

    Every family of `METRIC_HELP` is declared, with or without samples. A topic never measured has
    its ``linker_workers``, owners and state but no lag figures: no made-up 0.

    >>> st = ClusterStatus("c", 0.0, (), (), ())
    >>> [(m.name, m.samples) for m in metric_families([(st, [])]) if m.samples]  # doctest: +NORMALIZE_WHITESPACE
    [('lagsched_live_slots', (({'cluster': 'c'}, 0.0),)),
     ('lagsched_measurements_stale_after_seconds', (({'cluster': 'c'}, 600.0),))]
    """
    by_name: dict[str, _Samples] = {name: [] for name in METRIC_HELP}
    slot_claims: dict[tuple[str, str], int] = {}

    def add(name: str, labels: dict[str, str], value: float) -> None:
        by_name[name].append((labels, float(value)))

    for st, figures in clusters:
        _cluster_samples(st, add)
        for s in st.slots:
            slot_claims[(st.cluster, s.slot_id)] = slot_claims.get((st.cluster, s.slot_id), 0) + len(s.claims)
        for t in st.topics:
            lb = {"cluster": st.cluster, "topic": t.name}
            add("lagsched_topic_linker_workers", lb, t.linker_workers)
            if t.max_workers is not None:
                add("lagsched_topic_max_workers", lb, t.max_workers)
            add("lagsched_topic_time_lag_slo_seconds", lb, t.time_lag_slo_s)
            add("lagsched_topic_watermark_slo_seconds", lb, t.watermark_slo_s)
            if t.watermark_ms is not None:
                add("lagsched_topic_watermark_timestamp_seconds", lb, t.watermark_ms / 1000)
            add("lagsched_topic_open_transaction_bound_seconds", lb, t.open_transaction_bound_s)
            add("lagsched_topic_owners", lb, len(t.owners))
            for state in STATES:
                add("lagsched_topic_state", {**lb, "state": state}, 1.0 if t.state == state else 0.0)
            if t.measured_at is None:
                continue  # never measured: no figure rather than a misleading 0
            add("lagsched_topic_lag_records", lb, t.lag or 0)
            add("lagsched_topic_time_lag_seconds", lb, t.time_lag_s)
            add("lagsched_topic_lost_records", lb, t.lost)
            add("lagsched_topic_consume_rate_records_per_second", lb, t.consumption_rate)
            add("lagsched_topic_ingress_rate_records_per_second", lb, t.ingress_rate)
            add("lagsched_topic_measured_timestamp_seconds", lb, t.measured_at)
            add("lagsched_topic_transaction_held_offsets", lb, t.held_by_transaction)
            add("lagsched_topic_open_transaction_seconds", lb, t.transaction_open_s)
        for f in figures:
            plb = {"cluster": st.cluster, "topic": f.topic, "partition": str(f.partition)}
            add("lagsched_partition_lag_records", plb, f.lag)
            add("lagsched_partition_time_lag_seconds", plb, f.time_lag_s)
    for (cluster, slot), n in sorted(slot_claims.items()):
        add("lagsched_slot_claimed_partitions", {"cluster": cluster, "slot": slot}, n)
    return [
        Metric(name, text, "counter" if name in COUNTERS else "gauge", tuple(by_name[name]))
        for name, text in METRIC_HELP.items()
    ]
