"""The lake's pure rules: a cluster's sink settings, validated with defaults, and the ranges a commit records."""

from __future__ import annotations

import argparse

import pytest

from lagsched.core.clusters import parse_clusters
from lagsched.core.errors import ConfigError
from lagsched.core.lake import (
    LakeTable,
    add_job_arguments,
    decode_ranges,
    default_warehouse,
    encode_ranges,
    from_job_arguments,
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


def test_the_default_warehouse_is_the_environments_and_never_the_working_directory() -> None:
    assert default_warehouse({"LAGSCHED_HOME": "/srv/ls"}) == "file:///srv/ls/warehouse"
    assert default_warehouse({"LAGSCHED_WAREHOUSE": "s3a://b/w", "LAGSCHED_HOME": "/srv/ls"}) == "s3a://b/w"
    with pytest.raises(ConfigError, match=r"no warehouse for the lake's tables: set the cluster's sink\.warehouse"):
        default_warehouse({"LAGSCHED_HOME": "", "PWD": "/tmp/lagsched-spark-x"})


def test_a_cluster_without_a_warehouse_anywhere_is_named() -> None:
    from lagsched.airflow.tasks import check_warehouses

    assert check_warehouses(parse_clusters({"eu": {"sink": {"warehouse": "file:///lake"}}}), {}) == {
        "eu": "file:///lake"
    }
    assert check_warehouses(parse_clusters({"eu": {}}), {"LAGSCHED_WAREHOUSE": "s3a://b/w"}) == {"eu": "s3a://b/w"}
    with pytest.raises(ConfigError) as caught:
        check_warehouses(parse_clusters({"eu": {"sink": {"table": "events"}}}), {})
    problem = str(caught.value)
    assert problem.startswith("cluster eu: no warehouse") and "LAGSCHED_WAREHOUSE" in problem


def test_a_job_without_a_warehouse_refuses_to_start() -> None:
    parser = argparse.ArgumentParser()
    add_job_arguments(parser)
    with pytest.raises(ConfigError, match="no warehouse"):
        from_job_arguments("eu", parser.parse_args([]), {})
    given = from_job_arguments("eu", parser.parse_args(["--warehouse", "file:///lake"]), {})
    assert given.warehouse == "file:///lake"
    assert from_job_arguments("eu", parser.parse_args([]), {"LAGSCHED_HOME": "/h"}).warehouse == "file:///h/warehouse"


def test_table_names_are_legal_identifiers() -> None:
    assert table_name_for("lagsched_kafka") == "lagsched_kafka"
    assert table_name_for("9-east") == "c_9_east"


def test_the_dags_name_every_cluster_without_a_warehouse_before_any_slot_starts() -> None:
    from lagsched.airflow.tasks import check_warehouses

    clusters = parse_clusters({"a": {}, "b": {"sink": {"warehouse": "s3a://b/lake"}}, "c": {}})
    with pytest.raises(ConfigError) as caught:
        check_warehouses(clusters, {})
    assert "cluster a: no warehouse" in str(caught.value) and "cluster c: no warehouse" in str(caught.value)
    assert "cluster b" not in str(caught.value)
    assert check_warehouses(clusters, {"LAGSCHED_WAREHOUSE": "s3a://w/x"}) == {
        "a": "s3a://w/x",
        "b": "s3a://b/lake",
        "c": "s3a://w/x",
    }
