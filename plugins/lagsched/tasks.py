"""The DAGs' task bodies: build clients from the lagsched Connections and run one workflow.

This is the composition root of the Airflow side. The workflows (`lagsched.workflows`) take
their clients as arguments; here they are built from Connections, closed afterwards, and each
task returns a JSON-ready summary for XCom.

Failures: every error of a client built here is raised as a `ConnectionFailure` naming its
Connection, where it points and what failed (`lagsched.adapters.failures.naming_connections`).
The DAG files run each body inside `fail_fast`, which fails the task at once on what a retry
cannot fix (a wrong password, a missing or malformed Connection, a bad ``cluster`` param, a
malformed Variable) and leaves the rest (a service down or timing out) to the DAG's retries.

Example (a DAG task)::

    with fail_fast():
        return run_monitor(cluster, Variable.get("lagsched_settings", default=None))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lagsched.core.config import parse_settings
from lagsched.core.names import validate_cluster_name

__all__ = [
    "fail_fast",
    "run_check_kafka",
    "run_check_redis",
    "run_evaluation",
    "run_migrations",
    "run_monitor",
    "run_registry_sync",
]

log = logging.getLogger(__name__)


@contextmanager
def fail_fast() -> Iterator[None]:
    """Raise what a retry cannot fix as ``AirflowFailException``; re-raise the rest unchanged.

    ``AirflowFailException`` fails the task instance without using its retries, so a wrong
    password fails the run at the first try instead of after every retry and its delay.
    `lagsched.adapters.failures.is_permanent` decides; its module docstring has the table.
    """
    from lagsched.adapters.failures import is_permanent

    try:
        yield
    except Exception as exc:
        if not is_permanent(exc):
            raise
        from airflow.sdk.exceptions import AirflowFailException

        # The message alone: it names what to fix; the original error is chained for the traceback.
        raise AirflowFailException(str(exc)) from exc


def _warn_if_redis_ignores_password(params: Any) -> None:
    """A password the server ignores is a warning here; the setup DAG's check fails on it.

    See `lagsched.adapters.health.check_redis` for why the two differ.
    """
    from lagsched.adapters.health import redis_ignores_password

    if redis_ignores_password(params):
        log.warning(
            "Connection %r sets a Redis password, but the server has none (requirepass is not set) and "
            "ignores it: anyone can connect. Is this the Redis you meant? Remove the password from the "
            "Connection, or set requirepass on the server.",
            params.conn_id,
        )


def run_check_kafka() -> dict[str, Any]:
    """The setup DAG's Kafka check: broker and topic counts of ``lagsched_kafka``."""
    from lagsched.adapters.health import check_kafka
    from lagsched.connections import kafka_config

    return check_kafka(kafka_config())


def run_check_redis() -> dict[str, Any]:
    """The setup DAG's Redis check: the server version of ``lagsched_redis``.

    Fails on a wrong password and on a password the server ignores.
    """
    from lagsched.adapters.health import check_redis
    from lagsched.connections import redis_params

    return check_redis(redis_params())


def run_migrations() -> list[str]:
    """The setup DAG's schema step: check ``lagsched_mysql``, apply the pending migrations.

    Returns the names of the migrations applied (none when the schema is up to date).
    """
    from lagsched.adapters.failures import mysql_target, naming_connections
    from lagsched.adapters.health import check_mysql
    from lagsched.adapters.migrations import migrate
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    params = mysql_params()
    log.info("MySQL: %s", check_mysql(params))
    with naming_connections(mysql_target(params)):
        conn = connect(params)
        try:
            applied = migrate(conn)
        finally:
            conn.close()
    log.info("applied %d migration(s): %s", len(applied), applied or "none pending")
    return applied


def run_registry_sync(cluster: str) -> dict[str, Any]:
    """Bring the registry in step with the broker before measuring; the lag monitor DAG's first task.

    New topics and new partitions get rows, deleted or re-created topics are handled as
    `lagsched.workflows.topic_sync` describes. Returns what changed (JSON, for XCom).
    """
    from lagsched.adapters.failures import KafkaConnection, mysql_target, naming_connections
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config, mysql_params
    from lagsched.workflows.topic_sync import sync_registry

    validate_cluster_name(cluster)
    kafka, mysql_p = KafkaConnection(kafka_config()), mysql_params()
    with naming_connections(kafka.target, mysql_target(mysql_p)):
        admin = kafka.client(admin_client)
        mysql = connect(mysql_p)
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
    from lagsched.adapters.failures import KafkaConnection, mysql_target, naming_connections, redis_target
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.lag_store import LagStore, redis_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config, mysql_params, redis_params
    from lagsched.workflows.lag_monitor import measure

    settings = parse_settings({} if raw_settings is None else raw_settings)
    validate_cluster_name(cluster)
    kafka, mysql_p, redis_p = KafkaConnection(kafka_config()), mysql_params(), redis_params()
    with naming_connections(kafka.target, mysql_target(mysql_p), redis_target(redis_p)):
        admin = kafka.client(admin_client)
        mysql = connect(mysql_p)
        try:
            redis = redis_client(redis_p)
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
        _warn_if_redis_ignores_password(redis_p)
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
    from lagsched.adapters.failures import mysql_target, naming_connections, redis_target
    from lagsched.adapters.lag_store import redis_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params, redis_params
    from lagsched.workflows.scaling import count_live_slots, evaluate_cluster

    parse_settings({} if raw_settings is None else raw_settings)  # fail before connecting
    validate_cluster_name(cluster)
    at = time.time() if now is None else now
    mysql_p, redis_p = mysql_params(), redis_params()
    with naming_connections(mysql_target(mysql_p), redis_target(redis_p)):
        mysql = connect(mysql_p)
        try:
            redis = redis_client(redis_p)
            try:
                slots = count_live_slots(redis, at, slot_timeout_s)
                if slots is None:
                    log.info("no worker slot has registered a heartbeat: live slots unknown, no live-slot cap")
                summary = evaluate_cluster(
                    cluster,
                    raw_settings,
                    mysql=mysql,
                    redis=redis,
                    evaluation_id=evaluation_id,
                    now=at,
                    live_slots=slots,
                )
            finally:
                redis.close()
        finally:
            mysql.close()
        _warn_if_redis_ignores_password(redis_p)
    log.info("scaling evaluation\n%s", summary.table())
    return summary.as_dict()
