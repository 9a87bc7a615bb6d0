"""The Variable ``lagsched_notifiers``: what it accepts, and one error naming each bad entry for hostile input."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lagsched.airflow.notifications import allowed_notifiers, load_notifiers, notifiers_or_error, sender
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
def test_classes_are_checked_where_airflow_is(
    notifier: str, kwargs: dict[str, Any], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST", f"providers,{notifier}")
    raw = json.dumps([{"notifier": notifier, "kwargs": kwargs}])
    with pytest.raises(ConfigError) as info:
        load_notifiers(raw)
    assert message in str(info.value)


def test_the_allowlist_defaults_to_the_installed_providers_notifiers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST", raising=False)
    assert {HTTP, SMTP} <= allowed_notifiers()
    assert [e.notifier for e in load_notifiers(json.dumps([entry()]))] == [HTTP]
    monkeypatch.setenv("AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST", "my_pkg.pager.PagerNotifier")
    assert allowed_notifiers() == {"my_pkg.pager.PagerNotifier"}  # the providers' only when listed
    with pytest.raises(
        ConfigError, match=r"\[0\]\.notifier = '.*HttpNotifier': is not in \[lagsched\] notifier_allowlist"
    ):
        load_notifiers(json.dumps([entry()]))
    monkeypatch.setenv("AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST", "providers, rm -rf /")
    with pytest.raises(ConfigError, match=r"\[lagsched\] notifier_allowlist = .*'rm -rf /'"):
        allowed_notifiers()


def test_a_module_outside_the_allowlist_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "lagsched_untrusted_probe.py").write_text(
        "print('UNTRUSTED MODULE RAN')\nopen(__file__ + '.ran', 'w').close()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST", raising=False)
    raw = json.dumps([{"notifier": "lagsched_untrusted_probe.Notifier"}])
    entries, error = notifiers_or_error(raw)
    assert entries == ()
    assert "[0].notifier = 'lagsched_untrusted_probe.Notifier': is not in [lagsched] notifier_allowlist" in error
    send = sender(allowed=allowed_notifiers())  # the sender checks too, before its import
    with pytest.raises(ConfigError, match="notifier_allowlist"):
        send(parse_notifiers(raw)[0], None)  # type: ignore[arg-type]
    assert "lagsched_untrusted_probe" not in sys.modules
    assert not (tmp_path / "lagsched_untrusted_probe.py.ran").exists()
    assert "UNTRUSTED MODULE RAN" not in capsys.readouterr().out
    # The proof that the probe would have run: listed, it is imported (and then refused: no notifier).
    monkeypatch.setenv("AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST", "lagsched_untrusted_probe.Notifier")
    with pytest.raises(ConfigError, match="cannot be imported"):
        load_notifiers(raw)
    assert (tmp_path / "lagsched_untrusted_probe.py.ran").exists()
    sys.modules.pop("lagsched_untrusted_probe", None)


def test_every_bad_entry_is_named_at_once_and_a_bad_variable_only_stops_the_notifications(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST", "providers,json.JSONDecoder,no_such_pkg.N")
    raw = json.dumps([entry(), {"notifier": "json.JSONDecoder"}, {"notifier": "no_such_pkg.N"}])
    entries, error = notifiers_or_error(raw)
    assert entries == ()
    assert "[1].notifier = 'json.JSONDecoder'" in error
    assert "[2].notifier = 'no_such_pkg.N'" in error
