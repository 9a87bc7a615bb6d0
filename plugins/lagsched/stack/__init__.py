"""The local stack: real Kafka, MariaDB, Redis (and Airflow for the demo) on loopback."""

from __future__ import annotations

import logging
import time

from lagsched.stack.config import StackConfig
from lagsched.stack.services import Airflow, Service, Status, core_services, migrate_airflow_db

log = logging.getLogger(__name__)


def up(cfg: StackConfig, *, airflow: bool = False) -> list[Status]:
    """Start the data services (and Airflow if asked), each only if not already healthy."""
    services: list[Service] = [*core_services(cfg), *([Airflow(cfg)] if airflow else [])]
    for service in services:
        started = time.monotonic()
        service.start()
        log.info("%-8s up   %s (%.1f s)", service.name, service.detail(), time.monotonic() - started)
    if not airflow:
        # Airflow's own start migrates its DB; without it, tests still need one for dag.test().
        migrate_airflow_db(cfg)
    return [s.status() for s in services]


def down(cfg: StackConfig) -> list[str]:
    """Stop every service lagsched started, Airflow first; returns the names that were running."""
    stopped = []
    for service in [Airflow(cfg), *reversed(core_services(cfg))]:
        if service.stop():
            stopped.append(service.name)
            log.info("%-8s stopped", service.name)
    return stopped


def status(cfg: StackConfig) -> list[Status]:
    return [s.status() for s in [*core_services(cfg), Airflow(cfg)]]
