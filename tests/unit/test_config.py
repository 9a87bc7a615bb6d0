"""Settings Variable validation: defaults, per-topic overrides, and errors that name field and value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lagsched.core.config import Settings, TopicPolicyConfig, parse_settings
from lagsched.core.errors import ConfigError


def test_empty_object_gives_documented_defaults() -> None:
    s = parse_settings("{}")
    d = s.for_topic("anything")
    assert d == TopicPolicyConfig()
    assert (d.policy, d.min_lag, d.max_lag, d.window, d.min_samples, d.evaluate_every) == (
        "hevo",
        10_000,
        100_000,
        15,
        5,
        3,
    )
    assert (d.cooldown_s, d.scale_up_cooldown_s, d.hysteresis, d.min_workers, d.max_workers) == (
        300.0,
        180.0,
        0.1,
        1,
        32,
    )
    assert (d.drain_target_s, d.no_offset_policy) == (900.0, "earliest")
    assert d.lag_threshold == 12_500  # keda: the backlog one worker (50k/h) drains in drain_target_s (900)
    assert (s.measure_every_s, s.sample_window, s.sample_ttl_s) == (60.0, 120, 7200.0)


def test_overrides_merge_over_defaults() -> None:
    s = parse_settings(
        {
            "defaults": {"max_workers": 8, "cooldown_s": 120},
            "topics": {"orders": {"policy": "capacity", "max_workers": 4}, "clicks": {"keda_lag_threshold": 500}},
        }
    )
    orders = s.for_topic("orders")
    assert (orders.policy, orders.max_workers, orders.cooldown_s) == ("capacity", 4, 120.0)
    assert s.for_topic("clicks").lag_threshold == 500
    assert s.for_topic("unlisted") == s.defaults
    assert s.for_topic("unlisted").max_workers == 8


def test_accepts_bytes_and_mappings_alike() -> None:
    raw = {"topics": {"t": {"min_workers": 2}}}
    assert parse_settings(json.dumps(raw).encode()) == parse_settings(raw) == parse_settings(json.dumps(raw))


# (name, raw settings, field path named, value named, words about what is allowed)
BAD_CASES: list[tuple[str, Any, str, str, str]] = [
    ("unknown policy", {"defaults": {"policy": "magic"}}, "defaults.policy", "'magic'", "'hevo', 'keda' or 'capacity'"),
    ("negative cooldown", {"defaults": {"cooldown_s": -5}}, "defaults.cooldown_s", "-5", "greater than or equal to 0"),
    (
        "min above max workers",
        {"defaults": {"min_workers": 5, "max_workers": 2}},
        "defaults.max_workers",
        "2",
        ">= min_workers (5)",
    ),
    (
        "min lag not below max lag",
        {"defaults": {"min_lag": 500, "max_lag": 500}},
        "defaults.max_lag",
        "500",
        "greater than min_lag (500)",
    ),
    ("hysteresis of 1", {"defaults": {"hysteresis": 1.0}}, "defaults.hysteresis", "1.0", "less than 1"),
    ("window too small", {"defaults": {"window": 2}}, "defaults.window", "2", "greater than or equal to 3"),
    (
        "min_samples above window",
        {"defaults": {"window": 4, "min_samples": 6}},
        "defaults.min_samples",
        "6",
        "<= window (4)",
    ),
    (
        "bad no-offset policy",
        {"defaults": {"no_offset_policy": "middle"}},
        "defaults.no_offset_policy",
        "'middle'",
        "'earliest' or 'latest'",
    ),
    ("not a number", {"defaults": {"max_lag": "lots"}}, "defaults.max_lag", "'lots'", "valid integer"),
    ("misspelt field", {"defaults": {"max_lags": 5}}, "defaults.max_lags", "5", "unknown field"),
    ("misspelt top-level field", {"topic": {}}, "topic", "{}", "unknown field"),
    (
        "bad override",
        {"topics": {"orders": {"drain_target_s": 0}}},
        "topics.orders.drain_target_s",
        "0",
        "greater than 0",
    ),
    (
        "override conflicts with defaults",
        {"topics": {"orders": {"min_workers": 40}}},
        "topics.orders.max_workers",
        "32",
        ">= min_workers (40)",
    ),
    (
        "unknown field in override",
        {"topics": {"orders": {"polcy": "keda"}}},
        "topics.orders.polcy",
        "'keda'",
        "unknown field",
    ),
    ("override not an object", {"topics": {"orders": 3}}, "topics.orders", "3", "valid dictionary"),
    ("empty topic name", {"topics": {" ": {}}}, "topics", "", "non-empty"),
    ("window beyond the sample window", {"sample_window": 10}, "defaults.window", "15", "<= sample_window (10)"),
    (
        "keda threshold zero",
        {"defaults": {"keda_lag_threshold": 0}},
        "defaults.keda_lag_threshold",
        "0",
        "greater than or equal to 1",
    ),
    ("not JSON", "{policy: hevo}", "(root)", "", "JSON object"),
    ("JSON but not an object", "[1, 2]", "(root)", "", "JSON object"),
]


@pytest.mark.parametrize(
    ("raw", "field", "value", "allowed"), [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES]
)
def test_bad_value_names_field_value_and_what_is_allowed(raw: Any, field: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw if isinstance(raw, str) else json.dumps(raw))
    err = caught.value
    message = str(err)
    assert err.field == field
    assert field in message
    assert value in message
    assert allowed in message


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings({"defaults": {"policy": "x", "cooldown_s": -1}, "topics": {"a": {"max_lag": -3}}})
    message = str(caught.value)
    assert "defaults.policy" in message
    assert "defaults.cooldown_s" in message


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"defaults\.policy"):
        parse_settings({"defaults": {"policy": "x"}})


def test_models_are_frozen() -> None:
    s = parse_settings({})
    with pytest.raises(Exception, match="frozen"):
        setattr(s.defaults, "max_lag", 3)


def test_for_topic_on_an_unchecked_settings_raises_config_error() -> None:
    # Built directly, bypassing parse_settings: the merge is still validated.
    s = Settings(topics={"t": {"min_workers": 99}})
    with pytest.raises(ConfigError, match=r"topics\.t\.max_workers"):
        s.for_topic("t")


@pytest.mark.parametrize("doc_path", ["docs/configuration.md", "README.md"])
def test_every_field_is_documented(doc_path: str) -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / doc_path).read_text(encoding="utf-8")
    for name in [*Settings.model_fields, *TopicPolicyConfig.model_fields]:
        assert f"| `{name}` |" in doc, name
