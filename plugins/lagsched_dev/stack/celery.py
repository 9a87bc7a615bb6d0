"""Airflow with the CeleryExecutor on the local stack: ``lagsched-dev stack up --airflow --celery``.

``airflow standalone`` forces the LocalExecutor, so with Celery each of Airflow's processes is a
service of its own: the API server (`lagsched_dev.stack.services.Airflow`, which also prepares the
metadata DB), the scheduler, the DAG processor and the triggerer (`AirflowComponent`), and
``cfg.celery_workers`` Celery workers (`CeleryWorker`), each with its own Celery node name
``lagsched-w<i>@<host>``. The broker is a DB of the stack's Redis, the result backend the metadata
DB (`lagsched_dev.stack.environment.celery_environment`). docs/celery.md has the whole picture.
"""

from __future__ import annotations

import signal
import socket

from lagsched_dev.stack import process
from lagsched_dev.stack.config import StackConfig
from lagsched_dev.stack.services import Service, airflow_binary, airflow_environment, airflow_health


class AirflowComponent(Service):
    """The scheduler, the DAG processor or the triggerer, healthy when the API server says so (their
    heartbeats in the metadata DB)."""

    start_timeout_s = 120.0

    def __init__(self, cfg: StackConfig, command: str, health_key: str) -> None:
        super().__init__(cfg)
        self.name = f"airflow-{command}"
        self._command = command
        self._health_key = health_key

    def command(self) -> list[str]:
        return [airflow_binary(), self._command]

    def environment(self) -> dict[str, str]:
        return airflow_environment(self.cfg)

    def is_healthy(self) -> bool:
        health = airflow_health(self.cfg)
        component = health.get(self._health_key) if health else None
        return isinstance(component, dict) and component.get("status") == "healthy"

    def detail(self) -> str:
        return f"airflow {self._command}"


class CeleryWorker(Service):
    """Celery worker ``index`` (1-based): ``airflow celery worker`` named ``lagsched-w<index>@<host>``.

    Its tasks see that name as ``LAGSCHED_WORKER``: the slots put it in their locks (the page's host
    column) and Airflow records it as the task instance's hostname. A stop ends its whole process
    tree: a task runs in a process group of its own, and a slot's spark-submit and JVM below it.
    """

    start_timeout_s = 120.0

    def __init__(self, cfg: StackConfig, index: int) -> None:
        super().__init__(cfg)
        self.index = index
        self.name = f"celery-worker-{index}"

    @property
    def node(self) -> str:
        return f"lagsched-w{self.index}@{socket.gethostname()}"

    def command(self) -> list[str]:
        # --skip-serve-logs: the workers share the stack's AIRFLOW_HOME, so the API server reads each
        # task's log from the file itself (and N workers would fight over the log server's port).
        return [airflow_binary(), "celery", "worker", "--celery-hostname", self.node,
                "--concurrency", str(self.cfg.celery_concurrency), "--skip-serve-logs"]  # fmt: skip

    def environment(self) -> dict[str, str]:
        return {**airflow_environment(self.cfg), "LAGSCHED_WORKER": self.node}

    def is_healthy(self) -> bool:
        return self.node in ping_workers(self.cfg, [self.node])

    def stop(self) -> bool:
        pid = self.pid()
        if pid is not None:
            # SIGTERM to every process of the tree: the slots finish their batch and leave, and
            # Celery's warm shutdown then has no task to wait for.
            process.stop_tree(pid, signal.SIGTERM, timeout_s=60.0)
        (self.cfg.run / f"{self.name}.pid").unlink(missing_ok=True)
        return pid is not None

    def detail(self) -> str:
        return f"{self.node}, {self.cfg.celery_concurrency} task process(es), broker {self.cfg.celery_broker_url}"


def ping_workers(cfg: StackConfig, nodes: list[str], timeout_s: float = 1.0) -> set[str]:
    """The nodes among ``nodes`` that answer a Celery ping over the stack's broker."""
    from celery import Celery

    app = Celery("lagsched-dev", broker=cfg.celery_broker_url)
    try:
        replies = app.control.ping(destination=nodes, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - a broker that does not answer: nobody is healthy
        return set()
    finally:
        app.close()
    return {name for reply in replies for name in reply} & set(nodes)


def components(cfg: StackConfig) -> list[Service]:
    """The scheduler, the DAG processor and the triggerer: started together after the API server."""
    return [
        AirflowComponent(cfg, "scheduler", "scheduler"),
        AirflowComponent(cfg, "dag-processor", "dag_processor"),
        AirflowComponent(cfg, "triggerer", "triggerer"),
    ]


def workers(cfg: StackConfig, count: int | None = None) -> list[CeleryWorker]:
    """The stack's Celery workers: ``cfg``'s count, or ``count`` (`MAX_CELERY_WORKERS`: any that may run)."""
    return [CeleryWorker(cfg, i) for i in range(1, (cfg.celery_workers if count is None else count) + 1)]
