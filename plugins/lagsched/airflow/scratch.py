"""The scratch folders of the operator's ``spark-submit`` runs, and the sweep of those a kill left behind.

Each run works in a folder of its own under the temporary directory (Spark makes ``artifacts/`` in
its working directory and, as its local dir, copies the lake's jars there, 56 MB, at every
start). The run removes it when it ends; a run whose task process and JVM were killed cannot, and
on a Celery or local executor its folders pile up in ``/tmp``. So every folder holds a lock file,
locked by the task process and inherited by ``spark-submit`` and so by Spark's JVM (hand
`ScratchFolder.lock_fd` to the child in ``pass_fds``): while any of them lives the lock is held,
and once all are gone the next run's `sweep_scratch` removes the folder.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime

from lagsched.core.times import epoch_s

__all__ = ["LOCK_FILE", "SCRATCH_PREFIX", "ScratchFolder", "scratch_folder", "sweep_scratch"]

log = logging.getLogger(__name__)

SCRATCH_PREFIX = "lagsched-spark-"
LOCK_FILE = ".in-use"
#: A folder younger than this is never swept: its run may not have taken the lock yet.
MIN_AGE_S = 60.0
#: A folder without a lock file (made before runs locked theirs) is swept once this old.
UNLOCKED_AGE_S = 24 * 3600.0


@dataclass(frozen=True)
class ScratchFolder:
    path: str
    #: The open, locked lock file: pass it to the run's process (``pass_fds``) so the lock lives as
    #: long as the longest-lived of them.
    lock_fd: int


@contextmanager
def scratch_folder(parent: str | None = None) -> Iterator[ScratchFolder]:
    """A fresh, locked scratch folder in `parent` (the temporary directory), removed on leaving;
    the folders earlier runs left behind are swept first."""
    parent = parent or tempfile.gettempdir()
    sweep_scratch(parent)
    path = tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent)
    fd = os.open(os.path.join(path, LOCK_FILE), os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield ScratchFolder(path, fd)
    finally:
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)


def sweep_scratch(parent: str, *, now: datetime | None = None) -> list[str]:
    """Remove the scratch folders in `parent` that no live process holds; returns their paths.

    Only this user's own directories named ``lagsched-spark-*`` count (``/tmp`` is shared: a link or
    another user's folder is left alone), and none younger than a minute. ``now`` (aware; default
    the wall clock) meets the folders' modification times as epoch seconds.
    """
    now_s = epoch_s(datetime.now(tz=UTC) if now is None else now)
    removed = []
    for entry in os.scandir(parent):
        if not entry.name.startswith(SCRATCH_PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or now_s - info.st_mtime < MIN_AGE_S:
            continue
        if _abandoned(entry.path, age_s=now_s - info.st_mtime):
            size = _size_mb(entry.path)
            shutil.rmtree(entry.path, ignore_errors=True)
            log.info("removed %s (%.0f MB), the scratch folder of a Spark run that was killed", entry.path, size)
            removed.append(entry.path)
    return removed


def _abandoned(path: str, *, age_s: float) -> bool:
    try:
        fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return age_s >= UNLOCKED_AGE_S
    except OSError:  # a link, or not ours to open
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # a process of the run still holds it
    finally:
        os.close(fd)  # closing drops the lock if this took it
    return True


def _size_mb(path: str) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total / 1e6
