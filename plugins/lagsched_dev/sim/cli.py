"""``lagsched-dev simulate``: run the policy simulator, print and store the figures, plot each trace.

The ``lagsched`` command wires this in with::

    sub = subparsers.add_parser("simulate", help="policy simulator")
    add_arguments(sub)
    sub.set_defaults(func=run)

Exit status: 0, or 1 with ``--check`` when the done-when target is missed (see docs/simulator.md),
2 on a bad settings file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lagsched.core.config import TopicPolicyConfig, parse_settings
from lagsched.core.errors import ConfigError
from lagsched_dev.sim.engine import DEFAULT_REBALANCE_PAUSE_S, PAUSE_MODELS
from lagsched_dev.sim.report import (
    KEDA_SWEEP,
    POLICY_NAMES,
    format_sweep,
    format_table,
    judge,
    keda_sweep,
    plot_trace,
    results_json,
    run_grid,
)
from lagsched_dev.sim.traces import TRACES, trace_names

__all__ = ["DEFAULT_OUT", "DEFAULT_PLOT", "add_arguments", "plot_path", "run"]

DEFAULT_OUT = "bench/results/simulation.json"
DEFAULT_PLOT = "bench/results/simulation_{trace}.png"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the simulator's options to `parser`."""
    parser.add_argument(
        "--trace",
        action="append",
        choices=list(TRACES),
        help="trace to run (repeatable; default: all but demo, which runs with --settings of make demo)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"write the figures JSON here (default {DEFAULT_OUT})")
    parser.add_argument(
        "--plot",
        default=DEFAULT_PLOT,
        help="PNG path per trace; '{trace}' is replaced by the trace name (default "
        f"{DEFAULT_PLOT.replace('{trace}', '<trace>')})",
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the plots")
    parser.add_argument(
        "--settings",
        help="settings Variable JSON (inline or @file) whose 'defaults' the simulated topics use "
        "(default: built-in defaults)",
    )
    parser.add_argument(
        "--keda-lag-threshold",
        type=int,
        help="lagThreshold of the KEDA baseline (default: the settings' keda_lag_threshold, else "
        "per_worker_rate x drain_target_s)",
    )
    parser.add_argument(
        "--keda-sweep",
        metavar="FILE",
        help="also run the KEDA baseline at lagThreshold "
        f"{', '.join(str(t) for t in KEDA_SWEEP)} and write its figures and the wins there",
    )
    parser.add_argument(
        "--rebalance-pause-s",
        type=float,
        default=DEFAULT_REBALANCE_PAUSE_S,
        help=f"consumption seconds a change of worker count costs each worker it stops "
        f"(default {DEFAULT_REBALANCE_PAUSE_S:g})",
    )
    parser.add_argument(
        "--pause-model",
        choices=PAUSE_MODELS,
        default="runtime",
        help="who pays that pause: 'runtime' (lagsched's started workers; all of KEDA's consumer group), "
        "or 'equal' (the whole group, for every policy); see docs/simulator.md",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 unless the done-when targets are met")


def plot_path(pattern: str, trace: str) -> Path:
    """The PNG path for `trace`: '{trace}' or '<trace>' in `pattern` replaced, else '_<trace>'
    inserted before the suffix (so several traces never overwrite one file)."""
    for token in ("{trace}", "<trace>"):
        if token in pattern:
            return Path(pattern.replace(token, trace))
    path = Path(pattern)
    return path.with_name(f"{path.stem}_{trace}{path.suffix or '.png'}")


def run(args: argparse.Namespace) -> int:
    """Simulate every trace under the hevo, keda and capacity policies with the real evaluator."""
    try:
        config = _base_config(args.settings)
    except ConfigError as exc:
        print(f"lagsched-dev simulate: {exc}", file=sys.stderr)
        return 2
    if args.keda_lag_threshold is not None:
        config = config.model_copy(update={"keda_lag_threshold": args.keda_lag_threshold})
    traces = args.trace or trace_names()
    runs = run_grid(
        traces, POLICY_NAMES, config, rebalance_pause_s=args.rebalance_pause_s, pause_model=args.pause_model
    )
    payload = results_json(runs)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if not args.no_plot:
        for trace, by_policy in runs.items():
            plot_trace(trace, by_policy, config.max_lag, plot_path(args.plot, trace))

    verdict = judge(runs, config.max_lag)
    sweep = None
    if args.keda_sweep:
        sweep = keda_sweep(runs, config, rebalance_pause_s=args.rebalance_pause_s, pause_model=args.pause_model)
        sweep_path = Path(args.keda_sweep)
        sweep_path.parent.mkdir(parents=True, exist_ok=True)
        sweep_path.write_text(json.dumps(sweep, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(format_table(runs))
        print()
        for policy, won in verdict.wins.items():
            print(
                f"{policy} beats keda (lag_threshold {config.lag_threshold}) on peak lag and worker-hours in: "
                f"{', '.join(won) or 'no trace'}"
            )
        print(f"best policy: {verdict.best_policy}; target (>= 3 of 4 traces) met: {verdict.target_met}")
        if verdict.hevo_ramp_stable is not None:
            print(f"hevo policy's lag stabilises on hevo_ramp: {verdict.hevo_ramp_stable}")
        if sweep is not None:
            print()
            print(format_sweep(sweep))
        print(f"figures written to {out}")
    if args.check and not (verdict.target_met and verdict.hevo_ramp_stable is not False):
        return 1
    return 0


def _base_config(settings: str | None) -> TopicPolicyConfig:
    if not settings:
        return TopicPolicyConfig()
    text = Path(settings[1:]).read_text(encoding="utf-8") if settings.startswith("@") else settings
    return parse_settings(text).defaults
