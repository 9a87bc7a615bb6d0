"""Notifications: the findings of a lag measurement or an evaluation, sent once when new and once when cleared.

The lag monitor's task hands `monitor_findings` (stalled, stopped, lost records) and the evaluator's
`evaluator_findings` (lag rising at the ceiling, an override expiring) to `notify`, which compares
them per notifier with what that notifier was already told (`lagsched.adapters.notified`, in Redis)
and sends what is new and what cleared (`lagsched.core.findings.diff`) through ``send`` (the Airflow
glue, `lagsched.airflow.notifications`).

Delivery: **send, then remember**. A finding is recorded as told only after its message went out;
a cleared one is forgotten only after its cleared message went out. A send that fails leaves the
record as it was, so the next run (the next minute) sends it again: never lost. Once a send
succeeded and its record is written, no later run sends it again: no repeats. The one window for a
repeat is a task that dies (or a Redis that fails) between a successful send and the write of its
record: at-least-once, as with the scaling messages. Remembering first would turn that window into
a lost message instead. A notifier that fails does not stop the others; nothing here raises for it.

Each notifier has its own record (by its name), so one that failed is retried without repeating
the message to those that succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from lagsched.adapters.lag_store import LagRecord
from lagsched.adapters.overrides import OverrideRow
from lagsched.adapters.topics import TopicRow
from lagsched.core.config import Settings, effective_config
from lagsched.core.findings import (
    EVALUATOR_KINDS,
    LOST_WINDOW_S,
    MONITOR_KINDS,
    Finding,
    Notice,
    Scope,
    dead_letters_finding,
    diff,
    is_lag_at_max_workers,
    lag_at_max_detail,
    lost_records_finding,
    override_expiring_finding,
    stuck_finding,
)
from lagsched.core.notifiers import NotifierEntry
from lagsched.core.times import epoch_s

__all__ = [
    "FindingRecord",
    "NotifyReport",
    "Send",
    "evaluator_findings",
    "first_line",
    "monitor_findings",
    "notify",
]

log = logging.getLogger(__name__)

#: Sends one notice through one notifier; raises when it could not.
Send = Callable[[NotifierEntry, Notice], None]


OUT_OF_TIME = "this run's time for notifications is used up; the next run sends it"


class FindingRecord(Protocol):
    """What each notifier was told (`lagsched.adapters.notified.NotifiedStore`)."""

    def load(self) -> dict[str, dict[str, Finding]]: ...
    def remember(self, notifier: str, finding: Finding) -> None: ...
    def forget(self, notifier: str, finding_key: str) -> None: ...


#: Rules under which a topic at its ceiling is a person's choice or another finding, not lag_at_max_workers.
_NOT_AT_MAX_RULES = frozenset({"override", "stuck", "bounds"})


@dataclass(frozen=True, slots=True)
class NotifyReport:
    """What one `notify` call sent and what failed (to be sent again by the next run)."""

    sent: tuple[dict[str, str], ...] = ()
    failed: tuple[dict[str, str], ...] = ()
    active: int = 0
    error: str = ""
    notifiers: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "notifiers": self.notifiers,
            "active": self.active,
            "sent": list(self.sent),
            "failed": list(self.failed),
        }
        if self.error:
            out["error"] = self.error
        return out


def notify(
    store: FindingRecord,
    findings: Iterable[Finding],
    scope: Scope,
    notifiers: Sequence[NotifierEntry],
    send: Send,
    *,
    out_of_time: Callable[[], bool] = lambda: False,
) -> NotifyReport:
    """Send each notifier the findings in ``scope`` that are new to it and those that cleared.

    Cleared messages go first (a stalled topic that stopped reads "stalled cleared", then
    "stopped"). Records of notifiers no longer configured, and of kinds a notifier no longer
    receives, are dropped silently (within ``scope``'s kinds: the other task's are its own).
    Once ``out_of_time()`` says so, what is left is not sent: reported as failed, sent next run.
    """
    current = list(findings)
    state = store.load()
    sent: list[dict[str, str]] = []
    failed: list[dict[str, str]] = []
    names = {n.label for n in notifiers}
    for name, told in state.items():
        for key, finding in told.items():
            if finding.kind in scope.kinds and name not in names:
                store.forget(name, key)
    for entry in notifiers:
        told = state.get(entry.label, {})
        for key, finding in told.items():
            if finding.kind in scope.kinds and finding.kind not in entry.receives:
                store.forget(entry.label, key)
        own = Scope(scope.kinds & entry.receives, scope.topics)
        new, cleared = diff(told, current, own)
        for event, batch in (("cleared", cleared), ("new", new)):
            for finding in batch:
                notice = Notice("cleared" if event == "cleared" else "new", finding)
                row = {"notifier": entry.label, "event": notice.event, "key": finding.key, "summary": notice.summary}
                if out_of_time():
                    failed.append({**row, "error": f"not sent: {OUT_OF_TIME}"})
                    continue
                try:
                    send(entry, notice)
                except Exception as exc:  # noqa: BLE001 - any notifier's failure: the next run retries it
                    reason = _failure_text(exc)
                    log.warning(
                        "notifier %s could not send %r (%s); it is sent again on the next run: %s",
                        entry.label, notice.summary, notice.event, reason,
                    )  # fmt: skip
                    failed.append({**row, "error": reason})
                    continue
                if notice.event == "new":
                    store.remember(entry.label, finding)
                else:
                    store.forget(entry.label, finding.key)
                log.info("notifier %s: sent %s (%s)", entry.label, notice.summary, notice.event)
                sent.append(row)
    return NotifyReport(
        tuple(sent),
        tuple(failed),
        active=len({f.key for f in current if scope.covers(f)}),
        notifiers=len(notifiers),
    )


def first_line(exc: BaseException) -> str:
    """The first line of the exception's text, at most 300 characters: enough to say what failed,
    never a traceback or a whole response body."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def _failure_text(exc: BaseException) -> str:
    """The exception's type and first line, short (the Airflow glue has already masked secrets in it)."""
    first = first_line(exc)
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


# -- what the monitor and the evaluator found ---------------------------------------------------


def monitor_findings(
    cluster: str,
    topics: Iterable[tuple[str, str, str]],
    history: Mapping[str, Sequence[LagRecord]],
    now: datetime,
) -> tuple[list[Finding], Scope]:
    """The lag monitor's findings and scope: ``topics`` is each measured topic's (name, state, reason);
    ``history`` the lag records, this measurement's included, of the topics that have lost records
    now (a topic with none has no new loss, so its history is not needed)."""
    at = epoch_s(now)
    found: list[Finding] = []
    for name, state, reason in topics:
        if (stuck := stuck_finding(cluster, name, state, reason)) is not None:
            found.append(stuck)
        records = history.get(name, ())
        if (lost := lost_records_finding(cluster, name, _recent(records, at, _lost))) is not None:
            found.append(lost)
        if (letters := dead_letters_finding(cluster, name, _recent(records, at, _dead_letters))) is not None:
            found.append(letters)
    return found, Scope.of(MONITOR_KINDS)


def _recent(records: Sequence[LagRecord], at: float, value: Callable[[LagRecord], int]) -> list[tuple[float, int]]:
    """(time, value) of the records within `LOST_WINDOW_S` up to ``at``, oldest first: read from the
    newest back, so only the window's records are looked at (a topic keeps about 120)."""
    out: list[tuple[float, int]] = []
    for i in range(len(records) - 1, -1, -1):
        r = records[i]
        if r.at < at - LOST_WINDOW_S:
            break
        if r.at <= at:
            out.append((r.at, value(r)))
    return out[::-1]


def _lost(r: LagRecord) -> int:
    return r.lost


def _dead_letters(r: LagRecord) -> int:
    return r.dead_letters


def evaluator_findings(
    cluster: str,
    outcomes: Iterable[Any],
    *,
    topics: Iterable[TopicRow],
    settings: Settings,
    overrides: Iterable[OverrideRow],
    active_keys: Iterable[str],
    now: datetime,
) -> tuple[list[Finding], Scope]:
    """The evaluator's findings and scope.

    ``outcomes`` are the evaluation's (`lagsched.workflows.scaling.Outcome`); only topics with a
    decision were looked at for ``lag_at_max_workers``. ``active_keys``: the keys already sent (the
    rule keeps a weak fit's state). ``overrides``: the cluster's active overrides.
    """
    rows = {t.name: t for t in topics}
    active = set(active_keys)
    found: list[Finding] = []
    looked: list[str] = []
    for o in outcomes:
        d, row = o.decision, rows.get(o.topic)
        if d is None or row is None:
            continue
        looked.append(o.topic)
        cfg = effective_config(settings, row)
        ceiling = cfg.ceiling(row.partition_count)
        probe = Finding("lag_at_max_workers", cluster, o.topic, "")
        if d.changed or d.rule in _NOT_AT_MAX_RULES:
            continue
        if is_lag_at_max_workers(
            linker_workers=d.linker_workers,
            ceiling=ceiling,
            lag=d.lag,
            max_lag=cfg.max_lag,
            slope=d.slope,
            fit_r2=d.fit_r2,
            min_fit_r2=cfg.min_fit_r2,
            was_active=probe.key in active,
        ):
            detail = lag_at_max_detail(
                linker_workers=d.linker_workers, lag=d.lag, max_lag=cfg.max_lag, slope=d.slope,
                max_workers=cfg.max_workers, partitions=row.partition_count,
            )  # fmt: skip
            found.append(Finding("lag_at_max_workers", cluster, o.topic, detail))
    # A topic no longer in the registry (deleted, disabled) is looked at too: what was sent about it clears.
    gone = {k.split(":")[1] for k in active if k.startswith("lag_at_max_workers:")} - set(rows)
    looked.extend(sorted(gone))
    for ov in overrides:
        f = override_expiring_finding(
            cluster, ov.topic, override_id=ov.id, linker_workers=ov.linker_workers, expires_at=ov.expires_at,
            created_by=ov.created_by, reason=ov.reason, now=now,
        )  # fmt: skip
        if f is not None:
            found.append(f)
    return found, Scope.of(EVALUATOR_KINDS, {"lag_at_max_workers": looked})
