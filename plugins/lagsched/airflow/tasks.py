"""The DAGs' task bodies: build clients from the lagsched Connections and run one workflow.

This is the composition root of the Airflow side. The workflows (`lagsched.workflows`) take
their clients as arguments; here they are built from Connections, closed afterwards, and each
task returns a JSON-ready summary for XCom.

Connections: each body takes the ids of the Connections it uses (``mysql_conn_id``,
``redis_conn_id``; defaults ``lagsched_mysql``, ``lagsched_redis``; a cluster's Kafka Connection is its
``kafka_conn_id``) and reads them through the hooks (`lagsched.airflow.hooks`) when it runs, as Airflow's
providers do: a changed Connection applies from the next task on.

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

import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lagsched.connections import KAFKA_CONN_ID, MYSQL_CONN_ID, REDIS_CONN_ID
from lagsched.core.clusters import ClusterConfig, parse_clusters, select_clusters
from lagsched.core.config import parse_settings
from lagsched.core.errors import ConfigError
from lagsched.core.lag import measurement_due
from lagsched.core.lake import WAREHOUSE_SETTINGS
from lagsched.core.names import validate_cluster_name
from lagsched.core.notifiers import RawNotifiers
from lagsched.core.times import epoch_s

if TYPE_CHECKING:
    from lagsched.connections import MySQLParams, RedisParams

__all__ = [
    "fail_fast",
    "run_check_kafka",
    "run_check_redis",
    "run_consume_plan",
    "run_evaluation",
    "run_maintenance",
    "run_migrations",
    "run_monitor",
    "run_registry_sync",
    "run_resolve_clusters",
]

#: A cluster as the DAGs pass it between tasks: a name (the ``cluster`` param, every topic through
#: ``lagsched_kafka``) or ``ClusterConfig.as_dict()`` (from ``run_resolve_clusters``).
ClusterArg = str | Mapping[str, Any]

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


def mysql_settings(mysql_conn_id: str) -> MySQLParams:
    """The MySQL Connection ``mysql_conn_id``, read now through its hook."""
    from lagsched.airflow.hooks.mysql import MySQLHook

    return MySQLHook(mysql_conn_id).get_params()


def redis_settings(redis_conn_id: str) -> RedisParams:
    """The Redis Connection ``redis_conn_id``, read now through its hook."""
    from lagsched.airflow.hooks.redis import RedisHook

    return RedisHook(redis_conn_id).get_params()


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


def run_check_kafka(kafka_conn_id: str = KAFKA_CONN_ID) -> dict[str, Any]:
    """The setup DAG's Kafka check: broker and topic counts of ``kafka_conn_id``."""
    from lagsched.adapters.health import check_kafka
    from lagsched.connections import kafka_config

    return check_kafka(kafka_config(kafka_conn_id))


def run_check_redis(redis_conn_id: str = REDIS_CONN_ID) -> dict[str, Any]:
    """The setup DAG's Redis check: the server version of ``redis_conn_id``.

    Fails on a wrong password and on a password the server ignores.
    """
    from lagsched.adapters.health import check_redis

    return check_redis(redis_settings(redis_conn_id))


def run_migrations(mysql_conn_id: str = MYSQL_CONN_ID) -> list[str]:
    """The setup DAG's schema step: check ``mysql_conn_id``, apply the pending migrations.

    Returns the names of the migrations applied (none when the schema is up to date).
    """
    from lagsched.adapters.failures import mysql_target, naming_connections
    from lagsched.adapters.health import check_mysql
    from lagsched.adapters.migrations import migrate_database

    params = mysql_settings(mysql_conn_id)
    log.info("MySQL: %s", check_mysql(params))
    with naming_connections(mysql_target(params)):
        applied = migrate_database(params)
    log.info("applied %d migration(s): %s", len(applied), applied or "none pending")
    return applied


def check_warehouses(clusters: Iterable[ClusterConfig], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Where each cluster's table goes: its ``sink.warehouse``, else the deployment's default
    (``LAGSCHED_WAREHOUSE``, ``LAGSCHED_HOME``; `lagsched.core.lake.default_warehouse`).

    Raises:
        ConfigError: naming every cluster with no warehouse anywhere, before any slot writes.
    """
    from lagsched.core.lake import default_warehouse

    env = os.environ if env is None else env
    chosen = list(clusters)
    without = [c.name for c in chosen if not c.sink_settings().get("warehouse")]
    default = ""
    if without:
        try:
            default = default_warehouse(env)
        except ConfigError as exc:
            problems = "; ".join(f"cluster {name}: {exc}" for name in without)
            raise ConfigError(problems, field="sink.warehouse", value=None, allowed=WAREHOUSE_SETTINGS) from None
    return {c.name: c.sink_settings().get("warehouse") or default for c in chosen}


def run_check_warehouses(raw_clusters: str | bytes | Mapping[str, Any] | None) -> dict[str, str]:
    """The setup DAG's lake check: every configured cluster has a warehouse for its table."""
    warehouses = check_warehouses(parse_clusters(raw_clusters))
    for cluster, warehouse in warehouses.items():
        log.info("cluster %s: tables under %s", cluster, warehouse)
    return warehouses


def run_resolve_clusters(
    raw_clusters: str | bytes | Mapping[str, Any] | None, cluster: str = ""
) -> list[dict[str, Any]]:
    """The clusters a run works on, from the Variable ``lagsched_clusters`` and the ``cluster`` param.

    An empty ``cluster`` means every configured cluster; a name means that one (a name that is not
    configured: that cluster through ``lagsched_kafka``, every topic). JSON-ready, one entry per
    mapped task. Opens no connection.

    Raises:
        ConfigError: the Variable is malformed (the run fails before anything is read or changed).
    """
    chosen = select_clusters(parse_clusters(raw_clusters), cluster.strip())
    log.info("clusters: %s", ", ".join(f"{c.name} (Kafka Connection {c.kafka_conn_id})" for c in chosen))
    return [c.as_dict() for c in chosen]


def _cluster(cluster: ClusterArg) -> ClusterConfig:
    if isinstance(cluster, str):
        return select_clusters((), validate_cluster_name(cluster))[0]
    return ClusterConfig.from_dict(cluster)


def run_registry_sync(cluster: ClusterArg, *, mysql_conn_id: str = MYSQL_CONN_ID) -> dict[str, Any]:
    """Bring the registry in step with the broker before measuring; the lag monitor DAG's first task.

    New topics and new partitions get rows, deleted or re-created topics are handled as
    `lagsched.workflows.topic_sync` describes; a configured cluster's topic filter decides which
    broker topics it manages (the rest are not registered, or disabled). Returns what changed
    (JSON, for XCom), with the cluster's name under ``cluster``.
    """
    from lagsched.adapters.failures import KafkaConnection, mysql_target, naming_connections
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import kafka_config
    from lagsched.workflows.topic_sync import sync_registry

    c = _cluster(cluster)
    kafka, mysql_p = KafkaConnection(kafka_config(c.kafka_conn_id)), mysql_settings(mysql_conn_id)
    with naming_connections(kafka.target, mysql_target(mysql_p)):
        admin = kafka.client(admin_client)
        mysql = connect(mysql_p)
        try:
            report = sync_registry(mysql, admin, c.name, topic_filter=None if c.manages_every_topic else c.manages)
        finally:
            mysql.close()
    summary = {"cluster": c.name, **report.as_dict()}
    log.info("registry sync: %s", summary)
    return summary


def run_monitor(
    cluster: ClusterArg,
    raw_settings: str | bytes | Mapping[str, Any] | None,
    *,
    now: datetime | None = None,
    top: int = 10,
    when_due: bool = False,
    mysql_conn_id: str = MYSQL_CONN_ID,
    redis_conn_id: str = REDIS_CONN_ID,
    raw_notifiers: RawNotifiers = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One measurement; the lag monitor DAG's task.

    Validates the settings before opening any connection, logs `MeasureSummary.table`, and
    returns `MeasureSummary.as_dict` (JSON, for XCom). With ``when_due`` (a scheduled run) it
    measures only when ``measure_every_s`` has passed since the cluster's last measurement
    (`lagsched.core.lag.measurement_due`), and otherwise returns ``{"cluster": ..., "skipped": why}``.

    After measuring, the findings (stalled, stopped, lost records) go to the notifiers of
    ``raw_notifiers`` (the Variable ``lagsched_notifiers``; ``context``: the task's, for their
    templates), under ``notifications`` in the summary when any are configured
    (`lagsched.airflow.notifications`): never a reason for the task to fail.

    Raises:
        ConfigError: the settings are malformed (nothing was measured or stored).
    """
    from lagsched.adapters.clients import mysql_and_redis
    from lagsched.adapters.failures import KafkaConnection
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.adapters.lag_store import LagStore
    from lagsched.airflow.notifications import notifiers_or_error, notify_after_measurement
    from lagsched.connections import kafka_config
    from lagsched.workflows.lag_monitor import measure

    settings = parse_settings({} if raw_settings is None else raw_settings)
    notifiers, notifiers_error = notifiers_or_error(raw_notifiers)
    c = _cluster(cluster)
    kafka = KafkaConnection(kafka_config(c.kafka_conn_id))
    mysql_p, redis_p = mysql_settings(mysql_conn_id), redis_settings(redis_conn_id)
    with mysql_and_redis(mysql_p, redis_p, also_naming=(kafka.target,)) as (mysql, redis):
        admin = kafka.client(admin_client)
        store = LagStore(redis, c.name, max_samples=settings.sample_window, max_age_s=settings.sample_ttl_s)
        at = datetime.now(tz=UTC) if now is None else now
        last = store.last_measured() if when_due else None
        if last is not None and not measurement_due(last, at, settings.measure_every_s):
            why = f"measured {epoch_s(at) - last:.0f} s ago; measure_every_s is {settings.measure_every_s:g}"
            log.info("cluster %s: not measuring now (%s)", c.name, why)
            return {"cluster": c.name, "skipped": why}
        summary = measure(c.name, mysql=mysql, admin=admin, store=store, settings=settings, now=at)
        _warn_if_redis_ignores_password(redis_p)
        notified = notify_after_measurement(summary, store, notifiers, error=notifiers_error, context=context)
    log.info("lag summary\n%s", summary.table(top))
    return _with_notifications(summary.as_dict(top), notified)


def run_evaluation(
    cluster: ClusterArg,
    raw_settings: str | bytes | Mapping[str, Any] | None,
    *,
    evaluation_id: str,
    now: datetime | None = None,
    slot_timeout_s: float = 60.0,
    mysql_conn_id: str = MYSQL_CONN_ID,
    redis_conn_id: str = REDIS_CONN_ID,
    raw_notifiers: RawNotifiers = None,
    context: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One evaluation; the evaluator DAG's task.

    Validates the settings before opening any connection, logs `EvaluationSummary.table`, and
    returns `EvaluationSummary.as_dict` (JSON, for XCom). After the evaluation, its findings (lag
    rising at the ceiling, an override expiring) go to the notifiers of ``raw_notifiers``, as in
    `run_monitor`.

    Raises:
        ConfigError: the settings are malformed (nothing was read or changed).
    """
    from lagsched.adapters.clients import mysql_and_redis
    from lagsched.airflow.notifications import notifiers_or_error, notify_after_evaluation
    from lagsched.workflows.scaling import count_live_slots, evaluate_cluster

    settings = parse_settings({} if raw_settings is None else raw_settings)  # once, and before connecting
    notifiers, notifiers_error = notifiers_or_error(raw_notifiers)
    config = _cluster(cluster)
    name = config.name
    at = datetime.now(tz=UTC) if now is None else now
    mysql_p, redis_p = mysql_settings(mysql_conn_id), redis_settings(redis_conn_id)
    with mysql_and_redis(mysql_p, redis_p) as (mysql, redis):
        live = count_live_slots(redis, name, at, slot_timeout_s)
        if live is None:
            log.info("no worker slot has registered a heartbeat: live slots unknown, no live-slot cap")
        # The consume DAG starts slots on demand, up to the cluster's max_slots, so that is
        # what a scale-up can count on: capped at the slots live now, a topic could never
        # grow past the slots its own worker count had started.
        slots = None if live is None else max(live, config.max_slots)
        if live is not None and slots != live:
            log.info("%d live slot(s); the consume DAG can run %d for %s: scale-ups capped at %d",
                     live, config.max_slots, name, slots)  # fmt: skip
        summary = evaluate_cluster(
            name,
            settings,
            mysql=mysql,
            redis=redis,
            evaluation_id=evaluation_id,
            now=at,
            live_slots=slots,
        )
        _warn_if_redis_ignores_password(redis_p)
        notified = notify_after_evaluation(
            summary, mysql=mysql, redis=redis, settings=settings, notifiers=notifiers, now=at,
            error=notifiers_error, context=context,
        )  # fmt: skip
    log.info("scaling evaluation\n%s", summary.table())
    return _with_notifications(summary.as_dict(), notified)


def _with_notifications(summary: dict[str, Any], notified: Mapping[str, Any]) -> dict[str, Any]:
    """The summary with ``notifications`` when any notifier is configured or the Variable is bad."""
    if notified.get("notifiers") or notified.get("error"):
        summary["notifications"] = dict(notified)
    return summary


def changed_workers(results: Iterable[Mapping[str, Any] | None]) -> list[dict[str, Any]]:
    """The applied ``linker_workers`` changes in evaluation results (`EvaluationSummary.as_dict`);
    a missing result (a failed cluster's) counts as none.

    >>> changed_workers([None, {"cluster": "eu", "outcomes": [
    ...     {"topic": "a", "status": "applied", "previous_linker_workers": 1, "linker_workers": 2},
    ...     {"topic": "b", "status": "unchanged", "previous_linker_workers": 3, "linker_workers": None}]}])
    [{'cluster': 'eu', 'topic': 'a', 'previous_linker_workers': 1, 'linker_workers': 2}]
    """
    return [
        {
            "cluster": r["cluster"],
            "topic": o["topic"],
            "previous_linker_workers": o["previous_linker_workers"],
            "linker_workers": o["linker_workers"],
        }
        for r in results
        if r
        for o in r.get("outcomes", [])
        if o.get("status") == "applied"
    ]


def run_consume_plan(
    clusters: Sequence[Mapping[str, Any]],
    options: Mapping[str, Any],
    *,
    mysql_conn_id: str = MYSQL_CONN_ID,
    redis_conn_id: str = REDIS_CONN_ID,
) -> list[dict[str, Any]]:
    """The consume DAG's planning task: one mapped-operator kwargs dict per slot to start.

    Each cluster needs as many slots as its largest enabled ``linker_workers``, at most its
    ``max_slots``; of those, only the slots no process runs (their lock in Redis is free) are
    started (`lagsched.workflows.consume_plan`). Running slots carry on untouched.

    Args:
        clusters: ``run_resolve_clusters`` output.
        options: `SlotOptions` fields (``budget_s``, ``min_interval_s``, ``min_records``); a
            ``budget_s`` of None (or absent) means each cluster's ``slot_budget_s``.
    """
    from lagsched.adapters.alert_figures import write_planned_slots
    from lagsched.adapters.clients import mysql_and_redis
    from lagsched.adapters.slots import SlotLock
    from lagsched.workflows.consume_plan import SlotOptions, plan_consume

    chosen = [ClusterConfig.from_dict(c) for c in clusters]
    check_warehouses(chosen)  # the slots check too; here the run fails before any starts
    slot_options = SlotOptions(**dict(options))
    with mysql_and_redis(mysql_settings(mysql_conn_id), redis_settings(redis_conn_id)) as (mysql, redis):
        plan = plan_consume(mysql, chosen, slot_options, SlotLock(redis))
        write_planned_slots(redis, plan.planned)  # for the alert on missing slots
    if not plan.slots:
        log.info(
            "no slot to start in %s (%d needed slot(s) already running)",
            ", ".join(c.name for c in chosen), len(plan.running),
        )  # fmt: skip
    return [s.as_kwargs() for s in plan.slots]


def run_maintenance(
    clusters: Sequence[Mapping[str, Any]],
    *,
    slot_horizon_s: float = 3600.0,
    now: datetime | None = None,
    raw_retention: str | bytes | Mapping[str, Any] | None = None,
    mysql_conn_id: str = MYSQL_CONN_ID,
    redis_conn_id: str = REDIS_CONN_ID,
) -> dict[str, Any]:
    """The maintenance DAG's task: `lagsched.workflows.maintenance.maintain` over ``clusters``.

    ``raw_retention`` is the Variable ``lagsched_retention`` (`lagsched.core.retention`; None: the
    defaults), validated before any connection opens. Logs `MaintenanceReport.table` (rows each
    table lost to retention; retention losses and anomalies as ``RETENTION LOSS`` and ``ANOMALY``
    lines, at warning level when there are any) and returns `MaintenanceReport.as_dict`.

    Raises:
        ConfigError: ``lagsched_retention`` is malformed (nothing is deleted).
    """
    from lagsched.adapters.clients import mysql_and_redis
    from lagsched.adapters.failures import KafkaConnection
    from lagsched.adapters.kafka_admin import admin_client
    from lagsched.connections import kafka_config
    from lagsched.core.retention import parse_retention
    from lagsched.workflows.maintenance import maintain

    retention = parse_retention(raw_retention)
    chosen = [ClusterConfig.from_dict(c) for c in clusters]
    kafkas = {c.name: KafkaConnection(kafka_config(c.kafka_conn_id)) for c in chosen}
    mysql_p, redis_p = mysql_settings(mysql_conn_id), redis_settings(redis_conn_id)
    with mysql_and_redis(mysql_p, redis_p, also_naming=[k.target for k in kafkas.values()]) as (mysql, redis):
        admins = {name: k.client(admin_client) for name, k in kafkas.items()}
        report = maintain(
            chosen,
            mysql=mysql,
            redis=redis,
            admins=admins,
            now=datetime.now(tz=UTC) if now is None else now,
            slot_horizon_s=slot_horizon_s,
            retention=retention,
        )
    troubled = any(c.retention_losses or c.lost_pending or c.anomalies for c in report.clusters)
    log.log(logging.WARNING if troubled else logging.INFO, "maintenance\n%s", report.table())
    return report.as_dict()


def run_table_care_plan(
    raw_clusters: str | bytes | Mapping[str, Any] | None,
    raw_settings: str | bytes | Mapping[str, Any] | None,
    cluster: str = "",
    now: str = "",
) -> list[dict[str, Any]]:
    """The table care DAG's planning task: one mapped-operator kwargs dict per cluster's table.

    Both Variables are validated here, so a malformed one fails the run before any Spark job starts
    (the job validates them again). ``now`` (ISO, empty: the job's clock) is passed on.
    """
    from datetime import datetime

    from lagsched.core.lake import job_args
    from lagsched.core.table_care import parse_table_care

    settings = parse_table_care(raw_settings)
    if now:
        datetime.fromisoformat(now)  # a malformed time fails here, naming itself
    chosen = select_clusters(parse_clusters(raw_clusters), cluster.strip())
    check_warehouses(chosen)
    plan = []
    for c in chosen:
        args = ["--cluster", c.name, "--settings", json.dumps(settings.as_dict()), *job_args(c.sink_settings())]
        if now:
            args += ["--now", now]
        plan.append({"application_args": args, "kafka_conn_id": c.kafka_conn_id})
    log.info("table care of %d table(s) with %s", len(plan), settings.as_dict())
    return plan
