"""Benchmarks: each module times the code path production runs and writes JSON under bench/results/."""

from __future__ import annotations

import os


def use_local_stack_connections() -> None:
    """Outside Airflow and the test suite, point the lagsched Connections at the local stack.

    Connections already defined in the environment are left as they are.
    """
    if "AIRFLOW_CONN_LAGSCHED_MYSQL" in os.environ:
        return
    from lagsched.stack.config import load
    from lagsched.stack.environment import connection_environment

    os.environ.update(connection_environment(load()))
