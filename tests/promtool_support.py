"""Running Prometheus' own checker, ``promtool``, from the unit tests.

promtool is a static Go binary with no service behind it (Debian ships it in the ``prometheus``
package, which scripts/bootstrap.sh installs), so its checks are unit tests. A machine without it
fails them with the fix in the message: a skipped check would read as a passed one.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

MISSING = (
    "promtool is not on PATH: it checks the /metrics text and the shipped alert rules. Install it with "
    "`apt-get install --no-install-recommends prometheus` (scripts/bootstrap.sh does), or put the promtool of a "
    "Prometheus 2.x release on PATH."
)


def promtool(*args: str | Path, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``promtool *args``, its output captured; fails the test when promtool is missing."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail(MISSING, pytrace=False)
    return subprocess.run(
        [exe, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def output(result: subprocess.CompletedProcess[str]) -> str:
    """What promtool printed, both streams, for an assertion message."""
    return f"promtool {' '.join(result.args[1:])} exited {result.returncode}:\n{result.stdout}{result.stderr}"
