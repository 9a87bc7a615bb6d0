"""Scaling messages over Redis pub/sub: publishing a decision, listening for them.

The evaluator (and an override) publishes each applied change of ``linker_workers`` on
`SCALING_CHANNEL` (named in `lagsched.adapters.redis_store`); running slots listen there and on
their cluster's slot events channel (`lagsched.adapters.slots.SlotRegistry.events_channel`) to
rebalance at once instead of at their next batch boundary. A message is JSON (docs/lag.md);
missing one costs only that wait.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lagsched.adapters.redis_store import SCALING_CHANNEL, subscriber

if TYPE_CHECKING:
    import redis
    import redis.client

    from lagsched.core.decisions import DecisionRow

__all__ = ["ScalingListener", "ScalingMessage", "publish_decision"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScalingMessage:
    """One applied change of a topic's ``linker_workers``, as published on `SCALING_CHANNEL`.

    On the wire (`to_json`, docs/lag.md) the counts keep their names (``previous_linker_workers``,
    ``linker_workers``) and the time is ISO 8601; the evaluator's decisions and recorded rows (an
    override's, a retried run's) build it the same way: from the recorded row (`of_row`), once it is written.
    """

    cluster: str
    topic_id: str
    topic: str
    previous_linker_workers: int
    linker_workers: int
    decided_at: float
    reason: str
    rule: str
    policy: str
    decision_id: int | None

    @classmethod
    def of_row(cls, row: DecisionRow) -> ScalingMessage:
        return cls(row.cluster, row.topic_id, row.topic, row.previous_linker_workers, row.linker_workers,
                   row.decided_at, row.reason, row.rule, row.policy,
                   row.decision_id)  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(
            {
                "topic_id": self.topic_id,
                "topic": self.topic,
                "cluster": self.cluster,
                "previous_linker_workers": self.previous_linker_workers,
                "linker_workers": self.linker_workers,
                "at": datetime.fromtimestamp(self.decided_at, tz=UTC).isoformat(),
                "reason": self.reason,
                "rule": self.rule,
                "policy": self.policy,
                "decision_id": self.decision_id,
            },
            sort_keys=True,
        )


def publish_decision(client: redis.Redis, message: ScalingMessage) -> int:
    """Publish one decision's message on `SCALING_CHANNEL`; returns how many subscribers got it."""
    return int(client.publish(SCALING_CHANNEL, message.to_json()))


class ScalingListener:
    """Wakes the loop when a scaling decision is published (``lagsched:scaling``) or a slot of the
    cluster went live (`SlotRegistry.events_channel`).

    A message for this cluster sets the event: the loop recomputes ownership at every batch
    boundary anyway, the event only cuts a wait short so a rescale (or a new slot's share) takes
    effect within one batch interval.
    """

    def __init__(self, client: redis.Redis, channels: Sequence[str], cluster: str, wake: threading.Event) -> None:
        self._cluster = cluster
        self._pubsub = subscriber(client)
        self._pubsub.subscribe(**dict.fromkeys(channels, self._on_message))
        self._wake = wake
        self._thread: redis.client.PubSubWorkerThread | None = None
        self._down = False
        self.decisions = 0

    def _on_message(self, message: Mapping[str, Any]) -> None:
        # Redis pub/sub channels span every database of the server: other clusters' (and other
        # deployments') messages arrive here too, and only this cluster's matter.
        try:
            detail = json.loads(message.get("data") or "{}")
        except (TypeError, ValueError):
            log.warning("ignoring a malformed message on %s: %r", message.get("channel"), message.get("data"))
            return
        self._down = False
        if not isinstance(detail, dict) or detail.get("cluster") != self._cluster:
            return
        if detail.get("event") == "joined":
            log.info("slot %s joined the cluster: rebalancing now", detail.get("slot"))
        elif detail.get("event") == "standby":
            log.info("slot %s left the live set to stand by: rebalancing now", detail.get("slot"))
        else:
            self.decisions += 1
            log.info(
                "scaling decision: %s %s -> %s workers",
                detail.get("topic"),
                detail.get("previous_linker_workers"),
                detail.get("linker_workers"),
            )
        self._wake.set()

    def start(self) -> None:
        self._thread = self._pubsub.run_in_thread(sleep_time=0.5, daemon=True, exception_handler=self._on_error)

    def _on_error(self, exc: BaseException, pubsub: Any, thread: Any) -> None:
        """Redis went away: keep the thread, which re-subscribes once Redis answers again (the
        loop looks at every batch boundary anyway; the messages only cut waits short)."""
        if not self._down:
            log.warning("scaling messages: Redis unreachable (%s); listening again once it is back", exc)
            self._down = True
        time.sleep(1.0)

    def stop(self) -> None:
        if self._thread is not None:
            # The worker closes the pubsub itself once it leaves get_message; closing it under the
            # thread printed "Bad file descriptor" tracebacks into every slot's log.
            self._thread.stop()
            self._thread.join(timeout=5)
        else:
            self._pubsub.close()
