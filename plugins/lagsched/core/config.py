"""The scaling settings: one JSON Airflow Variable of global settings plus per-topic overrides.

Validated here, with no I/O, so a malformed Variable fails the evaluation before anything changes:
`parse_settings` raises a single `ConfigError` naming every bad field path, the value found and what
is allowed. Per-topic overrides are merged over ``defaults`` and validated as a whole at parse time,
so a bad combination (an override ``min_workers`` above the default ``max_workers``) is caught then
too, not when the topic is first evaluated.

Every number has a lower and an upper bound (NaN and infinities are never accepted), integers are
strict (``true``, ``"50000"`` and ``4.0`` are not integers), a duplicate JSON key is an error, and
every override key must be a legal Kafka topic name. Whether an override names a topic that exists is
something only the registry knows: `unknown_topic_overrides` lists those keys for a warning.

Example Variable (``lagsched_settings``)::

    {
      "defaults": {"policy": "hevo", "max_lag": 100000, "max_workers": 16},
      "topics": {"orders": {"policy": "capacity", "drain_target_s": 300}}
    }

Every default and bound is listed, with what it means, in docs/configuration.md.

Example:
    >>> s = parse_settings('{"topics": {"orders": {"max_workers": 4}}}')
    >>> (s.for_topic("orders").max_workers, s.for_topic("other").max_workers)
    (4, 32)
    >>> unknown_topic_overrides(s, ["Orders", "clicks"])
    [('orders', 'Orders')]
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from lagsched.core.errors import ConfigError
from lagsched.core.lag import MONITOR_SCHEDULE_S, OPEN_TRANSACTION_WARN_S
from lagsched.core.registry import TopicRow
from lagsched.core.variables import (
    TopicName,
    VariableModel,
    config_error,
    decode,
    joined,
    number_text,
    require_object,
    validate,
)

__all__ = [
    "PolicyName",
    "Settings",
    "TopicPolicyConfig",
    "effective_config",
    "parse_settings",
    "unknown_topic_overrides",
]

log = logging.getLogger(__name__)

PolicyName = Literal["hevo", "keda", "capacity"]

#: How its errors name the Variable ``lagsched_settings``.
SETTINGS_LABEL = "lagsched settings"

_WORKER_HOUR = 50_000 / 3600  # Hevo's figure: one job ingests 50k records an hour

# Upper bounds: far beyond any deployment we can imagine wanting, yet small enough that every value
# stays finite and usable by what consumes it (Redis EXPIRE, worker counts stored in INT columns,
# arithmetic in the policies), so a typo of a few extra zeros is caught here, not by a crash later.
DAY = 86_400.0
MAX_RECORDS = 10**12  # lag thresholds: a trillion records
MAX_COUNT = 10_000  # samples, measurements and workers
MAX_DURATION_S = 30 * DAY  # cooldowns and drain targets
MAX_MEASURE_EVERY_S = DAY
MAX_TTL_S = 365 * DAY
MAX_RETENTION_S = 3650 * DAY  # retention thresholds; a longer retention counts as infinite anyway
MAX_WORKER_RATE = 10.0**7  # records/s of one worker
#: The default of ``stale_after_s``: this many measurements missed, and never under ten minutes.
STALE_AFTER_RUNS = 3
STALE_AFTER_MIN_S = 600.0


class TopicPolicyConfig(VariableModel):
    """How one topic is measured and scaled. All fields have defaults; see docs/configuration.md."""

    policy: PolicyName = Field(
        default="hevo",
        description="Scaling policy: 'hevo' (regression + thresholds), 'keda' (ceil(lag/threshold)), "
        "'capacity' (ingress + drain rate over observed per-worker rate).",
    )
    min_lag: int = Field(
        default=10_000, ge=0, le=MAX_RECORDS, description="Records; below this the topic may scale down."
    )
    max_lag: int = Field(
        default=100_000,
        ge=1,
        le=MAX_RECORDS,
        description="Records; above this the topic may scale up. Also the simulator's lag target.",
    )
    window: int = Field(default=15, ge=3, le=MAX_COUNT, description="Most recent lag samples fitted by the regression.")
    min_samples: int = Field(
        default=5,
        ge=3,
        le=MAX_COUNT,
        description="Fewer lag samples than this (since the last change) means no change.",
    )
    evaluate_every: int = Field(
        default=3,
        ge=1,
        le=MAX_COUNT,
        description="A topic is evaluated once this many measurements arrived since its last evaluation.",
    )
    cooldown_s: float = Field(
        default=300.0,
        ge=0,
        le=MAX_DURATION_S,
        description="Seconds after a change before a scale-down (the data-loss override excepted).",
    )
    scale_up_cooldown_s: float = Field(
        default=180.0,
        ge=0,
        le=MAX_DURATION_S,
        description="Seconds after a change before a scale-up (the data-loss override excepted); short, because "
        "a lag that outruns the workers costs more than one change too many.",
    )
    hysteresis: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="For the keda policy: ignore a change of at most this fraction of the current workers. "
        "The hevo and capacity policies' min/max lag band is their hysteresis.",
    )
    # >= 1 as the topics table's CHECK requires: a topic with 0 workers would never be consumed.
    min_workers: int = Field(default=1, ge=1, le=MAX_COUNT, description="Never fewer workers than this.")
    max_workers: int = Field(
        default=32, ge=1, le=MAX_COUNT, description="Never more workers than this (also capped by partitions)."
    )
    drain_target_s: float = Field(
        default=900.0, ge=1, le=MAX_DURATION_S, description="Seconds in which a backlog should be drained."
    )
    no_offset_policy: Literal["earliest", "latest"] = Field(
        default="earliest", description="Start of a partition with no committed offset."
    )
    keda_lag_threshold: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RECORDS,
        description="Records of lag per worker for the 'keda' policy; null means per_worker_rate x drain_target_s "
        "(the backlog one worker drains within the drain target).",
    )
    per_worker_rate: float = Field(
        default=_WORKER_HOUR,
        ge=0.001,
        le=MAX_WORKER_RATE,
        description="Records/s one worker consumes, used until one has been observed.",
    )
    min_fit_r2: float = Field(default=0.5, ge=0, le=1, description="r² a trend needs to count as steady.")
    data_loss_fraction: float = Field(
        default=0.5, gt=0, le=1, description="Time lag above this fraction of retention forces a scale-up."
    )
    short_retention_s: float = Field(
        default=6 * 3600.0,
        ge=1,
        le=MAX_RETENTION_S,
        description="Retention at or below this gets the largest step up, smallest down.",
    )
    long_retention_s: float = Field(
        default=7 * DAY,
        ge=1,
        le=MAX_RETENTION_S,
        description="Retention at or above this (or infinite) gets the smallest step up, largest down.",
    )
    max_step: int = Field(default=4, ge=1, le=MAX_COUNT, description="Largest step, in workers, of the 'hevo' policy.")
    stall_after_measurements: int = Field(
        default=5,
        ge=2,
        le=MAX_COUNT,
        description="Consecutive measurements with lag and no committed offset moving after which the topic's "
        "pipeline is stalled (its partitions have live holders) or stopped (none); the evaluator then holds it.",
    )

    time_lag_slo_s: float = Field(
        default=600.0,
        ge=1,
        le=MAX_DURATION_S,
        description="Seconds of time lag the topic may reach: the alert LagschedTopicTimeLagHigh fires above it "
        "(exported as lagsched_topic_time_lag_slo_seconds; docs/alerts.md).",
    )
    watermark_slo_s: float = Field(
        default=3600.0,
        ge=1,
        le=MAX_DURATION_S,
        description="Seconds the topic's watermark may trail the clock: LagschedWatermarkBehind fires above it; "
        "its table's hourly events wait behind the watermark (lagsched_topic_watermark_slo_seconds; "
        "docs/completeness.md).",
    )
    open_transaction_bound_s: float = Field(
        default=OPEN_TRANSACTION_WARN_S,
        ge=1,
        le=MAX_DURATION_S,
        description="Seconds a producer's transaction may hold the topic's last stable offset before the lag "
        "monitor warns and LagschedOpenTransactionOld fires (lagsched_topic_open_transaction_bound_seconds).",
    )

    @field_validator("max_lag")
    @classmethod
    def _max_lag_above_min(cls, v: int, info: ValidationInfo) -> int:
        low = info.data.get("min_lag")
        if low is not None and v <= low:
            raise ValueError(f"must be greater than min_lag ({low})")
        return v

    @field_validator("min_samples")
    @classmethod
    def _min_samples_within_window(cls, v: int, info: ValidationInfo) -> int:
        window = info.data.get("window")
        if window is not None and v > window:
            raise ValueError(f"must be <= window ({window})")
        return v

    @field_validator("max_workers")
    @classmethod
    def _max_workers_above_min(cls, v: int, info: ValidationInfo) -> int:
        low = info.data.get("min_workers")
        if low is not None and v < low:
            raise ValueError(f"must be >= min_workers ({low})")
        return v

    @field_validator("long_retention_s")
    @classmethod
    def _long_above_short(cls, v: float, info: ValidationInfo) -> float:
        short = info.data.get("short_retention_s")
        if short is not None and v <= short:
            raise ValueError(f"must be greater than short_retention_s ({short:g})")
        return v

    def ceiling(self, partitions: int) -> int:
        """The most workers the evaluator gives a topic of ``partitions`` partitions: ``max_workers``,
        and never more than one per partition (the rule ``bounds``; the alert on lag rising at
        max_workers and the ``lag_at_max_workers`` notification compare with it too).

        >>> TopicPolicyConfig(max_workers=8).ceiling(3), TopicPolicyConfig(max_workers=2).ceiling(12)
        (3, 2)
        """
        return min(self.max_workers, partitions)

    @property
    def lag_threshold(self) -> int:
        """The 'keda' policy's records of lag per worker: ``keda_lag_threshold``, else the backlog one
        worker drains within ``drain_target_s`` (12,500 with the defaults), the sizing that gives the
        KEDA rule the same goal as the capacity policy."""
        if self.keda_lag_threshold is not None:
            return self.keda_lag_threshold
        return max(1, round(self.per_worker_rate * self.drain_target_s))


class Settings(VariableModel):
    """The whole Variable: global settings, topic defaults and per-topic overrides."""

    measure_every_s: float = Field(
        default=60.0,
        ge=MONITOR_SCHEDULE_S,
        le=MAX_MEASURE_EVERY_S,
        description="Seconds between lag measurements. The lag monitor DAG runs every minute and measures a "
        "cluster when this long has passed since its last measurement (60: every run; 300: every fifth).",
    )
    sample_window: int = Field(
        default=120, ge=2, le=MAX_COUNT, description="Offset and lag samples kept per partition/topic (in Redis)."
    )
    sample_ttl_s: float = Field(default=7200.0, ge=1, le=MAX_TTL_S, description="Seconds before stored samples expire.")
    stale_after_s: float | None = Field(
        default=None,
        ge=1,
        le=MAX_TTL_S,
        description="Seconds after a topic's newest measurement at which its measurements are stale: the alert "
        "LagschedMeasurementsStale fires (lagsched_measurements_stale_after_seconds). null: "
        f"{STALE_AFTER_RUNS} x measure_every_s, at least {STALE_AFTER_MIN_S:g}.",
    )
    defaults: TopicPolicyConfig = Field(default_factory=TopicPolicyConfig, description="Settings of every topic.")
    topics: dict[TopicName, dict[str, Any]] = Field(
        default_factory=dict, description="Per-topic overrides of 'defaults', keyed by topic name."
    )

    @field_validator("stale_after_s")
    @classmethod
    def _stale_after_a_measurement(cls, v: float | None, info: ValidationInfo) -> float | None:
        # Shorter than the time between two measurements, every topic would read as stale between them.
        every = info.data.get("measure_every_s")
        if v is not None and every is not None and v < every:
            raise ValueError(f"must be >= measure_every_s ({every:g}), or null")
        return v

    @property
    def measurements_stale_after_s(self) -> float:
        """``stale_after_s``, or its default: several missed measurements, never under ten minutes.

        >>> Settings().measurements_stale_after_s, Settings(measure_every_s=900).measurements_stale_after_s
        (600.0, 2700.0)
        """
        if self.stale_after_s is not None:
            return self.stale_after_s
        return max(STALE_AFTER_MIN_S, STALE_AFTER_RUNS * self.measure_every_s)

    def for_topic(self, name: str) -> TopicPolicyConfig:
        """The settings of topic `name`: its overrides merged over ``defaults``.

        Raises:
            ConfigError: the merged settings are invalid (cannot happen for a `Settings` built by
                `parse_settings`, which checks every listed topic).
        """
        override = self.topics.get(name)
        if not override:
            return self.defaults
        merged = {**self.defaults.model_dump(), **override}
        try:
            return TopicPolicyConfig.model_validate(merged)
        except ValidationError as exc:
            raise config_error(exc, TopicPolicyConfig, SETTINGS_LABEL, prefix=("topics", name)) from None


def parse_settings(raw: str | bytes | Mapping[str, Any] | None) -> Settings:
    """Validate the settings Variable (a JSON string or an already decoded mapping; None or blank: the defaults).

    Every topic override is merged and validated, and the relations between the global settings and
    every topic's (the sample window holds the regression window and ``evaluate_every``
    measurements; samples live long enough to be evaluated) are checked, so a `Settings` returned
    here never fails later.

    Raises:
        ConfigError: naming each bad field path, the value found and what is allowed.

    Example:
        >>> parse_settings('{"defaults": {"policy": "magic"}}')
        Traceback (most recent call last):
        ...
        lagsched.core.errors.ConfigError: invalid lagsched settings: defaults.policy = 'magic': \
Input should be 'hevo', 'keda' or 'capacity'
    """
    data = require_object(decode(raw, SETTINGS_LABEL) or {}, SETTINGS_LABEL)
    settings = validate(Settings, data, SETTINGS_LABEL)
    errors: list[ConfigError] = []
    checked: list[tuple[str, TopicPolicyConfig, Mapping[str, Any]]] = [("defaults", settings.defaults, {})]
    for name, fields in settings.topics.items():
        try:
            checked.append((f"topics.{name}", settings.for_topic(name), fields))
        except ConfigError as exc:
            errors.append(exc)
    for path, cfg, own_fields in checked:
        errors.extend(_global_relations(settings, path, cfg, own_fields))
    if errors:
        raise joined(errors, SETTINGS_LABEL)
    return settings


def unknown_topic_overrides(settings: Settings, registered: Iterable[str]) -> list[tuple[str, str | None]]:
    """Each ``topics`` override key that names no registered topic, with the closest registered name.

    Topic names are case-sensitive in Kafka, so ``Orders`` does not override ``orders``: such a key
    silently does nothing, which is worth a warning in the task log. The hint is a registered name
    equal but for case, else the closest by `difflib` (None when nothing is close).

    Example:
        >>> s = parse_settings({"topics": {"ordres": {}, "Clicks": {}, "zzz": {}, "views": {}}})
        >>> unknown_topic_overrides(s, ["orders", "clicks", "views"])
        [('ordres', 'orders'), ('Clicks', 'clicks'), ('zzz', None)]
    """
    names = list(dict.fromkeys(registered))
    known = set(names)
    unknown = [key for key in settings.topics if key not in known]
    if not unknown:
        return []
    by_lower: dict[str, str] = {}
    for name in sorted(names):
        by_lower.setdefault(name.lower(), name)
    out: list[tuple[str, str | None]] = []
    for key in unknown:
        hint = by_lower.get(key.lower())
        if hint is None:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
            hint = close[0] if close else None
        out.append((key, hint))
    return out


def _global_relations(
    settings: Settings, path: str, cfg: TopicPolicyConfig, override: Mapping[str, Any]
) -> list[ConfigError]:
    """A topic's settings against the global ones. Each is reported once: at ``defaults``, or at a
    topic that sets one of the fields involved itself."""
    errors: list[ConfigError] = []
    own = path == "defaults"

    def check(field: str, ok: bool, allowed: str, involved: tuple[str, ...] = ()) -> None:
        if ok or not (own or field in override or any(f in override for f in involved)):
            return
        value = getattr(cfg, field)
        errors.append(
            ConfigError(
                f"{path}.{field} = {value!r}: must be {allowed}", field=f"{path}.{field}", value=value, allowed=allowed
            )
        )

    window = settings.sample_window
    check("window", cfg.window <= window, f"<= sample_window ({window})")
    # The evaluator counts the measurements stored since its last evaluation, and at most
    # sample_window are stored: a larger evaluate_every would never be reached again.
    check("evaluate_every", cfg.evaluate_every <= window, f"<= sample_window ({window})")
    # Samples older than sample_ttl_s are dropped, so with a shorter TTL fewer than min_samples (or
    # evaluate_every) measurements are ever stored at once and the topic would never be scaled.
    # The stall rule counts stored lag records, so it needs that many kept as well. Checked only
    # where the field is set, so a Variable written before the field existed stays valid (with a
    # short sample window or TTL, stall detection then never fires; docs/configuration.md says so).
    stall_set = "stall_after_measurements" in (settings.defaults.model_fields_set if own else override)
    if stall_set:
        check("stall_after_measurements", cfg.stall_after_measurements <= window, f"<= sample_window ({window})")
    needs = [(cfg.min_samples, "min_samples"), (cfg.evaluate_every, "evaluate_every")]
    # On a tie the scaling fields are named: theirs is the older and graver consequence.
    count, which = max(needs)
    if stall_set and cfg.stall_after_measurements > count:
        count, which = cfg.stall_after_measurements, "stall_after_measurements"
    least = count * settings.measure_every_s
    if settings.sample_ttl_s < least and (own or which in override or any(f in override for _, f in needs)):
        consequence = (
            "a stalled pipeline would never be detected"
            if which == "stall_after_measurements"
            else "the topic would never be scaled"
        )
        allowed = (
            f">= measure_every_s x {path}.{which} "
            f"({number_text(settings.measure_every_s)} x {count} = {number_text(least)}): "
            f"samples would expire before that many measurements are stored, and {consequence}"
        )
        errors.append(
            ConfigError(
                f"sample_ttl_s = {settings.sample_ttl_s!r}: must be {allowed}",
                field="sample_ttl_s",
                value=settings.sample_ttl_s,
                allowed=allowed,
            )
        )
    return errors


def effective_config(settings: Settings, topic: TopicRow) -> TopicPolicyConfig:
    """The topic's settings with its registry row's worker limits applied on top.

    The Variable holds policy; the ``topics`` row's ``min_workers``/``max_workers`` are the
    operator's optional hard limits for this one topic (NULL: none). The evaluator gets the tighter
    of the two; if they do not overlap, the row's limits win (the row is the more specific statement).
    """
    cfg = settings.for_topic(topic.name)
    row_low = cfg.min_workers if topic.min_workers is None else topic.min_workers
    row_high = cfg.max_workers if topic.max_workers is None else topic.max_workers
    low, high = max(cfg.min_workers, row_low), min(cfg.max_workers, row_high)
    if low > high:
        log.warning(
            "topic %s: settings workers [%d, %d] and registry [%s, %s] do not overlap; using the registry's",
            topic.name, cfg.min_workers, cfg.max_workers, topic.min_workers, topic.max_workers,
        )  # fmt: skip
        low, high = min(row_low, row_high), row_high
    return cfg.model_copy(update={"min_workers": low, "max_workers": high})
