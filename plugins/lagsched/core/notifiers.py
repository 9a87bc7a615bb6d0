"""The Variable ``lagsched_notifiers``: who is told about findings (`lagsched.core.findings`). Pure.

A JSON list; each entry names an Airflow notifier class by import path, the keyword arguments it is
built with (they carry its Connection id: ``http_conn_id``, ``smtp_conn_id``, ``slack_conn_id``...),
and optionally which finding kinds it receives and a name::

    [
      {"notifier": "airflow.providers.http.notifications.HttpNotifier",
       "kwargs": {"http_conn_id": "lagsched_webhook", "endpoint": "/hooks/lagsched",
                  "json": {"text": "{{ finding.summary }}: {{ finding.detail }}"}}},
      {"name": "oncall-mail", "kinds": ["stopped", "lost_records"],
       "notifier": "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
       "kwargs": {"smtp_conn_id": "lagsched_smtp", "to": "oncall@example.com",
                  "subject": "{{ finding.summary }}", "html_content": "{{ finding.detail }}"}}
    ]

Blank or unset: no notifications. Checked here: the shape (a list of objects with those fields and
no other), an import path that looks like one, kwargs an object, kinds known and not repeated, and
names unique (the name defaults to the class's own name, so two entries of one class need names:
the name keys what was sent to whom, see docs/notifications.md). Whether the path imports and names
a ``BaseNotifier`` subclass that takes those kwargs is checked where Airflow is at hand
(`lagsched.airflow.notifications.load_notifiers`), after the path was found in the operator's
allow-list (`ALLOWLIST_OPTION`, `parse_allowlist`): a path outside it is never imported. A bad
Variable raises one `ConfigError` naming each bad entry by its index.

Example:
    >>> (entry,) = parse_notifiers('[{"notifier": "my.pkg.PagerNotifier", "kinds": ["stopped"]}]')
    >>> entry.label, sorted(entry.receives)
    ('PagerNotifier', ['stopped'])
    >>> parse_notifiers("  ")
    ()
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import Field, field_validator

from lagsched.core.errors import ConfigError
from lagsched.core.findings import KINDS, FindingKind
from lagsched.core.variable_json import short_repr
from lagsched.core.variables import VariableModel, decode, joined, validate

__all__ = [
    "ALLOWLIST_OPTION",
    "NOTIFIERS_LABEL",
    "NOTIFIERS_VARIABLE",
    "PROVIDERS",
    "NotifierEntry",
    "RawNotifiers",
    "parse_allowlist",
    "parse_notifiers",
]

NOTIFIERS_VARIABLE = "lagsched_notifiers"
NOTIFIERS_LABEL = "lagsched_notifiers"
MAX_NOTIFIERS = 50
#: The option of Airflow's configuration that lists the notifier classes a Variable may name
#: (``AIRFLOW__LAGSCHED__NOTIFIER_ALLOWLIST``): anyone who may edit Variables names the class, so
#: only an operator's list decides what may be imported.
ALLOWLIST_OPTION = "[lagsched] notifier_allowlist"
#: The entry of the allow-list that stands for the notifier classes of the installed Airflow
#: providers (the default when the option is unset).
PROVIDERS = "providers"

#: The Variable as Airflow hands it over: JSON text, or already decoded; None when unset.
RawNotifiers = str | bytes | Mapping[str, Any] | list[Any] | None

_IMPORT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_KWARG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class NotifierEntry(VariableModel):
    """One entry of ``lagsched_notifiers``."""

    notifier: str = Field(description="Import path of a subclass of Airflow's BaseNotifier.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments the notifier is built with, its Connection id among them; string values "
        "of its template fields are Jinja templates with the finding as `finding`.",
    )
    kinds: tuple[FindingKind, ...] | None = Field(
        default=None, strict=False, description="Finding kinds it receives; absent: every kind."
    )
    name: str | None = Field(
        default=None,
        description="Distinct name (letters, digits, . _ -; up to 64); absent: the class's name. It keys "
        "what was sent to this notifier.",
    )

    @field_validator("notifier")
    @classmethod
    def _import_path(cls, v: str) -> str:
        if not _IMPORT_PATH.match(v):
            raise ValueError("must be the import path of a notifier class, like package.module.ClassName")
        return v

    @field_validator("kwargs")
    @classmethod
    def _keyword_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in v if not _KWARG.match(k)]
        if bad:
            raise ValueError(f"keyword argument names must be Python identifiers, got {', '.join(map(repr, bad))}")
        return v

    @field_validator("kinds")
    @classmethod
    def _known_once(cls, v: tuple[FindingKind, ...] | None) -> tuple[FindingKind, ...] | None:
        if v is not None:
            if not v:
                raise ValueError(f"must list at least one kind of {', '.join(KINDS)} (or be left out: every kind)")
            if len(set(v)) != len(v):
                raise ValueError("lists a kind twice")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.match(v):
            raise ValueError("must be 1 to 64 letters, digits, '.', '_' or '-'")
        return v

    @property
    def class_name(self) -> str:
        return self.notifier.rsplit(".", 1)[-1]

    @property
    def label(self) -> str:
        """The name sent findings are remembered under: ``name``, else the class's name."""
        return self.name or self.class_name

    @property
    def receives(self) -> frozenset[FindingKind]:
        return frozenset(KINDS if self.kinds is None else self.kinds)


def parse_allowlist(text: str | None, providers: Callable[[], Iterable[str]]) -> frozenset[str]:
    """`ALLOWLIST_OPTION`: comma-separated import paths of notifier classes; `PROVIDERS` stands for
    the notifiers the installed Airflow providers declare (``providers()``, asked only then); unset
    or blank: `PROVIDERS`.

    >>> sorted(parse_allowlist("providers, my.pkg.Pager", lambda: ["airflow.providers.x.XNotifier"]))
    ['airflow.providers.x.XNotifier', 'my.pkg.Pager']

    Raises:
        ConfigError: an entry is neither `PROVIDERS` nor an import path.
    """
    names = [n.strip() for n in (text or "").split(",") if n.strip()] or [PROVIDERS]
    bad = [n for n in names if n != PROVIDERS and not _IMPORT_PATH.match(n)]
    if bad:
        allowed = f"import paths of notifier classes (package.module.Class) or {PROVIDERS!r}, comma-separated"
        raise ConfigError(
            f"{ALLOWLIST_OPTION} = {text!r}: {', '.join(map(repr, bad))}: expected {allowed}",
            field=ALLOWLIST_OPTION,
            value=text,
            allowed=allowed,
        )
    found = {n for n in names if n != PROVIDERS}
    if PROVIDERS in names:
        found.update(providers())
    return frozenset(found)


def parse_notifiers(raw: RawNotifiers) -> tuple[NotifierEntry, ...]:
    """The entries of ``lagsched_notifiers``; none when it is unset or blank.

    Raises:
        ConfigError: naming each bad entry as ``[index].field = value: what is allowed``.
    """
    data = raw if isinstance(raw, list) else decode(raw, NOTIFIERS_LABEL)
    if data is None:
        return ()
    if not isinstance(data, list):
        allowed = "a JSON list of notifier entries (see docs/notifications.md)"
        raise ConfigError(
            f"invalid {NOTIFIERS_LABEL}: (root) = {short_repr(data)}: expected {allowed}, got {type(data).__name__}",
            field="(root)",
            value=data,
            allowed=allowed,
        )
    errors: list[ConfigError] = []
    if len(data) > MAX_NOTIFIERS:
        errors.append(_error("(root)", f"{len(data)} entries", f"at most {MAX_NOTIFIERS} notifiers"))
    entries: list[NotifierEntry] = []
    for i, item in enumerate(data):
        if not isinstance(item, Mapping):
            errors.append(_error(f"[{i}]", short_repr(item), "expected a JSON object with notifier and kwargs"))
            continue
        try:
            entries.append(validate(NotifierEntry, item, NOTIFIERS_LABEL, prefix=(f"[{i}]",)))
        except ConfigError as exc:
            errors.append(exc)
    if not errors:
        seen: dict[str, int] = {}
        for i, entry in enumerate(entries):
            if entry.label in seen:
                errors.append(
                    _error(
                        f"[{i}].name",
                        repr(entry.label),
                        f"the same name as entry [{seen[entry.label]}]: give each notifier a distinct name",
                    )
                )
            seen.setdefault(entry.label, i)
    if errors:
        raise joined(errors, NOTIFIERS_LABEL)
    return tuple(entries)


def _error(field: str, shown: str, allowed: str) -> ConfigError:
    return ConfigError(f"invalid {NOTIFIERS_LABEL}: {field} = {shown}: {allowed}", field=field, value=shown,
                       allowed=allowed)  # fmt: skip
