"""The operator's scratch folders: a folder goes once no process of its run holds its lock, never before.

Real processes and a real file system: the lock is inherited the way spark-submit inherits it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lagsched.airflow.scratch import LOCK_FILE, MIN_AGE_S, SCRATCH_PREFIX, UNLOCKED_AGE_S, scratch_folder, sweep_scratch


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _child_holding(fd: int) -> subprocess.Popen[bytes]:
    """A process that inherited `fd` (as spark-submit and its JVM do) and outlives its parent's use of it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(fd,))


def test_a_folder_lives_while_a_child_holds_its_lock_and_is_swept_once_the_child_is_gone(tmp_path: Path) -> None:
    with scratch_folder(str(tmp_path)) as scratch:
        folder = Path(scratch.path)
        assert folder.name.startswith(SCRATCH_PREFIX) and (folder / LOCK_FILE).is_file()
        child = _child_holding(scratch.lock_fd)
        (folder / "artifacts").mkdir()
        (folder / "connector.jar").write_bytes(b"x" * 1000)
        # The task process is killed here: its cleanup never runs. Simulate that by keeping the folder.
        kept = folder.with_name(folder.name + "-killed")
        folder.rename(kept)
    try:
        _age(kept, MIN_AGE_S + 5)
        assert sweep_scratch(str(tmp_path)) == []  # the child (Spark's JVM) still holds the lock
        assert kept.is_dir()
    finally:
        child.kill()
        child.wait()
    _age(kept, MIN_AGE_S + 5)
    assert sweep_scratch(str(tmp_path)) == [str(kept)]
    assert not kept.exists()


def test_leaving_removes_the_folder_and_the_next_folder_sweeps_what_a_kill_left(tmp_path: Path) -> None:
    left = tmp_path / f"{SCRATCH_PREFIX}left"
    (left / "spark-1" / "userFiles-1").mkdir(parents=True)
    (left / LOCK_FILE).touch()  # its processes are gone: nobody holds the lock
    _age(left, MIN_AGE_S + 5)
    with scratch_folder(str(tmp_path)) as scratch:
        assert not left.exists()
        assert Path(scratch.path).is_dir()
    assert not Path(scratch.path).exists()
    assert list(tmp_path.iterdir()) == []


def test_the_sweep_spares_young_foreign_and_linked_folders(tmp_path: Path) -> None:
    young = tmp_path / f"{SCRATCH_PREFIX}young"
    young.mkdir()
    (young / LOCK_FILE).touch()  # unlocked, but its run may not have locked it yet
    unlocked_recent = tmp_path / f"{SCRATCH_PREFIX}old-style"
    unlocked_recent.mkdir()  # no lock file: a run of an earlier version may still use it
    _age(unlocked_recent, UNLOCKED_AGE_S - 600)
    unlocked_old = tmp_path / f"{SCRATCH_PREFIX}old-style-stale"
    unlocked_old.mkdir()
    _age(unlocked_old, UNLOCKED_AGE_S + 600)
    other = tmp_path / "spark-not-ours"
    other.mkdir()
    _age(other, UNLOCKED_AGE_S + 600)
    target = tmp_path / "precious"
    target.mkdir()
    (target / LOCK_FILE).touch()
    link = tmp_path / f"{SCRATCH_PREFIX}link"
    link.symlink_to(target)
    os.utime(link, (0, 0), follow_symlinks=False)
    _age(target, UNLOCKED_AGE_S + 600)

    assert sweep_scratch(str(tmp_path)) == [str(unlocked_old)]
    assert young.is_dir() and unlocked_recent.is_dir() and other.is_dir() and target.is_dir() and link.is_symlink()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a folder another user owns")
def test_the_sweep_spares_another_users_folder(tmp_path: Path) -> None:
    theirs = tmp_path / f"{SCRATCH_PREFIX}theirs"
    theirs.mkdir()
    (theirs / LOCK_FILE).touch()
    os.chown(theirs, 65534, 65534)
    _age(theirs, UNLOCKED_AGE_S + 600)
    assert sweep_scratch(str(tmp_path)) == []
    assert theirs.is_dir()
