"""The Spark job's command line refuses a bad option before it starts anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lagsched.jobs import CONSUME_JOB

ROOT = Path(__file__).resolve().parents[2]


def test_an_unknown_start_is_refused_with_a_usage_error() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "plugins")}
    done = subprocess.run(
        [sys.executable, CONSUME_JOB, "--slot", "s1", "--start-from", "yesterday"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--start-from: invalid choice: 'yesterday'" in done.stderr
