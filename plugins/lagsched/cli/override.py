"""``lagsched override``: pin a topic's linker_workers for a while, list overrides, cancel one.

The same workflow as the ``lagsched_override`` DAG (`lagsched.workflows.overrides`), from the
``lagsched_mysql`` and ``lagsched_redis`` Connections (``AIRFLOW_CONN_*``; ``eval "$(lagsched-dev stack
env)"`` sets them for the local stack). The override is applied at once, recorded as a decision
(rule ``override``) and announced on ``lagsched:scaling``; it expires by itself.

Example::

    lagsched override orders --linker-workers 8 --for 2h --reason "Black Friday sale"
    lagsched override --list
    lagsched override --cancel 7

Exit status: 0 done; 1 a bad request (the message names the field) or nothing to cancel; 2 MySQL
or Redis unreachable or misconfigured (the message names the Connection).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Any

__all__ = ["add_arguments", "format_overrides", "run"]

DEFAULT_CLUSTER = "lagsched_kafka"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``lagsched override``."""
    parser.add_argument("topic", nargs="?", help="the topic to pin (with --linker-workers, --for and --reason)")
    parser.add_argument(
        "--linker-workers",
        "--workers",  # the short form, as the docs first wrote it
        dest="linker_workers",
        type=int,
        metavar="N",
        help="linker_workers to pin: 1 to the partition count (--workers for short)",
    )
    parser.add_argument(
        "--for", dest="duration", metavar="DURATION", help="how long, with units: 90m, 2h, 1h30m, 1d (at most 7d)"
    )
    parser.add_argument("--reason", help="why (recorded with the decision)")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"registry cluster (default {DEFAULT_CLUSTER})")
    parser.add_argument("--by", default=None, help="who asks (default: your OS user name)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list the active overrides (with --all: recent ones too)")
    action.add_argument("--cancel", type=int, metavar="ID", help="end override ID now")
    parser.add_argument("--all", action="store_true", help="with --list: the last 50 overrides, ended ones too")
    parser.add_argument("--json", action="store_true", help="print JSON")


def format_overrides(rows: list[Any], now: datetime) -> str:
    """A table of `lagsched.adapters.overrides.OverrideRow` s: id, topic, workers, status, until, who, why."""
    if not rows:
        return "no overrides"
    header = f"{'id':>5} {'topic':<32} {'workers':>9} {'status':<9} {'until (UTC)':<19} {'by':<16} reason"
    lines = [header, "-" * len(header)]
    for r in rows:
        left = f" ({_short((r.expires_at - now).total_seconds())} left)" if r.is_active(now) else ""
        lines.append(
            f"{r.id:>5} {r.topic[:32]:<32} {f'{r.previous_linker_workers}->{r.linker_workers}':>9} {r.status(now):<9} "
            f"{r.expires_at:%Y-%m-%d %H:%M:%S} {r.created_by[:16]:<16} {r.reason}{left}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace, *, out: IO[str] | None = None, now: datetime | None = None) -> int:
    """Apply, list or cancel; see the module docstring for the exit status."""
    from lagsched.core.errors import ConfigError, LagschedError

    stream = sys.stdout if out is None else out
    at = datetime.now(tz=UTC) if now is None else now
    by = args.by or _os_user()
    if not args.list and args.cancel is None:
        missing = [
            flag
            for flag, value in (("TOPIC", args.topic), ("--linker-workers", args.linker_workers),
                                ("--for", args.duration), ("--reason", args.reason))
            if value is None
        ]  # fmt: skip
        if missing:
            print(
                f"lagsched override: missing {', '.join(missing)}; e.g. lagsched override orders --linker-workers 8 "
                '--for 2h --reason "Black Friday" (or --list, --cancel ID)',
                file=sys.stderr,
            )
            return 1
    elif args.topic is not None:
        print("lagsched override: give a TOPIC to create an override, or --list/--cancel without one", file=sys.stderr)
        return 1
    try:
        with _clients() as (mysql, redis):
            if args.list:
                return _list(mysql, args, at, stream)
            if args.cancel is not None:
                return _cancel(mysql, args.cancel, now=at, by=by, out=stream, as_json=args.json)
            return _apply(mysql, redis, args, now=at, by=by, out=stream)
    except ConfigError as exc:
        print(f"lagsched override: {exc}", file=sys.stderr)
        return 1
    except LagschedError as exc:
        print(f"lagsched override: {exc}", file=sys.stderr)
        return 2


def _apply(mysql: Any, redis: Any, args: argparse.Namespace, *, now: datetime, by: str, out: IO[str]) -> int:
    from lagsched.core.overrides import parse_duration
    from lagsched.workflows.overrides import apply_override

    result = apply_override(
        mysql,
        redis,
        cluster=args.cluster,
        topic=args.topic,
        linker_workers=args.linker_workers,
        duration_s=parse_duration(args.duration),
        reason=args.reason,
        created_by=by,
        now=now,
    )
    if args.json:
        json.dump(result.as_dict(), out, indent=2)
        out.write("\n")
    else:
        out.write(result.text() + f"\nundo early with: lagsched override --cancel {result.override.id}\n")
    return 0


def _list(mysql: Any, args: argparse.Namespace, now: datetime, out: IO[str]) -> int:
    from lagsched.adapters.overrides import active_overrides, list_overrides

    cluster = None if args.cluster in ("", "*") else args.cluster
    rows = list_overrides(mysql, cluster, limit=50) if args.all else active_overrides(mysql, cluster, now)
    if args.json:
        json.dump([r.as_dict(now) for r in rows], out, indent=2)
        out.write("\n")
    else:
        out.write(format_overrides(rows, now) + "\n")
    return 0


def _cancel(mysql: Any, override_id: int, *, now: datetime, by: str, out: IO[str], as_json: bool) -> int:
    from lagsched.adapters.overrides import get_override
    from lagsched.workflows.overrides import end_override

    if not end_override(mysql, override_id, now, by):
        row = get_override(mysql, override_id)
        why = "no such override" if row is None else f"it is already {row.status(now)}"
        print(f"lagsched override: cannot cancel override {override_id}: {why}", file=sys.stderr)
        return 1
    if as_json:
        json.dump({"cancelled": override_id, "by": by, "at": now.isoformat()}, out)
        out.write("\n")
    else:
        out.write(
            f"override {override_id} cancelled; the scaling evaluator decides the topic's workers at its next run\n"
        )
    return 0


@contextmanager
def _clients() -> Iterator[tuple[Any, Any]]:
    """MySQL and Redis from the lagsched Connections; errors name the Connection (never a password)."""
    from lagsched.adapters.clients import mysql_and_redis

    with mysql_and_redis() as clients:
        yield clients


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        return "cli"


def _short(seconds: float) -> str:
    from lagsched.core.overrides import format_duration

    return format_duration(max(0.0, seconds - seconds % 60) if seconds >= 60 else seconds)
