"""``make bench``: every benchmark in turn; each prints its figures and writes JSON under bench/results/."""

from __future__ import annotations

import importlib
import sys
import time

RESULTS = "bench/results"
# The simulator is a benchmark of policies, not of speed: once with each pause model, with the KEDA
# threshold sweep. Claims needs the running stack (make bench starts it).
BENCHMARKS: list[tuple[str, list[str]]] = [
    ("lagsched_dev.bench.assignment", []),
    ("lagsched_dev.bench.claims", []),
    ("lagsched_dev.bench.lag", []),
    ("lagsched_dev.bench.consumer", []),
    ("lagsched_dev.bench.long_slot", []),
    # Issue 40's commits at scale: a table with six hours of history, then several slots on one table.
    ("lagsched_dev.bench.commit_scale", []),
    ("lagsched_dev.bench.commit_slots", []),
    ("lagsched_dev.bench.sink", []),
    # Issue 41's typed topics: Avro and JSON values into columns, against a record at a time (no service).
    ("lagsched_dev.bench.decode", []),
    # Where a typed record's time goes in a slot's task, against the raw consumer's same decode (no service).
    ("lagsched_dev.bench.typed_task", []),
    ("lagsched_dev.bench.slot_start", []),
    # Through Airflow (started with the stack if not running); the consume DAG must be paused.
    ("lagsched_dev.bench.lifecycle", []),
    # Starts (and stops) the 3-broker rack cluster unless it is up.
    ("lagsched_dev.bench.rack", []),
    # Airflow on Celery with two workers (a standalone Airflow is stopped first); the consume DAG must be paused.
    ("lagsched_dev.bench.failover", []),
    ("lagsched_dev.sim.__main__", ["--keda-sweep", f"{RESULTS}/simulation_keda_sweep.json"]),
    (
        "lagsched_dev.sim.__main__",
        [
            "--pause-model",
            "equal",
            "--out",
            f"{RESULTS}/simulation_equal_pause.json",
            "--no-plot",
            "--keda-sweep",
            f"{RESULTS}/simulation_keda_sweep_equal_pause.json",
        ],
    ),
]


def _short(name: str) -> str:
    """A benchmark's short name: its module's last part (``sim`` for the simulator's ``__main__``)."""
    parts = name.split(".")
    return parts[-2] if parts[-1] == "__main__" else parts[-1]


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """The benchmarks named first (module names or short names), and the flags after them."""
    known = {n for n, _ in BENCHMARKS} | {_short(n) for n, _ in BENCHMARKS}
    names: list[str] = []
    for i, arg in enumerate(argv):
        if arg not in known:
            return names, argv[i:]
        names.append(arg)
    return names, []


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks named in `argv` (module names or short names, ``sink`` for
    ``lagsched_dev.bench.sink``, ``sim`` for the simulator; default: all of `BENCHMARKS`). Flags
    after one benchmark's name are its own (``consumer --help`` prints the consumer benchmark's help)."""
    names, flags = _split(list(argv or []))
    if not names and flags:
        if flags[0] in ("-h", "--help"):
            print(__doc__.strip())
            print("\nusage: python -m lagsched_dev.bench [NAME ...] | NAME [its flags]\n\nNAME is one of:")
            for n, a in BENCHMARKS:
                print(f"  {_short(n):<14} {' '.join([n, *a])}")
            return 0
        print(f"unknown benchmark {flags[0]!r}; `python -m lagsched_dev.bench --help` lists them", file=sys.stderr)
        return 2
    wanted = [(n, a) for n, a in BENCHMARKS if not names or n in names or _short(n) in names]
    if flags:
        if len(wanted) != 1:
            print(f"flags {' '.join(flags)!r} go to one benchmark; name exactly one", file=sys.stderr)
            return 2
        wanted = [(wanted[0][0], flags)]
    failed = []
    for name, args in wanted:
        module = importlib.import_module(name)
        label = " ".join([name, *args])
        print(f"==> {label}", flush=True)
        started = time.monotonic()
        code = int(module.main(args))
        print(f"==> {label}: exit {code} after {time.monotonic() - started:.1f} s\n", flush=True)
        if code != 0:
            failed.append(label)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
