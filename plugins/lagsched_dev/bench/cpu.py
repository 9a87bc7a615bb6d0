"""CPU figures of this machine and its processes, from /proc: what the benchmarks and the test
suite's CPU profile (``LAGSCHED_TEST_CPU_PROFILE``) count."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["machine_busy_s", "proc_pid_cpu_s", "proc_stat_busy_s"]


def proc_stat_busy_s(line: str, tick: int) -> float:
    """Busy CPU-seconds (all cores, neither idle nor waiting for I/O) from /proc/stat's ``cpu`` line.

    >>> proc_stat_busy_s("cpu  100 0 50 1000 20 0 5 0 0 0", 100)
    1.55
    """
    fields = [int(x) for x in line.split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / tick


def machine_busy_s() -> float:
    """Busy CPU-seconds of this machine since boot (every process: services, JVMs, this one)."""
    return proc_stat_busy_s(Path("/proc/stat").read_text().split("\n", 1)[0], os.sysconf("SC_CLK_TCK"))


def proc_pid_cpu_s(stat: str, tick: int) -> float:
    """utime + stime of a process from its /proc/<pid>/stat text (the name may hold spaces).

    >>> proc_pid_cpu_s("42 (java x) S " + " ".join(["0"] * 10) + " 250 50 0 0", 100)
    3.0
    """
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / tick
