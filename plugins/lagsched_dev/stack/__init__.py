"""The local stack: real Kafka, MariaDB, Redis, an S3 API server (S3Proxy), a schema registry
(Apicurio) (and Airflow for the demo, a Spark standalone cluster and a Prometheus server on request)
on loopback."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import time
from collections.abc import Iterator

from lagsched_dev.stack.config import MAX_CELERY_WORKERS, StackConfig
from lagsched_dev.stack.services import (
    Airflow,
    Prometheus,
    Service,
    Status,
    core_services,
    migrate_airflow_db,
    spark_cluster_services,
    start_together,
)

log = logging.getLogger(__name__)


def up(
    cfg: StackConfig, *, airflow: bool = False, spark_cluster: bool = False, prometheus: bool = False
) -> list[Status]:
    """Start the data services (and the Spark cluster, Airflow, Prometheus if asked), each only if not
    already healthy. Prometheus comes last: it scrapes Airflow's API server (without Airflow its
    target is down, and `LagschedMetricsAbsent` says so)."""
    groups: list[list[Service]] = [[s] for s in core_services(cfg)]
    if spark_cluster:
        master, workers = spark_cluster_services(cfg)
        groups += [[master], list(workers)]
    if airflow:
        groups.append([Airflow(cfg)])
        if cfg.airflow_executor == "celery":
            from lagsched_dev.stack import celery

            groups += [celery.components(cfg), list(celery.workers(cfg))]
    if prometheus:
        groups.append([Prometheus(cfg)])
    with _one_start_at_a_time(cfg):
        for group in groups:
            _start_group(group)
        if not airflow:
            # Airflow's own start migrates its DB; without it, tests still need one for dag.test().
            migrate_airflow_db(cfg)
    return [s.status() for group in groups for s in group]


@contextlib.contextmanager
def _one_start_at_a_time(cfg: StackConfig) -> Iterator[None]:
    """Two `up`s at once (the test suite's xdist workers, a demo beside a test run) would each start the
    same services on the same ports: the second waits for the first, then finds them healthy."""
    cfg.home.mkdir(parents=True, exist_ok=True)
    with open(cfg.home / "stack-up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        yield


def spark_cluster_up(cfg: StackConfig) -> list[Status]:
    """Start only the Spark standalone cluster (master, then the workers side by side)."""
    master, workers = spark_cluster_services(cfg)
    groups: list[list[Service]] = [[master], list(workers)]
    for group in groups:
        _start_group(group)
    return [s.status() for s in (master, *workers)]


def spark_cluster_down(cfg: StackConfig) -> list[str]:
    """Stop the Spark cluster's workers, then its master; returns the names that were running."""
    master, workers = spark_cluster_services(cfg)
    return _stop([*reversed(workers), master])


def down(cfg: StackConfig) -> list[str]:
    """Stop every service lagsched started, Prometheus and Airflow first; returns the names that were running.

    The 3-broker rack cluster (docs/rack.md) too, when it runs.
    """
    from lagsched_dev.stack import celery
    from lagsched_dev.stack.kafka_cluster import brokers

    master, workers = spark_cluster_services(cfg)
    rack_brokers: list[Service] = list(reversed(brokers(cfg)))
    # Whichever executor ran: the Celery workers and Airflow's own processes before its API server.
    airflow: list[Service] = [*celery.workers(cfg, MAX_CELERY_WORKERS), *celery.components(cfg), Airflow(cfg)]
    return _stop([Prometheus(cfg), *airflow, *reversed(workers), master, *rack_brokers, *reversed(core_services(cfg))])


def status(cfg: StackConfig) -> list[Status]:
    """Every service's status: the data services first, then Airflow, the Spark cluster and Prometheus."""
    from lagsched_dev.stack import celery

    master, workers = spark_cluster_services(cfg)
    # Celery's processes when the stack runs that executor, or any of them runs (started with --celery).
    wanted = cfg.airflow_executor == "celery"
    extra = [*celery.components(cfg), *celery.workers(cfg, cfg.celery_workers if wanted else MAX_CELERY_WORKERS)]
    airflow: list[Service] = [Airflow(cfg), *(s for s in extra if wanted or s.pid() is not None)]
    return [s.status() for s in [*core_services(cfg), *airflow, master, *workers, Prometheus(cfg)]]


def _start_group(group: list[Service]) -> None:
    started = time.monotonic()
    start_together(group)
    for service in group:
        log.info("%-14s up   %s (%.1f s)", service.name, service.detail(), time.monotonic() - started)


def _stop(services: list[Service]) -> list[str]:
    stopped = []
    for service in services:
        if service.stop():
            stopped.append(service.name)
            log.info("%-14s stopped", service.name)
    return stopped
