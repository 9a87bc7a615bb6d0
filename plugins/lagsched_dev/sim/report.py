"""Run the (trace x policy) grid, shape the results JSON, judge it, and plot it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lagsched.core.config import PolicyName, TopicPolicyConfig
from lagsched_dev.sim.engine import DEFAULT_REBALANCE_PAUSE_S, PauseModel, Run, simulate
from lagsched_dev.sim.keda import KedaHpa
from lagsched_dev.sim.traces import TRACES

__all__ = [
    "KEDA_SWEEP",
    "POLICY_NAMES",
    "STABLE_GROWTH_PER_HOUR",
    "STABLE_PEAK_RISE",
    "Verdict",
    "format_sweep",
    "format_table",
    "is_lag_stable",
    "judge",
    "keda_sweep",
    "plot_trace",
    "results_json",
    "run_grid",
]

POLICY_NAMES: tuple[PolicyName, ...] = ("hevo", "keda", "capacity")

KEDA_SWEEP: tuple[int, ...] = (10, 5_000, 12_500, 25_000, 100_000)
"""KEDA ``lagThreshold`` values `keda_sweep` tries by default: KEDA's own default (10), a fraction
of, equal to, and multiples of the default 12,500 (one worker's backlog for the drain target)."""


def run_grid(
    traces: Iterable[str],
    policies: Sequence[PolicyName] = POLICY_NAMES,
    base: TopicPolicyConfig | None = None,
    *,
    sample_window: int = 120,
    rebalance_pause_s: float = DEFAULT_REBALANCE_PAUSE_S,
    pause_model: PauseModel = "runtime",
) -> dict[str, dict[str, Run]]:
    """Simulate every trace under every policy, all with the same settings but ``policy``.

    ``keda`` is the KEDA/HPA model (`lagsched_dev.sim.keda.KedaHpa`) with ``lagThreshold`` =
    ``base.lag_threshold`` and the same worker bounds; the others run through the real evaluator.
    """
    config = base if base is not None else TopicPolicyConfig()
    out: dict[str, dict[str, Run]] = {}
    for name in traces:
        trace = TRACES[name]
        out[name] = {}
        for policy in policies:
            keda = None
            if policy == "keda":
                keda = KedaHpa(
                    lag_threshold=config.lag_threshold,
                    min_replicas=config.min_workers,
                    max_replicas=min(config.max_workers, trace.partitions),
                )
            out[name][policy] = simulate(
                trace,
                config.model_copy(update={"policy": policy}),
                sample_window=sample_window,
                rebalance_pause_s=rebalance_pause_s,
                keda=keda,
                pause_model=pause_model,
            )
    return out


def results_json(runs: Mapping[str, Mapping[str, Run]]) -> dict[str, Any]:
    """``{"traces": {trace: {policy: figures}}}``, the shape `bench/results/simulation.json` holds."""
    return {
        "traces": {
            trace: {policy: run.figures.as_json() for policy, run in by_policy.items()}
            for trace, by_policy in runs.items()
        }
    }


STABLE_GROWTH_PER_HOUR = 0.01
"""`is_lag_stable`: the largest trend, as a fraction of ``max_lag`` per hour, a held lag may show
(at 1 %/h it would take 100 hours to grow by ``max_lag``)."""

STABLE_PEAK_RISE = 0.1
"""`is_lag_stable`: how far, as a fraction of ``max_lag``, the last third's peak may exceed the
middle third's before rising peaks count as growth."""


def is_lag_stable(run: Run, max_lag: int) -> bool:
    """True when the policy holds the lag: over the last third of the run the mean lag is at most
    ``max_lag``, and the lag is not growing. Growing means both signs of it: the least-squares trend
    rises by more than `STABLE_GROWTH_PER_HOUR` x ``max_lag`` per hour, *and* the peak rises more
    than `STABLE_PEAK_RISE` x ``max_lag`` above the middle third's.

    Trend, not peak ratios: a 0 -> 4.3M ramp's last quarter peaks only 4/3 above the third's, yet
    it shows both signs. Both signs are required because a policy's slow oscillation (hevo's cycles
    last hours) gives a trend from its phase alone, while its peaks do not rise. The level bound
    rejects a lag that stopped growing only far above its target.
    """
    n = run.lag.size
    third = n // 3
    if third < 2:
        return bool(n == 0 or float(run.lag.mean()) <= max_lag)
    hours = run.times[n - third :] / 3600.0
    last = run.lag[n - third :].astype(np.float64)
    middle = run.lag[n - 2 * third : n - third]
    if float(last.mean()) > max_lag:
        return False
    slope = float(np.polyfit(hours, last, 1)[0]) if float(np.ptp(hours)) > 0 else 0.0  # records per hour
    rising_trend = slope > STABLE_GROWTH_PER_HOUR * max_lag
    rising_peaks = float(last.max()) - float(middle.max()) > STABLE_PEAK_RISE * max_lag
    return not (rising_trend and rising_peaks)


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the policies fared against the KEDA-style baseline.

    Attributes:
        wins: per policy (not keda), the traces where it beat keda on peak lag AND worker-hours.
        best_policy: the policy with the most such wins (ties: fewer worker-hours in total).
        target_met: the best policy won in at least 3 of the traces run (of 4).
        hevo_ramp_stable: hevo's lag stabilised on the hevo_ramp trace, `is_lag_stable` (None if not run).
    """

    wins: dict[str, list[str]]
    best_policy: str
    target_met: bool
    hevo_ramp_stable: bool | None


def judge(runs: Mapping[str, Mapping[str, Run]], max_lag: int) -> Verdict:
    """Count, for each non-keda policy, the traces where it beats keda on both figures."""
    wins: dict[str, list[str]] = {}
    totals: dict[str, float] = {}
    for trace, by_policy in runs.items():
        keda = by_policy.get("keda")
        for policy, run in by_policy.items():
            if policy == "keda":
                continue
            wins.setdefault(policy, [])
            totals[policy] = totals.get(policy, 0.0) + run.figures.worker_hours
            if keda is None:
                continue
            if run.figures.peak_lag < keda.figures.peak_lag and run.figures.worker_hours < keda.figures.worker_hours:
                wins[policy].append(trace)
    best = min(wins, key=lambda p: (-len(wins[p]), totals[p])) if wins else ""
    ramp = runs.get("hevo_ramp", {}).get("hevo")
    return Verdict(
        wins=wins,
        best_policy=best,
        target_met=bool(best) and len(wins[best]) >= 3,
        hevo_ramp_stable=None if ramp is None else is_lag_stable(ramp, max_lag),
    )


def keda_sweep(
    runs: Mapping[str, Mapping[str, Run]],
    base: TopicPolicyConfig,
    thresholds: Iterable[int] = KEDA_SWEEP,
    *,
    rebalance_pause_s: float = DEFAULT_REBALANCE_PAUSE_S,
    pause_model: PauseModel = "runtime",
) -> dict[str, Any]:
    """The KEDA baseline at each of `thresholds`, and which of `runs`' other policies beat it where.

    Returns ``{"pause_model", "thresholds": {threshold: {"keda": {trace: figures}, "wins": {policy:
    [traces]}}}}``; the non-keda runs are reused, so only the baseline is re-simulated.
    """
    out: dict[str, Any] = {}
    for threshold in thresholds:
        config = base.model_copy(update={"keda_lag_threshold": threshold})
        keda = run_grid(runs, ("keda",), config, rebalance_pause_s=rebalance_pause_s, pause_model=pause_model)
        merged = {
            trace: {**{p: r for p, r in by_policy.items() if p != "keda"}, "keda": keda[trace]["keda"]}
            for trace, by_policy in runs.items()
        }
        out[str(threshold)] = {
            "keda": {trace: keda[trace]["keda"].figures.as_json() for trace in runs},
            "wins": judge(merged, base.max_lag).wins,
        }
    return {"pause_model": pause_model, "thresholds": out}


def format_sweep(sweep: Mapping[str, Any]) -> str:
    """`keda_sweep`'s result as a text table: per threshold and trace, keda's peak lag and
    worker-hours, then the policies that beat it there."""
    lines = [f"KEDA lagThreshold sweep (pause model {sweep['pause_model']}):"]
    for threshold, entry in sweep["thresholds"].items():
        cells = ", ".join(
            f"{trace} {fig['peak_lag']}/{fig['worker_hours']:.1f}h" for trace, fig in entry["keda"].items()
        )
        wins = "; ".join(
            f"{policy} beats it in {len(won)} ({', '.join(won) or '-'})" for policy, won in entry["wins"].items()
        )
        lines.append(f"  {threshold:>7}: {cells}")
        lines.append(f"           {wins}")
    return "\n".join(lines)


def plot_trace(trace: str, by_policy: Mapping[str, Run], max_lag: int, path: Path) -> None:
    """PNG of lag, workers and time lag over time, one line per policy, at `path`."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers or CI
    import matplotlib.pyplot as plt

    fig, (ax_lag, ax_workers, ax_time) = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    needed_drawn = False
    for policy, run in by_policy.items():
        hours = run.times / 3600.0
        ax_lag.plot(hours, run.lag, label=policy, linewidth=1)
        ax_workers.step(hours, run.workers, where="post", label=policy, linewidth=1)
        ax_time.plot(hours, run.time_lag / 60.0, label=policy, linewidth=1)
        if not needed_drawn:
            rate = TRACES[trace].worker_rate
            ax_workers.plot(
                hours, run.ingress / rate, color="grey", linewidth=0.6, alpha=0.6, label="ingress / worker rate"
            )
            needed_drawn = True
    ax_lag.axhline(max_lag, color="black", linestyle="--", linewidth=0.8, label=f"max_lag {max_lag}")
    ax_lag.set_ylabel("lag (records)")
    ax_lag.set_yscale("symlog", linthresh=max(1.0, max_lag / 10))
    ax_lag.set_ylim(bottom=0)
    ax_workers.set_ylabel("workers")
    ax_time.set_ylabel("time lag (min)")
    ax_time.set_xlabel("hours")
    ax_lag.set_title(f"{trace}: {TRACES[trace].description}")
    for ax in (ax_lag, ax_workers, ax_time):
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_table(runs: Mapping[str, Mapping[str, Run]]) -> str:
    """The figures as an aligned text table."""
    head = (
        f"{'trace':<11} {'policy':<9} {'peak_lag':>10} {'peak_tl_s':>10} {'s_above':>8} {'worker_h':>9} "
        f"{'changes':>7} {'lost':>8} {'final':>9}"
    )
    lines = [head, "-" * len(head)]
    for trace, by_policy in runs.items():
        for policy, run in by_policy.items():
            f = run.figures
            lines.append(
                f"{trace:<11} {policy:<9} {f.peak_lag:>10} {f.peak_time_lag_s:>10.0f} {f.seconds_above_target:>8} "
                f"{f.worker_hours:>9.1f} {f.scaling_changes:>7} {f.records_lost:>8} {f.final_lag:>9}"
            )
    return "\n".join(lines)
