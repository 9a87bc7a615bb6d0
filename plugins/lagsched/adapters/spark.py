"""Spark sessions and spark-submit command lines with lagsched's jars (Iceberg, its JDBC driver, S3A),
from local files."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from lagsched.adapters.class_archive import archive_options
from lagsched.environment import lake_jars

log = logging.getLogger(__name__)


def session(app_name: str, *, master: str | None = "local[2]", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark session with the lake's jars, resolving no package at start.

    ``master=None`` leaves the master to ``spark-submit --master`` (a job must not override it).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder.config("spark.jars", ",".join(lake_jars()))
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        # Spark keeps every job, stage and task of the application in its status store, UI or not,
        # up to these bounds (defaults 1,000 jobs and stages): a slot runs a job per batch for an
        # hour, and nothing reads their history.
        .config("spark.ui.retainedJobs", "50")
        .config("spark.ui.retainedStages", "50")
        .config("spark.ui.retainedTasks", "2000")
        .config("spark.sql.ui.retainedExecutions", "50")
        # Timestamps are read and hour partitions computed in UTC, whatever the hosts' zones.
        .config("spark.sql.session.timeZone", "UTC")
        # Parquet timestamps as plain INT64 micros (INT96 is deprecated; every reader knows micros).
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def submit_command(
    application: str,
    args: Sequence[str],
    *,
    master: str = "local[2]",
    java_options: Sequence[str] = (),
    class_archive: str | None = None,
    record_classes: bool = False,
) -> list[str]:
    """The ``spark-submit`` argv for a lagsched job, with the lake's jars and the venv's python.

    ``java_options`` go to the driver's JVM (in local mode the executors run in it too), e.g. the
    C1-only compiler that halves a short job's start-up CPU.

    ``class_archive`` names a JVM class-data archive (CDS, JDK 13+) of the job's classes: the JVM
    maps the classes from it instead of loading and verifying them one by one, which took a
    quarter off a test slot's start-up CPU (docs/consumer.md, "Start-up from a class-data archive"). With
    ``record_classes`` the JVM writes it there as it exits normally; give each recording JVM a
    path of its own and move the file into place afterwards, as a JVM may map it meanwhile.
    Without ``record_classes`` a missing archive is skipped, and one that does not match (another
    JDK, other jars) is ignored by the JVM itself. Either way the jars go on the driver's
    class path too, where an archive can hold their classes, the same for recording and mapping.
    """
    bin_dir = os.path.dirname(sys.executable)
    log4j = os.path.join(os.path.dirname(os.path.abspath(application)), "log4j2.properties")
    jars = lake_jars()
    jvm = [f"-Dlog4j2.configurationFile=file:{log4j}", *java_options]
    class_path: list[str] = []
    if class_archive is not None and (record_classes or os.path.isfile(class_archive)):
        jvm.extend(archive_options(class_archive, record=record_classes))
        class_path = ["--driver-class-path", os.pathsep.join(jars)]
    return [
        os.path.join(bin_dir, "spark-submit"),
        "--master",
        master,
        "--driver-java-options",
        " ".join(jvm),
        *class_path,
        "--jars",
        ",".join(jars),
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        application,
        *args,
    ]
