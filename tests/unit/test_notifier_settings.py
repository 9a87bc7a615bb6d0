"""The Variable ``lagsched_notifiers``: what it accepts, and one error naming each bad entry for hostile input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lagsched.airflow.notifications import load_notifiers, notifiers_or_error
from lagsched.core.errors import ConfigError
from lagsched.core.findings import KINDS
from lagsched.core.notifiers import parse_notifiers

pytestmark = pytest.mark.unit

HTTP = "airflow.providers.http.notifications.HttpNotifier"
SMTP = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"


def entry(**kw: Any) -> dict[str, Any]:
    return {"notifier": HTTP, "kwargs": {"http_conn_id": "lagsched_webhook"}} | kw


def test_unset_or_blank_means_no_notifiers() -> None:
    assert parse_notifiers(None) == ()
    assert parse_notifiers("") == ()
    assert parse_notifiers(" \n") == ()
    assert load_notifiers("[]") == ()


def test_a_webhook_and_a_mail_notifier_are_loaded() -> None:
    raw = json.dumps(
        [
            entry(kwargs={"http_conn_id": "lagsched_webhook", "json": {"text": "{{ finding.summary }}"}}),
            {
                "name": "oncall-mail",
                "kinds": ["stopped", "lost_records"],
                "notifier": SMTP,
                "kwargs": {
                    "smtp_conn_id": "lagsched_smtp",
                    "to": "oncall@example.com",
                    "subject": "{{ finding.summary }}",
                },
            },
        ]
    )
    web, mail = load_notifiers(raw)
    assert (web.label, mail.label) == ("HttpNotifier", "oncall-mail")
    assert web.receives == frozenset(KINDS)  # every kind, dead_letters included
    assert mail.receives == {"stopped", "lost_records"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"notifier": "a.B"}', "(root) = {'notifier': 'a.B'}: expected a JSON list"),
        ("[1]", "[0] = 1: expected a JSON object"),
        ('[{"kwargs": {}}]', "[0].notifier: Field required"),
        ('[{"notifier": "x"}]', "[0].notifier = 'x': must be the import path of a notifier class"),
        ('[{"notifier": "a.B; rm -rf /"}]', "[0].notifier = 'a.B; rm -rf /': must be the import path"),
        ('[{"notifier": "a.B", "kwargs": [1]}]', "[0].kwargs = [1]: Input should be a valid dictionary"),
        ('[{"notifier": "a.B", "kwargs": "x=1"}]', "[0].kwargs = 'x=1': Input should be a valid dictionary"),
        ('[{"notifier": "a.B", "kwargs": {"1x": 1}}]', "keyword argument names must be Python identifiers, got '1x'"),
        ('[{"notifier": "a.B", "kinds": ["bored"]}]', "[0].kinds[0] = 'bored': Input should be 'stalled'"),
        ('[{"notifier": "a.B", "kinds": []}]', "[0].kinds = []: must list at least one kind"),
        ('[{"notifier": "a.B", "kinds": ["stopped", "stopped"]}]', "lists a kind twice"),
        ('[{"notifier": "a.B", "channel": "#ops"}]', "[0].channel = '#ops': unknown field"),
        ('[{"notifier": "a.B", "name": "a b"}]', "[0].name = 'a b': must be 1 to 64 letters"),
        ('[{"notifier": "a.B"}, {"notifier": "c.B"}]', "[1].name = 'B': the same name as entry [0]"),
        ('[{"notifier": "a.B", "notifier": "c.D"}]', "0.notifier: duplicate key"),
        ("[{", "lagsched_notifiers"),
    ],
)
def test_hostile_shapes_are_refused_naming_the_entry(raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_notifiers(raw)
    assert str(info.value).startswith("invalid lagsched_notifiers")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("notifier", "kwargs", "message"),
    [
        ("no_such_pkg.Notifier", {}, "[0].notifier = 'no_such_pkg.Notifier': cannot be imported (ModuleNotFoundError"),
        ("airflow.providers.http.notifications.NoSuchNotifier", {}, "cannot be imported (AttributeError"),
        ("json.JSONDecoder", {}, "is not a notifier: must be a subclass of airflow.sdk.BaseNotifier"),
        ("os.path.join", {}, "is not a notifier"),
        (
            HTTP,
            {"http_conn_id": "x", "no_such_argument": 1},
            "[0].kwargs = '(http_conn_id, no_such_argument)': HttpNotifier refuses them: TypeError",
        ),
        (SMTP, {"smtp_conn_id": "x"}, "SmtpNotifier refuses them: TypeError"),  # `to` is required
    ],
)
def test_classes_are_checked_where_airflow_is(notifier: str, kwargs: dict[str, Any], message: str) -> None:
    raw = json.dumps([{"notifier": notifier, "kwargs": kwargs}])
    with pytest.raises(ConfigError) as info:
        load_notifiers(raw)
    assert message in str(info.value)


def test_every_bad_entry_is_named_at_once_and_a_bad_variable_only_stops_the_notifications() -> None:
    raw = json.dumps([entry(), {"notifier": "json.JSONDecoder"}, {"notifier": "no_such_pkg.N"}])
    entries, error = notifiers_or_error(raw)
    assert entries == ()
    assert "[1].notifier = 'json.JSONDecoder'" in error
    assert "[2].notifier = 'no_such_pkg.N'" in error
