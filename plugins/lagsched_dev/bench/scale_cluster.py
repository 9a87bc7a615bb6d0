"""A Kafka cluster of several brokers for the 100,000-partition lag benchmark (bench/lag.py).

One broker process cannot hold 100,000 partitions here: it keeps one file descriptor open per
partition (the active segment) and two memory maps (the indexes), and this machine caps a process
at 20,000 descriptors (a hard limit root cannot raise in this sandbox). A production cluster of
that size has many brokers anyway, and the lag monitor's ``list_offsets`` goes to each partition's
leader. So the large section runs on ``count`` brokers: node 1 is broker and controller (a
standalone KRaft quorum), nodes 2..count are brokers only. Each is a JVM with the Kafka jars of
`make deps`; node ``i`` listens on ``LAGSCHED_KAFKA_SCALE_PORT + i - 1`` (default 19400...), the
controller on ``LAGSCHED_KAFKA_SCALE_CONTROLLER_PORT`` (default 19399), data in
``.local/kafka-scale/broker-<i>/``. The benchmark starts it, uses it and removes it, data included.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lagsched_dev.stack.config import StackConfig
from lagsched_dev.stack.kafka_cluster import ClusterNode
from lagsched_dev.stack.services import ONE_REPLICA_INTERNAL_TOPICS, start_together

__all__ = ["ScaleBroker", "bootstrap", "down", "up"]


def _base_port() -> int:
    return int(os.environ.get("LAGSCHED_KAFKA_SCALE_PORT", "19400"))


def _controller_port() -> int:
    return int(os.environ.get("LAGSCHED_KAFKA_SCALE_CONTROLLER_PORT", "19399"))


class ScaleBroker(ClusterNode):
    """Node ``node_id`` (1-based) of the scale cluster; node 1 is also its only controller."""

    start_timeout_s = 180.0

    def __init__(self, cfg: StackConfig, node_id: int, heap: str) -> None:
        super().__init__(cfg)
        self.node_id = node_id
        self.heap = heap
        self.name = f"kafka-scale-{node_id}"

    @property
    def port(self) -> int:
        return _base_port() + self.node_id - 1

    @property
    def top(self) -> Path:
        return self.cfg.home / "kafka-scale"

    def _write_config(self) -> Path:
        controller = f"127.0.0.1:{_controller_port()}"
        listeners = f"PLAINTEXT://127.0.0.1:{self.port}"
        props = {
            "process.roles": "broker,controller" if self.node_id == 1 else "broker",
            "node.id": str(self.node_id),
            "controller.quorum.bootstrap.servers": controller,
            "listeners": listeners + (f",CONTROLLER://{controller}" if self.node_id == 1 else ""),
            "advertised.listeners": listeners,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.dir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            **ONE_REPLICA_INTERNAL_TOPICS,
            # Small preallocated indexes: 100,000 partitions x 2 maps of the default 10 MiB would
            # reserve 2 TB of address space; the benchmark's partitions are empty.
            "log.index.size.max.bytes": str(1 << 20),
            "log.segment.delete.delay.ms": "1000",
        }
        # WARN: at INFO each broker logs every one of its ~17,000 partitions' creation and deletion.
        return self._write_node_files(props, root_level="WARN")

    def prepare(self) -> None:
        config = self._write_config()
        if (self.dir / "data" / "meta.properties").exists():
            return
        if self.node_id == 1:
            self._format_storage(config, self._cluster_id(), "--standalone")
        else:
            self._format_storage(config, self._cluster_id())

    def command(self) -> list[str]:
        return self._kafka_command(initial_heap="256m", max_heap=self.heap)

    def detail(self) -> str:
        return f"kafka://127.0.0.1:{self.port} (scale cluster node {self.node_id})"


def _brokers(cfg: StackConfig, count: int, heap: str) -> list[ScaleBroker]:
    return [ScaleBroker(cfg, i + 1, heap) for i in range(count)]


def bootstrap(count: int) -> str:
    return ",".join(f"127.0.0.1:{_base_port() + i}" for i in range(count))


def up(cfg: StackConfig, count: int, heap: str = "1g") -> str:
    """Start `count` fresh brokers (the controller first: the others register with it); the bootstrap."""
    if count < 1:
        raise ValueError("the scale cluster needs at least one broker")
    shutil.rmtree(cfg.home / "kafka-scale", ignore_errors=True)
    nodes = _brokers(cfg, count, heap)
    start_together(nodes[:1])
    start_together(nodes[1:])
    return bootstrap(count)


def down(cfg: StackConfig, count: int) -> None:
    """Stop the brokers and delete their data."""
    for node in reversed(_brokers(cfg, count, "1g")):
        node.stop()
    shutil.rmtree(cfg.home / "kafka-scale", ignore_errors=True)
