"""Routes: which table a topic lands in and how it is decoded, validated in lagsched_clusters."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lagsched.core.clusters import ClusterConfig, parse_clusters
from lagsched.core.errors import ConfigError
from lagsched.core.routing import parse_routes, route_topics, table_for_topic

pytestmark = pytest.mark.unit

LEGAL_TOPIC = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=249
)


@given(LEGAL_TOPIC.filter(lambda t: t not in (".", "..")))
def test_every_legal_topic_has_a_legal_table_name(topic: str) -> None:
    name = table_for_topic(topic)
    assert re.fullmatch(r"[a-z_][a-z0-9_]{0,127}", name), name
    assert table_for_topic(topic.upper()) == name  # case never tells two tables apart


def cluster(**body: Any) -> ClusterConfig:
    return parse_clusters({"eu": body})[0]


def test_the_first_matching_route_decides_and_the_rest_land_in_the_shared_table() -> None:
    eu = cluster(
        routes=[
            {"topics": ["orders"], "value_format": "avro", "key_format": "string"},
            {"topic_pattern": r"clicks\..*", "value_format": "json_schema", "namespace": "web"},
            {"topic_pattern": r".*\.audit", "value_format": "json", "value_schema": {"type": "object"}},
            {"topic_pattern": r"clicks\.x", "value_format": "avro"},  # never reached: the pattern above is first
        ]
    )
    routed = eu.routes_for(["orders", "clicks.x", "billing.audit", "misc"])
    assert routed["misc"] is None
    orders, clicks, audit = routed["orders"], routed["clicks.x"], routed["billing.audit"]
    assert orders is not None and clicks is not None and audit is not None
    assert (orders.namespace, orders.table, orders.value_format, orders.key_format) == (
        "kafka",
        "orders",
        "avro",
        "string",
    )
    assert (clicks.namespace, clicks.table, clicks.value_format) == ("web", "clicks_x", "json_schema")
    assert (audit.table, audit.value_format, audit.value_schema) == ("billing_audit", "json", '{"type":"object"}')
    assert orders.needs_registry and clicks.needs_registry and not audit.needs_registry


def test_a_route_survives_the_round_trip_through_xcom() -> None:
    eu = cluster(
        routes=[
            {"topics": ["orders"], "table": "orders_v2", "value_format": "avro"},
            {"topic_pattern": "a.*", "value_format": "json", "value_schema": {"type": "object", "title": "A"}},
        ]
    )
    again = ClusterConfig.from_dict(eu.as_dict())
    assert again == eu
    assert again.routes_for(["orders"])["orders"].table == "orders_v2"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("route", "says"),
    [
        ({}, "a route takes at least one topic"),
        ({"topics": "orders"}, "a list of topic names"),
        ({"topics": ["bad topic"]}, "topics[0] = 'bad topic': topic name 'bad topic' is not legal"),
        ({"topics": ["a"], "value_format": "protobuf"}, "'raw', 'avro', 'json_schema' or 'json'"),
        ({"topics": ["a"], "key_format": "utf8"}, "'raw', 'string', 'avro', 'json_schema' or 'json'"),
        ({"topics": ["a", "b"], "table": "t"}, "only for a route of exactly one topic"),
        ({"topic_pattern": "a.*", "table": "t"}, "only for a route of exactly one topic"),
        ({"topics": ["a"], "table": "1abc"}, "not starting with a digit"),
        ({"topics": ["a"], "namespace": "web-logs"}, "[A-Za-z0-9_]"),
        ({"topics": ["a"], "value_format": "json"}, "value_schema: the JSON Schema"),
        ({"topics": ["a"], "key_format": "json", "key_schema": []}, "a JSON Schema object"),
        ({"topics": ["a"], "value_format": "avro", "value_schema": {"type": "object"}}, "only with value_format json"),
        ({"topic_pattern": "(?=a)"}, "RE2's syntax"),
        ({"topics": ["a"], "compression": "zstd"}, "compression"),
    ],
)
def test_a_bad_route_is_refused_naming_its_path(route: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_clusters({"eu": {"routes": [{"topics": ["ok"]}, route]}})
    message = str(caught.value)
    assert message.startswith("invalid lagsched_clusters: eu.routes[1]"), message
    assert says in message


def test_routes_must_be_a_list_and_every_problem_is_named_at_once() -> None:
    with pytest.raises(ConfigError, match=r"eu\.routes = \{'topics': \['a'\]\}: expected a list of routes"):
        parse_clusters({"eu": {"routes": {"topics": ["a"]}}})
    with pytest.raises(ConfigError) as caught:
        parse_clusters({"eu": {"routes": [7, {"topics": ["a"], "value_format": "x"}], "max_slots": 0}})
    message = str(caught.value)
    assert "eu.routes[0] = 7: expected a route object" in message
    assert "eu.routes[1].value_format" in message
    assert "eu.max_slots" in message


@pytest.mark.parametrize(
    ("topics", "clash"),
    [
        (["Orders", "orders"], "topic 'orders' -> kafka.orders, which topic 'Orders' lands in too"),
        (["a.b", "a-b"], "topic 'a-b' -> kafka.a_b, which topic 'a.b' lands in too"),
        (["x" * 130, "x" * 129], "lands in too"),  # cut to 128 characters
        (["EU"], "which is the cluster's shared table of raw records"),
    ],
)
def test_two_topics_never_share_a_table(topics: list[str], clash: str) -> None:
    eu = cluster(routes=[{"topic_pattern": ".*"}])
    with pytest.raises(ConfigError) as caught:
        eu.routes_for(topics)
    assert clash in str(caught.value)
    assert '"table": "..."' in str(caught.value)  # the fix


def test_a_clash_of_named_topics_is_refused_when_the_variable_is_read() -> None:
    with pytest.raises(ConfigError, match="which topic 'orders' lands in too"):
        parse_clusters({"eu": {"routes": [{"topics": ["orders", "ORDERS"]}]}})
    with pytest.raises(ConfigError, match=r"us\.routes = 'lagsched\.kafka\.orders': expected a table no other"):
        parse_clusters({"eu": {"routes": [{"topics": ["orders"]}]}, "us": {"routes": [{"topics": ["orders"]}]}})
    apart = parse_clusters(
        {"eu": {"routes": [{"topics": ["orders"], "namespace": "eu"}]}, "us": {"routes": [{"topics": ["orders"]}]}}
    )
    assert [c.routes_for(["orders"])["orders"].namespace for c in apart] == ["eu", "kafka"]  # type: ignore[union-attr]


def test_a_table_named_for_a_topic_frees_the_clash() -> None:
    routes = parse_routes([{"topics": ["a-b"], "table": "a_b_dash"}, {"topic_pattern": "a.*"}], "routes")
    routed = route_topics(routes, ["a.b", "a-b"], namespace="kafka", shared_table="lagsched_kafka")
    assert {t: r.table for t, r in routed.items() if r is not None} == {"a.b": "a_b", "a-b": "a_b_dash"}


def test_a_replay_request_is_checked_field_by_field() -> None:
    from lagsched.core.errors import ConfigError
    from lagsched.workflows.replay import ReplayRequest

    ok = ReplayRequest.of({"cluster": "eu", "topic": "orders", "partitions": [2, 0, 2], "from_offset": 0,
                           "to_offset": 10, "from_time": "2026-12-01T00:00:00Z", "dry_run": True})  # fmt: skip
    assert (ok.partitions, ok.from_offset, ok.to_offset, ok.dry_run) == ((0, 2), 0, 10, True)
    assert ok.row_filter() == (
        "topic == 'orders' AND partition IN (0, 2) AND offset >= 0 AND offset < 10 "
        "AND timestamp >= '2026-12-01T00:00:00+00:00'"
    )
    for bad, says in (
        ({"topic": "bad topic!"}, "topic"),
        ({"topic": "o", "from_offset": -1}, "from_offset = -1"),
        ({"topic": "o", "from_offset": True}, "from_offset = True"),
        ({"topic": "o", "partitions": "0"}, "partitions"),
        ({"topic": "o", "from_time": "yesterday"}, "an ISO time"),
        ({"topic": "o", "from_time": "2026-12-01T00:00:00"}, "give its zone"),
        ({"topic": "o", "from_time": "2026-12-02T00:00:00Z", "to_time": "2026-12-01T00:00:00Z"}, "not before"),
    ):
        with pytest.raises((ConfigError, ValueError), match=says):
            ReplayRequest.of(bad)
