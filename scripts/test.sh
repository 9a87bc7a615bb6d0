#!/usr/bin/env bash
# `make test`'s pytest part: every tier against one local stack, started once here.
#
# TEST_WORKERS=1 (the default) runs every test in one pytest process, as CI does. With more:
# most tests wait (on Airflow's scheduler, a Spark slot's start, a lease to run out) more than they
# compute, so TEST_WORKERS pytest-xdist workers run them side by side, each test in a database, a
# Redis DB, a cluster name and topics of its own. Tests that share one resource of the stack (its
# Airflow, the rack cluster, the Spark cluster) stay on one worker (tests/conftest.py). The tests
# marked `serial` stop one of the stack's services, which would fail everything running beside
# them: they run alone, afterwards. Both phases always run; the exit status is non-zero if either
# failed, or if the stack cannot start. Not the default: on two cores the suite is bound by CPU (the
# Spark slots), so side by side gains little (2 workers: 29.7 min; 4 workers failed timing bounds
# under the load; README, "Tests").
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$PWD/.venv}
PY=$VENV/bin/python
LAGSCHED_DEV=$VENV/bin/lagsched-dev
WORKERS=${TEST_WORKERS:-1}

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

was_up=0
"$LAGSCHED_DEV" stack status >/dev/null 2>&1 && was_up=1
stop_stack() {
  if [ "$was_up" = 0 ] && [ -z "${LAGSCHED_KEEP_STACK:-}" ]; then
    say "stopping the stack this run started"
    "$LAGSCHED_DEV" stack down >/dev/null || true
  fi
}
trap stop_stack EXIT

say "starting the local stack (Kafka, MariaDB, Redis, S3Proxy)"
"$LAGSCHED_DEV" stack up || { echo "the local stack could not start: see the lines above" >&2; exit 1; }

# Test paths given on the command line replace the whole suite (`scripts/test.sh tests/integration/x.py`).
where=tests
for arg in "$@"; do
  case "$arg" in tests|tests/*|./tests/*) where= ;; esac
done

started=$SECONDS
if [ "$WORKERS" -le 1 ]; then
  "$PY" -m pytest $where "$@"
  status=$?
  say "pytest wall time: $((SECONDS - started)) s"
  exit "$status"
fi
say "tests beside each other on $WORKERS workers (TEST_WORKERS)"
"$PY" -m pytest -n "$WORKERS" --dist loadgroup -m "not serial" $where "$@"
parallel=$?
say "tests that restart a service of the stack, alone"
"$PY" -m pytest -m serial $where "$@"
serial=$?
say "pytest wall time: $((SECONDS - started)) s (beside each other: exit $parallel; alone: exit $serial)"
[ "$parallel" = 0 ] && [ "$serial" = 0 ]
