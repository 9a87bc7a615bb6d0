"""Retention settings (the Variable lagsched_retention): defaults, validation and cutoffs. Pure rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lagsched.core.errors import ConfigError
from lagsched.core.retention import DAY_S, RetentionSettings, parse_retention

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("raw", [None, "", "  ", b"", {}, "{}"])
def test_absent_or_empty_means_the_defaults(raw: object) -> None:
    s = parse_retention(raw)  # type: ignore[arg-type]
    assert s == RetentionSettings()
    assert (s.decisions_days, s.gaps_days, s.overrides_days, s.batch_rows) == (30, 30, 30, 5000)


def test_fields_are_read_and_kept() -> None:
    s = parse_retention('{"decisions_days": 7, "gaps_days": 90.5, "batch_rows": 100}')
    assert (s.decisions_days, s.gaps_days, s.overrides_days, s.batch_rows) == (7.0, 90.5, 30.0, 100)
    assert parse_retention(s.as_dict()) == s  # the XCom form reads back


def test_cutoffs_are_per_table() -> None:
    s = RetentionSettings(decisions_days=1, gaps_days=2, overrides_days=3)

    def at(t: float) -> datetime:
        return datetime.fromtimestamp(t, tz=UTC)

    assert s.cutoffs(now=at(10 * DAY_S)) == {
        "scaling_decisions": at(9 * DAY_S),
        "retention_gaps": at(8 * DAY_S),
        "scaling_overrides": at(7 * DAY_S),
    }


@pytest.mark.parametrize(
    ("raw", "field", "allowed"),
    [
        ({"decisions_days": 0}, "decisions_days", "a finite number of days from 1 to 3,650"),
        ({"gaps_days": -5}, "gaps_days", "a finite number of days from 1 to 3,650"),
        ({"overrides_days": 4000}, "overrides_days", "a finite number of days from 1 to 3,650"),
        ({"overrides_days": "30"}, "overrides_days", "a finite number of days from 1 to 3,650"),
        ({"decisions_days": True}, "decisions_days", "a finite number of days from 1 to 3,650"),
        ({"batch_rows": 50}, "batch_rows", "an integer number of rows from 100 to 100,000"),
        ({"batch_rows": 500.5}, "batch_rows", "an integer number of rows from 100 to 100,000"),
        ({"decision_days": 30}, "decision_days", "unknown field; remove it or fix its spelling"),
    ],
)
def test_a_bad_field_is_named_with_its_value_and_what_is_allowed(
    raw: dict[str, object], field: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_retention(raw)
    err = caught.value
    assert err.field == field and err.value == raw[field] and allowed in err.allowed
    assert str(err).startswith(f"invalid lagsched_retention: {field} = {raw[field]!r}: ")
    assert allowed in str(err)


def test_every_problem_is_listed_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_retention('{"gaps_days": 0, "batch_rows": 1}')
    assert "gaps_days = 0" in str(caught.value) and "batch_rows = 1" in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [("{not json", "not valid JSON"), ("[30]", r"\(root\) = \[30\]: expected a JSON object, got list")],
)
def test_malformed_json_is_named(raw: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_retention(raw)


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="decisions_days: duplicate key"):
        parse_retention('{"decisions_days": 30, "decisions_days": 1}')
