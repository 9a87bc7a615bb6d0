"""lagsched's consumer: one worker slot's Spark application (docs/consumer.md).

    spark-submit --master <master> --jars "$LAGSCHED_SPARK_JARS" lagsched/jobs/consume.py --slot worker-1 [options]

Connections come from the environment as Airflow Connections (``AIRFLOW_CONN_LAGSCHED_KAFKA``,
``..._MYSQL``, ``..._REDIS``); the ``lagsched`` package from ``PYTHONPATH`` (or ``--py-files``).

Exit status: 0 when the run ended normally (time budget, SIGTERM/SIGINT, ``--exit-when-idle``, the slot
no longer owns any topic or its ``--slot-number`` is above what the cluster needs), and when the slot
already runs in another process (this start then leaves at once, touching nothing);
1 when something failed (the message says what; no offset was stored past unwritten records), or
a service that had answered stayed unreachable past ``--outage-s`` (shorter outages of Kafka, MySQL
or Redis are waited out: docs/consumer.md, "Failure handling");
3 when the slot lost a claim or its lock (a stale holder: it paused past its lease or the slot
timeout and another slot or process took over).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

STARTED = time.monotonic()

EXIT_OK, EXIT_FAILED, EXIT_LOST = 0, 1, 3

log = logging.getLogger("lagsched.consume")


def parse_args(argv: list[str]) -> argparse.Namespace:
    from lagsched.core.batches import StartFrom
    from lagsched.core.completeness import DEFAULT_ALLOWED_LATENESS_S
    from lagsched.core.lake import add_job_arguments
    from lagsched.workflows.slot_settings import default

    p = argparse.ArgumentParser(prog="consume.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--slot", required=True, help="slot name (a stable id is derived from it) or a slot UUID")
    p.add_argument(
        "--cluster", default=default("cluster"),
        help="registry cluster whose topics to consume, as in the DAGs' `cluster` param (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--budget-s", type=float, default=default("budget_s"),
        help="run this long, then finish up (default: %(default)s s)",
    )  # fmt: skip
    p.add_argument(
        "--slot-number", type=int,
        help="this slot's number n among the cluster's slots (<cluster>-slot-<n>); with --max-slots the slot "
        "leaves once the cluster's topics need fewer than n slots (the consume DAG passes both)",
    )  # fmt: skip
    p.add_argument("--max-slots", type=int, help="the cluster's max_slots (lagsched_clusters), with --slot-number")
    p.add_argument(
        "--standby-slots", type=int, default=default("standby_slots"),
        help="the cluster's standby_slots (lagsched_clusters), with --slot-number: a slot numbered up to that many "
        "above the need stands by warm, without claiming, and joins when the need reaches it (default: 0)",
    )  # fmt: skip
    p.add_argument(
        "--max-records", type=int, default=default("max_records"),
        help="max records per partition per batch (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--min-interval-s", type=float, default=default("min_interval_s"),
        help="a batch waits this long since the last ... (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--min-records", type=int, default=default("min_records"),
        help="... unless this many records are waiting (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--max-rate",
        type=float,
        help="records/s this slot reads at most (the cluster's slot_max_rate in lagsched_clusters; default: no cap)",
    )
    p.add_argument(
        "--commit-interval-s", type=float, default=default("commit_interval_s"),
        help="commit written batches to the table at most this often, and no later once they wait "
        "(the cluster's commit_interval_s; 0: every batch; default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--commit-max-records", type=_bound, default=default("commit_max_records"),
        help="... sooner once this many records wait (0: no such bound; default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--commit-max-bytes", type=_bound, default=default("commit_max_bytes"),
        help="... or this many bytes of data files (0: no such bound; default: %(default)s)",
    )  # fmt: skip
    add_job_arguments(p)
    p.add_argument(
        "--routes", type=json.loads, default=None,
        help="the cluster's routes (lagsched_clusters, JSON): topics that land in typed tables of their own "
        "(docs/routing.md); the consume DAG passes them",
    )  # fmt: skip
    p.add_argument(
        "--allowed-lateness-s", type=_lateness, default=DEFAULT_ALLOWED_LATENESS_S,
        help="the cluster's allowed_lateness_s (lagsched_clusters): a record of an hour complete longer ago than "
        "this is counted late (docs/completeness.md; a route's own applies to its table; default: %(default)s)",
    )  # fmt: skip
    p.add_argument("--lease-s", type=float, default=default("lease_s"), help="claim lease (default: %(default)s)")
    p.add_argument(
        "--heartbeat-s", type=float, default=default("heartbeat_s"), help="heartbeat period (default: %(default)s)"
    )
    p.add_argument(
        "--outage-s",
        type=float,
        help="ride through an outage of Kafka, MySQL or Redis this long, then exit 1 (default: the lease)",
    )
    p.add_argument("--group", help="Kafka consumer group to mirror offsets into (default: lagsched.<cluster>)")
    p.add_argument("--no-mirror", action="store_true", help="do not mirror offsets into a consumer group")
    p.add_argument("--exit-when-idle", action="store_true", help="exit once every claimed partition is caught up")
    p.add_argument("--stats-file", help="append one JSON line per batch here")
    p.add_argument(
        "--rack",
        help="this slot's rack (availability zone, a broker.rack value): prefer partitions led from it and "
        "read from same-rack replicas (docs/rack.md; default: none)",
    )
    p.add_argument(
        "--start-from", choices=[s.value for s in StartFrom], default=default("start_from").value,
        help="where a never-consumed partition starts (default: %(default)s)",
    )  # fmt: skip
    return p.parse_args(argv)


def _lateness(text: str) -> int:
    """An allowed lateness: whole seconds, 0 up to a week."""
    from lagsched.core.completeness import MAX_ALLOWED_LATENESS_S

    value = int(text)
    if not 0 <= value <= MAX_ALLOWED_LATENESS_S:
        raise argparse.ArgumentTypeError(f"{value}: use 0 to {MAX_ALLOWED_LATENESS_S} seconds")
    return value


def _bound(text: str) -> int | None:
    """A volume bound of the commit cadence: a positive integer, or 0 for none."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: use a positive number, or 0 for no bound")
    return value or None


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("got %s: finishing the batch in flight, then committing and releasing", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return _run(args, stop)
    except Exception as exc:
        log.error("the run failed: %s: %s", type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        print(f"lagsched consume: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _run(args: argparse.Namespace, stop: threading.Event) -> int:
    import uuid

    from lagsched.adapters.failures import mysql_target, naming_connections, redis_target
    from lagsched.adapters.slots import slot_id_for
    from lagsched.connections import kafka_config, mysql_params, redis_params
    from lagsched.core.batches import StartFrom
    from lagsched.core.lake import from_job_arguments
    from lagsched.core.names import validate_cluster_name
    from lagsched.workflows.slot_settings import ConsumerSettings

    cluster = validate_cluster_name(args.cluster)
    lake = from_job_arguments(cluster, args, os.environ)
    try:
        slot_id = str(uuid.UUID(args.slot))
    except ValueError:
        slot_id = slot_id_for(args.slot)
    settings = ConsumerSettings(
        slot_id=slot_id,
        cluster=cluster,
        budget_s=args.budget_s,
        max_records=args.max_records,
        min_interval_s=args.min_interval_s,
        min_records=args.min_records,
        lease_s=args.lease_s,
        heartbeat_s=args.heartbeat_s,
        outage_s=args.outage_s,
        group=None if args.no_mirror else (args.group or f"lagsched.{cluster}"),
        exit_when_idle=args.exit_when_idle,
        start_from=StartFrom(args.start_from),
        rack=args.rack,
        slot_number=args.slot_number,
        max_slots=args.max_slots,
        standby_slots=args.standby_slots,
        max_rate=args.max_rate,
        commit_interval_s=args.commit_interval_s,
        commit_max_records=args.commit_max_records,
        commit_max_bytes=args.commit_max_bytes,
    )
    kafka = kafka_config()
    mysql = mysql_params()
    redis_conf = redis_params()
    log.info(
        "slot %s (%s) of cluster %s, rack %s, table %s in %s",
        args.slot, slot_id, cluster, settings.rack, lake.identifier, lake.warehouse,
    )  # fmt: skip
    # Every client error below is re-raised naming its Connection (where it points, never secrets).
    with naming_connections(mysql_target(mysql), redis_target(redis_conf)):
        return _consume(args, settings, lake, kafka=kafka, mysql=mysql, redis_conf=redis_conf, stop=stop)


def _consume(
    args: argparse.Namespace,
    settings: Any,
    lake: Any,
    *,
    kafka: Any,
    mysql: Any,
    redis_conf: Any,
    stop: threading.Event,
) -> int:
    from lagsched.adapters.claims import open_claim_store
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import redis_client
    from lagsched.adapters.slots import SlotLock, SlotRegistry, holder_is_gone, lock_token
    from lagsched.workflows.slot_keeper import SlotKeeper

    slot_id = settings.slot_id
    # MySQL and Redis first: a wrong setting fails in a second, not after the JVM's start.
    conn = connect(mysql)
    redis = redis_client(redis_conf)
    redis.ping()
    # One process per slot id, taken before anything else touches the slot's rows.
    token = lock_token()
    lock = SlotLock(redis)
    holder = lock.acquire(slot_id, token, settings.slot_timeout_s)
    if (
        holder is not None
        and holder_is_gone(holder)
        and lock.take_over(slot_id, holder, token, settings.slot_timeout_s)
    ):
        # A restart right after a crash on this host: the holder's process is gone.
        log.info("took over the slot's lock from %s, a process of this host that no longer runs", holder)
        holder = None
    if holder is not None:
        conn.close()
        message = f"slot {args.slot} ({slot_id}) already runs in another process ({holder}); this start leaves"
        log.info("%s without touching its claims", message)
        print(f"lagsched consume: {message} (nothing to do)", file=sys.stderr)
        if args.stats_file:
            from lagsched.workflows.batch import StatsLines

            with open(args.stats_file, "a", encoding="utf-8") as out:
                StatsLines(out, slot_id).emit("duplicate", holder=holder)
        return EXIT_OK
    # The keeper holds the lock from now on; heartbeats start once Spark is up (run_slot).
    keeper = SlotKeeper(
        SlotRegistry(redis_client(redis_conf), cluster=settings.cluster),
        open_claim_store(mysql),
        slot_id,
        heartbeat_s=settings.heartbeat_s,
        lease_s=settings.lease_s,
        lock=SlotLock(redis_client(redis_conf)),
        token=token,
        outage_s=settings.outage_s,
    )
    keeper.start(live=False)
    try:
        return _run_slot(
            args,
            settings,
            lake,
            keeper,
            conn=conn,
            redis=redis,
            redis_conf=redis_conf,
            kafka=kafka,
            mysql=mysql,
            stop=stop,
        )
    finally:
        keeper.stop()


def _run_slot(
    args: argparse.Namespace,
    settings: Any,
    lake: Any,
    keeper: Any,
    *,
    conn: Any,
    redis: Any,
    redis_conf: Any,
    kafka: Any,
    mysql: Any,
    stop: threading.Event,
) -> int:
    from lagsched.adapters.alert_figures import TableCommitCounter
    from lagsched.adapters.claims import open_claim_store
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.range_files import RangeWriter
    from lagsched.adapters.redis_store import SCALING_CHANNEL, redis_client
    from lagsched.adapters.scaling_messages import ScalingListener
    from lagsched.adapters.slots import SlotRacks, SlotRegistry
    from lagsched.workflows.batch import Batches, OffsetMirror, StatsLines
    from lagsched.workflows.slot import SlotRun, run_slot
    from lagsched.workflows.slot_keeper import SlotTakenError

    slot_id, cluster = settings.slot_id, settings.cluster
    stats_file = open(args.stats_file, "a", encoding="utf-8") if args.stats_file else None  # noqa: SIM115
    stats = StatsLines(stats_file, slot_id)
    session = _start_spark(args.slot, lake, conn, mysql)
    stats.emit("started", spark_ready_s=time.monotonic() - STARTED)
    wake = threading.Event()
    registry = SlotRegistry(redis, cluster=cluster)
    table = _lake_sink(args, session, lake, conn, slot_id=slot_id, cluster=cluster, redis=redis)
    # The reads fetch from a same-rack replica where the brokers allow it (KIP-392); a read that
    # makes no progress for the outage bound fails the batch as Kafka unreachable.
    writer = RangeWriter(session, kafka, rack=settings.rack, stall_s=settings.outage_bound_s)
    channels = (SCALING_CHANNEL, registry.events_channel)
    listener = ScalingListener(redis_client(redis_conf), channels, cluster, wake)
    admin = admin_client(kafka)
    with open_claim_store(mysql) as store:
        batches = Batches(
            settings,
            conn=conn,
            store=store,
            admin=admin,
            sink=table,
            writer=writer,
            mirror=OffsetMirror(admin, settings.group),
            stats=stats,
            count_commit=TableCommitCounter(redis, cluster, lake.identifier).count,
        )
        run = SlotRun(
            settings,
            conn=conn,
            store=store,
            registry=registry,
            admin=admin,
            batches=batches,
            keeper=keeper,
            stop=stop,
            wake=wake,
            racks=SlotRacks(redis),
            stats=stats,
            announce_joined=True,
        )
        listener.start()
        # The tasks' Python workers start and import now, before the first claim, not in the first batch.
        batches.warm_up()
        try:
            outcome = run_slot(settings, run)
        except SlotTakenError as exc:
            print(f"lagsched consume: {exc}", file=sys.stderr)
            return EXIT_LOST
        finally:
            batches.close()
            listener.stop()
            conn.close()
            if stats_file is not None:
                stats_file.close()
    session.stop()
    return _exit_code(outcome, keeper)


def _lake_sink(
    args: argparse.Namespace, session: Any, lake: Any, conn: Any, *, slot_id: str, cluster: str, redis: Any
) -> Any:
    """The cluster's tables: the shared one, and the typed and dead-letter tables of its routes."""
    from lagsched.adapters.alert_figures import DeadLetterCounter
    from lagsched.adapters.lake_sink import LakeSink
    from lagsched.core.routing import parse_routes

    routes = parse_routes(args.routes, "--routes", label="--routes")
    registry = None
    if any(r.needs_registry for r in routes):
        from lagsched.connections import schema_registry_params

        registry = schema_registry_params()
    return LakeSink(
        session,
        lake,
        conn=conn,
        slot_id=slot_id,
        routes=routes,
        registry=registry,
        properties={"lagsched.slot": slot_id, "lagsched.cluster": cluster},
        cluster=cluster,
        allowed_lateness_s=args.allowed_lateness_s,
        count_dead_letters=DeadLetterCounter(redis, cluster).count,
    )


def _start_spark(slot: str, lake: Any, conn: Any, mysql: Any) -> Any:
    """The slot's Spark session, its Iceberg catalog in the cluster's MySQL."""
    from lagsched.adapters import sink, spark

    sink.ensure_catalog_tables(conn)  # before Spark's catalog would race other slots to create them
    conf = sink.catalog_conf(
        lake,
        jdbc_url=sink.jdbc_url(mysql.host, mysql.port, mysql.database, tls=mysql.tls),
        user=mysql.user,
        password=mysql.password,
    )
    # A task's decoders run in one Python worker per core: polars' own thread pool would only contend.
    conf["spark.executorEnv.POLARS_MAX_THREADS"] = "1"
    return spark.session(f"lagsched-consume-{slot}", master=None, conf=conf)


def _exit_code(outcome: Any, keeper: Any) -> int:
    """EXIT_LOST when this slot lost its place or a claim (said on stderr), else EXIT_OK."""
    if keeper.taken_by is not None:
        print(f"lagsched consume: {outcome.lost_claims[-1]}", file=sys.stderr)
        return EXIT_LOST
    if outcome.lost_claims:
        print(
            f"lagsched consume: lost the claim on {len(outcome.lost_claims)} partition(s); this slot was a stale "
            f"holder (paused past its lease). First: {outcome.lost_claims[0]}",
            file=sys.stderr,
        )
        return EXIT_LOST
    log.info("done (%s): %d records in %d batches", outcome.reason.value, outcome.records, outcome.batches)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
