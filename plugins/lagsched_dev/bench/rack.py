"""Rack-aware routing on the 3-broker cluster (racks a, b, c): how much traffic stays in its rack.

Needs the rack cluster (``python -m lagsched_dev.stack.kafka_cluster up``; started here if it is down,
and stopped again at the end unless ``LAGSCHED_KEEP_STACK`` is set). One topic of ``--partitions``
(120) partitions, replication factor 3, so every rack holds a replica of every partition and leads
about a third of them.

* **Produce**: one producer per rack sends ``--records`` records (half keyed, half keyless). The
  share is taken from the delivery reports: records whose partition's leader sits in the
  producer's rack, over all records. ``rack_aware`` = ``RackAwareProducer``; ``default`` = a plain
  confluent-kafka producer partitioning as Kafka's Java client does (``murmur2_random``: murmur2 of
  the key; keyless records spread at random, per record rather than per sticky batch).
* **Fetch**: one consumer per rack reads a third of the partitions to the end. The share is the
  consumer's own librdkafka statistics (``statistics.interval.ms``): per broker, ``rxbytes``
  received, from the broker in the consumer's rack over all brokers. ``rack_aware`` = the
  partitions of the consumer's rack target (``core.rack.rack_targets``, as the slots claim them)
  read with ``client.rack`` (fetch from follower, KIP-392); ``default`` = a contiguous third of the
  partitions (Kafka's range assignor) from the leaders. Two more variants say which half does
  what: ``follower_fetch_only`` (range split with ``client.rack``) and ``targets_only`` (rack
  targets, no ``client.rack``). ``slot_fetch_*``: ``rack_aware`` and ``default`` again through the
  slots' own reader (a batch task's function, `lagsched.adapters.range_files.write_ranges`).

Writes ``bench/results/rack.json``: ``{"produce_same_rack_share": {"rack_aware", "default"},
"fetch_same_rack_share": {"rack_aware", "default", ...}, ...}``. Targets (issue 11): >= 0.95
rack-aware against about 1/3 default, for both.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagsched.core.rack import RackOwner, rack_targets
from lagsched.core.rendezvous import fair_share

log = logging.getLogger(__name__)

DEFAULT_OUT = "bench/results/rack.json"
RACKS = ("a", "b", "c")


def create_topic(bootstrap: str, partitions: int, *, prefix: str = "rack-bench") -> str:
    """A topic of ``partitions`` partitions, replication factor 3, whose every leader is elected."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    from lagsched.adapters.kafka_admin import leader_racks

    admin = AdminClient({"bootstrap.servers": bootstrap})
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions, 3)], operation_timeout=60)[name].result(timeout=90)
    deadline = time.monotonic() + 60
    while True:
        racks = leader_racks(admin, [name]).get(name, {})
        if len(racks) == partitions and all(r is not None for r in racks.values()):
            return name
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name}: not every partition has a leader after 60 s: {racks}")
        time.sleep(0.5)


def delete_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name], operation_timeout=30).values():
        future.result(timeout=60)


def current_leader_racks(bootstrap: str, topic: str) -> dict[int, str | None]:
    from confluent_kafka.admin import AdminClient

    from lagsched.adapters.kafka_admin import leader_racks

    # Empty while a new topic's metadata has not reached the broker asked.
    return leader_racks(AdminClient({"bootstrap.servers": bootstrap}), [topic]).get(topic, {})


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Delivered records, and those whose partition was led from the producer's rack."""

    delivered: int
    same_rack: int
    partitions: frozenset[int]

    @property
    def share(self) -> float:
        return self.same_rack / self.delivered if self.delivered else 0.0


def produce(
    bootstrap: str, topic: str, rack: str, records: int, *, rack_aware: bool, value_size: int = 200
) -> ProduceResult:
    """``records`` records (even ones keyed ``key-<i>``, odd ones keyless) from a producer in ``rack``."""
    from confluent_kafka import Producer

    from lagsched_dev.rack_producer import RackAwareProducer

    leaders = current_leader_racks(bootstrap, topic)
    config = {"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all", "enable.idempotence": True}
    delivered: list[int] = []
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append(int(msg.partition()))

    value = b"x" * value_size
    # The default's keys go where Kafka's Java client puts them (murmur2); keyless records are spread
    # per record rather than per sticky batch: the same expected share, without one batch's luck
    # deciding a third of the figure.
    default = {**config, "partitioner": "murmur2_random", "sticky.partitioning.linger.ms": 0}
    client: Any = RackAwareProducer(config, rack) if rack_aware else Producer(default)
    for i in range(records):
        key = f"key-{i}".encode() if i % 2 == 0 else None
        while True:
            try:
                client.produce(topic, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                client.poll(0.1)
        if i % 1000 == 0:
            client.poll(0)
    left = client.flush(60)
    if left or errors:
        raise RuntimeError(f"{left} record(s) not delivered, errors: {errors[:3]}")
    same = sum(1 for p in delivered if leaders.get(p) == rack)
    return ProduceResult(len(delivered), same, frozenset(delivered))


def range_split(partitions: int) -> dict[str, list[int]]:
    """Kafka's range assignor over consumers named after the racks: contiguous thirds."""
    out: dict[str, list[int]] = {}
    p = 0
    for i, rack in enumerate(RACKS):
        n = fair_share(partitions, len(RACKS), i)
        out[rack] = list(range(p, p + n))
        p += n
    return out


def target_split(leaders: Mapping[int, str | None]) -> dict[str, list[int]]:
    """What three slots in racks a, b, c claim under rack targets (the slots' own rule)."""
    owners = [RackOwner(rack, rack, fair_share(len(leaders), len(RACKS), i)) for i, rack in enumerate(RACKS)]
    return {s: sorted(ps) for s, ps in rack_targets(leaders, owners).items()}


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Bytes a consumer received from each broker (librdkafka's ``rxbytes``), and how many records."""

    rack: str
    bytes_by_rack: dict[str, int]
    records: int

    @property
    def same_rack_bytes(self) -> int:
        return self.bytes_by_rack.get(self.rack, 0)

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_rack.values())


def fetch(
    bootstrap: str, topic: str, rack: str, partitions: Sequence[int], *, client_rack: bool, timeout_s: float = 120
) -> FetchResult:
    """Read ``partitions`` of ``topic`` to their end from a consumer in ``rack``; bytes per broker rack."""
    from confluent_kafka import Consumer, TopicPartition

    from lagsched.adapters.kafka_admin import broker_racks

    stats: list[dict[str, Any]] = []
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"rack-bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "statistics.interval.ms": 200,
        "stats_cb": lambda raw: stats.append(json.loads(raw)),
        # A follower serves only what it has replicated; small fetch waits keep the read short.
        "fetch.wait.max.ms": 100,
    }
    if client_rack:
        config["client.rack"] = rack
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    racks = broker_racks(admin)
    from lagsched.adapters.kafka_admin import read_offsets

    ends = {o.partition: o.latest for o in read_offsets(admin, {topic: max(partitions) + 1})[topic]}
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    todo = {p for p in partitions if ends[p] > 0}
    records = 0
    deadline = time.monotonic() + timeout_s
    try:
        while todo:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumer in rack {rack}: {len(todo)} partition(s) not read to the end")
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is not None:
                    continue
                records += 1
                partition, offset = msg.partition(), msg.offset()
                if partition is not None and offset is not None and offset + 1 >= ends[partition]:
                    todo.discard(partition)
        # One statistics report after the last fetch, so every byte received is counted.
        seen = len(stats)
        while len(stats) < seen + 2 and time.monotonic() < deadline:
            consumer.poll(0.1)
    finally:
        consumer.close()
    final = stats[-1]
    by_rack: dict[str, int] = {}
    for broker in final.get("brokers", {}).values():
        node = int(broker.get("nodeid", -1))
        if node < 0:
            continue  # the bootstrap connections: metadata only, no fetches
        name = racks.get(node) or "?"
        by_rack[name] = by_rack.get(name, 0) + int(broker.get("rxbytes", 0))
    return FetchResult(rack, by_rack, records)


def slot_fetch(bootstrap: str, topic: str, rack: str, partitions: Sequence[int], *, client_rack: bool) -> FetchResult:
    """As ``fetch``, through the slots' own reader: the task function of a batch
    (``adapters.range_files.write_ranges``, with the slots' consumer settings and ``rack``), writing
    the files to a scratch folder; bytes per broker from librdkafka's statistics of its consumer."""
    import tempfile

    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from lagsched.adapters.data_files import CREATED_SCHEMA, FileSettings
    from lagsched.adapters.kafka_admin import broker_racks, read_offsets
    from lagsched.adapters.range_files import reader_config, write_ranges
    from lagsched.core.offsets import OffsetRange

    admin = AdminClient({"bootstrap.servers": bootstrap})
    racks = broker_racks(admin)
    ends = {o.partition: o.latest for o in read_offsets(admin, {topic: max(partitions) + 1})[topic]}
    ranges = [OffsetRange(topic, p, 0, ends[p]) for p in partitions if ends[p] > 0]
    stats: list[dict[str, Any]] = []

    def consumer(config: Mapping[str, Any]) -> Any:
        return Consumer({**config, "statistics.interval.ms": 200, "stats_cb": lambda r: stats.append(json.loads(r))})

    config = reader_config({"bootstrap.servers": bootstrap}, rack if client_rack else None)
    with tempfile.TemporaryDirectory(prefix="lagsched-rack-") as folder:
        settings = FileSettings.of(Path(folder).as_uri(), CREATED_SCHEMA, {})
        result = write_ranges(ranges, config, settings, consumer_factory=consumer)
    if result.error is not None:
        raise RuntimeError(f"the slots' reader in rack {rack} failed: {result.error}")
    by_rack: dict[str, int] = {}
    for broker in (stats[-1] if stats else {}).get("brokers", {}).values():
        node = int(broker.get("nodeid", -1))
        if node >= 0:  # not the bootstrap connections (metadata only)
            name = racks.get(node) or "?"
            by_rack[name] = by_rack.get(name, 0) + int(broker.get("rxbytes", 0))
    return FetchResult(rack, by_rack, sum(result.records.values()))


def fetch_share(results: Sequence[FetchResult]) -> float:
    total = sum(r.total_bytes for r in results)
    return sum(r.same_rack_bytes for r in results) / total if total else 0.0


def run(bootstrap: str, partitions: int, records: int) -> dict[str, Any]:
    topic = create_topic(bootstrap, partitions)
    try:
        leaders = current_leader_racks(bootstrap, topic)
        led = {r: sum(1 for x in leaders.values() if x == r) for r in RACKS}
        produced: dict[str, list[ProduceResult]] = {"rack_aware": [], "default": []}
        for mode, results in produced.items():
            for rack in RACKS:
                t0 = time.monotonic()
                res = produce(bootstrap, topic, rack, records, rack_aware=mode == "rack_aware")
                results.append(res)
                print(f"   produce {mode:<10} rack {rack}: {res.share:.3f} same-rack ({time.monotonic() - t0:.1f} s)")
        splits = {"targets": target_split(leaders), "range": range_split(partitions)}
        variants = {
            "rack_aware": ("targets", True),
            "default": ("range", False),
            "follower_fetch_only": ("range", True),
            "targets_only": ("targets", False),
        }
        fetched: dict[str, list[FetchResult]] = {}
        for name, (split, client_rack) in variants.items():
            fetched[name] = [
                fetch(bootstrap, topic, rack, splits[split][rack], client_rack=client_rack) for rack in RACKS
            ]
            print(f"   fetch   {name:<20}: {fetch_share(fetched[name]):.3f} same-rack bytes")
        slot_fetched: dict[str, list[FetchResult]] = {}
        for name in ("rack_aware", "default"):
            split, client_rack = variants[name]
            slot_fetched[name] = [
                slot_fetch(bootstrap, topic, rack, splits[split][rack], client_rack=client_rack) for rack in RACKS
            ]
            print(f"   slots   {name:<20}: {fetch_share(slot_fetched[name]):.3f} same-rack bytes")

        def produce_share(rs: list[ProduceResult]) -> float:
            return sum(r.same_rack for r in rs) / sum(r.delivered for r in rs)

        return {
            "produce_same_rack_share": {m: round(produce_share(rs), 4) for m, rs in produced.items()},
            "fetch_same_rack_share": {m: round(fetch_share(rs), 4) for m, rs in fetched.items()},
            "partitions": partitions,
            "leaders_per_rack": led,
            "records_per_producer": records,
            "producers": len(RACKS) * 2,
            "fetch_bytes": {m: {r.rack: r.bytes_by_rack for r in rs} for m, rs in fetched.items()},
            # The slots' own reader (a batch task's function and consumer settings).
            "slot_fetch_same_rack_share": {m: round(fetch_share(rs), 4) for m, rs in slot_fetched.items()},
            "slot_fetch_bytes": {m: {r.rack: r.bytes_by_rack for r in rs} for m, rs in slot_fetched.items()},
            "method": (
                "produce: delivery reports, partition leader rack == producer rack; fetch: librdkafka "
                "statistics rxbytes per broker, broker rack == consumer rack; rack_aware fetch = rack targets "
                "+ client.rack (RackAwareReplicaSelector), default = range split from leaders; slots: the same "
                "reads through the slots' task function (adapters.range_files.write_ranges), librdkafka rxbytes"
            ),
        }
    finally:
        delete_topic(bootstrap, topic)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lagsched_dev.bench.rack", description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=120)
    parser.add_argument("--records", type=int, default=20_000, help="records per producer (default: %(default)s)")
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from lagsched_dev.stack import kafka_cluster
    from lagsched_dev.stack.config import load

    cfg = load()
    was_up = all(s.healthy for s in kafka_cluster.status(cfg))
    kafka_cluster.up(cfg)
    try:
        started = time.monotonic()
        result = run(cfg.kafka_rack_bootstrap, args.partitions, args.records)
        result["elapsed_s"] = round(time.monotonic() - started, 1)
    finally:
        if not was_up and not os.environ.get("LAGSCHED_KEEP_STACK"):
            kafka_cluster.down(cfg)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("produce_same_rack_share", "fetch_same_rack_share")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
