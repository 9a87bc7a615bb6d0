"""Airflow notifiers for lagsched's findings: the glue between ``lagsched_notifiers`` and `notify`.

`load_notifiers` checks what `lagsched.core.notifiers.parse_notifiers` cannot without Airflow: each
entry's class is in ``[lagsched] notifier_allowlist`` of Airflow's configuration (checked before
anything is imported; default: the notifiers of the installed providers), imports, is a subclass of
Airflow's ``BaseNotifier``, and can be built with its kwargs. `sender` sends a notice the way
Airflow calls a notifier (``notifier(context)``: its template fields rendered with Jinja, then
``notify``), each time with a fresh instance (rendering changes it), and a context that is the
running task's plus ``finding`` (`Notice.as_dict`: ``summary``,
``detail``, ``kind``, ``event`` (new or cleared), ``cluster``, ``topic``, ``runbook``...).

`notify_after_measurement` and `notify_after_evaluation` are what the lag monitor's and the
evaluator's task bodies call once their own work is done. They never raise: a notification can
neither fail nor retry a measurement or an evaluation. What went wrong is a warning in the task log
and in the ``notifications`` entry of the task's summary.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lagsched.core.errors import ConfigError
from lagsched.core.findings import Notice
from lagsched.core.notifiers import (
    ALLOWLIST_OPTION,
    NOTIFIERS_LABEL,
    NotifierEntry,
    RawNotifiers,
    parse_allowlist,
    parse_notifiers,
)
from lagsched.workflows.notifications import first_line

if TYPE_CHECKING:
    from lagsched.adapters.lag_store import LagStore
    from lagsched.core.config import Settings
    from lagsched.workflows.lag_monitor import MeasureSummary
    from lagsched.workflows.notifications import NotifyReport, Send
    from lagsched.workflows.scaling import EvaluationSummary

__all__ = [
    "NotificationFailed",
    "allowed_notifiers",
    "load_notifiers",
    "notifiers_or_error",
    "notify_after_evaluation",
    "notify_after_measurement",
    "sender",
]

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 10.0
"""A notifier that has not returned after this long has failed (it may still deliver: then the next
run's retry is a repeat). Providers' notifiers often have no timeout of their own."""
BUDGET_S = 15.0
"""A run sends no more notifications after this long (the lag monitor's task has 50 s in all); what
is left is sent by the next run."""


class NotificationFailed(Exception):
    """A notifier raised; the message is the original's type and text with known secrets masked."""


def allowed_notifiers() -> frozenset[str]:
    """``[lagsched] notifier_allowlist`` of Airflow's configuration (`parse_allowlist`)."""
    from airflow.configuration import conf

    def providers() -> list[str]:
        from airflow.providers_manager import ProvidersManager

        # The class paths the installed providers declare (provider.yaml's "notifications").
        return [str(path) for path in ProvidersManager().notification]  # type: ignore[no-untyped-call]

    return parse_allowlist(conf.get("lagsched", "notifier_allowlist", fallback=""), providers)


def notifier_class(entry: NotifierEntry, index: int | None = None, *, allowed: Collection[str]) -> type[Any]:
    """The ``BaseNotifier`` subclass ``entry`` names, if ``allowed`` (`allowed_notifiers`) lists it.

    Raises:
        ConfigError: it is not allowed (then nothing was imported), does not import, or is not such
            a class (naming the entry).
    """
    where = f"[{index}].notifier" if index is not None else f"{entry.label}.notifier"
    if entry.notifier not in allowed:
        raise _entry_error(
            where, entry.notifier,
            f"is not in {ALLOWLIST_OPTION} of Airflow's configuration (AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST; "
            f"allowed: {', '.join(sorted(allowed)) or 'none'}): an operator adds it there (docs/notifications.md)",
        )  # fmt: skip
    from airflow.sdk import BaseNotifier

    module_name, _, class_name = entry.notifier.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise _entry_error(where, entry.notifier, f"cannot be imported ({type(exc).__name__}: {exc}); is its "
                           "provider installed?") from None  # fmt: skip
    if not (isinstance(found, type) and issubclass(found, BaseNotifier)):
        raise _entry_error(where, entry.notifier, "is not a notifier: must be a subclass of airflow.sdk.BaseNotifier")
    return found


def load_notifiers(raw: RawNotifiers, *, allowed: Collection[str] | None = None) -> tuple[NotifierEntry, ...]:
    """``lagsched_notifiers`` parsed, each class checked against ``allowed`` (default:
    `allowed_notifiers`), imported and built once with its kwargs.

    Building one reads no Connection (notifiers read theirs when they send).

    Raises:
        ConfigError: naming every bad entry by index.
    """
    entries = parse_notifiers(raw)
    if not entries:
        return entries
    allowed = allowed_notifiers() if allowed is None else allowed
    errors: list[ConfigError] = []
    for i, entry in enumerate(entries):
        try:
            cls = notifier_class(entry, i, allowed=allowed)
            cls(**entry.kwargs)
        except ConfigError as exc:
            errors.append(exc)
        except Exception as exc:  # noqa: BLE001 - whatever the class's constructor refuses
            names = ", ".join(sorted(entry.kwargs)) or "none"
            errors.append(
                _entry_error(
                    f"[{i}].kwargs",
                    f"({names})",
                    f"{entry.class_name} refuses them: {type(exc).__name__}: {first_line(exc)}",
                )
            )
    if errors:
        from lagsched.core.variables import joined

        raise joined(errors, NOTIFIERS_LABEL)
    return entries


def notifiers_or_error(raw: RawNotifiers) -> tuple[tuple[NotifierEntry, ...], str]:
    """`load_notifiers`, or none and the error's text (logged as an error): a malformed
    ``lagsched_notifiers`` stops the notifications, never the measurement or the evaluation."""
    try:
        return load_notifiers(raw), ""
    except ConfigError as exc:
        log.error("no notifications sent: %s", exc)
        return (), str(exc)


def sender(
    task_context: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = SEND_TIMEOUT_S,
    allowed: Collection[str] | None = None,
) -> Send:
    """A `Send` that builds the entry's notifier and calls it with the task's context plus ``finding``;
    a call that has not returned within ``timeout_s`` fails (`TimeoutError`). ``allowed``: the
    allow-list (default: `allowed_notifiers`, read at the first send)."""
    classes: dict[str, type[Any]] = {}
    allow: list[Collection[str]] = [] if allowed is None else [allowed]

    def send(entry: NotifierEntry, notice: Notice) -> None:
        if not allow:
            allow.append(allowed_notifiers())
        cls = classes.get(entry.notifier) or classes.setdefault(entry.notifier, notifier_class(entry, allowed=allow[0]))
        context: dict[str, Any] = dict(task_context or {})
        context["finding"] = notice.as_dict()
        try:
            _within(timeout_s, lambda: cls(**entry.kwargs)(context))
        except Exception as exc:  # noqa: BLE001 - any notifier's own error, reported without its traceback
            raise NotificationFailed(_masked(f"{type(exc).__name__}: {first_line(exc)}")) from None

    return send


def _within(timeout_s: float, call: Callable[[], None]) -> None:
    """``call()`` in a daemon thread, waited for ``timeout_s`` at most: a notifier that hangs can
    neither hold the task past its timeout nor keep its process from ending."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)
        else:
            outcome.append(None)

    worker = threading.Thread(target=run, name="lagsched-notifier", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    if outcome[0] is not None:
        raise outcome[0]


def _budget(budget_s: float) -> Callable[[], bool]:
    """True once ``budget_s`` has passed since this call."""
    started = time.monotonic()
    return lambda: time.monotonic() - started > budget_s


def notify_after_measurement(
    summary: MeasureSummary,
    store: LagStore,
    notifiers: Sequence[NotifierEntry],
    *,
    error: str = "",
    context: Mapping[str, Any] | None = None,
    send: Send | None = None,
) -> dict[str, Any]:
    """The lag monitor's notifications (stalled, stopped, lost records); never raises."""
    from lagsched.adapters.notified import NotifiedStore
    from lagsched.workflows.notifications import monitor_findings, notify

    if not notifiers:
        return _skipped(error)
    try:
        history = store.read_lag_records([t.topic for t in summary.topics if t.lost or t.dead_letters])
        found, scope = monitor_findings(
            summary.cluster, ((t.topic, t.state, t.pipeline.reason) for t in summary.topics), history, summary.at
        )
        report = notify(
            NotifiedStore(store.client, summary.cluster), found, scope, notifiers, send or sender(context),
            out_of_time=_budget(BUDGET_S),
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the measurement stands whatever happens here
        return _broken(exc)
    return _reported(report, error)


def notify_after_evaluation(
    summary: EvaluationSummary,
    *,
    mysql: Any,
    redis: Any,
    settings: Settings,
    notifiers: Sequence[NotifierEntry],
    now: datetime,
    error: str = "",
    context: Mapping[str, Any] | None = None,
    send: Send | None = None,
) -> dict[str, Any]:
    """The evaluator's notifications (lag rising at the ceiling, an override expiring); never raises."""
    from lagsched.adapters.notified import NotifiedStore
    from lagsched.adapters.overrides import active_overrides
    from lagsched.adapters.topics import load_topics
    from lagsched.workflows.notifications import evaluator_findings, notify

    if not notifiers:
        return _skipped(error)
    try:
        store = NotifiedStore(redis, summary.cluster)
        sent_keys = {key for told in store.load().values() for key in told}
        found, scope = evaluator_findings(
            summary.cluster,
            summary.outcomes,
            topics=load_topics(mysql, summary.cluster),
            settings=settings,
            overrides=active_overrides(mysql, summary.cluster, now),
            active_keys=sent_keys,
            now=now,
        )
        report = notify(store, found, scope, notifiers, send or sender(context), out_of_time=_budget(BUDGET_S))
    except Exception as exc:  # noqa: BLE001 - the evaluation stands whatever happens here
        return _broken(exc)
    return _reported(report, error)


def _skipped(error: str) -> dict[str, Any]:
    return {"notifiers": 0, "error": error} if error else {"notifiers": 0}


def _broken(exc: BaseException) -> dict[str, Any]:
    text = _masked(f"{type(exc).__name__}: {first_line(exc)}")
    log.warning("notifications not sent this run (the next run tries again): %s", text, exc_info=True)
    return {"error": text}


def _reported(report: NotifyReport, error: str) -> dict[str, Any]:
    out = report.as_dict()
    if report.failed:
        log.warning("%d notification(s) failed; the next run sends them again", len(report.failed))
    if error:
        out["error"] = error
    return out


def _masked(text: str) -> str:
    """``text`` with every secret Airflow's masker knows (the Connections' passwords a task read) hidden."""
    try:
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:  # pragma: no cover - another Airflow layout: the task log masks it anyway
        return text
    return str(redact(text))


def _entry_error(field: str, value: str, allowed: str) -> ConfigError:
    return ConfigError(f"invalid {NOTIFIERS_LABEL}: {field} = {value!r}: {allowed}", field=field, value=value,
                       allowed=allowed)  # fmt: skip
