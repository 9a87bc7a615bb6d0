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


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks named in `argv` (module names or their last part, ``sink`` for
    ``lagsched_dev.bench.sink``; default: all of `BENCHMARKS`)."""
    wanted = [(n, a) for n, a in BENCHMARKS if not argv or n in argv or n.rsplit(".", 1)[-1] in argv]
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
