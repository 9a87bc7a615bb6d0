"""``make bench``: every benchmark in turn; each prints its figures and writes JSON under bench/results/."""

from __future__ import annotations

import importlib
import sys
import time

# The simulator is a benchmark of policies, not of speed; claims needs the running stack (make bench starts it).
BENCHMARKS = ["lagsched.bench.assignment", "lagsched.bench.claims", "lagsched.sim.__main__"]


def main(argv: list[str] | None = None) -> int:
    wanted = argv if argv else BENCHMARKS
    failed = []
    for name in wanted:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            print(f"==> {name}: not built yet, skipped", flush=True)
            continue
        print(f"==> {name}", flush=True)
        started = time.monotonic()
        code = int(module.main([]))
        print(f"==> {name}: exit {code} after {time.monotonic() - started:.1f} s\n", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
