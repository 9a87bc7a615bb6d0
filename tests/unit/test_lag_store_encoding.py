"""The lag store's encodings, read back in Python: a window's text parsed in bulk, and a topic's
lag records parsed on access (appending to a window happens in Redis: see
tests/integration/test_sample_windows.py)."""

from __future__ import annotations

import pytest

from lagsched.adapters.lag_store import LagRecord, PackedRecords, _decode, _encode, _member
from lagsched.core.lag import OffsetSample


def test_a_window_text_reads_back_to_its_samples() -> None:
    samples = (OffsetSample(1_790_000_000.25, 5), OffsetSample(1_790_000_060.0, 9), OffsetSample(1e9, 12))
    assert _encode(samples) == f"3:{_member(samples[0])};{_member(samples[1])};{_member(samples[2])}"
    assert _decode(_encode(samples)) == samples
    assert _decode(";".join(_member(s) for s in samples)) == samples  # as stored before the count, or a digest


@pytest.mark.parametrize("raw", ["1@0.0;2", "1;2@3.0", "1@2@3.0", "x@1.0", "1@2@3;4", "1;2@3@4", "1@2;;3@4", "3:"])
def test_a_malformed_window_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        _decode(raw)


def test_packed_records_read_back_the_records_in_order() -> None:
    records = tuple(LagRecord(at=60.0 * i, lag=i * 10, lost=i % 2, state="ok") for i in range(5))
    packed = PackedRecords([r.to_member() for r in records])
    assert packed == records and len(packed) == 5
    assert (packed[-1], packed[0], tuple(packed[1:3])) == (records[-1], records[0], records[1:3])
    assert list(reversed(packed)) == list(reversed(records))
    with pytest.raises(IndexError):
        packed[5]  # past the end, as a tuple
