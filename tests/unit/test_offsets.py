from __future__ import annotations

import pytest

from lagsched.core.offsets import OffsetRange, spread


@pytest.mark.parametrize(
    ("args", "message"),
    [(("t", -1, 0, 1), "partition"), (("t", 0, 5, 4), "start <= end"), (("t", 0, -1, 4), "start <= end")],
)
def test_bad_range_is_refused(args: tuple[str, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OffsetRange(*args)


def test_spread_balances_records_keeps_each_range_whole_and_drops_no_range() -> None:
    ranges = [OffsetRange("t", p, 0, n) for p, n in enumerate([100, 90, 40, 30, 30, 5, 0])]
    groups = spread(ranges, 3)
    assert sorted(r for g in groups for r in g) == sorted(ranges)
    assert sorted(sum(r.count for r in g) for g in groups) == [95, 100, 100]
    assert spread(ranges, 10) == [[r] for r in sorted(ranges, key=lambda r: (-r.count, r))]
    with pytest.raises(ValueError, match="tasks"):
        spread(ranges, 0)
