"""Task callbacks that record what the alert rules need about a task's outcome.

The table care task is a Spark job: whether it succeeded is known to Airflow, not to the job (a job
that dies with its JVM reports nothing). Its task's callbacks count each attempt's outcome in Redis
(`lagsched.adapters.alert_figures.count_table_care`), which ``/lagsched/metrics`` exports as
``lagsched_table_care_runs_total`` and the rule LagschedTableCareFailing reads. A failed attempt
that is retried counts as failed too: the care did fail, and a retry that succeeds counts ``ok``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lagsched.connections import REDIS_CONN_ID

__all__ = ["cluster_of", "table_care_failed", "table_care_succeeded"]

log = logging.getLogger(__name__)


def cluster_of(application_args: Sequence[str]) -> str | None:
    """The ``--cluster`` of a lagsched job's arguments, None when absent.

    >>> cluster_of(["--cluster", "eu", "--warehouse", "s3a://w"]), cluster_of(["--now", "x"])
    ('eu', None)
    """
    args = list(application_args)
    for i, arg in enumerate(args[:-1]):
        if arg == "--cluster":
            return args[i + 1]
    return None


def _count_table_care(context: Mapping[str, Any], outcome: str, redis_conn_id: str = REDIS_CONN_ID) -> None:
    from lagsched.adapters.alert_figures import count_table_care
    from lagsched.adapters.redis_store import redis_client
    from lagsched.airflow.tasks import redis_settings
    from lagsched.core.names import validate_cluster_name

    task = context.get("task")
    cluster = cluster_of(getattr(task, "application_args", None) or ())
    try:
        if cluster is None:
            raise ValueError("the task's application_args name no --cluster")
        client = redis_client(redis_settings(redis_conn_id))
        try:
            count_table_care(client, validate_cluster_name(cluster), outcome, datetime.now(tz=UTC))
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - a callback must not fail the task; the log says what was lost
        log.warning("could not count this table care run (%s) for the alert rules: %s", outcome, exc)


def table_care_succeeded(context: Mapping[str, Any]) -> None:
    _count_table_care(context, "ok")


def table_care_failed(context: Mapping[str, Any]) -> None:
    _count_table_care(context, "failed")
