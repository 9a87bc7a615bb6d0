"""The thresholds lagsched's alert rules compare against, as the lag monitor last applied them.

The rules in ``lagsched/monitoring/alerts.yml`` hold no numbers of their own for what an operator
tunes: a topic's time-lag SLO, its open-transaction bound, its worker ceiling and how old a
measurement may grow are settings of the Variable ``lagsched_settings``, which the lag monitor reads
on each run. It stores what it applied (`lagsched.adapters.alert_figures`), the metrics endpoint
exports it (``lagsched_topic_time_lag_slo_seconds`` and the like) and the rules compare a figure
with its threshold series. One place to change a threshold, and the alert agrees with the page.

>>> t = ClusterThresholds(600.0, {"orders": TopicThresholds(4, 300.0, 120.0)})
>>> ClusterThresholds.from_json(t.to_json()) == t
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from lagsched.core.config import Settings, TopicPolicyConfig

__all__ = ["ClusterThresholds", "TopicThresholds"]

#: The settings' defaults, built once: every topic the monitor has not measured yet gets them, on
#: each scrape of /metrics.
_DEFAULT_POLICY = Settings().defaults


@dataclass(frozen=True, slots=True)
class TopicThresholds:
    """One topic's alert thresholds.

    Attributes:
        max_workers: the most workers the evaluator gives the topic: its ``max_workers`` (the
            settings' and the registry row's, the tighter) capped by its partitions. Lag rising at
            this many workers is a person's problem, not the evaluator's.
        time_lag_slo_s: the topic's ``time_lag_slo_s``.
        open_transaction_bound_s: the topic's ``open_transaction_bound_s``.
        watermark_slo_s: the topic's ``watermark_slo_s``.
    """

    max_workers: int
    time_lag_slo_s: float
    open_transaction_bound_s: float
    watermark_slo_s: float = 3600.0

    @classmethod
    def of(cls, cfg: TopicPolicyConfig, partitions: int) -> TopicThresholds:
        """The thresholds of a topic with settings ``cfg`` (registry limits applied) and ``partitions``.

        >>> TopicThresholds.of(TopicPolicyConfig(max_workers=8), 3)
        TopicThresholds(max_workers=3, time_lag_slo_s=600.0, open_transaction_bound_s=300.0, watermark_slo_s=3600.0)
        """
        return cls(
            max(1, cfg.ceiling(partitions)), cfg.time_lag_slo_s, cfg.open_transaction_bound_s, cfg.watermark_slo_s
        )

    @classmethod
    def default(cls, partitions: int, row_max_workers: int | None = None) -> TopicThresholds:
        """The thresholds before the lag monitor stored any: the settings' defaults, under the
        registry row's ``max_workers`` when it has one."""
        cfg = _DEFAULT_POLICY
        if row_max_workers is not None:
            cfg = cfg.model_copy(update={"max_workers": row_max_workers})
        return cls.of(cfg, partitions)


@dataclass(frozen=True, slots=True)
class ClusterThresholds:
    """A cluster's thresholds: when its measurements are stale, and each topic's."""

    stale_after_s: float
    topics: Mapping[str, TopicThresholds] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "stale_after_s": self.stale_after_s,
                "topics": {
                    name: [t.max_workers, t.time_lag_slo_s, t.open_transaction_bound_s, t.watermark_slo_s]
                    for name, t in sorted(self.topics.items())
                },
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> ClusterThresholds | None:
        """The stored thresholds; None when ``raw`` is not what `to_json` writes (then the defaults
        apply, and the next measurement writes them anew).

        >>> ClusterThresholds.from_json("{oops") is None, ClusterThresholds.from_json('{"topics": 3}') is None
        (True, True)
        """
        try:
            data = json.loads(raw)
            topics = {
                # three figures: stored before watermark_slo_s existed (its default applies)
                str(name): TopicThresholds(int(w), float(slo), float(bound), *(float(x) for x in rest[:1]))
                for name, (w, slo, bound, *rest) in data["topics"].items()
            }
            return cls(float(data["stale_after_s"]), topics)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def for_topic(self, name: str, partitions: int, row_max_workers: int | None = None) -> TopicThresholds:
        """The topic's stored thresholds, or the defaults for a topic the monitor has not seen yet."""
        known = self.topics.get(name)
        return known if known is not None else TopicThresholds.default(partitions, row_max_workers)
