"""Benchmarks: each module times the code path production runs and writes JSON under bench/results/."""

from __future__ import annotations

import os


def use_local_stack_connections() -> None:
    """Outside Airflow and the test suite, point the lagsched Connections at the local stack.

    Connections already defined in the environment are left as they are; so are Spark's connector
    jars (``LAGSCHED_SPARK_JARS``), which Spark jobs started from here need too.
    """
    import sys

    from lagsched_dev.stack.config import load
    from lagsched_dev.stack.environment import connection_environment, spark_jars

    cfg = load()
    if "LAGSCHED_SPARK_JARS" not in os.environ:
        os.environ["LAGSCHED_SPARK_JARS"] = ",".join(str(p) for p in spark_jars(cfg))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if "AIRFLOW_CONN_LAGSCHED_MYSQL" in os.environ:
        return
    os.environ.update(connection_environment(cfg))
