"""Settings Variable validation: defaults, per-topic overrides, and errors that name field and value."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from lagsched.core.config import Settings, TopicPolicyConfig, parse_settings, unknown_topic_overrides
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
        "a finite number from 1 to 2,592,000 (30 days)",
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
    ("blank topic name", {"topics": {" ": {}}}, "topics. ", "' '", "not legal in Kafka"),
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


# Issue 8, section 6: values that used to pass validation and then crashed a run (an OverflowError,
# a Redis error after one topic's change was applied) or silently did nothing sensible.
# (name, raw JSON text, field path named, value named, words about what is allowed)
OUT_OF_RANGE: list[tuple[str, str, str, str, str]] = [
    ("ttl Infinity token", '{"sample_ttl_s": Infinity}', "sample_ttl_s", "inf", "finite number from 1 to 31,536,000"),
    ("ttl overflowing literal", '{"sample_ttl_s": 1e400}', "sample_ttl_s", "inf", "finite number"),
    ("ttl 1e300", '{"sample_ttl_s": 1e300}', "sample_ttl_s", "1e+300", "from 1 to 31,536,000 (365 days)"),
    ("ttl 1e-300", '{"sample_ttl_s": 1e-300}', "sample_ttl_s", "1e-300", "from 1 to 31,536,000"),
    ("measure Infinity", '{"measure_every_s": Infinity}', "measure_every_s", "inf", "from 60 to 86,400 (1 day)"),
    ("measure -Infinity", '{"measure_every_s": -Infinity}', "measure_every_s", "-inf", "from 60 to 86,400"),
    ("measure 1e-9", '{"measure_every_s": 1e-9}', "measure_every_s", "1e-09", "from 60 to 86,400"),
    # The lag monitor runs every minute: a shorter period could not be kept, and the evaluator would
    # take every minute-old history for stale (older than 3 x measure_every_s) and never scale.
    ("measure 30", '{"measure_every_s": 30}', "measure_every_s", "30", "from 60 to 86,400"),
    ("NaN", '{"defaults": {"min_fit_r2": NaN}}', "defaults.min_fit_r2", "nan", "finite number from 0 to 1"),
    ("drain Infinity", '{"defaults": {"drain_target_s": Infinity}}', "defaults.drain_target_s", "inf", "to 2,592,000"),
    (
        "evaluate_every 1e9",
        '{"defaults": {"evaluate_every": 1000000000}}',
        "defaults.evaluate_every",
        "1000000000",
        "an integer from 1 to 10,000",
    ),
    (
        "min_workers 2**63",
        '{"defaults": {"min_workers": 9223372036854775808}}',
        "defaults.min_workers",
        "9223372036854775808",
        "an integer from 1 to 10,000",
    ),
    (
        "max_workers 2**63",
        '{"topics": {"t": {"max_workers": 9223372036854775808}}}',
        "topics.t.max_workers",
        "9223372036854775808",
        "an integer from 1 to 10,000",
    ),
    ("min_workers 0", '{"defaults": {"min_workers": 0}}', "defaults.min_workers", "0", "an integer from 1 to 10,000"),
    (
        "max_lag 1e300 says value and range",
        '{"defaults": {"max_lag": 1e300}}',
        "defaults.max_lag",
        "1e+300",
        "an integer from 1 to 1,000,000,000,000",
    ),
    (
        "keda threshold beyond bound",
        '{"defaults": {"keda_lag_threshold": 1000000000001}}',
        "defaults.keda_lag_threshold",
        "1000000000001",
        "from 1 to 1,000,000,000,000 or null",
    ),
    (
        "per-worker rate Infinity",
        '{"defaults": {"per_worker_rate": Infinity}}',
        "defaults.per_worker_rate",
        "inf",
        "from 0.001 to 10,000,000",
    ),
    (
        "cooldown a year",
        '{"defaults": {"cooldown_s": 31536000}}',
        "defaults.cooldown_s",
        "31536000",
        "from 0 to 2,592,000 (30 days)",
    ),
    ("hysteresis NaN", '{"defaults": {"hysteresis": NaN}}', "defaults.hysteresis", "nan", ">= 0 and < 1"),
    (
        "data-loss fraction 0",
        '{"defaults": {"data_loss_fraction": 0}}',
        "defaults.data_loss_fraction",
        "0",
        "> 0 and <= 1",
    ),
    (
        "long retention Infinity",
        '{"defaults": {"long_retention_s": Infinity}}',
        "defaults.long_retention_s",
        "inf",
        "to 315,360,000 (3650 days)",
    ),
]

# Where the docs say int, only a JSON integer is one.
LOOSE_INTS: list[tuple[str, str, str, str]] = [
    ("true", '{"defaults": {"min_workers": true}}', "defaults.min_workers", "True"),
    ("false", '{"defaults": {"min_lag": false}}', "defaults.min_lag", "False"),
    ("digit string", '{"defaults": {"max_lag": "50000"}}', "defaults.max_lag", "'50000'"),
    ("underscored string", '{"defaults": {"max_lag": "1_000"}}', "defaults.max_lag", "'1_000'"),
    ("integral float", '{"defaults": {"max_workers": 4.0}}', "defaults.max_workers", "4.0"),
    ("integral float in an override", '{"topics": {"t": {"window": 20.0}}}', "topics.t.window", "20.0"),
    ("string threshold", '{"defaults": {"keda_lag_threshold": "500"}}', "defaults.keda_lag_threshold", "'500'"),
    ("global int", '{"sample_window": 120.0}', "sample_window", "120.0"),
]


@pytest.mark.parametrize(
    ("raw", "field", "value", "allowed"), [c[1:] for c in OUT_OF_RANGE], ids=[c[0] for c in OUT_OF_RANGE]
)
def test_every_number_is_finite_and_bounded(raw: str, field: str, value: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw)
    err = caught.value
    assert err.field == field
    assert f"{field} = {value}:" in str(err)
    assert allowed in str(err)
    assert allowed in err.allowed


@pytest.mark.parametrize(("raw", "field", "value"), [c[1:] for c in LOOSE_INTS], ids=[c[0] for c in LOOSE_INTS])
def test_integers_are_strict(raw: str, field: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw)
    assert caught.value.field == field
    assert f"{field} = {value}: Input should be a valid integer (allowed: an integer " in str(caught.value)


def test_non_finite_numbers_are_rejected_in_a_decoded_mapping_too() -> None:
    with pytest.raises(ConfigError, match=r"sample_ttl_s = inf: Input should be a finite number"):
        parse_settings({"sample_ttl_s": math.inf})
    with pytest.raises(ConfigError, match=r"topics\.t\.cooldown_s = nan"):
        parse_settings({"topics": {"t": {"cooldown_s": math.nan}}})


def test_floats_accept_integers_and_bools_are_not_numbers() -> None:
    s = parse_settings('{"measure_every_s": 120, "defaults": {"cooldown_s": 0, "hysteresis": 0}}')
    assert (s.measure_every_s, s.defaults.cooldown_s, s.defaults.hysteresis) == (120.0, 0.0, 0.0)
    assert isinstance(s.measure_every_s, float)
    with pytest.raises(ConfigError, match=r"defaults\.cooldown_s = True: Input should be a valid number"):
        parse_settings('{"defaults": {"cooldown_s": true}}')


def test_every_number_field_has_both_bounds() -> None:
    for model in (Settings, TopicPolicyConfig):
        for name, info in model.model_fields.items():
            if info.annotation not in (int, float, int | None):
                continue
            kinds = {type(m).__name__ for m in info.metadata}
            assert kinds & {"Ge", "Gt"}, f"{name} has no lower bound"
            assert kinds & {"Le", "Lt"}, f"{name} has no upper bound"


def test_the_bounds_themselves_are_accepted() -> None:
    top = {
        "measure_every_s": 86_400,
        "sample_window": 10_000,
        "sample_ttl_s": 365 * 86_400,
        "defaults": {
            "min_lag": 10**12 - 1,
            "max_lag": 10**12,
            "window": 10_000,
            "min_samples": 365,  # one a day, kept for sample_ttl_s (a year)
            "evaluate_every": 1,
            "cooldown_s": 30 * 86_400,
            "scale_up_cooldown_s": 30 * 86_400,
            "min_workers": 10_000,
            "max_workers": 10_000,
            "drain_target_s": 30 * 86_400,
            "keda_lag_threshold": 10**12,
            "per_worker_rate": 1e7,
            "short_retention_s": 3649 * 86_400,
            "long_retention_s": 3650 * 86_400,
            "max_step": 10_000,
            "stall_after_measurements": 365,
        },
    }
    low = {
        "measure_every_s": 60,
        "sample_window": 3,
        "sample_ttl_s": 180,  # its own bound is 1, but it must hold min_samples (3) measurements of 60 s
        "defaults": {
            "min_lag": 0,
            "max_lag": 1,
            "window": 3,
            "min_samples": 3,
            "evaluate_every": 1,
            "min_workers": 1,
            "max_workers": 1,
            "drain_target_s": 1,
            "keda_lag_threshold": 1,
            "per_worker_rate": 0.001,
            "short_retention_s": 1,
            "long_retention_s": 1.5,
            "max_step": 1,
            "stall_after_measurements": 2,
        },
    }
    assert parse_settings(json.dumps(top)).defaults.max_workers == 10_000
    assert parse_settings(json.dumps(low)).defaults.per_worker_rate == 0.001


@pytest.mark.parametrize(
    ("raw", "fields"),
    [
        ('{"defaults": {"max_lag": 5000, "max_lag": 7000}}', ["defaults.max_lag"]),
        ('{"sample_window": 100, "sample_window": 100}', ["sample_window"]),
        ('{"topics": {"orders": {"policy": "keda"}, "orders": {"policy": "capacity"}}}', ["topics.orders"]),
        (
            '{"topics": {"orders": {"cooldown_s": 1, "policy": "keda", "cooldown_s": 2}}, "topics": {}}',
            ["topics", "topics.orders.cooldown_s"],
        ),
    ],
)
def test_a_duplicate_key_is_rejected_with_its_path(raw: str, fields: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw)
    err = caught.value
    assert err.field == fields[0]
    for field in fields:
        assert f"{field}: duplicate key" in str(err)
    assert "each key at most once per object" in err.allowed


@pytest.mark.parametrize(
    "name",
    ["a b", ".", "..", "x" * 250, "orders/eu", "orders\n", "", "naïve", "t:1"],
)
def test_an_illegal_topic_name_as_override_key_is_rejected(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings({"topics": {name: {"max_workers": 4}}})
    err = caught.value
    assert err.field == f"topics.{name}"
    assert err.value == name
    assert "not legal in Kafka" in str(err)
    assert "[a-zA-Z0-9._-]" in err.allowed


def test_legal_topic_names_are_accepted_as_keys() -> None:
    names = ["orders", "Orders.v2", "a-b_c", "x" * 249, "..."]
    s = parse_settings({"topics": {n: {"max_workers": 4} for n in names}})
    assert [s.for_topic(n).max_workers for n in names] == [4] * len(names)


def test_unknown_topic_overrides_name_each_key_that_matches_no_topic_with_a_hint() -> None:
    s = parse_settings(
        {"topics": {"orders": {}, "Clicks": {}, "paymnets": {}, "zzz": {}, "ORDERS": {}, "views": {"max_workers": 2}}}
    )
    registered = ["orders", "clicks", "payments", "views", "clicks"]
    assert unknown_topic_overrides(s, registered) == [
        ("Clicks", "clicks"),  # wrong case: Kafka's names are case-sensitive, so it does nothing
        ("paymnets", "payments"),
        ("zzz", None),
        ("ORDERS", "orders"),
    ]
    assert unknown_topic_overrides(s, iter(["orders", "Clicks", "paymnets", "zzz", "ORDERS", "views"])) == []
    assert unknown_topic_overrides(parse_settings({}), []) == []


def test_case_hint_prefers_an_exact_case_insensitive_match_over_a_close_one() -> None:
    s = parse_settings({"topics": {"Order": {}}})
    assert unknown_topic_overrides(s, ["orders", "order"]) == [("Order", "order")]


@pytest.mark.parametrize(
    ("raw", "field", "allowed"),
    [
        # Only sample_window records are stored: a larger evaluate_every would never be reached again.
        (
            {"sample_window": 10, "defaults": {"window": 5, "evaluate_every": 11}},
            "defaults.evaluate_every",
            "<= sample_window (10)",
        ),
        (
            {"sample_window": 10, "defaults": {"window": 5}, "topics": {"t": {"evaluate_every": 20}}},
            "topics.t.evaluate_every",
            "<= sample_window (10)",
        ),
        # Samples expire after sample_ttl_s: fewer than min_samples would ever be stored.
        ({"sample_ttl_s": 60}, "sample_ttl_s", ">= measure_every_s x defaults.min_samples (60 x 5 = 300)"),
        (
            {"sample_window": 300, "topics": {"t": {"window": 200, "min_samples": 200}}},
            "sample_ttl_s",
            ">= measure_every_s x topics.t.min_samples (60 x 200 = 12,000)",
        ),
        (
            {"measure_every_s": 600, "defaults": {"evaluate_every": 20}},
            "sample_ttl_s",
            ">= measure_every_s x defaults.evaluate_every (600 x 20 = 12,000)",
        ),
    ],
)
def test_settings_that_would_never_evaluate_a_topic_are_rejected(raw: Any, field: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw)
    assert caught.value.field == field
    assert allowed in caught.value.allowed


def test_a_relation_is_reported_once_not_for_every_topic_that_inherits_it() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings({"sample_ttl_s": 60, "topics": {"a": {"max_workers": 3}, "b": {"max_workers": 4}}})
    assert str(caught.value).count("sample_ttl_s = ") == 1


def test_min_workers_below_one_is_rejected_as_the_registry_requires() -> None:
    with pytest.raises(ConfigError, match=r"topics\.t\.min_workers = 0"):
        parse_settings({"topics": {"t": {"min_workers": 0}}})


@pytest.mark.parametrize("doc_path", ["docs/configuration.md", "README.md"])
def test_every_upper_bound_is_documented(doc_path: str) -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / doc_path).read_text(encoding="utf-8")
    rows = {line.split("`")[1]: line for line in doc.splitlines() if line.startswith("| `")}
    for model in (Settings, TopicPolicyConfig):
        for name, info in model.model_fields.items():
            for meta in info.metadata:
                bound = getattr(meta, "le", None)
                if bound is None:
                    bound = getattr(meta, "lt", None)
                if bound is None:
                    continue
                spelled = {f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"}
                if bound >= 10**6 and math.log10(bound).is_integer():
                    spelled.add(f"10^{round(math.log10(bound))}")
                assert any(s in rows[name].split("|")[2] for s in spelled), (name, spelled)


# Stalled and stopped pipelines (issue 10): the stall rule counts stored lag records.
@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"defaults": {"stall_after_measurements": 1}}, "defaults.stall_after_measurements", "from 2 to 10,000"),
        ({"defaults": {"stall_after_measurements": 5.0}}, "defaults.stall_after_measurements", "valid integer"),
        (
            {"sample_window": 10, "defaults": {"window": 10, "stall_after_measurements": 11}},
            "defaults.stall_after_measurements",
            "<= sample_window (10)",
        ),
        (
            {"sample_ttl_s": 600, "topics": {"t": {"stall_after_measurements": 20}}},
            "sample_ttl_s",
            "topics.t.stall_after_measurements (60 x 20 = 1,200): samples would expire before that many measurements "
            "are stored, and a stalled pipeline would never be detected",
        ),
    ],
)
def test_stall_after_measurements_is_validated(raw: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(raw)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_a_variable_written_before_stall_after_measurements_existed_stays_valid() -> None:
    # A 3-sample window cannot hold the default of 5 measurements; unset, that is not an error
    # (stall detection just never fires), so an upgrade does not break a working Variable.
    s = parse_settings({"sample_window": 3, "defaults": {"window": 3, "min_samples": 3}})
    assert s.defaults.stall_after_measurements == 5
    assert parse_settings({}).for_topic("any").stall_after_measurements == 5
    assert (
        parse_settings({"topics": {"t": {"stall_after_measurements": 12}}}).for_topic("t").stall_after_measurements
        == 12
    )
