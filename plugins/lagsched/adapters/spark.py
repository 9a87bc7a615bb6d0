"""Spark sessions with the Kafka connector from local jars, and exact offset-range reads."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lagsched.core.offsets import OffsetRange, spark_kafka_options


class SparkSetupError(RuntimeError):
    """The Kafka connector jars are missing; run `make deps`."""


def connector_jars() -> list[str]:
    """The connector jars from ``LAGSCHED_SPARK_JARS`` (set by the stack), checked to exist."""
    raw = os.environ.get("LAGSCHED_SPARK_JARS", "")
    jars = [j for j in raw.split(",") if j]
    missing = [j for j in jars if not os.path.exists(j)]
    if not jars or missing:
        raise SparkSetupError(
            "Spark's Kafka connector jars are not available "
            f"(LAGSCHED_SPARK_JARS={raw!r}, missing: {missing}); run `make deps`"
        )
    return jars


def session(app_name: str, *, master: str = "local[2]", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark session that can read Kafka without resolving any package at start."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", ",".join(connector_jars()))
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def read_offset_ranges(
    spark: SparkSession, kafka_config: Mapping[str, Any], ranges: Iterable[OffsetRange]
) -> DataFrame:
    """Exactly the records of ``ranges`` through Spark's Kafka batch source.

    ``failOnDataLoss`` stays true: if retention deleted part of a range, the read fails rather
    than silently skipping records.
    """
    reader = spark.read.format("kafka")
    for key, value in kafka_config.items():
        reader = reader.option(f"kafka.{key}", str(value))
    for key, value in spark_kafka_options(ranges).items():
        reader = reader.option(key, value)
    return reader.option("failOnDataLoss", "true").load()
