"""The scaling settings: one JSON Airflow Variable of global settings plus per-topic overrides.

Validated here, with no I/O, so a malformed Variable fails the evaluation before anything changes:
`parse_settings` raises a single `ConfigError` naming every bad field path, the value found and what
is allowed. Per-topic overrides are merged over ``defaults`` and validated as a whole at parse time,
so a bad combination (an override ``min_workers`` above the default ``max_workers``) is caught then
too, not when the topic is first evaluated.

Example Variable (``lagsched_settings``)::

    {
      "defaults": {"policy": "hevo", "max_lag": 100000, "max_workers": 16},
      "topics": {"orders": {"policy": "capacity", "drain_target_s": 300}}
    }

Every default is listed, with what it means, in docs/configuration.md.

Example:
    >>> s = parse_settings('{"topics": {"orders": {"max_workers": 4}}}')
    >>> (s.for_topic("orders").max_workers, s.for_topic("other").max_workers)
    (4, 32)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from lagsched.core.errors import ConfigError

__all__ = ["PolicyName", "Settings", "TopicPolicyConfig", "parse_settings"]

PolicyName = Literal["hevo", "keda", "capacity"]

_WORKER_HOUR = 50_000 / 3600  # Hevo's figure: one job ingests 50k records an hour


class TopicPolicyConfig(BaseModel):
    """How one topic is measured and scaled. All fields have defaults; see docs/configuration.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: PolicyName = Field(
        default="hevo",
        description="Scaling policy: 'hevo' (regression + thresholds), 'keda' (ceil(lag/threshold)), "
        "'capacity' (ingress + drain rate over observed per-worker rate).",
    )
    min_lag: int = Field(default=10_000, ge=0, description="Records; below this the topic may scale down.")
    max_lag: int = Field(
        default=100_000,
        ge=1,
        description="Records; above this the topic may scale up. Also the simulator's lag target.",
    )
    window: int = Field(default=15, ge=3, description="Most recent lag samples fitted by the regression.")
    min_samples: int = Field(
        default=5, ge=3, description="Fewer lag samples than this (since the last change) means no change."
    )
    evaluate_every: int = Field(default=3, ge=1, description="Evaluate once every this many measurement runs.")
    cooldown_s: float = Field(
        default=300.0,
        ge=0,
        description="Seconds after a change before a scale-down (the data-loss override excepted).",
    )
    scale_up_cooldown_s: float = Field(
        default=180.0,
        ge=0,
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
    min_workers: int = Field(default=1, ge=0, description="Never fewer workers than this.")
    max_workers: int = Field(default=32, ge=1, description="Never more workers than this (also capped by partitions).")
    drain_target_s: float = Field(default=900.0, gt=0, description="Seconds in which a backlog should be drained.")
    no_offset_policy: Literal["earliest", "latest"] = Field(
        default="earliest", description="Start of a partition with no committed offset."
    )
    keda_lag_threshold: int | None = Field(
        default=None,
        ge=1,
        description="Records of lag per worker for the 'keda' policy; null means per_worker_rate x drain_target_s "
        "(the backlog one worker drains within the drain target).",
    )
    per_worker_rate: float = Field(
        default=_WORKER_HOUR, gt=0, description="Records/s one worker consumes, used until one has been observed."
    )
    min_fit_r2: float = Field(default=0.5, ge=0, le=1, description="r² a trend needs to count as steady.")
    data_loss_fraction: float = Field(
        default=0.5, gt=0, le=1, description="Time lag above this fraction of retention forces a scale-up."
    )
    short_retention_s: float = Field(
        default=6 * 3600.0, gt=0, description="Retention at or below this gets the largest step up, smallest down."
    )
    long_retention_s: float = Field(
        default=7 * 86400.0,
        gt=0,
        description="Retention at or above this (or infinite) gets the smallest step up, largest down.",
    )
    max_step: int = Field(default=4, ge=1, description="Largest step, in workers, of the 'hevo' policy.")

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
            raise ValueError(f"must be greater than short_retention_s ({short})")
        return v

    @property
    def lag_threshold(self) -> int:
        """The 'keda' policy's records of lag per worker: ``keda_lag_threshold``, else the backlog one
        worker drains within ``drain_target_s`` (12,500 with the defaults), the sizing that gives the
        KEDA rule the same goal as the capacity policy."""
        if self.keda_lag_threshold is not None:
            return self.keda_lag_threshold
        return max(1, round(self.per_worker_rate * self.drain_target_s))


class Settings(BaseModel):
    """The whole Variable: global settings, topic defaults and per-topic overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    measure_every_s: float = Field(default=60.0, gt=0, description="Seconds between lag measurements.")
    sample_window: int = Field(
        default=120, ge=2, description="Offset and lag samples kept per partition/topic (in Redis)."
    )
    sample_ttl_s: float = Field(default=7200.0, gt=0, description="Seconds before stored samples expire.")
    defaults: TopicPolicyConfig = Field(default_factory=TopicPolicyConfig, description="Settings of every topic.")
    topics: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-topic overrides of 'defaults', keyed by topic name."
    )

    @field_validator("topics")
    @classmethod
    def _topic_names_non_empty(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name in v:
            if not name.strip():
                raise ValueError("topic names must be non-empty")
        return v

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
            raise _config_error(exc, prefix=("topics", name)) from None


def parse_settings(raw: str | bytes | Mapping[str, Any]) -> Settings:
    """Validate the settings Variable (a JSON string or an already decoded mapping).

    Every topic override is merged and validated, and the sample window must hold at least every
    topic's regression window, so a `Settings` returned here never fails later.

    Raises:
        ConfigError: naming each bad field path, the value found and what is allowed.

    Example:
        >>> parse_settings('{"defaults": {"policy": "magic"}}')
        Traceback (most recent call last):
        ...
        lagsched.core.errors.ConfigError: invalid lagsched settings: defaults.policy = 'magic': \
Input should be 'hevo', 'keda' or 'capacity'
    """
    if isinstance(raw, str | bytes):
        try:
            data: object = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"invalid lagsched settings: (root) = {_short_repr(raw)}: not valid JSON ({exc.msg} at line "
                f"{exc.lineno} column {exc.colno}); expected a JSON object",
                field="(root)",
                value=raw[:80],
                allowed="a JSON object",
            ) from None
    else:
        data = raw
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"invalid lagsched settings: (root) = {_short_repr(data)}: expected a JSON object, "
            f"got {type(data).__name__}",
            field="(root)",
            value=data,
            allowed="a JSON object",
        )
    try:
        settings = Settings.model_validate(dict(data))
    except ValidationError as exc:
        raise _config_error(exc, prefix=()) from None
    errors: list[ConfigError] = []
    for name, override in settings.topics.items():
        try:
            cfg = settings.for_topic(name)
        except ConfigError as exc:
            errors.append(exc)
            continue
        if cfg.window > settings.sample_window and "window" in override:
            errors.append(
                ConfigError(
                    f"topics.{name}.window = {cfg.window}: must be <= sample_window ({settings.sample_window})",
                    field=f"topics.{name}.window",
                    value=cfg.window,
                    allowed=f"<= sample_window ({settings.sample_window})",
                )
            )
    if settings.defaults.window > settings.sample_window:
        errors.append(
            ConfigError(
                f"defaults.window = {settings.defaults.window}: must be <= sample_window ({settings.sample_window})",
                field="defaults.window",
                value=settings.defaults.window,
                allowed=f"<= sample_window ({settings.sample_window})",
            )
        )
    if errors:
        first = errors[0]
        detail = "; ".join(str(e).removeprefix("invalid lagsched settings: ") for e in errors)
        raise ConfigError(
            f"invalid lagsched settings: {detail}", field=first.field, value=first.value, allowed=first.allowed
        )
    return settings


def _config_error(exc: ValidationError, prefix: tuple[str, ...]) -> ConfigError:
    """One `ConfigError` for all of pydantic's errors, each as ``path = value: what is allowed``."""
    parts: list[str] = []
    first_field, first_value, first_allowed = "", None, ""
    for i, err in enumerate(exc.errors(include_url=False)):
        path = ".".join(str(p) for p in (*prefix, *err["loc"])) or "(root)"
        allowed = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            allowed = "unknown field; remove it or fix its spelling (see docs/configuration.md)"
        value = err.get("input")
        if err["type"] == "missing":
            parts.append(f"{path}: {allowed}")
        else:
            parts.append(f"{path} = {_short_repr(value)}: {allowed}")
        if i == 0:
            first_field, first_value, first_allowed = path, value, allowed
    return ConfigError(
        "invalid lagsched settings: " + "; ".join(parts), field=first_field, value=first_value, allowed=first_allowed
    )


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
