"""The lag store's window text: a sample appended to the stored members (`append_member`) gives
exactly the members of `SampleWindow.add`'s window, and the members are read back lazily and in
bulk to the same samples (a fake-free check of the pure helpers; Redis I/O is covered by
tests/integration/test_lag_measurement.py)."""

from __future__ import annotations

import random

import pytest

from lagsched.adapters.lag_store import PackedSamples, _decode, _member, _samples_of, append_member
from lagsched.core.lag import OffsetSample, SampleWindow


def replay(steps: list[tuple[float, int]], max_samples: int, max_age_s: float | None) -> None:
    window = SampleWindow(max_samples, max_age_s)
    raw = ""
    for at, offset in steps:
        sample = OffsetSample(at, offset)
        window = window.add(sample)
        raw = append_member(raw, sample, max_samples, max_age_s)
        assert raw == ";".join(_member(s) for s in window.samples), (window.samples, raw)
        assert PackedSamples(raw) == window.samples
        assert tuple(_samples_of(raw)) == window.samples  # eager when short, lazy when long: the same samples
        assert _decode(raw) == window.samples


@pytest.mark.parametrize("seed", range(40))
def test_appending_to_the_text_equals_the_window_rule_over_random_histories(seed: int) -> None:
    rng = random.Random(seed)
    at, offset, steps = 1_790_000_000.0, 0, []
    for _ in range(300):
        at += rng.choice([0.0, 0.5, 60.0, 61.25, 3600.0, -5.0])  # equal, late and out-of-order times too
        offset = rng.choice([offset, offset, offset + rng.randint(1, 500), max(0, offset - 100)])  # idle runs, resets
        steps.append((at, offset))
    replay(steps, max_samples=rng.choice([2, 3, 5, 120]), max_age_s=rng.choice([None, 120.0, 7200.0]))


def test_a_full_window_drops_its_oldest_member_and_appends_the_newest() -> None:
    raw = "1@0.0;2@60.0;3@120.0"
    assert append_member(raw, OffsetSample(180.0, 4), 3, None) == "2@60.0;3@120.0;4@180.0"
    assert append_member(raw, OffsetSample(100.0, 4), 3, None) == raw  # a late sample changes nothing


def test_packed_samples_parse_only_what_is_read() -> None:
    window = PackedSamples("5@0.0;not a sample;9@300.0")
    assert (len(window), window[0], window[-1]) == (3, OffsetSample(0.0, 5), OffsetSample(300.0, 9))
    with pytest.raises(ValueError):
        window[1]  # reading the malformed member is what fails


@pytest.mark.parametrize("raw", ["1@0.0;2", "1;2@3.0", "1@2@3.0", "x@1.0"])
def test_a_malformed_window_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        _decode(raw)


def test_packed_records_read_back_the_records_in_order() -> None:
    from lagsched.adapters.lag_store import LagRecord, PackedRecords

    records = tuple(LagRecord(at=60.0 * i, lag=i * 10, lost=i % 2, state="ok") for i in range(5))
    packed = PackedRecords([r.to_member() for r in records])
    assert packed == records and len(packed) == 5
    assert (packed[-1], packed[0], tuple(packed[1:3])) == (records[-1], records[0], records[1:3])
    assert list(reversed(packed)) == list(reversed(records))
    with pytest.raises(IndexError):
        packed[5]  # past the end, as a tuple
