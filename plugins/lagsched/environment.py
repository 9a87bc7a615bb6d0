"""The settings lagsched reads from the process environment besides Connections, each in one place.

* ``LAGSCHED_SPARK_JARS``: the lake's jars for Spark (Iceberg's runtime, the JDBC driver of its
  catalog, S3A), comma-separated local paths (`lake_jars`); the stack sets it (``lagsched-dev stack
  env``), a deployment sets it for Airflow's workers and the slots.
* ``AWS_REGION``: the S3 region of the warehouse (`aws_region`, default ``us-east-1``: S3-compatible
  stores ignore it); S3's credentials come from the environment or an instance profile, never from
  lagsched's settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["DEFAULT_REGION", "SparkSetupError", "aws_region", "lake_jars"]

DEFAULT_REGION = "us-east-1"


class SparkSetupError(RuntimeError):
    """The lake's jars are missing; run `make deps`."""


def lake_jars(environ: Mapping[str, str] = os.environ) -> list[str]:
    """``LAGSCHED_SPARK_JARS``, each jar checked to exist.

    Raises:
        SparkSetupError: unset, or a jar is missing (the message says how to mend it).
    """
    raw = environ.get("LAGSCHED_SPARK_JARS", "")
    jars = [j for j in raw.split(",") if j]
    missing = [j for j in jars if not os.path.exists(j)]
    if not jars or missing:
        raise SparkSetupError(
            "the lake's jars for Spark (Iceberg, its JDBC driver, S3A) are not available to this process "
            f"(LAGSCHED_SPARK_JARS={raw!r}, missing: {missing}): run `make deps` and start Airflow with "
            "`lagsched-dev stack env` applied, or set LAGSCHED_SPARK_JARS to the jars' paths"
        )
    return jars


def aws_region(environ: Mapping[str, str] = os.environ) -> str:
    """``AWS_REGION``, or `DEFAULT_REGION`."""
    return environ.get("AWS_REGION") or DEFAULT_REGION
