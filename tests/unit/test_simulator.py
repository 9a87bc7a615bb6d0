"""Policy simulator sanity: record accounting, retention loss, Hevo's ramp, the JSON and the CLI."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from lagsched.core import evaluator as core_evaluator
from lagsched.core.config import TopicPolicyConfig
from lagsched.core.evaluator import is_evaluation_due
from lagsched_dev.sim import engine
from lagsched_dev.sim.cli import add_arguments, plot_path, run
from lagsched_dev.sim.engine import DEFAULT_REBALANCE_PAUSE_S, Figures, Run, simulate
from lagsched_dev.sim.keda import KedaHpa
from lagsched_dev.sim.report import is_lag_stable, judge, results_json, run_grid
from lagsched_dev.sim.traces import HOUR, TRACES, WORKER_RATE, Rates, Trace

FIGURE_KEYS = {
    "peak_lag",
    "peak_time_lag_s",
    "seconds_above_target",
    "worker_hours",
    "scaling_changes",
    "records_lost",
    "final_lag",
}


def _constant(rate: float) -> Callable[[Rates, np.random.Generator], Rates]:
    def rates(times: Rates, rng: np.random.Generator) -> Rates:
        return np.full(times.size, rate)

    return rates


def small_trace(rate: float, retention_s: float, hours: float = 6.0, partitions: int = 4) -> Trace:
    return Trace(
        "test",
        "constant ingress",
        duration_s=hours * HOUR,
        tick_s=60.0,
        partitions=partitions,
        retention_s=retention_s,
        worker_rate=WORKER_RATE,
        initial_workers=1,
        seed=0,
        rates=_constant(rate),
    )


def test_ingress_is_deterministic_and_integral() -> None:
    trace = TRACES["diurnal"]
    t1, c1 = trace.ingress()
    t2, c2 = trace.ingress()
    assert np.array_equal(c1, c2) and np.array_equal(t1, t2)
    assert np.all(c1 >= 0) and np.all(c1 == np.floor(c1))


def test_records_are_conserved_and_retention_loses_them() -> None:
    # 100 rec/s against a single worker (13.9 rec/s) with 30 min retention: records must be lost.
    trace = small_trace(rate=100.0, retention_s=1_800.0, partitions=1)
    run_ = simulate(trace, TopicPolicyConfig(policy="keda", max_workers=1))
    f = run_.figures
    produced = int(trace.ingress()[1].sum())
    consumed = round(f.worker_hours * 3600 * WORKER_RATE)  # one worker, always busy
    assert f.records_lost > 0
    assert produced == pytest.approx(consumed + f.records_lost + f.final_lag, rel=0.01)
    assert f.peak_time_lag_s <= 1_800.0 + trace.tick_s  # nothing older than retention is waiting
    assert f.seconds_above_target > 0


def test_enough_capacity_means_no_lag_and_no_loss() -> None:
    f = simulate(small_trace(rate=5.0, retention_s=HOUR), TopicPolicyConfig(policy="capacity")).figures
    assert (f.peak_lag, f.records_lost, f.final_lag, f.seconds_above_target) == (0, 0, 0, 0)
    assert f.peak_time_lag_s == 0.0
    assert f.worker_hours == pytest.approx(6.0)


@functools.cache
def _ramp(every: int) -> dict[str, Run]:
    """The three policies on the ramp trace, evaluating every ``every`` measurements (simulated once per
    cadence: the default's run serves two tests)."""
    return run_grid(["hevo_ramp"], base=TopicPolicyConfig(evaluate_every=every))["hevo_ramp"]


@pytest.fixture(scope="module")
def ramp_runs() -> dict[str, Run]:
    return _ramp(TopicPolicyConfig().evaluate_every)


def test_hevo_ramp_lag_stabilises_as_workers_increase(ramp_runs: dict[str, Run]) -> None:
    """Hevo's claim: with input rising steadily, lag stabilises as jobs are added."""
    config = TopicPolicyConfig()
    for policy in ("hevo", "capacity"):
        run_ = ramp_runs[policy]
        lag = run_.lag
        workers = run_.workers
        q = lag.size // 4
        assert is_lag_stable(run_, config.max_lag), policy
        assert lag[3 * q :].max() <= 1.5 * config.max_lag, policy
        assert workers[3 * q :].mean() > workers[:q].mean() + 5, policy  # it scaled out to keep up
        assert run_.figures.records_lost == 0


def test_keda_lag_grows_with_its_workers_on_the_ramp(ramp_runs: dict[str, Run]) -> None:
    # ceil(lag / threshold) needs lag ~ threshold x workers to hold its workers: the known
    # weakness the other policies fix.
    keda = ramp_runs["keda"]
    q = keda.lag.size // 4
    assert keda.lag[3 * q :].mean() > 2 * keda.lag[q : 2 * q].mean()  # more workers, more lag
    # The HPA holds w replicas only while lag > threshold x (w - 1), less its 10 % tolerance.
    assert keda.lag[-1] >= 0.9 * TopicPolicyConfig().lag_threshold * (keda.workers[-1] - 1)


def test_results_json_shape_and_judge(ramp_runs: dict[str, Run]) -> None:
    runs = {"hevo_ramp": ramp_runs}
    payload = results_json(runs)
    assert set(payload) == {"traces"}
    assert set(payload["traces"]["hevo_ramp"]) == {"hevo", "keda", "capacity"}
    for figures in payload["traces"]["hevo_ramp"].values():
        assert set(figures) == FIGURE_KEYS
    verdict = judge(runs, TopicPolicyConfig().max_lag)
    assert set(verdict.wins) == {"hevo", "capacity"}
    assert verdict.hevo_ramp_stable is True


def test_cli_writes_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = tmp_path / "sim.json"
    args = parser.parse_args(
        ["--trace", "noisy_idle", "--json", "--out", str(out), "--plot", str(tmp_path / "p_{trace}.png")]
    )
    assert run(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert set(printed["traces"]) == {"noisy_idle"}
    assert (tmp_path / "p_noisy_idle.png").stat().st_size > 10_000


def test_cli_rejects_bad_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--settings", '{"defaults": {"policy": "nope"}}', "--out", str(tmp_path / "x.json")])
    assert run(args) == 2
    assert "defaults.policy" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("bench/results/simulation_{trace}.png", "bench/results/simulation_spike.png"),
        ("out/<trace>.png", "out/spike.png"),
        ("plots/sim.png", "plots/sim_spike.png"),
    ],
)
def test_plot_path(pattern: str, expected: str) -> None:
    assert plot_path(pattern, "spike") == Path(expected)


def test_keda_hpa_follows_the_hpa_defaults() -> None:
    hpa = KedaHpa(lag_threshold=1_000, min_replicas=1, max_replicas=12)
    assert hpa.decide(10_500, 10, 0.0) == 10  # 10,500 / (1,000 x 10) is within the 10 % tolerance
    assert hpa.decide(40_000, 2, 60.0) == 6  # wants 40, but +4 pods or +100 % per 60 s
    assert hpa.decide(500_000, 6, 120.0) == 12  # capped at max_replicas (the partitions)
    # Scale-down: the highest recommendation of the last 300 s (12, at t = 120) holds until it ages out.
    assert [hpa.decide(0, 12, t) for t in (180.0, 400.0, 421.0)] == [12, 12, 1]


def test_runtime_pause_stops_only_started_workers_equal_pause_stops_all() -> None:
    trace = small_trace(rate=40.0, retention_s=HOUR, hours=2.0, partitions=8)
    config = TopicPolicyConfig(policy="capacity")
    runtime = simulate(trace, config, pause_model="runtime")
    equal = simulate(trace, config, pause_model="equal")
    change = int(np.flatnonzero(np.diff(runtime.workers))[0])  # last tick before the first change
    assert np.array_equal(runtime.workers[: change + 2], equal.workers[: change + 2])
    old, new = int(runtime.workers[change]), int(runtime.workers[change + 1])
    assert new > old
    # The tick after a scale-up: 'equal' stops all `new` workers for 30 s, 'runtime' the started ones.
    lost = equal.lag[change + 1] - runtime.lag[change + 1]
    assert lost == pytest.approx(old * DEFAULT_REBALANCE_PAUSE_S * WORKER_RATE, abs=2)


@pytest.mark.parametrize("every", [1, 3, 5])
def test_the_simulator_evaluates_exactly_when_production_would(every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule: replay the scaling workflow's rule (count the lag records newer than the last
    evaluation, `is_evaluation_due`) over the simulated measurements; the simulator must have called
    the evaluator at exactly those times."""
    called: list[float] = []

    def spy(
        snapshot: core_evaluator.TopicSnapshot, config: TopicPolicyConfig, now: datetime
    ) -> core_evaluator.Decision:
        called.append(now.timestamp())
        return core_evaluator.evaluate(snapshot, config, now)

    monkeypatch.setattr(engine, "evaluate", spy)
    trace = small_trace(rate=40.0, retention_s=HOUR, hours=2.0, partitions=8)
    run_ = simulate(trace, TopicPolicyConfig(policy="capacity", evaluate_every=every))

    expected: list[float] = []
    last_eval: float | None = None
    for i, now in enumerate(run_.times.tolist()):
        measured_at = run_.times[: i + 1]
        since = None if last_eval is None else int(np.count_nonzero(measured_at > last_eval))
        if is_evaluation_due(since, TopicPolicyConfig(evaluate_every=every)):
            expected.append(now)
            last_eval = now
    assert called == expected
    assert called[0] == run_.times[0]  # never evaluated: at once
    assert len(called) == 1 + (run_.times.size - 1) // every


def _run(lag: list[float] | np.ndarray, tick_s: float = 60.0) -> Run:
    lag_arr = np.asarray(lag, dtype=np.float64)
    times = tick_s * np.arange(1, lag_arr.size + 1, dtype=np.float64)
    figures = Figures(int(lag_arr.max()), 0.0, 0, 0.0, 0, 0, int(lag_arr[-1]))
    zeros = np.zeros(lag_arr.size)
    return Run("synthetic", "hevo", figures, times, lag_arr, zeros, zeros, zeros)


THREE_DAYS = 3 * 24 * 60  # one-minute ticks


def test_a_linear_lag_ramp_is_not_stable() -> None:
    # The case: 0 -> 4.3M over the run. Its last quarter peaks only 4/3 above the third's.
    assert not is_lag_stable(_run(np.linspace(0.0, 4_300_000.0, THREE_DAYS)), 100_000)
    # A slow ramp that stays below max_lag throughout is still a growing lag.
    assert not is_lag_stable(_run(np.linspace(0.0, 90_000.0, THREE_DAYS)), 100_000)


def test_a_lag_parked_far_above_its_target_is_not_stable() -> None:
    assert not is_lag_stable(_run(np.full(THREE_DAYS, 4_300_000.0)), 100_000)


def test_a_lag_held_around_its_target_is_stable() -> None:
    rng = np.random.default_rng(0)
    sawtooth = 95_000.0 * (np.arange(THREE_DAYS) % 97) / 96  # 0 -> 95k every 97 min, like hevo's cycle
    assert is_lag_stable(_run(sawtooth), 100_000)
    assert is_lag_stable(_run(30_000.0 + 20_000.0 * rng.standard_normal(THREE_DAYS).clip(-1.5, 1.5)), 100_000)
    assert is_lag_stable(_run(np.linspace(80_000.0, 10_000.0, THREE_DAYS)), 100_000)  # draining
    # A slow cycle (30 h) whose last third shows a trend from its phase alone: the peaks do not rise.
    hours = np.arange(THREE_DAYS) / 60.0
    cycle = 50_000.0 + 45_000.0 * np.sin(2 * np.pi * (hours / 30.0 + 0.15))  # trough at 48 h
    tail = slice(2 * THREE_DAYS // 3, None)
    assert np.polyfit(hours[tail], cycle[tail], 1)[0] > 0.01 * 100_000  # the trend alone would fail it
    assert is_lag_stable(_run(cycle), 100_000)
    assert is_lag_stable(_run([0.0]), 100_000)


@pytest.mark.parametrize("every", [1, 3, 5, 10])
def test_keda_lag_on_the_ramp_is_not_stable_the_others_are(every: int) -> None:
    # Whatever the evaluation cadence (the DAG's 5 minutes is 5 one-minute measurements), which
    # moves the phase of hevo's cycles in the last third of the run.
    config = TopicPolicyConfig(evaluate_every=every)
    runs = _ramp(every)
    assert {p: is_lag_stable(r, config.max_lag) for p, r in runs.items()} == {
        "hevo": True,
        "keda": False,  # ceil(lag / threshold): its lag grows with its workers
        "capacity": True,
    }
