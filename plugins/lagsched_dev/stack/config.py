"""Where the local stack lives and which ports it uses.

Everything the stack writes (data, logs, pid files, generated secrets) goes under one folder,
``$LAGSCHED_HOME`` (default: ``.local/`` in the repository), so ``rm -rf .local`` is a full reset.
Ports come from the environment so two checkouts, or a busy machine, can run side by side.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]

#: The stack's MariaDB database and user for lagsched (the password is generated: `stack_secrets`).
MYSQL_DATABASE = "lagsched"
MYSQL_USER = "lagsched"
#: The schema registry's own database and user in the stack's MariaDB (Apicurio keeps its schemas
#: there, so a schema id survives a restart and is never handed out twice; the password is generated).
REGISTRY_DATABASE = "apicurio_registry"
REGISTRY_USER = "apicurio"
#: PostgreSQL (Airflow's metadata DB) listens on a Unix socket only; the port names its file.
POSTGRES_SOCKET_PORT = 5432


def airflow_uses_postgres() -> bool:
    """Airflow's metadata in PostgreSQL (default), or in SQLite with ``LAGSCHED_AIRFLOW_DB=sqlite``.

    SQLite (in WAL mode, as Airflow sets it) answered "database is locked" to the scheduler and the
    API server while the consume DAG's mapped slots, the monitor and the evaluator ran together on a
    loaded 2-core machine (docs/dags.md); PostgreSQL does not lock the whole database per write.
    """
    return os.environ.get("LAGSCHED_AIRFLOW_DB", "postgres").strip().lower() != "sqlite"


def _port(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a port number; set it to an integer 1024-65535") from None
    if not 1024 <= port <= 65535:
        raise ValueError(f"{name}={port} is out of range; use 1024-65535")
    return port


def _count(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer; set it to {low}-{high}") from None
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is out of range; use {low}-{high}")
    return value


def _memory(name: str, default: str) -> str:
    raw = os.environ.get(name, default).strip()
    if not re.fullmatch(r"[1-9][0-9]*[mMgG]", raw):
        raise ValueError(f"{name}={raw!r} is not a memory size; use a number with m or g, e.g. 1g or 768m")
    return raw


EXECUTORS = ("local", "celery")
#: The most Celery workers the stack runs (``LAGSCHED_CELERY_WORKERS``, ``--celery-workers``).
MAX_CELERY_WORKERS = 8


def _flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw not in ("", "0", "1", "true", "false", "yes", "no"):
        raise ValueError(f"{name}={raw!r} is not a yes/no value; use 1 or 0")
    return raw in ("1", "true", "yes")


def _executor(raw: str) -> str:
    value = raw.strip().lower()
    if value not in EXECUTORS:
        raise ValueError(f"LAGSCHED_AIRFLOW_EXECUTOR={raw!r} is not one of {', '.join(EXECUTORS)}")
    return value


@dataclass(frozen=True, slots=True)
class StackConfig:
    """Paths and ports of the local stack; built from the environment by :func:`load`."""

    repo: Path
    home: Path
    kafka_port: int
    kafka_controller_port: int
    mysql_port: int
    redis_port: int
    airflow_port: int
    s3_port: int = 19000
    # The optional Spark standalone cluster (`lagsched-dev stack up --spark-cluster`).
    spark_master_port: int = 17077
    spark_master_webui_port: int = 17080
    #: The first worker's web UI port; worker ``i`` (0-based) uses this plus ``i``.
    spark_worker_webui_port: int = 17081
    spark_workers: int = 2
    spark_worker_cores: int = 1
    #: What each worker offers its executors; Spark's default executor asks for 1g.
    spark_worker_memory: str = "1g"
    #: Cores an application gets unless it sets ``spark.cores.max`` (the master's
    #: ``spark.deploy.defaultCores``). Spark's own default, every core, lets one slot's job hold
    #: the whole cluster while the other slots' jobs wait.
    spark_app_cores: int = 1
    #: ``LAGSCHED_KAFKA_JARS``: a folder of Kafka's jars to use instead of the ones `make deps`
    #: fetched (for example the libs/ folder of a Kafka distribution); see :attr:`kafka_jars`.
    kafka_jars_override: Path | None = None
    #: The optional 3-broker rack cluster (``python -m lagsched_dev.stack.kafka_cluster up``): broker
    #: ``i`` (0-based, rack ``a``, ``b``, ``c``) listens on this plus ``i``...
    kafka_rack_port: int = 19192
    #: ... and its controller on this plus ``i``.
    kafka_rack_controller_port: int = 19195
    #: The optional Prometheus server (``lagsched-dev stack up --prometheus``), on loopback.
    prometheus_port: int = 19090
    #: The schema registry (Apicurio, Confluent-compatible API under ``/apis/ccompat/v7``).
    schema_registry_port: int = 18081
    #: Airflow's executor: ``local`` (``airflow standalone``) or ``celery`` (the API server, scheduler,
    #: DAG processor and triggerer as processes of their own, and :attr:`celery_workers` Celery
    #: workers; ``lagsched-dev stack up --airflow --celery``, docs/celery.md).
    airflow_executor: str = "local"
    celery_workers: int = 2
    #: Task processes per Celery worker (``[celery] worker_concurrency``).
    celery_concurrency: int = 4
    #: The Redis DB of the stack's Redis that is Celery's broker (lagsched's own data is in DB 0).
    celery_broker_db: int = 1
    #: The consume DAG's slots submit to the stack's Spark standalone master (the ``lagsched_spark``
    #: Connection's host) instead of ``local[1]``: ``LAGSCHED_SLOTS_ON_SPARK_CLUSTER=1``.
    slots_on_spark_cluster: bool = False

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        """Pid files and sockets."""
        return self.home / "run"

    @property
    def jars(self) -> Path:
        return self.home / "jars"

    @property
    def kafka_jars(self) -> Path:
        """The folder of Kafka's jars: the broker's classpath, and the CLI tools' (kafka-tools)."""
        return self.kafka_jars_override or self.jars / "kafka"

    @property
    def spark_data(self) -> Path:
        """Data of the local Spark cluster (the workers' work dirs)."""
        return self.home / "spark"

    @property
    def spark_master_url(self) -> str:
        return f"spark://127.0.0.1:{self.spark_master_port}"

    @property
    def spark_worker_webui_ports(self) -> tuple[int, ...]:
        return tuple(self.spark_worker_webui_port + i for i in range(self.spark_workers))

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def postgres_socket_dir(self) -> Path:
        return self.home / "postgres" / "run"

    @property
    def prometheus_home(self) -> Path:
        """The stack's Prometheus: its generated configuration, the scrape token's file, its data."""
        return self.home / "prometheus"

    @property
    def secrets_file(self) -> Path:
        return self.home / "secrets.env"

    @property
    def celery_broker_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/{self.celery_broker_db}"

    @property
    def schema_registry_url(self) -> str:
        """The registry's Confluent-compatible API (what a Confluent client's ``url`` is set to)."""
        return f"http://127.0.0.1:{self.schema_registry_port}/apis/ccompat/v7"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def kafka_rack_ports(self) -> tuple[int, ...]:
        """The rack cluster's client ports, broker 1 (rack a) first."""
        return tuple(self.kafka_rack_port + i for i in range(3))

    @property
    def kafka_rack_controller_ports(self) -> tuple[int, ...]:
        return tuple(self.kafka_rack_controller_port + i for i in range(3))

    @property
    def kafka_rack_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka_rack_ports)


def with_celery(cfg: StackConfig, workers: int | None = None) -> StackConfig:
    """``cfg`` with Airflow on the CeleryExecutor and ``workers`` workers (default: ``cfg``'s)."""
    count = cfg.celery_workers if workers is None else workers
    if not 1 <= count <= MAX_CELERY_WORKERS:
        raise ValueError(f"--celery-workers {count} is out of range; use 1-{MAX_CELERY_WORKERS}")
    return replace(cfg, airflow_executor="celery", celery_workers=count)


def load() -> StackConfig:
    """Read the stack's settings from the environment (no I/O beyond reading variables)."""
    home = Path(os.environ.get("LAGSCHED_HOME", REPO_ROOT / ".local")).resolve()
    cfg = StackConfig(
        repo=REPO_ROOT,
        home=home,
        kafka_port=_port("LAGSCHED_KAFKA_PORT", 19092),
        kafka_controller_port=_port("LAGSCHED_KAFKA_CONTROLLER_PORT", 19093),
        mysql_port=_port("LAGSCHED_MYSQL_PORT", 13306),
        redis_port=_port("LAGSCHED_REDIS_PORT", 16379),
        airflow_port=_port("LAGSCHED_AIRFLOW_PORT", 8080),
        s3_port=_port("LAGSCHED_S3_PORT", 19000),
        spark_master_port=_port("LAGSCHED_SPARK_MASTER_PORT", 17077),
        spark_master_webui_port=_port("LAGSCHED_SPARK_MASTER_WEBUI_PORT", 17080),
        spark_worker_webui_port=_port("LAGSCHED_SPARK_WORKER_WEBUI_PORT", 17081),
        spark_workers=_count("LAGSCHED_SPARK_WORKERS", 2, 1, 16),
        spark_worker_cores=_count("LAGSCHED_SPARK_WORKER_CORES", 1, 1, 256),
        spark_worker_memory=_memory("LAGSCHED_SPARK_WORKER_MEMORY", "1g"),
        spark_app_cores=_count("LAGSCHED_SPARK_APP_CORES", 1, 1, 4096),
        kafka_jars_override=Path(raw_jars).resolve() if (raw_jars := os.environ.get("LAGSCHED_KAFKA_JARS")) else None,
        kafka_rack_port=_port("LAGSCHED_KAFKA_RACK_PORT", 19192),
        kafka_rack_controller_port=_port("LAGSCHED_KAFKA_RACK_CONTROLLER_PORT", 19195),
        prometheus_port=_port("LAGSCHED_PROMETHEUS_PORT", 19090),
        schema_registry_port=_port("LAGSCHED_SCHEMA_REGISTRY_PORT", 18081),
        airflow_executor=_executor(os.environ.get("LAGSCHED_AIRFLOW_EXECUTOR", "local")),
        celery_workers=_count("LAGSCHED_CELERY_WORKERS", 2, 1, MAX_CELERY_WORKERS),
        celery_concurrency=_count("LAGSCHED_CELERY_CONCURRENCY", 4, 1, 32),
        celery_broker_db=_count("LAGSCHED_CELERY_BROKER_DB", 1, 1, 15),
        slots_on_spark_cluster=_flag("LAGSCHED_SLOTS_ON_SPARK_CLUSTER"),
    )
    for name, ports in (
        ("LAGSCHED_KAFKA_RACK_PORT", cfg.kafka_rack_ports),
        ("LAGSCHED_KAFKA_RACK_CONTROLLER_PORT", cfg.kafka_rack_controller_ports),
    ):
        if max(ports) > 65535:
            raise ValueError(f"{name}={ports[0]} leaves no room for 3 brokers (one port each, counting up)")
    clash = set(cfg.kafka_rack_ports) & set(cfg.kafka_rack_controller_ports)
    if clash:
        raise ValueError(
            f"LAGSCHED_KAFKA_RACK_PORT and LAGSCHED_KAFKA_RACK_CONTROLLER_PORT overlap on {sorted(clash)}; "
            "each takes 3 consecutive ports"
        )
    if max(cfg.spark_worker_webui_ports) > 65535:
        raise ValueError(
            f"LAGSCHED_SPARK_WORKER_WEBUI_PORT={cfg.spark_worker_webui_port} leaves no room for "
            f"{cfg.spark_workers} workers' web UIs (one port each, counting up); choose a lower port"
        )
    return cfg


def stack_secrets(cfg: StackConfig) -> dict[str, str]:
    """The local stack's generated credentials, created once with mode 0600.

    They never appear in code or logs: the MySQL password, Airflow's JWT secret and the metrics
    scrape token are random per machine and read back from ``secrets.env``.
    """
    path = cfg.secrets_file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.writelines(f"{k}={make()}\n" for k, make in _GENERATED.items())
    result = _read_secrets(path)
    missing = {k: make() for k, make in _GENERATED.items() if k not in result}
    if missing:  # a stack made before these secrets existed gets them added, the rest kept
        with path.open("a") as fh:
            fh.writelines(f"{k}={v}\n" for k, v in missing.items())
        result.update(missing)
    return result


#: The stack's generated credentials and how each is made.
_GENERATED: dict[str, Callable[[], str]] = {
    "LAGSCHED_MYSQL_PASSWORD": lambda: secrets.token_urlsafe(18),
    # The schema registry's own MariaDB user (its storage; lagsched never uses it).
    "LAGSCHED_REGISTRY_DB_PASSWORD": lambda: secrets.token_urlsafe(18),
    "AIRFLOW__API_AUTH__JWT_SECRET": lambda: secrets.token_hex(32),
    "LAGSCHED_S3_ACCESS_KEY": lambda: "lagsched-" + secrets.token_hex(6),
    "LAGSCHED_S3_SECRET_KEY": lambda: secrets.token_urlsafe(24),
    # The bearer token the stack's Prometheus scrapes /lagsched/metrics with (lagsched.ui.auth).
    "LAGSCHED_METRICS_TOKEN": lambda: secrets.token_urlsafe(32),
}


def _read_secrets(path: Path) -> dict[str, str]:
    result: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            result[key.strip()] = value.strip()
    return result
