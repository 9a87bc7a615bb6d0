"""The demo's load generator: produces uneven traffic to Kafka on a schedule (`lagsched.core.load_profile`).

One topic ramps hard to ``--peak-rate`` records/s for a few minutes and falls back, three trickle,
one stays idle. Records are produced by an idempotent producer (``acks=all``), paced by token
buckets filled from the profile, so the totals follow the profile however the loop is timed; a
producer far behind (a stalled broker) sends at most one second of its peak at once and counts the
rest as dropped. A line every ``--report-every-s`` seconds says what was sent; ``--stats-file``
gets the same as JSON (the demo's summary reads it). SIGINT or SIGTERM stops it cleanly: what is
in flight is delivered, the stats are written, the exit status is 0 (1 if any delivery failed).

    python -m lagsched_dev.loadgen --duration-s 600          # the local stack's broker, demo.* topics
    python -m lagsched_dev.loadgen --peak-rate 5000 --rack a # rack-aware producing (issue #11)

The broker comes from ``--bootstrap``, else the ``lagsched_kafka`` Connection (so SASL/SSL settings in
its extra apply), else the local stack's broker.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO

from lagsched.core.errors import ConfigError
from lagsched.core.load_profile import DueSchedule, TopicLoad, demo_profile

__all__ = ["LoadStats", "create_topics", "main", "produce"]

log = logging.getLogger(__name__)

TICK_S = 0.02  # 50 sends a second: small bursts, smooth rates


class Sender(Protocol):
    """What the loop needs of a producer (confluent-kafka's ``Producer`` or the rack-aware one)."""

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...


@dataclass
class TopicStats:
    sent: int = 0
    acked: int = 0
    failed: int = 0


@dataclass
class LoadStats:
    """What was produced, per topic; ``acked`` counts records the broker confirmed."""

    topics: dict[str, TopicStats] = field(default_factory=dict)
    elapsed_s: float = 0.0
    dropped: dict[str, float] = field(default_factory=dict)
    done: bool = False
    last_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed_s, 3),
            "done": self.done,
            "topics": {t: {"sent": s.sent, "acked": s.acked, "failed": s.failed} for t, s in self.topics.items()},
            "dropped": {t: round(d) for t, d in self.dropped.items()},
            "last_error": self.last_error,
        }


class _Counting:
    """A producer (confluent-kafka's, or the rack-aware one) with per-topic delivery counts.

    The delivery callback runs inside ``poll``/``flush``, on the loop's own thread.
    """

    def __init__(self, producer: Any, stats: LoadStats) -> None:
        self._producer = producer
        self._stats = stats

    def _delivered(self, err: Any, msg: Any) -> None:
        counts = self._stats.topics[msg.topic()]
        if err is None:
            counts.acked += 1
        else:
            counts.failed += 1
            self._stats.last_error = str(err)

    def produce(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._delivered)
                return
            except BufferError:
                # The local queue is full: let deliveries drain it, then retry this record.
                self._producer.poll(0.05)

    def poll(self, timeout: float) -> int:
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        return int(self._producer.flush(timeout))

    def routing(self) -> str:
        """How the rack-aware producer routed, in words ("" for a plain producer)."""
        stats = getattr(self._producer, "stats", None)
        if stats is None:
            return ""
        return f"{stats.same_rack:,} of {stats.total:,} records to a leader in rack {self._producer.rack}"


def producer_config(kafka_config: dict[str, Any]) -> dict[str, Any]:
    """The Connection's client config plus an idempotent, batching producer's settings."""
    return {
        **kafka_config,
        "enable.idempotence": True,  # implies acks=all: no duplicates from the producer's retries
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 200_000,
    }


def make_sender(kafka_config: dict[str, Any], stats: LoadStats, rack: str | None) -> _Counting:
    """A plain idempotent producer, or the rack-aware one (issue #11) when ``rack`` is set."""
    config = producer_config(kafka_config)
    if rack is None:
        from confluent_kafka import Producer

        return _Counting(Producer(config), stats)
    from lagsched_dev.rack_producer import RackAwareProducer

    try:
        return _Counting(RackAwareProducer(config, rack), stats)
    except ValueError as exc:
        raise ConfigError(f"--rack {rack!r}: {exc}") from None


def create_topics(kafka_config: dict[str, Any], loads: Sequence[TopicLoad], replication: int = 1) -> list[str]:
    """Create the profile's missing topics; returns the names created. An existing topic is kept as is."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(kafka_config)
    existing = set(admin.list_topics(timeout=15).topics)
    missing = [NewTopic(lt.topic, lt.partitions, replication) for lt in loads if lt.topic not in existing]
    if not missing:
        return []
    for name, future in admin.create_topics(missing, operation_timeout=30).items():
        try:
            future.result(timeout=30)
        except Exception as exc:
            # Another process may have created it in between: that is what we wanted.
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
            log.info("topic %s was created meanwhile", name)
    created = [t.topic for t in missing]
    wait_until_ready(kafka_config, {t.topic: t.num_partitions for t in missing})
    return created


def wait_until_ready(kafka_config: dict[str, Any], partitions: dict[str, int], timeout_s: float = 60.0) -> None:
    """Wait until every partition of the new topics has a leader that answers for its offsets.

    Records produced in the first moments after a create were acknowledged and then missing from the
    log (one in a few runs on the local KRaft broker): producing only once the leaders answer
    ListOffsets avoided it in every run since.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({**kafka_config, "group.id": "lagsched-loadgen-ready", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    try:
        for topic, count in partitions.items():
            while True:
                try:
                    meta = consumer.list_topics(topic, timeout=10).topics[topic]
                    parts = meta.partitions
                    if meta.error is None and len(parts) == count and all(p.leader >= 0 for p in parts.values()):
                        for p in parts:
                            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                        break
                except KafkaException as exc:
                    log.debug("topic %s not ready yet: %s", topic, exc)
                if time.monotonic() > deadline:
                    raise ConfigError(f"topic {topic} has no leader for all its partitions after {timeout_s:.0f} s")
                time.sleep(0.2)
    finally:
        consumer.close()


def _report_line(stats: LoadStats, schedule: DueSchedule, now: float) -> str:
    rates = schedule.rates(now)
    parts = [f"{topic} {rates[topic]:,.0f}/s sent {s.sent:,}" for topic, s in stats.topics.items()]
    return f"loadgen {stats.elapsed_s:,.0f} s: " + "; ".join(parts)


def _write_stats(path: Path | None, stats: LoadStats) -> None:
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(stats.as_dict(), indent=1))
    tmp.replace(path)  # readers never see half a file


def produce(
    sender: Sender,
    loads: Sequence[TopicLoad],
    *,
    stop: threading.Event,
    duration_s: float | None = None,
    report_every_s: float = 15.0,
    stats: LoadStats | None = None,
    stats_file: Path | None = None,
    out: TextIO = sys.stdout,
    clock: Callable[[], float] = time.monotonic,
    encoders: Mapping[str, Callable[[int, int, float], bytes]] | None = None,
) -> LoadStats:
    """Produce the profile until ``stop`` is set or ``duration_s`` has passed; then flush and return the counts.

    ``encoders``: a topic's values (seq, ms since the epoch, seconds into the run -> bytes) instead
    of the plain JSON ``{"seq", "ts_ms"}`` (`lagsched_dev.typed_values`)."""
    stats = stats if stats is not None else LoadStats()
    for lt in loads:
        stats.topics.setdefault(lt.topic, TopicStats())
    start = clock()
    schedule = DueSchedule(loads, start=start)
    seq = dict.fromkeys(stats.topics, 0)
    next_report = start + report_every_s
    while not stop.is_set():
        now = clock()
        if duration_s is not None and now - start >= duration_s:
            now = start + duration_s
            stop.set()
        for topic, n in schedule.due(now).items():
            counts = stats.topics[topic]
            encode = (encoders or {}).get(topic)
            for _ in range(n):
                seq[topic] += 1
                key = str(seq[topic]).encode()
                ts_ms = int(time.time() * 1000)
                # Keys spread records over the partitions; the value carries when it was made.
                value = (
                    json.dumps({"seq": seq[topic], "ts_ms": ts_ms}).encode()
                    if encode is None
                    else encode(seq[topic], ts_ms, now - start)
                )
                sender.produce(topic, value, key)
            counts.sent += n
        sender.poll(0)
        stats.elapsed_s = now - start
        if now >= next_report:
            next_report = now + report_every_s
            stats.dropped = schedule.dropped
            print(_report_line(stats, schedule, now), file=out, flush=True)
            _write_stats(stats_file, stats)
        stop.wait(TICK_S)
    left = sender.flush(30)
    if left:
        stats.last_error = f"{left} records still undelivered after 30 s"
    stats.dropped = schedule.dropped
    stats.done = True
    _write_stats(stats_file, stats)
    totals = ", ".join(f"{t} {s.acked:,}" for t, s in stats.topics.items())
    print(f"loadgen stopped after {stats.elapsed_s:,.0f} s; delivered: {totals}", file=out, flush=True)
    return stats


def resolve_kafka_config(bootstrap: str | None) -> dict[str, Any]:
    """``--bootstrap``, else the lagsched_kafka Connection, else the local stack's broker."""
    if bootstrap:
        return {"bootstrap.servers": bootstrap}
    # Without a Connection in the environment or an Airflow home to look in, asking Airflow would
    # only read (and create) ~/airflow: the local stack is what is meant.
    if "AIRFLOW_CONN_LAGSCHED_KAFKA" in os.environ or "AIRFLOW_HOME" in os.environ:
        from lagsched.connections import kafka_config

        return kafka_config()
    from lagsched_dev.stack.config import load

    return {"bootstrap.servers": load().kafka_bootstrap}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="broker list (default: the lagsched_kafka Connection, else the stack)")
    parser.add_argument("--prefix", default="demo.", help="topic name prefix (default: demo.)")
    parser.add_argument("--peak-rate", type=float, default=3000.0, help="the hot topic's peak, records/s")
    parser.add_argument("--ramp-at-s", type=float, default=30.0, help="seconds before the hot topic ramps up")
    parser.add_argument("--ramp-s", type=float, default=60.0, help="seconds from trickle to peak")
    parser.add_argument("--hold-s", type=float, default=210.0, help="seconds at the peak")
    parser.add_argument("--fall-s", type=float, default=30.0, help="seconds from peak back to a trickle")
    parser.add_argument("--duration-s", type=float, default=None, help="stop after this long (default: never)")
    parser.add_argument("--report-every-s", type=float, default=15.0, help="seconds between progress lines")
    parser.add_argument("--stats-file", type=Path, help="write the counts here as JSON (at every report)")
    parser.add_argument(
        "--rack", help="produce to partitions led from this rack (broker.rack), as a client in that zone would"
    )
    parser.add_argument("--replication-factor", type=int, default=1, help="for topics it creates (default 1)")
    parser.add_argument(
        "--typed", action="store_true",
        help="<prefix>orders as Avro and <prefix>clicks as JSON Schema through the schema registry (the "
        "lagsched_schema_registry Connection), orders evolving when the ramp ends, with a few poison records",
    )  # fmt: skip


def _typed_encoders(args: argparse.Namespace, loads: Sequence[TopicLoad]) -> dict[str, Any]:
    """The routed topics' encoders (`lagsched_dev.typed_values`), their schemas registered now."""
    from lagsched.adapters.schema_registry import RegistryClient
    from lagsched.connections import schema_registry_params
    from lagsched_dev.typed_values import TypedValues

    values = TypedValues(args.prefix, evolve_at_s=args.ramp_at_s + args.ramp_s)
    ids = values.register(RegistryClient(schema_registry_params()))
    print(f"loadgen: typed values, schema ids {ids}; orders evolve at +{values.evolve_at_s:.0f} s", flush=True)
    return {lt.topic: e for lt in loads if (e := values.encoder(lt.topic)) is not None}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lagsched_dev.loadgen", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        loads = demo_profile(
            peak_rate=args.peak_rate,
            ramp_at_s=args.ramp_at_s,
            ramp_s=args.ramp_s,
            hold_s=args.hold_s,
            fall_s=args.fall_s,
            prefix=args.prefix,
        )
        config = resolve_kafka_config(args.bootstrap)
        stats = LoadStats()
        sender = make_sender(config, stats, args.rack)
    except ConfigError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    created = create_topics(config, loads, args.replication_factor)
    if created:
        print(f"loadgen: created {', '.join(created)}", flush=True)
    encoders = _typed_encoders(args, loads) if args.typed else None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    peaks = ", ".join(f"{lt.topic} {lt.peak:,.0f}/s" for lt in loads)
    print(f"loadgen: pid {os.getpid()}, peaks {peaks}" + (f", rack {args.rack}" if args.rack else ""), flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        produce(
            sender,
            loads,
            stop=stop,
            duration_s=args.duration_s,
            report_every_s=args.report_every_s,
            stats=stats,
            stats_file=args.stats_file,
            encoders=encoders,
        )
    if args.rack:
        print(f"loadgen: {sender.routing()}", flush=True)
    failed = sum(s.failed for s in stats.topics.values())
    if failed or stats.last_error:
        print(f"loadgen: {failed:,} records failed; last error: {stats.last_error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
