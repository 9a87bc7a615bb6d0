"""The DAGs' task bodies: build clients from the lagsched Connections and run one workflow.

This is the composition root of the Airflow side. The workflows (`lagsched.workflows`) take
their clients as arguments; here they are built from Connections, closed afterwards, and each
task returns a JSON-ready summary for XCom.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from lagsched.core.config import parse_settings
from lagsched.core.names import validate_cluster_name

__all__ = ["run_evaluation", "run_monitor", "run_registry_sync"]

log = logging.getLogger(__name__)


def run_registry_sync(cluster: str) -> dict[str, Any]:
    """Bring the registry in step with the broker before measuring; the lag monitor DAG's first task.

    New topics and new partitions get rows, deleted or re-created topics are handled as
    `lagsched.workflows.topic_sync` describes. Returns what changed (JSON, for XCom).
    """
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config, mysql_params
    from lagsched.workflows.topic_sync import sync_registry

    validate_cluster_name(cluster)
    admin = admin_client(kafka_config())
    mysql = connect(mysql_params())
    try:
        report = sync_registry(mysql, admin, cluster)
    finally:
        mysql.close()
    return report.as_dict()


def run_monitor(
    cluster: str, raw_settings: str | bytes | Mapping[str, Any] | None, *, now: float | None = None, top: int = 10
) -> dict[str, Any]:
    """One measurement; the lag monitor DAG's task.

    Validates the settings before opening any connection, logs `MeasureSummary.table`, and
    returns `MeasureSummary.as_dict` (JSON, for XCom).

    Raises:
        ConfigError: the settings are malformed (nothing was measured or stored).
    """
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.lag_store import LagStore, redis_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config, mysql_params, redis_params
    from lagsched.workflows.lag_monitor import measure

    settings = parse_settings({} if raw_settings is None else raw_settings)
    validate_cluster_name(cluster)
    admin = admin_client(kafka_config())
    mysql = connect(mysql_params())
    try:
        redis = redis_client(redis_params())
        try:
            store = LagStore(redis, cluster, max_samples=settings.sample_window, max_age_s=settings.sample_ttl_s)
            summary = measure(
                cluster,
                mysql=mysql,
                admin=admin,
                store=store,
                settings=settings,
                now=time.time() if now is None else now,
            )
        finally:
            redis.close()
    finally:
        mysql.close()
    log.info("lag summary\n%s", summary.table(top))
    return summary.as_dict(top)


def run_evaluation(
    cluster: str,
    raw_settings: str | bytes | Mapping[str, Any] | None,
    *,
    evaluation_id: str,
    now: float | None = None,
    slot_timeout_s: float = 60.0,
) -> dict[str, Any]:
    """One evaluation; the evaluator DAG's task.

    Validates the settings before opening any connection, logs `EvaluationSummary.table`, and
    returns `EvaluationSummary.as_dict` (JSON, for XCom).

    Raises:
        ConfigError: the settings are malformed (nothing was read or changed).
    """
    from lagsched.adapters.lag_store import redis_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params, redis_params
    from lagsched.workflows.scaling import count_live_slots, evaluate_cluster

    parse_settings({} if raw_settings is None else raw_settings)  # fail before connecting
    at = time.time() if now is None else now
    mysql = connect(mysql_params())
    try:
        redis = redis_client(redis_params())
        try:
            slots = count_live_slots(redis, at, slot_timeout_s)
            if slots is None:
                log.info("no worker slot has registered a heartbeat: live slots unknown, no live-slot cap")
            summary = evaluate_cluster(
                cluster, raw_settings, mysql=mysql, redis=redis, evaluation_id=evaluation_id, now=at, live_slots=slots
            )
        finally:
            redis.close()
    finally:
        mysql.close()
    log.info("scaling evaluation\n%s", summary.table())
    return summary.as_dict()
