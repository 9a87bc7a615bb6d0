"""Start, find and stop the stack's background processes through pid files.

The stack runs without systemd: each service is a child started in its own session (so a stop can
signal its whole process group) with stdout/stderr in ``logs/<name>.log`` and its pid in
``run/<name>.pid``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class ServiceError(RuntimeError):
    """A local service could not be started or did not become healthy; the message says where to look."""


def read_pid(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` if that process is still alive, else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    # A zombie (exited, not yet reaped by us) counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split(")")[-1].split()[0] == "Z":
                return None
    except OSError:
        return None
    return pid


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    logs: Path,
    run: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` detached in a new session, logging to ``logs/<name>.log``; returns its pid."""
    logs.mkdir(parents=True, exist_ok=True)
    run.mkdir(parents=True, exist_ok=True)
    log = (logs / f"{name}.log").open("ab")
    proc = subprocess.Popen(  # noqa: S603 - argv is built by the stack, not from user input
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=True,
    )
    log.close()
    (run / f"{name}.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def stop(name: str, run: Path, *, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> bool:
    """Signal the service's process group and wait for it to exit; SIGKILL after ``timeout_s``.

    Returns True if something was running.
    """
    pidfile = run / f"{name}.pid"
    pid = read_pid(pidfile)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    _signal_group(pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if read_pid(pidfile) is None and not _group_alive(pid):
            break
        time.sleep(0.2)
    else:
        _signal_group(pid, signal.SIGKILL)
        time.sleep(0.5)
    pidfile.unlink(missing_ok=True)
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` (children included) is still running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        # fields: state ppid pgrp ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it, parents first (read from /proc, at this instant).

    A process that started a session of its own (an Airflow task under its Celery worker) is in no
    process group of its parent's, so a group's signal misses it; its place in the tree does not.
    """
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to ``pid`` and all its descendants at once (a snapshot first, so a child that
    outlives its parent is not missed); the pids signalled."""
    tree = process_tree(pid)
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, sig)
    return tree


def stop_tree(pid: int, sig: int, *, timeout_s: float) -> None:
    """``sig`` to the tree of ``pid``; SIGKILL to whatever of it still runs after ``timeout_s``."""
    tree = kill_tree(pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(running(p) for p in tree):
            return
        time.sleep(0.25)
    for member in tree:
        if running(member):
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that runs (not gone, not a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(
    check: Callable[[], bool],
    *,
    what: str,
    timeout_s: float,
    log: Path | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll ``check`` until it is true; fail with the log's tail if the time runs out or the process dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if alive is not None and not alive():
            raise ServiceError(f"{what} exited during start-up.{_tail(log)}")
        time.sleep(0.25)
    raise ServiceError(f"{what} was not healthy after {timeout_s:.0f} s.{_tail(log)}")


def _tail(log: Path | None, lines: int = 25) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\nLast lines of {log}:\n" + "\n".join(f"  {line}" for line in text)
