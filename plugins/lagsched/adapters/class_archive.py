"""JVM class-data archives (CDS, JDK 13+) of a slot's driver: where one lives, and the flags that use it.

A driver JVM that maps an archive of the classes a slot loads, instead of loading and verifying
them one by one, starts on about a quarter less CPU (docs/consumer.md). An archive holds the
classes of one JDK, one Spark and one set of jars, and a JVM ignores one that does not match (a
warning line, then a start as without it): so the file's name is keyed by all three, and a changed
setup records a new archive instead of mapping nothing. The jars must be on the driver's class path
(not only ``--jars``, whose loader the archive cannot hold), the same when recording and mapping.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec

__all__ = ["ARCHIVE_DIR_ENV", "archive_dir", "archive_file", "archive_options", "spark_java"]

#: Where the operator keeps its slots' archives; empty: no archive.
ARCHIVE_DIR_ENV = "LAGSCHED_CLASS_ARCHIVE_DIR"


def archive_dir(env: Mapping[str, str]) -> str | None:
    """`ARCHIVE_DIR_ENV` if set (empty: None, no archive), else ``spark-classes`` in lagsched's
    folder of the user's cache (``$XDG_CACHE_HOME``, else ``~/.cache``).

    >>> archive_dir({"LAGSCHED_CLASS_ARCHIVE_DIR": "/var/cache/cds", "HOME": "/home/a"})
    '/var/cache/cds'
    >>> archive_dir({"LAGSCHED_CLASS_ARCHIVE_DIR": ""}) is None
    True
    >>> archive_dir({"HOME": "/home/a"})
    '/home/a/.cache/lagsched/spark-classes'
    """
    if ARCHIVE_DIR_ENV in env:
        return env[ARCHIVE_DIR_ENV] or None
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "lagsched", "spark-classes")


def spark_java(env: Mapping[str, str]) -> str:
    """The ``java`` that spark-submit runs: ``$JAVA_HOME/bin/java``, else the first on ``PATH``; resolved."""
    java = (
        os.path.join(env["JAVA_HOME"], "bin", "java")
        if env.get("JAVA_HOME")
        else shutil.which("java", path=env.get("PATH"))
    )
    return os.path.realpath(java or "java")


def archive_file(directory: str, *, job: str, java: str, jars: Sequence[str], spark_home: str | None = None) -> str:
    """The archive in `directory` of `job` (the application's name: each job loads classes of its
    own, and one job's archive would hold few of another's) for this `java`, this Spark
    (`spark_home`, else the installed pyspark: its version and place, as its jars are the class
    path) and these `jars`.

    >>> os.path.basename(archive_file("/c", job="consume", java="/usr/bin/java", jars=["/j/a.jar"], spark_home="/s"))
    'consume-0894924c31bf7bed.jsa'
    """
    spark = spark_home or _pyspark_place()
    key = hashlib.sha256("\n".join([java, spark, *jars]).encode()).hexdigest()[:16]
    return os.path.join(directory, f"{job}-{key}.jsa")


def _pyspark_place() -> str:
    try:
        spec = find_spec("pyspark")  # found, not imported
        where = list(spec.submodule_search_locations or []) if spec is not None else []
        return f"{version('pyspark')} {where}"
    except PackageNotFoundError:
        return "none"


def archive_options(path: str, *, record: bool) -> list[str]:
    """The driver JVM's options that map the archive at `path`, or (`record`) write it there at a
    normal exit: a path of its own, moved into place afterwards, as another JVM may map it meanwhile.
    A recording JVM warns of every class it cannot archive (hundreds of lines in the job's log):
    it says errors only.

    >>> archive_options("/c/slot.jsa", record=False)
    ['-XX:SharedArchiveFile=/c/slot.jsa']
    >>> archive_options("/tmp/x/classes.jsa", record=True)
    ['-XX:ArchiveClassesAtExit=/tmp/x/classes.jsa', '-Xlog:cds*=error']
    """
    if record:
        return [f"-XX:ArchiveClassesAtExit={path}", "-Xlog:cds*=error"]
    return [f"-XX:SharedArchiveFile={path}"]
