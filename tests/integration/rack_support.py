"""The consumer harness pointed at the 3-broker rack cluster (lagsched_dev.stack.kafka_cluster).

``ConsumerHarness`` hands the slots the stack's Kafka Connection from the environment; here the
slots get ``AIRFLOW_CONN_LAGSCHED_KAFKA`` of the rack cluster instead, so the same job, claim table
and exactly-once check run against three brokers in racks a, b, c.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from consumer_support import ConsumerHarness


@dataclass
class RackHarness(ConsumerHarness):
    """``ConsumerHarness`` whose slots (and registry sync) use the rack cluster's bootstrap servers."""

    def env(self) -> dict[str, str]:
        env = super().env()
        env["AIRFLOW_CONN_LAGSCHED_KAFKA"] = json.dumps({"conn_type": "kafka", "extra": dict(self.kafka_config)})
        return env


def wait_for_leaders(bootstrap: str, topic: str, *, timeout_s: float, accept: Any) -> dict[int, str | None]:
    """Poll the topic's leader racks until ``accept(racks)`` holds; returns them, or fails naming them."""
    import time

    from lagsched_dev.bench.rack import current_leader_racks

    deadline = time.monotonic() + timeout_s
    racks = current_leader_racks(bootstrap, topic)
    while not accept(racks):
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: leaders did not settle within {timeout_s} s: {racks}")
        time.sleep(0.5)
        racks = current_leader_racks(bootstrap, topic)
    return racks


__all__ = ["RackHarness", "wait_for_leaders"]
