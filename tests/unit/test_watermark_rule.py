"""The watermark rule of `lagsched.core.completeness` (docs/completeness.md)."""

from __future__ import annotations

import pytest

from lagsched.core.completeness import (
    HOUR_MS,
    PartitionTime,
    hour_complete,
    hour_key,
    hour_of_key,
    table_watermark,
)

H = 1_764_000_000_000 - 1_764_000_000_000 % HOUR_MS  # the start of some hour


def test_a_partition_is_as_far_as_its_newest_committed_record_or_its_last_end_read_once_caught_up() -> None:
    assert PartitionTime(10, H + 5).watermark_ms == H + 5
    # caught up with the end read at H + 99: everything appended before then is committed
    assert PartitionTime(10, H + 5, end_offset=10, observed_ms=H + 99).watermark_ms == H + 99
    # behind the end read: only the records tell
    assert PartitionTime(9, H + 5, end_offset=10, observed_ms=H + 99).watermark_ms == H + 5
    # nothing ever committed, nothing to read (end 0): idle, not unknown
    assert PartitionTime(None, None, end_offset=0, observed_ms=H).watermark_ms == H
    assert PartitionTime(None, None, end_offset=3, observed_ms=H).watermark_ms is None
    assert PartitionTime(None, None).watermark_ms is None
    # a newer record than the end's time wins (a producer clock ahead)
    assert PartitionTime(10, H + 500, end_offset=10, observed_ms=H + 99).watermark_ms == H + 500


def test_the_table_waits_for_its_slowest_partition_and_for_any_unknown_one() -> None:
    fast, slow = PartitionTime(5, H + HOUR_MS * 3), PartitionTime(5, H + 10)
    assert table_watermark([fast, slow]) == H + 10
    assert table_watermark([fast, PartitionTime(0, None)]) is None
    assert table_watermark([]) is None


def test_an_hour_is_complete_once_the_watermark_passes_its_end_plus_the_lateness() -> None:
    end = H + HOUR_MS
    assert not hour_complete(H, end - 1, 0)
    assert hour_complete(H, end, 0)
    assert not hour_complete(H, end + 59_999, 60_000)
    assert hour_complete(H, end + 60_000, 60_000)
    assert not hour_complete(H, None, 0)
    with pytest.raises(ValueError, match="start of an hour"):
        hour_complete(H + 1, end, 0)
    with pytest.raises(ValueError, match=">= 0"):
        hour_complete(H, end, -1)


def test_partition_keys_are_airflows_hourly_keys_in_utc() -> None:
    assert hour_key(0) == "1970-01-01T00:00:00"
    assert hour_of_key(hour_key(H)) == H
    for bad in ("2026-12-02T13:30:00", "2026-12-02", "yesterday", "2026-12-02T13:00:00+01:00"):
        with pytest.raises(ValueError, match="partition key"):
            hour_of_key(bad)


def test_a_credit_once_caught_up_stays_whatever_the_newest_reading_says() -> None:
    # caught up at H + 50, then a reading at H + 99 it has not reached: still H + 50
    assert PartitionTime(10, H + 5, end_offset=20, observed_ms=H + 99, caught_up_ms=H + 50).watermark_ms == H + 50


def test_hours_start_is_an_iso_hour_in_utc() -> None:
    from datetime import UTC, datetime

    from lagsched.core.completeness import DEFAULT_HOURS_START, parse_hours_start

    assert parse_hours_start(None) == parse_hours_start("  ") == DEFAULT_HOURS_START
    assert parse_hours_start("2026-12-02T05:00:00Z") == datetime(2026, 12, 2, 5, tzinfo=UTC)
    assert parse_hours_start("2026-12-02T06:00:00+01:00") == datetime(2026, 12, 2, 5, tzinfo=UTC)
    assert parse_hours_start("2026-12-02T05:00") == datetime(2026, 12, 2, 5, tzinfo=UTC)
    for bad in ("2026-12-02T05:30:00Z", "tomorrow"):
        with pytest.raises(ValueError, match="hours_start"):
            parse_hours_start(bad)


def test_a_tables_watermark_over_its_topics_is_the_least_and_unknown_if_any_is() -> None:
    from lagsched.core.completeness import least_watermark

    assert least_watermark([H + 5, H + 2, H + 9]) == H + 2
    assert least_watermark([H + 5, None]) is None
    assert least_watermark([]) is None


def test_a_tables_lateness_is_its_routes_else_none_when_the_broker_stamps_every_topic_else_the_clusters() -> None:
    from lagsched.core.hour_tables import hour_tables
    from lagsched.core.routing import TopicRoute

    def lateness(routed: dict[str, TopicRoute | None], appended: set[str]) -> dict[str, int]:
        tables = hour_tables(
            "c", catalog="lagsched", namespace="kafka", shared_table="c", routed=routed, allowed_lateness_s=300,
            log_append_time=appended,
        )  # fmt: skip
        return {t.table: t.allowed_lateness_s for t in tables}

    typed = TopicRoute("a", "kafka", "a", "raw", "raw")
    pinned = TopicRoute("b", "kafka", "b", "raw", "raw", allowed_lateness_s=60)
    routed = {"a": typed, "b": pinned, "x": None, "y": None}
    assert lateness(routed, set()) == {"c": 300, "a": 300, "b": 60}
    assert lateness(routed, {"a", "b", "x"}) == {"c": 300, "a": 0, "b": 60}  # y is CreateTime
    assert lateness(routed, {"a", "b", "x", "y"}) == {"c": 0, "a": 0, "b": 60}


def test_a_tables_restatements_have_an_asset_of_their_own() -> None:
    from lagsched.airflow.assets import restatement_asset, table_asset

    hours, restated = table_asset("lagsched.kafka.orders"), restatement_asset("lagsched.kafka.orders", cluster="p")
    assert (hours.uri, restated.uri) == (
        "iceberg://lagsched/kafka/orders",
        "iceberg://lagsched/kafka/orders/restatements",
    )
    assert restated.name == "lagsched.kafka.orders/restatements" and restated.extra == {"cluster": "p", "topics": []}
    with pytest.raises(ValueError, match=r"catalog\.namespace\.table"):
        restatement_asset("kafka.orders")


def test_restatements_start_is_any_iso_time_and_defaults_to_the_hours_start() -> None:
    from datetime import UTC, datetime

    from lagsched.core.completeness import parse_restatements_start

    start = datetime(2026, 12, 1, tzinfo=UTC)
    assert parse_restatements_start(None, start) == parse_restatements_start(" ", start) == start
    assert parse_restatements_start("2026-12-02T05:34:00", start) == datetime(2026, 12, 2, 5, 34, tzinfo=UTC)
    with pytest.raises(ValueError, match="restatements_start"):
        parse_restatements_start("yesterday", start)
