"""`lagsched.workflows.notifications.notify` over an in-memory record: send then remember, per notifier.

The same rules run against real Redis and a real HTTP receiver in tests/integration/test_notifications.py.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from airflow.sdk import BaseNotifier

from lagsched.airflow.notifications import NotificationFailed, sender
from lagsched.core.findings import MONITOR_KINDS, Finding, Notice, Scope
from lagsched.core.notifiers import NotifierEntry, parse_notifiers
from lagsched.workflows.notifications import notify

pytestmark = pytest.mark.unit

STALLED = Finding("stalled", "eu", "orders", "no commit")
LOST = Finding("lost_records", "eu", "clicks", "4 lost")
AT_MAX = Finding("lag_at_max_workers", "eu", "orders", "rising")
SCOPE = Scope.of(MONITOR_KINDS)


class MemoryStore:
    """`NotifiedStore`'s three calls over a dict."""

    def __init__(self) -> None:
        self.told: dict[str, dict[str, Finding]] = {}

    def load(self) -> dict[str, dict[str, Finding]]:
        return {n: dict(t) for n, t in self.told.items()}

    def remember(self, notifier: str, finding: Finding) -> None:
        self.told.setdefault(notifier, {})[finding.key] = finding

    def forget(self, notifier: str, key: str) -> None:
        self.told.get(notifier, {}).pop(key, None)
        if notifier in self.told and not self.told[notifier]:
            del self.told[notifier]


class Outbox:
    """A `Send` that records what it sent and refuses what it is told to."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.refuse: set[str] = set()

    def __call__(self, entry: NotifierEntry, notice: Notice) -> None:
        if entry.label in self.refuse:
            raise ConnectionError(f"{entry.label} is down")
        self.sent.append((entry.label, notice.event, notice.finding.key))

    def take(self) -> list[tuple[str, str, str]]:
        out, self.sent = self.sent, []
        return out


def entries(text: str) -> tuple[NotifierEntry, ...]:
    return parse_notifiers(text)


TWO = entries('[{"name": "chat", "notifier": "a.Chat"}, {"name": "mail", "notifier": "a.Mail", "kinds": ["stopped"]}]')


def run(store: Any, outbox: Outbox, findings: list[Finding], notifiers: tuple[NotifierEntry, ...] = TWO) -> Any:
    return notify(store, findings, SCOPE, notifiers, outbox)


def test_once_when_new_once_when_cleared_and_only_the_kinds_a_notifier_receives() -> None:
    store, outbox = MemoryStore(), Outbox()
    report = run(store, outbox, [STALLED])
    assert outbox.take() == [("chat", "new", "stalled:orders")]  # mail receives only "stopped"
    assert (len(report.sent), report.active) == (1, 1)
    for _ in range(5):
        run(store, outbox, [STALLED])
    assert outbox.take() == []
    run(store, outbox, [])
    assert outbox.take() == [("chat", "cleared", "stalled:orders")]
    run(store, outbox, [])
    assert outbox.take() == [] and store.told == {}


def test_a_refused_send_is_sent_again_next_run_without_repeating_it_to_the_others() -> None:
    store, outbox = MemoryStore(), Outbox()
    both = entries('[{"name": "chat", "notifier": "a.Chat"}, {"name": "pager", "notifier": "a.Pager"}]')
    outbox.refuse = {"pager"}
    report = run(store, outbox, [LOST], both)
    assert outbox.take() == [("chat", "new", "lost_records:clicks")]
    assert [(f["notifier"], f["error"]) for f in report.failed] == [("pager", "ConnectionError: pager is down")]
    outbox.refuse = set()
    run(store, outbox, [LOST], both)
    assert outbox.take() == [("pager", "new", "lost_records:clicks")]
    outbox.refuse = {"chat"}  # a cleared message that fails is sent again too
    run(store, outbox, [], both)
    assert outbox.take() == [("pager", "cleared", "lost_records:clicks")]
    outbox.refuse = set()
    run(store, outbox, [], both)
    assert outbox.take() == [("chat", "cleared", "lost_records:clicks")]


def test_another_task_s_findings_and_removed_notifiers() -> None:
    store, outbox = MemoryStore(), Outbox()
    store.remember("chat", AT_MAX)  # the evaluator's: the monitor leaves it alone
    store.remember("gone", STALLED)  # a notifier no longer configured: dropped without a message
    run(store, outbox, [])
    assert outbox.take() == []
    assert store.told == {"chat": {AT_MAX.key: AT_MAX}}


def test_what_is_left_when_the_run_s_time_is_used_up_is_sent_next_run() -> None:
    store, outbox = MemoryStore(), Outbox()
    calls = iter([False, True])
    report = notify(store, [STALLED, LOST], SCOPE, TWO, outbox, out_of_time=lambda: next(calls, True))
    assert outbox.take() == [("chat", "new", "lost_records:clicks")]
    assert [(f["key"], f["error"].split(":")[0]) for f in report.failed] == [("stalled:orders", "not sent")]
    run(store, outbox, [STALLED, LOST])
    assert outbox.take() == [("chat", "new", "stalled:orders")]


# -- the Airflow glue: a real BaseNotifier subclass, named by its import path -----------------------

RENDERED: list[str] = []
RELEASE = threading.Event()


class Recording(BaseNotifier):
    template_fields = ("text",)

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.text = text

    def notify(self, context: Any) -> None:
        RENDERED.append(self.text)


class Hanging(BaseNotifier):
    def notify(self, context: Any) -> None:
        RELEASE.wait(10)


def test_the_sender_renders_the_finding_and_gives_up_on_a_notifier_that_hangs() -> None:
    recording, hanging = entries(
        '[{"notifier": "test_notify_delivery.Recording", "kwargs": {"text": "{{ finding.summary }} ({{ x }})"}},'
        ' {"notifier": "test_notify_delivery.Hanging"}]'
    )
    allowed = {"test_notify_delivery.Recording", "test_notify_delivery.Hanging"}
    send = sender({"x": "from the task"}, timeout_s=0.2, allowed=allowed)
    send(recording, Notice("cleared", STALLED))
    assert RENDERED == ["lagsched eu/orders: pipeline stalled cleared (from the task)"]
    started = time.monotonic()
    try:
        with pytest.raises(NotificationFailed, match=r"TimeoutError: no answer within 0.2 s"):
            send(hanging, Notice("new", STALLED))
    finally:
        RELEASE.set()
    assert time.monotonic() - started < 5
