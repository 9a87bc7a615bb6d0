#!/usr/bin/env bash
# `make demo`: dependencies are already installed by `make deps`; this runs the demo driver
# (plugins/lagsched_dev/demo.py). DURATION (seconds of traffic) ends it by itself; Ctrl-C ends it early,
# a second Ctrl-C stops the running consumer slots at once. Both end with the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [ -n "${DURATION:-}" ]; then
  [[ "$DURATION" =~ ^[0-9]+$ ]] || { echo "DURATION must be whole seconds, got '$DURATION'" >&2; exit 2; }
  args+=(--duration "$DURATION")
fi
# CELERY=1 (Airflow with the CeleryExecutor and two workers) and SPARK_CLUSTER=1 (the slots on the
# stack's Spark standalone cluster; docs/celery.md) are read by the demo itself.
export PYTHONPATH="$PWD/plugins${PYTHONPATH:+:$PYTHONPATH}"
exec "${VENV:-.venv}/bin/python" -m lagsched_dev.demo "${args[@]}"
