"""Table care settings (the Variable lagsched_table_care), closed partitions, files per target and the
orphan bound: pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lagsched.core.errors import ConfigError
from lagsched.core.table_care import (
    MAX_FILES_PER_TARGET,
    TableCareSettings,
    closed_before,
    files_per_target,
    orphan_cutoff,
    parse_table_care,
    partitions_over,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("raw", [None, "", "  ", {}, "{}"])
def test_absent_or_empty_means_the_defaults(raw: object) -> None:
    assert parse_table_care(raw) == TableCareSettings()  # type: ignore[arg-type]


def test_fields_are_read_and_kept() -> None:
    s = parse_table_care('{"target_file_mb": 64, "snapshot_max_age_hours": 1.5, "max_manifests": 10}')
    assert (s.target_file_bytes, s.snapshot_max_age_hours, s.max_manifests, s.snapshots_to_keep) == (
        64 * 1024 * 1024, 1.5, 10, 20,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"target_file_mb": 0}, "target_file_mb"),
        ({"target_file_mb": 1.5}, "target_file_mb"),
        ({"snapshots_to_keep": True}, "snapshots_to_keep"),
        ({"orphan_min_age_hours": 0.5}, "orphan_min_age_hours"),  # would delete files of batches in flight
        ({"closed_after_minutes": -1}, "closed_after_minutes"),
        ({"max_manifests": "50"}, "max_manifests"),
        ({"compact": True}, "compact"),
    ],
)
def test_a_bad_field_is_named(raw: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_table_care(raw)
    assert caught.value.field == field


def test_every_problem_is_listed_and_bad_json_is_said() -> None:
    with pytest.raises(ConfigError, match=r"target_file_mb = 0.*max_manifests = 0"):
        parse_table_care({"target_file_mb": 0, "max_manifests": 0})
    with pytest.raises(ConfigError, match="not valid JSON"):
        parse_table_care("{target_file_mb: 1}")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        parse_table_care("[1]")


def test_an_hour_is_closed_once_it_ended_long_enough_ago() -> None:
    at = datetime(2026, 11, 25, 10, 9, tzinfo=UTC)
    assert closed_before(at, 10) == datetime(2026, 11, 25, 9, tzinfo=UTC)  # 09:00-10:00 ended 9 min ago: open
    assert closed_before(at.replace(minute=10), 10) == datetime(2026, 11, 25, 10, tzinfo=UTC)
    assert closed_before(at, 0) == datetime(2026, 11, 25, 10, tzinfo=UTC)


def test_files_per_target_counts_files_against_what_the_bytes_need() -> None:
    mib = 1024 * 1024
    assert files_per_target([], mib) == 0.0
    assert files_per_target([10, 10, 10], mib) == 3.0  # three small files where one would do
    assert files_per_target([mib, mib, mib // 2], mib) == 1.0  # 2.5 MiB needs 3 files
    assert files_per_target([900_000, 20_000], mib) == 2.0  # the bin-pack's blind spot


def test_partitions_over_the_limit_are_the_ones_to_rewrite_whole() -> None:
    mib = 1024 * 1024
    partitions = {("a", 1): [900_000, 20_000], ("a", 2): [mib, mib, 1000], ("b", 1): [mib // 2, 5], ("b", 2): [5]}
    assert partitions_over(partitions, mib) == [("a", 1), ("b", 1)]
    assert partitions_over(partitions, mib, limit=2.0) == []
    assert MAX_FILES_PER_TARGET == 1.5


def test_the_orphan_bound_counts_from_the_real_clock_when_now_is_ahead() -> None:
    real = datetime(2026, 11, 25, 10, tzinfo=UTC)
    assert orphan_cutoff(real + timedelta(hours=2), real, 24) == real - timedelta(hours=24)
    assert orphan_cutoff(real - timedelta(hours=2), real, 24) == real - timedelta(hours=26)  # a past now: further back


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="target_file_mb: duplicate key"):
        parse_table_care('{"target_file_mb": 128, "target_file_mb": 1}')
