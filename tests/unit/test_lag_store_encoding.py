"""The lag store's window text: decoded in bulk, re-encoded reusing the kept samples' text, always
equal to encoding the window afresh (a fake-free check of the pure helpers; Redis I/O is covered by
tests/integration/test_lag_measurement.py)."""

from __future__ import annotations

import random

import pytest

from lagsched.adapters.lag_store import _decode, _encode, _encode_after
from lagsched.core.lag import OffsetSample, SampleWindow


def replay(steps: list[tuple[float, int]], max_samples: int, max_age_s: float | None) -> None:
    window = SampleWindow(max_samples, max_age_s)
    raw: str | None = None
    for at, offset in steps:
        before = SampleWindow(max_samples, max_age_s, _decode(raw)) if raw else window
        after = before.add(OffsetSample(at, offset))
        encoded = _encode_after(before, after, raw)
        assert encoded == _encode(after), (before.samples, after.samples)
        assert _decode(encoded) == after.samples
        raw = encoded


@pytest.mark.parametrize("seed", range(20))
def test_reused_text_equals_a_fresh_encoding_over_random_histories(seed: int) -> None:
    rng = random.Random(seed)
    at, offset, steps = 1_790_000_000.0, 0, []
    for _ in range(300):
        at += rng.choice([0.0, 0.5, 60.0, 61.25, 3600.0, -5.0])  # equal, late and out-of-order times too
        offset = rng.choice([offset, offset, offset + rng.randint(1, 500), max(0, offset - 100)])  # idle runs, resets
        steps.append((at, offset))
    replay(steps, max_samples=rng.choice([2, 3, 5, 120]), max_age_s=rng.choice([None, 120.0, 7200.0]))


def test_a_full_window_drops_its_oldest_member_and_appends_the_newest() -> None:
    window = SampleWindow(3, None, (OffsetSample(0.0, 1), OffsetSample(60.0, 2), OffsetSample(120.0, 3)))
    raw = _encode(window)
    assert raw == "1@0.0;2@60.0;3@120.0"
    assert _encode_after(window, window.add(OffsetSample(180.0, 4)), raw) == "2@60.0;3@120.0;4@180.0"


@pytest.mark.parametrize("raw", ["1@0.0;2", "1;2@3.0", "1@2@3.0", "x@1.0"])
def test_a_malformed_window_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        _decode(raw)
