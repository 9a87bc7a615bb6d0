"""Sample windows appended inside Redis (`LagStore.add_samples`, a Lua script) against the rule the
simulator uses (`SampleWindow.add`): random histories replayed through both leave the same
samples, and the digest the script returns gives the lag math what the whole window gives it."""

from __future__ import annotations

import logging
import random
from typing import Any

import pytest

from lagsched.adapters.lag_store import LagStore, _encode
from lagsched.core.lag import OffsetSample, SampleWindow, estimate_time_lag, offset_rate
from lagsched.core.pipeline_state import last_progress_at

T0 = 1_790_000_000.0


def _history(rng: random.Random, steps: int) -> list[OffsetSample]:
    at, offset, out = T0, 0, []
    for _ in range(steps):
        at += rng.choice([0.0, 0.5, 60.0, 61.25, 3600.0, -5.0])  # equal, late and out-of-order times too
        offset = rng.choice([offset, offset, offset + rng.randint(1, 500), max(0, offset - 100)])  # idle runs, resets
        out.append(OffsetSample(at, offset))
    return out


def _subsequence(part: tuple[OffsetSample, ...], whole: tuple[OffsetSample, ...]) -> bool:
    rest = iter(whole)
    return all(any(s == w for w in rest) for s in part)


@pytest.mark.parametrize(("max_samples", "max_age_s"), [(2, 120.0), (3, 7200.0), (5, 120.0), (120, 7200.0), (120, 1e9)])
def test_appending_in_redis_keeps_the_windows_rule_and_the_digest_reads_the_same(
    redis_client: Any, cluster: str, max_samples: int, max_age_s: float
) -> None:
    """40 partitions of one topic, each its own random history, appended together step by step."""
    store = LagStore(redis_client, cluster, max_samples=max_samples, max_age_s=max_age_s)
    rng = random.Random(max_samples * 7 + int(max_age_s))
    histories = [_history(rng, 300) for _ in range(40)]
    keys = [store.latest_key("orders", p) for p in range(40)]
    windows = [SampleWindow(max_samples, max_age_s) for _ in keys]
    for step in range(300):
        samples = {k: h[step] for k, h in zip(keys, histories, strict=True)}
        # A position anywhere around the window, its ends included: the time lag's committed offset.
        positions = {k: h[step].offset + rng.choice([-600, -250, -1, 0, 1, 250]) for k, h in zip(keys, histories)}
        digests = store.add_samples(samples, positions)
        stored = redis_client.hmget(f"lagsched:{cluster}:latest:orders", [str(p) for p in range(40)])
        for i, key in enumerate(keys):
            windows[i] = windows[i].add(samples[key])
            whole, part = windows[i].samples, digests[key].samples
            assert stored[i] == _encode(whole), (step, i)
            assert _subsequence(part, whole) and part[0] == whole[0] and part[-1] == whole[-1]
            at, pos = samples[key].at, positions[key]
            assert estimate_time_lag(part, committed=pos, at=at + 30) == estimate_time_lag(
                whole, committed=pos, at=at + 30
            )
            assert offset_rate(part) == offset_rate(whole)
            assert last_progress_at([part]) == last_progress_at([whole])


def test_a_full_window_is_bisected_on_the_text_for_any_position(redis_client: Any, cluster: str) -> None:
    """120 samples, offsets 0, 10, ... 1190: every position inside gives its two neighbours."""
    store = LagStore(redis_client, cluster, max_samples=120, max_age_s=1e6)
    key = store.latest_key("orders", 0)
    for i in range(120):
        store.add_samples({key: OffsetSample(T0 + 60 * i, 10 * i)})
    whole = store.read_windows([key])[0].samples
    late = OffsetSample(T0, 0)  # older than the newest sample: ignored, the window stays as it is
    for position in range(-3, 1200):
        digest = store.add_samples({key: late}, {key: position})[key].samples
        assert estimate_time_lag(digest, committed=position, at=T0 + 7200) == estimate_time_lag(
            whole, committed=position, at=T0 + 7200
        )
        if 0 <= position < 1190:
            below = [s.offset for s in digest if s.offset <= position][-1]
            above = next(s.offset for s in digest if s.offset > position)
            assert (below, above) == (position // 10 * 10, position // 10 * 10 + 10)
    assert store.read_windows([key])[0].samples == whole


def test_a_window_of_many_partitions_in_one_hash_is_read_in_slices(redis_client: Any, cluster: str) -> None:
    """1,200 partitions in one topic's hash: more fields than one HMGET slice (500) or HSET (1,000)."""
    store = LagStore(redis_client, cluster)
    keys = [store.latest_key("wide", p) for p in range(1200)]
    store.add_samples({k: OffsetSample(T0, p) for p, k in enumerate(keys)})
    digests = store.add_samples({k: OffsetSample(T0 + 60, p + 60) for p, k in enumerate(keys)})
    assert [digests[k].samples for k in keys] == [
        (OffsetSample(T0, p), OffsetSample(T0 + 60, p + 60)) for p in range(1200)
    ]
    assert redis_client.hlen(f"lagsched:{cluster}:latest:wide") == 1200


def test_a_window_stored_without_its_count_is_read_and_rewritten_with_it(redis_client: Any, cluster: str) -> None:
    store = LagStore(redis_client, cluster, max_samples=3, max_age_s=7200)
    key, h = store.latest_key("orders", 0), f"lagsched:{cluster}:latest:orders"
    redis_client.hset(h, "0", ";".join(f"{10 * i}@{T0 + 60 * i!r}" for i in range(3)))  # the layout before
    assert [s.offset for s in store.read_windows([key])[0].samples] == [0, 10, 20]
    late = store.add_samples({key: OffsetSample(T0, 5)}, {key: 15})[key]  # ignored: the text stays as it was
    assert [s.offset for s in late.samples] == [0, 10, 20] and redis_client.hget(h, "0").startswith("0@")
    digest = store.add_samples({key: OffsetSample(T0 + 180, 30)}, {key: 15})[key]
    assert [s.offset for s in digest.samples] == [10, 20, 30]  # the count bound applied
    assert redis_client.hget(h, "0") == _encode([OffsetSample(T0 + 60 * i, 10 * i) for i in (1, 2, 3)])
    redis_client.hset(h, "0", "x:" + redis_client.hget(h, "0").partition(":")[2])  # a bad count is counted again
    store.add_samples({key: OffsetSample(T0 + 240, 40)})
    assert redis_client.hget(h, "0") == _encode([OffsetSample(T0 + 60 * i, 10 * i) for i in (2, 3, 4)])


@pytest.mark.parametrize(
    "stored",
    [
        "garbage",
        f"1@x;2@{T0}",
        f"1@{T0};;2@{T0 + 60}",
        f"5@{T0};zz;9@{T0 + 300}",
        f"1@{T0};2",
        f"1@{T0};2@{T0 + 60};3@1.5.5",  # a bad time that only the reader of the digest parses
        f"999:1@{T0};2@{T0 + 60}",  # a count larger than the members
    ],
)
def test_a_malformed_stored_window_starts_afresh_with_a_warning(
    redis_client: Any, cluster: str, stored: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = LagStore(redis_client, cluster)
    key = store.latest_key("orders", 3)
    redis_client.hset(f"lagsched:{cluster}:latest:orders", "3", stored)
    with caplog.at_level(logging.WARNING, logger="lagsched.adapters.lag_store"):
        digest = store.add_samples({key: OffsetSample(T0 + 600, 42)}, {key: 10})[key]
    assert digest.samples == (OffsetSample(T0 + 600, 42),)
    assert redis_client.hget(f"lagsched:{cluster}:latest:orders", "3") == _encode((OffsetSample(T0 + 600, 42),))
    assert f"sample window {key} was malformed" in caplog.text
