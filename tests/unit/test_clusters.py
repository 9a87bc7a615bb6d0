"""The ``lagsched_clusters`` Variable (lagsched.core.clusters) and the consume plan's slot counts."""

from __future__ import annotations

import json

import pytest

from lagsched.core.clusters import (
    DEFAULT_CLUSTERS,
    DEFAULT_MAX_SLOTS,
    ClusterConfig,
    managed,
    parse_clusters,
    select_clusters,
)
from lagsched.core.errors import ConfigError
from lagsched.core.registry import TopicRow
from lagsched.core.routing import parse_routes
from lagsched.workflows.consume_plan import ConsumePlan, SlotOptions, slot_name, slots_needed


@pytest.mark.parametrize("raw", [None, "", "  \n", b""])
def test_absent_or_blank_variable_is_the_default_cluster_with_every_topic(raw: str | bytes | None) -> None:
    (c,) = parse_clusters(raw)
    assert c == DEFAULT_CLUSTERS[0]
    assert (c.name, c.kafka_conn_id, c.max_slots, c.manages_every_topic) == (
        "lagsched_kafka", "lagsched_kafka", DEFAULT_MAX_SLOTS, True,
    )  # fmt: skip
    assert c.manages("anything.at-all")


def test_full_variable_is_parsed_sorted_by_name() -> None:
    raw = json.dumps(
        {
            "us": {},
            "eu": {
                "kafka_conn_id": "lagsched_kafka_eu",
                "topics": ["orders", "payments", "orders"],
                "topic_pattern": r"clicks\..*",
                "max_slots": 8,
            },
        }
    )
    eu, us = parse_clusters(raw)
    assert (eu.name, eu.kafka_conn_id, eu.topics, eu.topic_pattern, eu.max_slots) == (
        "eu", "lagsched_kafka_eu", ("orders", "payments"), r"clicks\..*", 8,
    )  # fmt: skip
    assert us == ClusterConfig(name="us")
    assert managed(eu, ["orders", "clicks.web", "clicks", "xclicks.web", "payments", "refunds"]) == [
        "orders", "clicks.web", "payments",
    ]  # fmt: skip


def test_pattern_must_match_the_whole_name() -> None:
    (c,) = parse_clusters({"c": {"topic_pattern": "e2e-[0-9a-f]+-.*"}})
    assert c.manages("e2e-1f-hot")
    assert not c.manages("x-e2e-1f-hot")


def test_round_trip_through_xcom_form() -> None:
    (c,) = parse_clusters({"eu": {"kafka_conn_id": "k_eu", "topics": ["a"], "topic_pattern": "b.*", "max_slots": 2}})
    assert ClusterConfig.from_dict(json.loads(json.dumps(c.as_dict()))) == c


def test_every_problem_is_named_at_once_with_the_first_in_the_fields() -> None:
    raw = {
        "bad name!": {},
        "eu": {
            "kafka_conn_id": "has space",
            "topics": ["ok", "no/slash"],
            "topic_pattern": "(",
            "max_slots": True,
            "colour": "blue",
        },
    }
    with pytest.raises(ConfigError) as err:
        parse_clusters(raw)
    msg = str(err.value)
    for fragment in (
        "bad name! = 'bad name!'",
        "eu.colour = 'blue': unknown field",
        "eu.kafka_conn_id = 'has space'",
        "eu.topics[1] = 'no/slash'",
        "eu.topic_pattern = '('",
        "eu.max_slots = True: Input should be a valid integer (allowed: an integer from 1 to 1,000)",
    ):
        assert fragment in msg, msg
    assert (err.value.field, err.value.value) == ("bad name!", "bad name!")


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "(root) = [1, 2]: expected an object keyed by cluster name"),
        ("{}", "no cluster configured"),
        ('{"c": []}', "c = []: expected an object"),
        ('{"c": {"max_slots": 0}}', "c.max_slots = 0"),
        ('{"c": {"max_slots": 1001}}', "c.max_slots = 1001"),
        ('{"c": {"topics": "orders"}}', "c.topics = 'orders': a list of topic names"),
        ('{"c": {"topic_pattern": ""}}', "c.topic_pattern = ''"),
    ],
)
def test_malformed_variable_fails_naming_the_field(raw: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="invalid lagsched_clusters") as err:
        parse_clusters(raw)
    assert fragment in str(err.value)


def test_select_all_one_or_an_unconfigured_name() -> None:
    configured = parse_clusters({"eu": {"topics": ["a"]}, "us": {}})
    assert select_clusters(configured, "") == configured
    assert select_clusters(configured, "eu") == (configured[0],)
    # A name nobody configured keeps its old meaning: that registry cluster, every topic, lagsched_kafka.
    assert select_clusters(configured, "adhoc") == (ClusterConfig(name="adhoc"),)
    with pytest.raises(ValueError, match="cluster name"):
        select_clusters(configured, "no spaces")


def _row(name: str, workers: int, enabled: bool = True) -> TopicRow:
    return TopicRow(f"id-{name}", "c", name, None, 8, -1, workers, None, None, enabled)


def test_slots_needed_is_the_largest_enabled_worker_count_within_max_slots() -> None:
    rows = [_row("a", 2), _row("b", 5), _row("off", 7, enabled=False)]
    assert slots_needed(rows, 8) == 5
    assert slots_needed(rows, 3) == 3
    assert slots_needed([], 8) == 0
    assert slots_needed([_row("off", 7, enabled=False)], 8) == 0


def test_plan_names_slots_per_cluster_and_carries_the_options() -> None:
    options = SlotOptions(budget_s=90, min_interval_s=2.5, min_records=100)
    sinks = {"eu": {"warehouse": "s3a://lake/eu", "s3_endpoint": "http://s3.local:9000"}}
    plan = ConsumePlan.of({"us": 1, "eu": 3, "idle": 0}, {"us": 4, "eu": 2, "idle": 4}, options, {"eu": "k_eu"}, sinks)
    assert [s.name for s in plan.slots] == ["eu-slot-1", "eu-slot-2", "us-slot-1"]
    assert plan.per_cluster() == {"us": 1, "eu": 2, "idle": 0}
    first = plan.slots[0].as_kwargs()
    assert first == {
        "application_args": [
            "--slot", "eu-slot-1", "--cluster", "eu", "--slot-number", "1", "--max-slots", "2", "--budget-s", "90",
            "--min-interval-s", "2.5", "--min-records", "100",
            "--commit-interval-s", "30", "--commit-max-records", "10000000", "--commit-max-bytes", "1073741824",
            "--warehouse", "s3a://lake/eu", "--s3-endpoint", "http://s3.local:9000",
        ],
        "kafka_conn_id": "k_eu",
    }  # fmt: skip
    assert plan.slots[2].kafka_conn_id == "lagsched_kafka"
    # A cluster without sink settings: the job's defaults (no lake option at all).
    assert "--warehouse" not in plan.slots[2].args


def test_plan_passes_each_clusters_allowed_lateness_when_not_the_default() -> None:
    eu, us = parse_clusters({"eu": {"allowed_lateness_s": 0}, "us": {}})
    lateness = {c.name: c.allowed_lateness_s for c in (eu, us)}
    plan = ConsumePlan.of({"eu": 1, "us": 1}, {"eu": 1, "us": 1}, SlotOptions(), lateness=lateness)
    args = {s.cluster: s.args for s in plan.slots}
    assert args["eu"][args["eu"].index("--allowed-lateness-s") + 1] == "0"
    assert "--allowed-lateness-s" not in args["us"]  # 300, the slot's own default


def test_the_slot_refuses_a_lateness_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    from lagsched.jobs.consume import parse_args

    assert parse_args(["--slot", "s", "--allowed-lateness-s", "0"]).allowed_lateness_s == 0
    assert parse_args(["--slot", "s"]).allowed_lateness_s == 300
    for bad in ("-1", str(7 * 24 * 3600 + 1), "5m"):
        with pytest.raises(SystemExit):
            parse_args(["--slot", "s", "--allowed-lateness-s", bad])
    assert "--allowed-lateness-s" in capsys.readouterr().err


def test_plan_carries_each_clusters_commit_cadence() -> None:
    eu, us = parse_clusters({"eu": {"commit_interval_s": 120, "commit_max_records": None}, "us": {}})
    assert (eu.cadence.interval_s, eu.cadence.max_records, us.cadence.interval_s) == (120, None, 30)
    plan = ConsumePlan.of({"eu": 1, "us": 1}, {"eu": 1, "us": 1}, SlotOptions(), cadences={"eu": eu.cadence})
    args = {s.cluster: s.args for s in plan.slots}
    assert args["eu"][args["eu"].index("--commit-interval-s") :][:6] == (
        "--commit-interval-s", "120", "--commit-max-records", "0", "--commit-max-bytes", "1073741824",
    )  # fmt: skip
    assert args["us"][args["us"].index("--commit-interval-s") + 1] == "30"
    # A round trip through XCom keeps it.
    assert ClusterConfig.from_dict(eu.as_dict()).cadence == eu.cadence


@pytest.mark.parametrize(
    "body",
    [{"commit_interval_s": -1}, {"commit_interval_s": 3601}, {"commit_max_records": 0}, {"commit_max_bytes": "1GB"}],
)
def test_a_bad_commit_cadence_is_refused_naming_the_field(body: dict[str, object]) -> None:
    field = next(iter(body))
    with pytest.raises(ConfigError, match=field):
        parse_clusters({"eu": body})


def test_plan_passes_each_clusters_routes_and_the_operator_the_registry_connection_they_need() -> None:
    from lagsched.airflow.operators import CHILD_CONNECTIONS, child_connections

    (eu, us) = parse_clusters(
        {
            "eu": {"routes": [{"topics": ["orders"], "value_format": "avro"}]},
            "us": {
                "routes": [{"topic_pattern": "audit\\..*", "value_format": "json", "value_schema": {"type": "object"}}]
            },
        }
    )
    routes = {c.name: [r.as_dict() for r in c.routes] for c in (eu, us)}
    plan = ConsumePlan.of({"eu": 1, "us": 1, "raw": 1}, {"eu": 1, "us": 1, "raw": 1}, SlotOptions(), routes=routes)
    args = {s.cluster: s.args for s in plan.slots}
    passed = json.loads(args["eu"][args["eu"].index("--routes") + 1])
    assert passed == [{"topics": ["orders"], "value_format": "avro", "key_format": "raw"}]
    assert parse_routes(passed, "--routes") == eu.routes  # the job reads back what the Variable said
    assert "--routes" not in args["raw"]
    assert child_connections(args["eu"]) == (*CHILD_CONNECTIONS, "lagsched_schema_registry")
    assert child_connections(args["us"]) == CHILD_CONNECTIONS  # plain JSON needs no registry
    assert child_connections(args["raw"]) == CHILD_CONNECTIONS


def test_plan_starts_only_needed_slots_not_running_with_each_clusters_budget() -> None:
    plan = ConsumePlan.of(
        {"eu": 4, "us": 2}, {"eu": 3, "us": 4}, SlotOptions(), budgets={"eu": 600}, running={"eu-slot-2", "us-slot-9"}
    )
    # eu needs 3 (its max_slots), slot 2 runs: slots 1 and 3 start; a running slot beyond the need is no reason.
    assert [s.name for s in plan.slots] == ["eu-slot-1", "eu-slot-3", "us-slot-1", "us-slot-2"]
    assert plan.running == ("eu-slot-2",)
    budgets = {s.name: s.args[s.args.index("--budget-s") + 1] for s in plan.slots}
    assert budgets == {"eu-slot-1": "600", "eu-slot-3": "600", "us-slot-1": "3600", "us-slot-2": "3600"}
    assert plan.slots[1].args[:8] == (
        "--slot",
        "eu-slot-3",
        "--cluster",
        "eu",
        "--slot-number",
        "3",
        "--max-slots",
        "3",
    )
    # Every needed slot running: nothing to start.
    assert ConsumePlan.of({"eu": 1}, {"eu": 3}, SlotOptions(), running={"eu-slot-1"}).slots == ()


def test_slot_budget_is_validated_per_cluster() -> None:
    assert parse_clusters({"eu": {}})[0].slot_budget_s == 3600
    assert parse_clusters({"eu": {"slot_budget_s": 900}})[0].slot_budget_s == 900
    for bad in (59, 86_401, "3600", True, 60.5):
        with pytest.raises(ConfigError, match=r"eu\.slot_budget_s"):
            parse_clusters({"eu": {"slot_budget_s": bad}})
    again = ClusterConfig.from_dict(parse_clusters({"eu": {"slot_budget_s": 900}})[0].as_dict())
    assert again.slot_budget_s == 900


def test_slot_max_rate_is_validated_and_reaches_each_slot_of_its_cluster_only() -> None:
    assert parse_clusters({"eu": {}})[0].slot_max_rate is None
    (eu, us) = parse_clusters({"eu": {"slot_max_rate": 1000}, "us": {"slot_max_rate": 2.5}})
    assert (eu.slot_max_rate, us.slot_max_rate) == (1000.0, 2.5)
    assert ClusterConfig.from_dict(eu.as_dict()).slot_max_rate == 1000.0
    for bad in (0, -1, "1000", True, 10_000_001, float("nan")):
        with pytest.raises(ConfigError, match=r"eu\.slot_max_rate"):
            parse_clusters({"eu": {"slot_max_rate": bad}})
    plan = ConsumePlan.of({"eu": 2, "us": 1}, {"eu": 4, "us": 4}, SlotOptions(), rates={"eu": 1000.0, "us": None})
    rates = {s.name: s.args[s.args.index("--max-rate") + 1] if "--max-rate" in s.args else None for s in plan.slots}
    assert rates == {"eu-slot-1": "1000", "eu-slot-2": "1000", "us-slot-1": None}


def test_standby_slots_are_validated_and_add_warm_slots_within_max_slots() -> None:
    assert parse_clusters({"eu": {}})[0].standby_slots == 0
    (eu,) = parse_clusters({"eu": {"standby_slots": 1, "max_slots": 3}})
    assert ClusterConfig.from_dict(eu.as_dict()).standby_slots == 1
    for bad in (-1, 11, "1", True, 1.5):
        with pytest.raises(ConfigError, match=r"eu\.standby_slots"):
            parse_clusters({"eu": {"standby_slots": bad}})
    plan = ConsumePlan.of(
        {"eu": 1, "us": 3, "idle": 0},
        {"eu": 3, "us": 3, "idle": 3},
        SlotOptions(),
        standbys={"eu": 1, "us": 1, "idle": 1},
        running={"eu-slot-1"},
    )
    # eu: slot 1 runs, slot 2 starts as its standby; us: at max_slots, no room for one; idle: none.
    assert [s.name for s in plan.slots] == ["eu-slot-2", "us-slot-1", "us-slot-2", "us-slot-3"]
    two = next(s for s in plan.slots if s.name == "eu-slot-2")
    assert two.args[two.args.index("--standby-slots") + 1] == "1"
    assert "--standby-slots" not in ConsumePlan.of({"eu": 1}, {"eu": 3}, SlotOptions()).slots[0].args


@pytest.mark.parametrize(("kwargs", "fragment"), [({"budget_s": 5}, "budget_s=5"), ({"budget_s": 90_000}, "budget_s=")])
def test_slot_options_refuse_what_the_job_would(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        SlotOptions(**kwargs)  # type: ignore[arg-type]


def test_slot_numbers_start_at_one() -> None:
    assert slot_name("eu", 1) == "eu-slot-1"
    with pytest.raises(ValueError, match="start at 1"):
        slot_name("eu", 0)


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(.*a){12}$"])
def test_a_pattern_that_backtracks_in_python_matches_in_linear_time(pattern: str) -> None:
    # With Python's re each of these takes longer than the suite's timeout on this name; RE2 answers at once.
    (cluster,) = parse_clusters({"c": {"topic_pattern": pattern}})
    assert not cluster.manages("a" * 60 + "!")
    assert cluster.manages("a" * 60)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [("(?!internal\\.).*", "invalid perl operator: (?!"), ("(a)\\1", "invalid escape sequence"), ("(", "missing )")],
)
def test_a_pattern_re2_cannot_match_in_linear_time_is_refused_by_name(pattern: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_clusters({"c": {"topic_pattern": pattern}})
    assert err.value.field == "c.topic_pattern"
    assert "RE2" in err.value.allowed and reason in err.value.allowed, err.value.allowed


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"eu": {}, "eu": {"max_slots": 2}}', "eu"),
        ('{"eu": {"max_slots": 2, "max_slots": 3}}', "eu.max_slots"),
        ('{"eu": {"sink": {"table": "a", "table": "b"}}}', "eu.sink.table"),
    ],
)
def test_a_key_given_twice_is_refused_not_taken_last(raw: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_clusters(raw)
    assert err.value.field == field
    assert f"{field}: duplicate key" in str(err.value)


@pytest.mark.parametrize(
    ("clusters", "second", "table"),
    [
        ({"a": {"sink": {"table": "orders"}}, "b": {"sink": {"table": "orders"}}}, "b", "lagsched.kafka.orders"),
        ({"a": {"sink": {"table": "Orders"}}, "b": {"sink": {"table": "orders"}}}, "b", "lagsched.kafka.orders"),
        ({"eu-1": {}, "eu_1": {}}, "eu_1", "lagsched.kafka.eu_1"),  # the default tables of both names
        ({"a": {}, "b": {"sink": {"table": "a"}}}, "b", "lagsched.kafka.a"),
    ],
)
def test_two_clusters_cannot_write_one_table(clusters: dict[str, object], second: str, table: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_clusters(clusters)
    assert err.value.field == f"{second}.sink.table"
    assert err.value.value == table


def test_clusters_may_share_a_table_name_in_other_namespaces_or_catalogs() -> None:
    clusters = parse_clusters(
        {
            "a": {"sink": {"table": "t"}},
            "b": {"sink": {"table": "t", "namespace": "other"}},
            "c": {"sink": {"table": "t", "catalog": "second"}},
        }
    )
    assert [c.name for c in clusters] == ["a", "b", "c"]
