#!/usr/bin/env bash
# `make demo`: dependencies are already installed by `make deps`; this runs the demo driver.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${VENV:-.venv}/bin/python" -m lagsched.demo
