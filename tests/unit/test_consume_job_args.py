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


def test_the_command_line_takes_its_defaults_from_the_slots_settings_and_the_plan_its_option_names() -> None:
    from dataclasses import fields

    from lagsched.jobs.consume import parse_args
    from lagsched.workflows.consume_plan import SlotOptions
    from lagsched.workflows.slot_settings import ConsumerSettings

    args = vars(parse_args(["--slot", "s1"]))
    settings = ConsumerSettings(slot_id="s1")
    # Every setting the command line sets, by the same name, defaults to what ConsumerSettings says.
    shared = [f.name for f in fields(ConsumerSettings) if f.name in args]
    assert len(shared) >= 12, shared
    for name in shared:
        expected = getattr(settings, name)
        assert args[name] == getattr(expected, "value", expected), name
    # The plan's options are the job's, by name: what it passes, the job parses back.
    plan = SlotOptions(budget_s=120, min_interval_s=2.5, min_records=7)
    back = vars(parse_args(["--slot", "s1", *plan.args()]))
    assert (back["budget_s"], back["min_interval_s"], back["min_records"]) == (120, 2.5, 7)
