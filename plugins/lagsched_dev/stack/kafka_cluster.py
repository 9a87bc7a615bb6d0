"""An optional 3-broker Kafka cluster with racks ``a``, ``b``, ``c``, for rack-aware routing (docs/rack.md).

The default stack runs one Kafka node; this cluster is started on demand, beside it::

    python -m lagsched_dev.stack.kafka_cluster up            # 3 KRaft nodes, racks a, b, c
    python -m lagsched_dev.stack.kafka_cluster status
    python -m lagsched_dev.stack.kafka_cluster stop-broker 1 # broker 1 (rack a) down, the others go on
    python -m lagsched_dev.stack.kafka_cluster start-broker 1
    python -m lagsched_dev.stack.kafka_cluster down

Each node is a separate JVM (``kafka.Kafka``, the jars of `make deps`) acting as broker and
controller, so the controller quorum of 3 survives one node stopped (the fallback tests stop one).
Node ``i`` (1-based) has ``broker.rack`` = ``"abc"[i - 1]``, listens on
``LAGSCHED_KAFKA_RACK_PORT + i - 1`` (default 19192..19194; controllers from
``LAGSCHED_KAFKA_RACK_CONTROLLER_PORT``, default 19195..19197), and keeps its data in
``.local/kafka-rack/broker-<i>/``, its log in ``.local/logs/kafka-rack-<i>.log``.

Topics default to replication factor 3 and ``min.insync.replicas`` 2, and every broker runs the
``RackAwareReplicaSelector``, so a consumer that sets ``client.rack`` fetches from the replica in
its own rack (KIP-392). Heaps are small (``LAGSCHED_KAFKA_RACK_HEAP``, default 384m) because the
three JVMs share the machine with everything else.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lagsched_dev.stack.config import StackConfig, load
from lagsched_dev.stack.process import ServiceError
from lagsched_dev.stack.services import Kafka, Status, _port_open, new_cluster_id, start_together

__all__ = [
    "RACKS",
    "ClusterNode",
    "RackBroker",
    "brokers",
    "down",
    "main",
    "start_broker",
    "status",
    "stop_broker",
    "up",
]

log = logging.getLogger(__name__)

#: ``broker.rack`` of broker 1, 2, 3.
RACKS = ("a", "b", "c")

REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


class ClusterNode(Kafka):
    """A node of a multi-node cluster: its own client ``port``, its data under ``top``/broker-<id>,
    and a cluster id shared by the nodes (``top``/cluster.id)."""

    node_id: int

    @property
    def port(self) -> int:
        raise NotImplementedError

    @property
    def top(self) -> Path:
        raise NotImplementedError

    @property
    def dir(self) -> Path:
        return self.top / f"broker-{self.node_id}"

    def _cluster_id(self) -> str:
        """The one cluster id of the nodes, made by whichever node is prepared first."""
        path = self.top / "cluster.id"
        if not path.exists():
            self.top.mkdir(parents=True, exist_ok=True)
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()

    def is_healthy(self) -> bool:
        """Serving clients and registered with the cluster (it is in the metadata it serves)."""
        if not _port_open(self.port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            meta = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"}).list_topics(timeout=3)
        except Exception:  # noqa: BLE001 - any failure means "not healthy yet"
            return False
        return self.node_id in meta.brokers


class RackBroker(ClusterNode):
    """Node ``node_id`` (1-3) of the rack cluster: broker and controller, in rack ``RACKS[node_id - 1]``."""

    start_timeout_s = 120.0

    def __init__(self, cfg: StackConfig, node_id: int) -> None:
        super().__init__(cfg)
        if node_id not in range(1, len(RACKS) + 1):
            raise ValueError(f"broker {node_id} does not exist; the rack cluster has brokers 1-{len(RACKS)}")
        self.node_id = node_id
        self.name = f"kafka-rack-{node_id}"

    @property
    def rack(self) -> str:
        return RACKS[self.node_id - 1]

    @property
    def port(self) -> int:
        return self.cfg.kafka_rack_ports[self.node_id - 1]

    @property
    def controller_port(self) -> int:
        return self.cfg.kafka_rack_controller_ports[self.node_id - 1]

    @property
    def top(self) -> Path:
        """The cluster's folder (its id, shared by the three nodes)."""
        return self.cfg.home / "kafka-rack"

    def _write_config(self) -> Path:
        c = self.cfg
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(c.kafka_rack_controller_ports))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            # A static quorum of the three nodes: any two keep the cluster's metadata moving.
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "broker.rack": self.rack,
            # KIP-392: a fetch that names client.rack is served by the replica in that rack.
            "replica.selector.class": REPLICA_SELECTOR,
            "num.partitions": "3",
            "default.replication.factor": "3",
            "min.insync.replicas": "2",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            "share.coordinator.state.topic.replication.factor": "3",
            "share.coordinator.state.topic.min.isr": "2",
            "group.initial.rebalance.delay.ms": "0",
            # Followers fetch often, so a follower read sees new records soon after the leader.
            "replica.fetch.wait.max.ms": "100",
            # A stopped broker's partitions move within seconds (the fallback tests wait on it).
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "1000",
            "log.retention.check.interval.ms": "2000",
            "log.segment.delete.delay.ms": "1000",
        }
        return self._write_node_files(props)

    def prepare(self) -> None:
        config = self._write_config()
        if (self.dir / "data" / "meta.properties").exists():
            return
        self._format_storage(config, self._cluster_id())

    def command(self) -> list[str]:
        return self._kafka_command(initial_heap="128m", max_heap=os.environ.get("LAGSCHED_KAFKA_RACK_HEAP", "384m"))

    def detail(self) -> str:
        return f"kafka://127.0.0.1:{self.port} rack {self.rack} (controller {self.controller_port})"


def brokers(cfg: StackConfig) -> list[RackBroker]:
    """The three nodes, broker 1 (rack a) first."""
    return [RackBroker(cfg, i + 1) for i in range(len(RACKS))]


def up(cfg: StackConfig) -> list[Status]:
    """Start the nodes that are not up, side by side (a quorum needs two of them at once)."""
    started = time.monotonic()
    nodes = brokers(cfg)
    start_together(nodes)
    log.info("rack cluster up: %s (%.1f s)", cfg.kafka_rack_bootstrap, time.monotonic() - started)
    return [n.status() for n in nodes]


def down(cfg: StackConfig) -> list[str]:
    """Stop every node; returns the names that were running.

    All three at once: stopped one by one, the last node has lost its quorum and waits out its
    controlled shutdown until the SIGKILL 30 s later; stopped together they exit in about 6 s.
    """
    nodes = brokers(cfg)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        stopped = list(pool.map(RackBroker.stop, nodes))
    return [n.name for n, was_running in zip(nodes, stopped, strict=True) if was_running]


def status(cfg: StackConfig) -> list[Status]:
    return [n.status() for n in brokers(cfg)]


def stop_broker(cfg: StackConfig, node_id: int) -> bool:
    """Stop one node (its rack loses its leaders to the others); True if it was running."""
    return RackBroker(cfg, node_id).stop()


def start_broker(cfg: StackConfig, node_id: int) -> Status:
    """Start one node again (the other two must be up: it needs a quorum to join)."""
    node = RackBroker(cfg, node_id)
    start_together([node])
    return node.status()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.stack.kafka_cluster",
        description="The optional 3-broker Kafka cluster with racks a, b, c (docs/rack.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the three brokers (idempotent)")
    sub.add_parser("down", help="stop the three brokers")
    sub.add_parser("status", help="each broker's state")
    for name in ("stop-broker", "start-broker"):
        one = sub.add_parser(name, help=f"{name.split('-')[0]} one broker (1 = rack a, 2 = b, 3 = c)")
        one.add_argument("node", type=int, choices=range(1, len(RACKS) + 1), metavar="N")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load()
    try:
        if args.command == "up":
            _print(up(cfg))
            print(f"bootstrap.servers={cfg.kafka_rack_bootstrap}")
        elif args.command == "down":
            print("stopped: " + (", ".join(down(cfg)) or "nothing was running"))
        elif args.command == "status":
            states = status(cfg)
            _print(states)
            return 0 if all(s.healthy for s in states) else 1
        elif args.command == "stop-broker":
            print(f"kafka-rack-{args.node}: " + ("stopped" if stop_broker(cfg, args.node) else "was not running"))
        else:
            _print([start_broker(cfg, args.node)])
    except ServiceError as exc:
        print(f"lagsched rack cluster: {exc}", file=sys.stderr)
        return 1
    return 0


def _print(states: list[Status]) -> None:
    for s in states:
        state = "healthy" if s.healthy else ("running" if s.running else "down")
        print(f"{s.name:<14} {state:<8} {s.detail}")


if __name__ == "__main__":
    sys.exit(main())
