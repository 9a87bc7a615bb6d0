"""The override DAG's task body: re-validate the form, then apply the override (tasks.py style).

Airflow's trigger form already checks each Param's JSON schema, but a run can also be triggered
through the API or the CLI with any conf, so every value is checked again here, before any
connection is opened; what only the registry knows (the topic exists, its partition count) is
checked by `lagsched.adapters.worker_changes.create_override` inside its transaction. Either way a bad
value raises `ConfigError` naming the field, which `lagsched.airflow.tasks.fail_fast` turns into an
``AirflowFailException`` (the run fails at once, without retries) and nothing is changed.

Example (the DAG's task)::

    with fail_fast():
        return run_override(context["params"], created_by=user, request_id=run_id)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID
from lagsched.core.errors import ConfigError, TopicNameError
from lagsched.core.names import validate_cluster_name, validate_topic_name
from lagsched.core.overrides import check_duration, parse_duration

__all__ = ["OverrideRequest", "parse_request", "run_override"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OverrideRequest:
    """A checked override form.

    Attributes:
        cluster: registry cluster.
        topic: topic name (legal in Kafka; whether it is registered is checked when applying).
        linker_workers: the count to pin (>= 1; the partition bound is checked when applying).
        duration_s: how long, seconds (0 < d <= 7 days).
        reason: why, stripped.
    """

    cluster: str
    topic: str
    linker_workers: int
    duration_s: float
    reason: str


def _bad(field: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(f"invalid override: {field} = {value!r}: {allowed}", field=field, value=value, allowed=allowed)


def parse_request(params: Mapping[str, Any]) -> OverrideRequest:
    """Check the form's values (``topic``, ``linker_workers``, ``duration``, ``reason``, ``cluster``).

    ``duration`` is a string with units (``2h``, ``90m``) or a number of minutes (an integer, as
    the API may send it).

    Raises:
        ConfigError: naming the first bad field.

    Example:
        >>> r = parse_request({"topic": "orders", "linker_workers": 8, "duration": "2h", "reason": "sale"})
        >>> (r.cluster, r.topic, r.linker_workers, r.duration_s)
        ('lagsched_kafka', 'orders', 8, 7200.0)
    """
    cluster = params.get("cluster") or "lagsched_kafka"
    try:
        validate_cluster_name(cluster)
    except TopicNameError as exc:
        raise _bad("cluster", cluster, str(exc)) from None
    topic: Any = params.get("topic")
    try:
        validate_topic_name(topic)
    except TopicNameError as exc:
        raise _bad("topic", topic, str(exc)) from None
    workers = params.get("linker_workers")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise _bad("linker_workers", workers, "must be an integer >= 1 (and at most the topic's partition count)")
    duration = params.get("duration")
    if isinstance(duration, int) and not isinstance(duration, bool):
        duration_s = check_duration(duration * 60.0, shown=duration)  # a bare number from the API: minutes
    elif isinstance(duration, str):
        duration_s = parse_duration(duration)
    else:
        raise _bad("duration", duration, "must be a duration with units, like 90m, 2h or 1d")
    reason = params.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise _bad("reason", reason, "must say why (non-empty text); it is recorded with the decision")
    return OverrideRequest(str(cluster), str(topic), workers, duration_s, reason.strip())


def run_override(
    params: Mapping[str, Any],
    *,
    created_by: str,
    request_id: str,
    now: datetime | None = None,
    mysql_conn_id: str = MYSQL_CONN_ID,
    redis_conn_id: str = REDIS_CONN_ID,
) -> dict[str, Any]:
    """Validate the form, then apply the override (`lagsched.workflows.overrides.apply_override`).

    Args:
        params: the DAG run's params.
        created_by: the Airflow user who triggered the run.
        request_id: the run id: a retry of the task finds the override its first try made.
        now: the request time (default: the wall clock).
        mysql_conn_id, redis_conn_id: the Connections, read through their hooks when the task runs.

    Returns:
        `OverrideResult.as_dict` (JSON, for XCom).

    Raises:
        ConfigError: a bad value, ``field`` naming it; nothing was changed.
    """
    from lagsched.adapters.clients import mysql_and_redis
    from lagsched.airflow.tasks import mysql_settings, redis_settings
    from lagsched.workflows.overrides import apply_override

    request = parse_request(params)  # before connecting: a bad form opens no connection
    at = datetime.now(tz=UTC) if now is None else now
    mysql_p, redis_p = mysql_settings(mysql_conn_id), redis_settings(redis_conn_id)
    with mysql_and_redis(mysql_p, redis_p) as (mysql, redis):
        result = apply_override(
            mysql,
            redis,
            cluster=request.cluster,
            topic=request.topic,
            linker_workers=request.linker_workers,
            duration_s=request.duration_s,
            reason=request.reason,
            created_by=created_by or "airflow",
            now=at,
            request_id=request_id,
        )
    log.info("%s", result.text())
    return result.as_dict()
