"""The lake's pure rules: a cluster's sink settings, validated with defaults, and the ranges a commit records."""

from __future__ import annotations

import pytest

from lagsched.core.clusters import parse_clusters
from lagsched.core.errors import ConfigError
from lagsched.core.lake import (
    LakeTable,
    decode_ranges,
    default_warehouse,
    encode_ranges,
    job_args,
    table_name_for,
)

pytestmark = pytest.mark.unit


def test_defaults_name_the_table_after_the_cluster_under_the_default_warehouse() -> None:
    lake = LakeTable.of("eu-west.1", None, default_warehouse="file:///lake")
    assert lake.identifier == "lagsched.kafka.eu_west_1"
    assert (lake.warehouse, lake.scheme, lake.s3_endpoint) == ("file:///lake", "file", None)


def test_every_field_can_be_set() -> None:
    sink = {"warehouse": "s3a://bucket/lake", "catalog": "lake", "namespace": "raw", "table": "events",
            "s3_endpoint": "http://127.0.0.1:19000"}  # fmt: skip
    lake = LakeTable.of("eu", sink, default_warehouse="file:///unused")
    assert lake.as_dict() == sink
    assert lake.identifier == "lake.raw.events"


@pytest.mark.parametrize(
    ("sink", "field"),
    [
        ({"warehouse": "/var/lake"}, "eu.sink.warehouse"),  # no scheme
        ({"warehouse": "s3://bucket/lake"}, "eu.sink.warehouse"),  # Hadoop's s3a, not s3
        ({"warehouse": "file://"}, "eu.sink.warehouse"),
        ({"catalog": "lake; DROP TABLE x"}, "eu.sink.catalog"),
        ({"namespace": "1raw"}, "eu.sink.namespace"),
        ({"table": "a.b"}, "eu.sink.table"),
        ({"table": 7}, "eu.sink.table"),
        ({"s3_endpoint": "127.0.0.1:9000"}, "eu.sink.s3_endpoint"),
        ({"s3_endpoint": "http://host:9000/path"}, "eu.sink.s3_endpoint"),
        ({"bucket": "x"}, "eu.sink.bucket"),
    ],
)
def test_a_bad_field_is_named_with_its_value(sink: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LakeTable.of("eu", sink, default_warehouse="file:///lake")
    assert caught.value.field == field


def test_the_clusters_variable_validates_the_sink_and_carries_it() -> None:
    (eu,) = parse_clusters({"eu": {"sink": {"warehouse": "s3a://b/lake", "table": "events"}}})
    assert eu.sink_settings() == {"table": "events", "warehouse": "s3a://b/lake"}
    assert parse_clusters({"eu": {}})[0].sink_settings() == {}
    with pytest.raises(ConfigError, match=r"eu\.sink\.warehouse"):
        parse_clusters({"eu": {"sink": {"warehouse": "ftp://x/y"}}})
    with pytest.raises(ConfigError, match=r"eu\.sink"):
        parse_clusters({"eu": {"sink": "s3a://b/lake"}})


def test_job_args_pass_only_what_was_set() -> None:
    assert job_args({}) == []
    assert job_args({"table": "events", "namespace": "raw"}) == ["--namespace", "raw", "--table", "events"]


def test_ranges_round_trip_and_malformed_summaries_hold_none() -> None:
    ranges = {("orders", 2): (100, 600), ("clicks", 0): (0, 5)}
    assert decode_ranges(encode_ranges(ranges)) == ranges
    for bad in (None, "", "not json", "[1, 2]", '{"t": {"0": [1]}}', '{"t": {"x": [1, 2]}}'):
        assert decode_ranges(bad) == {}


def test_the_default_warehouse_lives_under_the_stack_home() -> None:
    assert default_warehouse({}, "/repo/.local") == "file:///repo/.local/warehouse"
    assert default_warehouse({"LAGSCHED_HOME": "/srv/ls"}, "/repo/.local") == "file:///srv/ls/warehouse"
    assert default_warehouse({"LAGSCHED_WAREHOUSE": "s3a://b/w"}, "/repo/.local") == "s3a://b/w"


def test_table_names_are_legal_identifiers() -> None:
    assert table_name_for("lagsched_kafka") == "lagsched_kafka"
    assert table_name_for("9-east") == "c_9_east"
