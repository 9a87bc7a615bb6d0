"""A slot's class-data archive that does not fit is ignored by the JVM, never fatal.

`lagsched.adapters.spark.submit_command` maps the archive wherever it exists and counts on the JVM
to refuse one that does not match (other jars, another JDK, a damaged file) and start without it.
This holds that promise against the JDK the stack runs, in a JVM start of a second each, without
Spark: the flag is the one `submit_command` puts on the driver's command line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lagsched.adapters.spark import submit_command
from lagsched_dev.stack.services import java_binary


def _archive_flags(archive: Path) -> list[str]:
    argv = submit_command("job.py", [], class_archive=str(archive))
    java_options = argv[argv.index("--driver-java-options") + 1].split()
    return [o for o in java_options if o.startswith("-XX:SharedArchiveFile=")]


def test_a_damaged_or_mismatched_archive_starts_the_jvm_without_it(slot_class_archive: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(os.urandom(100_000))
    # The real archive, recorded with Spark's and the connectors' jars on the class path, given a
    # JVM whose class path holds none of them: as after an upgrade of the jars.
    for archive in (damaged, slot_class_archive):
        flags = _archive_flags(archive)
        assert flags == [f"-XX:SharedArchiveFile={archive}"]
        started = subprocess.run(
            [java_binary(), *flags, "-cp", str(tmp_path), "-version"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert started.returncode == 0, f"{archive.name}: {started.stderr}"
        assert "version" in started.stderr
    # The JVM is not simply ignoring the flag: told to insist on the archive, it refuses to start.
    insisted = subprocess.run(
        [java_binary(), "-Xshare:on", *_archive_flags(slot_class_archive), "-cp", str(tmp_path), "-version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert insisted.returncode != 0
