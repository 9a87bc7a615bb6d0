"""``lagsched status``: topics (lag, time lag, linker_workers, owners, state) and slots with claims.

The same read model as the lagsched page (`lagsched.workflows.status.cluster_status`), from the
``lagsched_mysql`` and ``lagsched_redis`` Connections (``AIRFLOW_CONN_*``; ``eval "$(lagsched-dev stack
env)"`` sets them for the local stack).

Example::

    lagsched status --cluster lagsched_kafka
    lagsched status --json | jq '.topics[] | {name, lag, linker_workers}'
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import IO, Any

from lagsched.core.status import ClusterStatus
from lagsched.core.times import epoch_s

__all__ = ["add_arguments", "format_status", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``lagsched status``."""
    parser.add_argument(
        "--cluster",
        default=None,
        help="registry cluster (default: lagsched_kafka if it has topics, else the first one)",
    )
    parser.add_argument("--json", action="store_true", help="print the status as JSON (the page's /api/status)")
    parser.add_argument(
        "--slot-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="a slot silent this many seconds is not live (default 60, as the evaluator)",
    )


def _ago(at: str | None, now: datetime) -> str:
    if at is None:
        return "never"
    return f"{max(0.0, epoch_s(now) - datetime.fromisoformat(at).timestamp()):.0f} s ago"


def format_status(status: ClusterStatus) -> str:
    """A readable table of the cluster's topics, then its slots and their claims."""
    d = status.as_dict()
    names = {s["slot_id"]: s["name"] or s["slot_id"][:8] for s in d["slots"]}
    lines = [f"cluster {d['cluster']} at {d['at']}: {len(d['topics'])} topic(s), {d['live_slots']} live slot(s)"]
    header = (
        f"{'topic':<40} {'parts':>5} {'lag':>12} {'lost':>8} {'time lag s':>10} {'watermark':>12} {'workers':>7}  "
        f"{'state':<8} owners"
    )
    lines += [header, "-" * len(header)]
    for t in d["topics"]:
        lag = "-" if t["lag"] is None else f"{t['lag']:,}"
        owners = ", ".join(names.get(o, o[:8]) for o in t["owners"]) or "none"
        workers = f"{t['linker_workers']}" + ("*" if t["override"] else "")
        lines.append(
            f"{t['name'][:40]:<40} {t['partitions']:>5} {lag:>12} {t['lost']:>8,} {t['time_lag_s']:>10.1f} "
            f"{_ago(t['watermark'], status.at) if t['watermark'] else '-':>12} {workers:>7}  {t['state']:<8} {owners}"
        )
    if any(t["override"] for t in d["topics"]):
        lines.append("* linker_workers set by a manual override")
    for s in d["stuck"]:
        lines.append(f"{s['state'].upper()} {s['topic']}: {s['reason']}")
    lines.append("")
    lines.append(f"slots (live = heartbeat within {d['slot_timeout_s']:g} s):")
    if not d["slots"]:
        lines.append("  none live and none holding a partition")
    for s in d["slots"]:
        state = "live" if s["live"] else "NOT LIVE"
        seen, held = _ago(s["last_seen"], status.at), len(s["claims"])
        label = s["name"] or s["slot_id"]
        host = f" on {s['host']}" if s["host"] else ""
        lines.append(f"  {label} ({s['slot_id']}) {state}{host}, last heartbeat {seen}, {held} partition(s)")
        for c in s["claims"]:
            offset = "none" if c["committed_offset"] is None else f"{c['committed_offset']:,}"
            lines.append(f"    {c['topic']}[{c['partition']}] committed {offset}, lease until {c['lease_expires_at']}")
    for topic, n in d["dead_letters"].items():
        lines.append(f"DEAD LETTERS {topic}: {n:,} record(s) in the dead-letter table (docs/routing.md)")
    for table, n in d.get("late_records", {}).items():
        lines.append(
            f"LATE RECORDS {table}: {n:,} record(s) landed in hours already complete; "
            "their hours are restated (docs/completeness.md)"
        )
    for a in d["anomalies"]:
        where = a["topic"] + ("" if a["partition"] is None else f"[{a['partition']}]")
        lines.append(f"ANOMALY {a['kind']} {where}: {a['detail']}")
    lines.extend(f"note: {n}" for n in d["notes"])
    return "\n".join(lines)


def run(args: argparse.Namespace, *, out: IO[str] | None = None, now: datetime | None = None) -> int:
    """Print the status; 0 on success, 2 when MySQL or Redis cannot be read (the message says which)."""
    from lagsched.core.errors import LagschedError
    from lagsched.ui.sources import status_sources
    from lagsched.workflows.status import cluster_status, list_clusters

    stream = sys.stdout if out is None else out
    try:
        with status_sources() as (mysql, redis):
            cluster = args.cluster
            if cluster is None:
                known = list_clusters(mysql)
                cluster = "lagsched_kafka" if "lagsched_kafka" in known or not known else known[0]
            status = cluster_status(
                mysql, redis, cluster, datetime.now(tz=UTC) if now is None else now, slot_timeout_s=args.slot_timeout
            )
    except LagschedError as exc:
        print(f"lagsched status: {exc}", file=sys.stderr)
        return 2
    if args.json:
        payload: dict[str, Any] = status.as_dict()
        json.dump(payload, stream, indent=2)
        stream.write("\n")
    else:
        stream.write(format_status(status) + "\n")
    return 0
