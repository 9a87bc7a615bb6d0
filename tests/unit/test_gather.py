"""`gather`: the bytes of some ranges of a buffer end to end, as the decoders hand them to polars and Arrow."""

from __future__ import annotations

import numpy as np
import pytest

from lagsched.core.decoded import gather

pytestmark = pytest.mark.unit


def by_hand(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, sep: int | None) -> bytes:
    tail = b"" if sep is None else bytes([sep])
    return b"".join(data[a:b].tobytes() + tail for a, b in zip(starts.tolist(), ends.tolist(), strict=True))


@pytest.mark.parametrize("shuffled", [False, True], ids=["in order", "out of order"])
def test_gather_matches_slicing_by_hand_for_empty_adjacent_and_spaced_ranges(shuffled: bool) -> None:
    rng = np.random.default_rng(41)
    for _ in range(2000):
        n = int(rng.integers(0, 25))
        lengths = rng.integers(0, 6, n)  # empty ranges too, which share their start with the next
        gaps = rng.integers(0, 3, n)  # adjacent ranges (no gap) and spaced ones (a 5-byte header, rows left out)
        starts = np.cumsum(gaps + np.concatenate([[0], lengths[:-1]])).astype(np.int64) if n else np.zeros(0, np.int64)
        ends = starts + lengths
        data = rng.integers(0, 256, int(ends.max() if n else 0) + int(rng.integers(0, 4))).astype(np.uint8)
        order = rng.permutation(n) if shuffled else np.arange(n)
        for sep in (None, ord("\n")):
            got = gather(data, starts[order], ends[order], sep=sep).tobytes()
            assert got == by_hand(data, starts[order], ends[order], sep)


def test_gather_of_a_slice_reads_only_the_span_it_covers() -> None:
    data = np.frombuffer(b"xxxxHEADab|cd|efxxxx", np.uint8)
    assert gather(data, np.array([8, 11, 14]), np.array([10, 13, 16])).tobytes() == b"abcdef"
    assert gather(data, np.array([8, 11]), np.array([10, 13]), sep=0x2C).tobytes() == b"ab,cd,"
