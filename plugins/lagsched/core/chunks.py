"""Cutting a long request into pieces a client or server handles well (pure).

Admin ``list_offsets`` calls, SQL ``IN`` lists and Redis pipelines all get slower per item past
some size; the adapters cut them with `chunked` and name their own size and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["chunked"]

_T = TypeVar("_T")


def chunked(items: Sequence[_T], size: int) -> list[Sequence[_T]]:
    """`items` cut into consecutive pieces of at most `size`, in order; none when `items` is empty.

    >>> chunked([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]

    Raises:
        ValueError: `size` is below 1.
    """
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    return [items[i : i + size] for i in range(0, len(items), size)]
