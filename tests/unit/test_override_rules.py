"""What an override request may hold (lagsched.core.overrides): durations and bounds, fields named."""

from __future__ import annotations

import pytest

from lagsched.core.errors import ConfigError
from lagsched.core.overrides import MAX_OVERRIDE_S, format_duration, parse_duration, validate_override


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2h", 7200),
        ("90m", 5400),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("1d", 86_400),
        ("45s", 45),
        ("7d", MAX_OVERRIDE_S),
    ],
)
def test_durations_with_units(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("90", "a duration with units"),  # minutes or seconds? refused rather than guessed
        ("2 hours", "a duration with units"),
        ("", "a duration with units"),
        ("-1h", "a duration with units"),
        ("0m", "more than 0"),
        ("8d", "at most 7d"),
        ("167h61m", "at most 7d"),
    ],
)
def test_bad_durations_name_the_field(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_duration(text)
    assert caught.value.field == "duration"
    assert words in str(caught.value)


GOOD = {
    "topic": "orders",
    "linker_workers": 8,
    "partitions": 12,
    "duration_s": 3600.0,
    "reason": "sale",
    "created_by": "ana",
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"linker_workers": 0}, "linker_workers"),
        ({"linker_workers": 13}, "linker_workers"),
        ({"linker_workers": True}, "linker_workers"),
        ({"duration_s": 0.0}, "duration"),
        ({"duration_s": MAX_OVERRIDE_S + 1}, "duration"),
        ({"reason": " "}, "reason"),
        ({"reason": "x" * 501}, "reason"),
        ({"created_by": ""}, "created_by"),
    ],
)
def test_validate_override_names_the_bad_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_override(**(GOOD | change))  # type: ignore[arg-type]
    assert caught.value.field == field
    assert str(caught.value).startswith(f"invalid override: {field} = ")


def test_a_good_request_passes_at_its_bounds() -> None:
    validate_override(**(GOOD | {"linker_workers": 12, "duration_s": MAX_OVERRIDE_S}))  # type: ignore[arg-type]
    validate_override(**(GOOD | {"linker_workers": 1, "duration_s": 1.0}))  # type: ignore[arg-type]
