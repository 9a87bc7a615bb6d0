"""The KEDA baseline as KEDA runs it: the Kafka scaler's metric through a Kubernetes HPA's defaults.

The simulator's ``keda`` policy is not our evaluator with another rule: it is this model, so the
baseline gets what it has in production, no more and no less:

* KEDA's Kafka scaler reports the topic's total lag with an ``AverageValue`` target of
  ``lagThreshold``, so the HPA wants ``ceil(lag / lagThreshold)`` replicas, capped at the partition
  count (``allowIdleConsumers: false``, the default) and at ``maxReplicaCount``, floored at
  ``minReplicaCount``;
* the HPA skips a change while ``|lag / (lagThreshold * replicas) - 1| <= 0.1`` (its default
  ``--horizontal-pod-autoscaler-tolerance``);
* scaling up has no stabilisation window; per 60 s it may add the larger of 4 pods or 100 %
  (the default ``behavior.scaleUp``);
* scaling down uses the highest recommendation of the last 300 s (the default
  ``behavior.scaleDown.stabilizationWindowSeconds``).

It is polled once per simulated tick (a minute; KEDA's default ``pollingInterval`` is 30 s, the
HPA syncs every 15 s, so this is, if anything, slower than the real thing by up to a minute).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

__all__ = ["HPA_SCALE_DOWN_WINDOW_S", "HPA_TOLERANCE", "KedaHpa"]

HPA_TOLERANCE = 0.1
"""The HPA ignores a metric within this fraction of its target."""
HPA_SCALE_DOWN_WINDOW_S = 300.0
"""The HPA scales down to the highest recommendation of this many seconds."""
HPA_SCALE_UP_PODS = 4
"""Default scale-up policy: at most the larger of +4 pods or +100 % per 60 s."""


@dataclass(slots=True)
class KedaHpa:
    """One ScaledObject's replica count over time; call `decide` once per poll, in time order.

    Attributes:
        lag_threshold: KEDA's ``lagThreshold``, records of lag per replica.
        min_replicas: ``minReplicaCount``.
        max_replicas: ``min(maxReplicaCount, partitions)``.
    """

    lag_threshold: int
    min_replicas: int
    max_replicas: int
    _recommendations: deque[tuple[float, int]] = field(default_factory=deque)

    def decide(self, lag: int, replicas: int, now: float) -> int:
        """The replica count after a poll at `now` that measured `lag` with `replicas` running.

        Example:
            >>> hpa = KedaHpa(lag_threshold=1_000, min_replicas=1, max_replicas=12)
            >>> hpa.decide(500, 1, 0.0), hpa.decide(3_000, 1, 60.0)
            (1, 3)
            >>> hpa.decide(40_000, 3, 120.0)  # wants 40; +4 pods or +100 % per poll: 7
            7
        """
        usage = lag / (self.lag_threshold * replicas) if replicas > 0 else math.inf
        wanted = replicas if abs(usage - 1.0) <= HPA_TOLERANCE else math.ceil(lag / self.lag_threshold)
        wanted = min(max(wanted, self.min_replicas), self.max_replicas)
        self._recommendations.append((now, wanted))
        while self._recommendations[0][0] < now - HPA_SCALE_DOWN_WINDOW_S:
            self._recommendations.popleft()
        if wanted < replicas:  # scale down only as far as the window's highest recommendation
            return min(replicas, max(r for _, r in self._recommendations))
        return min(wanted, max(2 * replicas, replicas + HPA_SCALE_UP_PODS))
