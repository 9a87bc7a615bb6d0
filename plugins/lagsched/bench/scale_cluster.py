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

import base64
import os
import shutil
import uuid
from pathlib import Path

from lagsched.stack.config import StackConfig
from lagsched.stack.services import Kafka, _port_open, start_together

__all__ = ["ScaleBroker", "bootstrap", "down", "up"]


def _base_port() -> int:
    return int(os.environ.get("LAGSCHED_KAFKA_SCALE_PORT", "19400"))


def _controller_port() -> int:
    return int(os.environ.get("LAGSCHED_KAFKA_SCALE_CONTROLLER_PORT", "19399"))


class ScaleBroker(Kafka):
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

    @property
    def dir(self) -> Path:
        return self.top / f"broker-{self.node_id}"

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
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Small preallocated indexes: 100,000 partitions x 2 maps of the default 10 MiB would
            # reserve 2 TB of address space; the benchmark's partitions are empty.
            "log.index.size.max.bytes": str(1 << 20),
            "log.segment.delete.delay.ms": "1000",
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.dir / "log4j2.properties").write_text(
            "status = warn\n"
            "appender.out.type = Console\nappender.out.name = STDOUT\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = WARN\nrootLogger.appenderRef.out.ref = STDOUT\n"
            "logger.server.name = kafka.server.KafkaServer\nlogger.server.level = INFO\n"
        )
        return path

    def _cluster_id(self) -> str:
        path = self.top / "cluster.id"
        if not path.exists():
            self.top.mkdir(parents=True, exist_ok=True)
            path.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=") + "\n")
        return path.read_text().strip()

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

    def is_healthy(self) -> bool:
        """Serving clients and registered with the cluster."""
        if not _port_open(self.port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            meta = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"}).list_topics(timeout=3)
        except Exception:  # noqa: BLE001 - any failure means "not healthy yet"
            return False
        return self.node_id in meta.brokers

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
