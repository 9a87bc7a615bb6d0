"""The commits-at-scale benchmark's own logic: the slots' lanes and ranges, and the figures it reports.

The history it builds must look like slots' batches (disjoint lanes, ranges that continue each
other) and its figures (windows, growth per MB, the extrapolation of a build cut short) must be
arithmetic one can check by hand; none of this needs Spark.
"""

from __future__ import annotations

import pytest

from lagsched_dev.bench.commit_scale import (
    TARGET_COMMIT_S_P99,
    Commit,
    Run,
    commit_ranges,
    history_figures,
    history_snapshots,
    lanes_of,
    slope,
)

pytestmark = pytest.mark.unit


def test_six_hours_of_twenty_slots_every_30_s() -> None:
    assert history_snapshots(20) == 14_400
    assert history_snapshots(10, hours=1, interval_s=60) == 600


def test_lanes_are_disjoint_and_cover_twenty_topics() -> None:
    lanes = [lane for slot in range(20) for lane in lanes_of(slot, 20)]
    assert len(lanes) == len(set(lanes)) == 400
    assert len({topic for topic, _ in lanes}) == 20
    assert all(len({t for t, _ in lanes_of(slot, 20)}) == 20 for slot in range(20))  # a batch spans 20 topics


def test_ranges_continue_from_round_to_round() -> None:
    lanes = lanes_of(3, 20)
    for round_ in range(5):
        now, after = commit_ranges(lanes, round_), commit_ranges(lanes, round_ + 1)
        assert set(now) == set(lanes)
        for lane in lanes:
            assert now[lane][0] < now[lane][1] == after[lane][0]


def test_slope() -> None:
    assert slope([0.0, 1.0, 2.0], [0.5, 0.7, 0.9]) == pytest.approx(0.2)
    assert slope([5.0], [1.0]) == 0.0


def _run(commits: int, *, base_s: float = 0.1, per_mb: float = 0.05, bytes_per_snapshot: int = 2000) -> Run:
    """Commits whose time grows linearly with the metadata file (``per_mb`` seconds per MB)."""
    out = []
    for n in range(commits):
        size = (n + 1) * bytes_per_snapshot
        out.append(Commit(n, n % 20, 0.01, base_s + per_mb * size / 1e6, size))
    return Run(commits=out)


def test_history_figures_of_a_finished_build() -> None:
    run = _run(2000)
    h = history_figures(run, slots=20, per_commit=20, in_flight=2, build_s=100.0, finished=True, target=2000)
    assert h["snapshots"] == 2000 and h["metadata_bytes"] == 4_000_000
    assert h["window_commits"] == 500
    assert h["commit_s_p99"] == pytest.approx(0.1 + 0.05 * 3.98, abs=1e-3)  # of the last 500
    assert h["first_commits_p99"] == pytest.approx(0.1 + 0.05 * 0.99, abs=1e-3)  # of the first 500
    assert h["commit_s_per_metadata_mb"] == pytest.approx(0.05, abs=1e-4)
    assert h["met"] is (h["commit_s_p99"] <= TARGET_COMMIT_S_P99)
    assert "extrapolated_to_target" not in h


def test_a_build_cut_short_is_extrapolated_and_says_so() -> None:
    run = _run(1000)
    h = history_figures(run, slots=20, per_commit=20, in_flight=2, build_s=100.0, finished=False, target=3000)
    x = h["extrapolated_to_target"]
    assert x["EXTRAPOLATED"] is True and x["snapshots"] == 3000
    assert x["metadata_bytes"] == pytest.approx(6_000_000, rel=1e-6)
    # The last window's p99 plus 0.05 s per MB over the 4 MB still to grow.
    assert x["commit_s_p99"] == pytest.approx(h["commit_s_p99"] + 0.2, abs=2e-3)
