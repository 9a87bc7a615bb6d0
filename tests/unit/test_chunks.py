"""`chunked` cuts a sequence into consecutive pieces of a bounded size."""

from __future__ import annotations

import pytest

from lagsched.core.chunks import chunked


@pytest.mark.parametrize(
    ("items", "size", "expected"),
    [
        ([], 3, []),
        ([1, 2, 3], 3, [[1, 2, 3]]),
        ([1, 2, 3, 4], 3, [[1, 2, 3], [4]]),
        ([1, 2, 3], 1, [[1], [2], [3]]),
        ([1, 2], 1000, [[1, 2]]),
    ],
)
def test_pieces_keep_order_and_size(items: list[int], size: int, expected: list[list[int]]) -> None:
    assert chunked(items, size) == expected


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        chunked([1], 0)
