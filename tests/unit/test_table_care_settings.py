"""Table care settings (the Variable lagsched_table_care) and closed partitions: pure rules."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from lagsched.core.errors import ConfigError
from lagsched.core.table_care import TableCareSettings, closed_before, parse_table_care

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
    with pytest.raises(ConfigError, match="not JSON"):
        parse_table_care("{target_file_mb: 1}")
    with pytest.raises(ConfigError, match="expected an object"):
        parse_table_care("[1]")


def test_an_hour_is_closed_once_it_ended_long_enough_ago() -> None:
    at = datetime(2026, 11, 25, 10, 9, tzinfo=UTC)
    assert closed_before(at, 10) == datetime(2026, 11, 25, 9, tzinfo=UTC)  # 09:00-10:00 ended 9 min ago: open
    assert closed_before(at.replace(minute=10), 10) == datetime(2026, 11, 25, 10, tzinfo=UTC)
    assert closed_before(at, 0) == datetime(2026, 11, 25, 10, tzinfo=UTC)
