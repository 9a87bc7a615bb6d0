"""The environment that points Airflow, Spark and lagsched at the local stack.

Connections are handed over as ``AIRFLOW_CONN_*`` variables (Airflow's own mechanism), so the DAGs
read them exactly as they would read Connections defined in the UI, and nothing secret is written
into airflow.cfg. To use an existing cluster instead, define Connections with the same ids
(see README, "Using your own Kafka, MySQL, Redis and Spark").
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lagsched_dev.stack.config import (
    MYSQL_DATABASE,
    MYSQL_USER,
    POSTGRES_SOCKET_PORT,
    StackConfig,
    airflow_uses_postgres,
    stack_secrets,
)

KAFKA_CONN_ID = "lagsched_kafka"
MYSQL_CONN_ID = "lagsched_mysql"
REDIS_CONN_ID = "lagsched_redis"
SPARK_CONN_ID = "lagsched_spark"
SCHEMA_REGISTRY_CONN_ID = "lagsched_schema_registry"
#: The consume DAG's pool; the stack's Airflow creates it (`Airflow.after_start`) with this size.
CONSUME_POOL = "lagsched_consume"
#: Three slots at once on a 2-core machine: with the monitor and the evaluator, what it can carry.
CONSUME_POOL_SLOTS = 3


def spark_jars(cfg: StackConfig) -> list[Path]:
    """The lake's jars fetched by `make deps` (Iceberg, its JDBC driver, S3A; passed as spark.jars,
    never resolved at start)."""
    return sorted((cfg.jars / "spark-lake").glob("*.jar"))


def connection_environment(cfg: StackConfig) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` variables for the local stack's services."""
    password = stack_secrets(cfg)["LAGSCHED_MYSQL_PASSWORD"]
    conns = {
        KAFKA_CONN_ID: {"conn_type": "kafka", "extra": {"bootstrap.servers": cfg.kafka_bootstrap}},
        MYSQL_CONN_ID: {
            "conn_type": "mysql",
            "host": "127.0.0.1",
            "port": cfg.mysql_port,
            "login": MYSQL_USER,
            "password": password,
            "schema": MYSQL_DATABASE,
        },
        REDIS_CONN_ID: {"conn_type": "redis", "host": "127.0.0.1", "port": cfg.redis_port, "extra": {"db": 0}},
        # Apicurio's Confluent-compatible API: the path is the Connection's schema.
        SCHEMA_REGISTRY_CONN_ID: {
            "conn_type": "lagsched_schema_registry",
            "host": "127.0.0.1",
            "port": cfg.schema_registry_port,
            "schema": "apis/ccompat/v7",
        },
        # Each consumer slot is its own driver: one task thread each, parallelism comes from slots. Or
        # the stack's standalone master (client mode: the driver runs in the Airflow task's process).
        SPARK_CONN_ID: (
            {"conn_type": "spark", "host": "spark://127.0.0.1", "port": cfg.spark_master_port}
            if cfg.slots_on_spark_cluster
            else {"conn_type": "spark", "host": "local[1]"}
        ),
    }
    return {f"AIRFLOW_CONN_{cid.upper()}": json.dumps(value) for cid, value in conns.items()}


def s3_environment(cfg: StackConfig) -> dict[str, str]:
    """What Spark's S3A and pyiceberg need to reach the stack's S3 API server (S3Proxy).

    The keys are the standard AWS variables, read by S3A's default credential chain, so no secret
    goes into a Spark conf or a command line. The SDK's default request checksums (AWS SDK 2.30+)
    are asked for only where an operation requires them: S3-compatible stores differ in which they
    accept.
    """
    secret = stack_secrets(cfg)
    return {
        "LAGSCHED_S3_ENDPOINT": f"http://127.0.0.1:{cfg.s3_port}",
        "AWS_ACCESS_KEY_ID": secret["LAGSCHED_S3_ACCESS_KEY"],
        "AWS_SECRET_ACCESS_KEY": secret["LAGSCHED_S3_SECRET_KEY"],
        "AWS_REGION": "us-east-1",
        "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
        "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
    }


def airflow_metadata_url(cfg: StackConfig) -> str:
    """Airflow's metadata DB: PostgreSQL by default, SQLite with ``LAGSCHED_AIRFLOW_DB=sqlite``.

    SQLite: Airflow itself puts every connection in WAL mode (readers never wait for the one
    writer; airflow.utils.orm_event_handlers). A writer still waits for another: 30 s rather than
    sqlite3's 5 s, which a loaded 2-core machine exceeded ("database is locked"; docs/dags.md has
    the measurements). PostgreSQL (`lagsched_dev.stack.services.Postgres`): its Unix socket, no password.
    """
    if airflow_uses_postgres():
        return f"postgresql+psycopg2://airflow@/airflow?host={cfg.postgres_socket_dir}&port={POSTGRES_SOCKET_PORT}"
    return f"sqlite:///{cfg.airflow_home / 'airflow.db'}?timeout=30"


def _hours_ago(hours: int) -> str:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return (now - timedelta(hours=hours)).isoformat()


def stack_environment(cfg: StackConfig) -> dict[str, str]:
    """Everything Airflow and Spark need to run lagsched against the local stack."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "LAGSCHED_HOME": str(cfg.home),
        "AIRFLOW_HOME": str(cfg.airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(cfg.repo / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(cfg.repo / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # Airflow's default of 32 starts 32 processes on a 2-core machine.
        # Room for the consume pool's 3 slots plus the monitor, evaluator and a manual run.
        "AIRFLOW__CORE__PARALLELISM": os.environ.get("AIRFLOW__CORE__PARALLELISM", "6"),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        # A new DAG file is found within 20 s (Airflow's default: 5 minutes).
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "20",
        # lagsched_hours (paused when created) announces from 4 hours before this Airflow started:
        # the tests and the demo write records timestamped in those hours (docs/completeness.md).
        "AIRFLOW__LAGSCHED__HOURS_START": os.environ.get("AIRFLOW__LAGSCHED__HOURS_START", _hours_ago(4)),
        # lagsched_restatements reads late records every minute, from this Airflow's start on
        # (its tests wait for one run, not ten minutes).
        "AIRFLOW__LAGSCHED__RESTATEMENTS_SCHEDULE": os.environ.get(
            "AIRFLOW__LAGSCHED__RESTATEMENTS_SCHEDULE", "* * * * *"
        ),
        "AIRFLOW__LAGSCHED__RESTATEMENTS_START": os.environ.get(
            "AIRFLOW__LAGSCHED__RESTATEMENTS_START", datetime.now(UTC).replace(second=0, microsecond=0).isoformat()
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(cfg.airflow_port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{cfg.airflow_port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": stack_secrets(cfg)["AIRFLOW__API_AUTH__JWT_SECRET"],
        # The scrape token of /lagsched/metrics (lagsched.ui.auth): the stack's Prometheus sends it.
        "LAGSCHED_METRICS_TOKEN": stack_secrets(cfg)["LAGSCHED_METRICS_TOKEN"],
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_metadata_url(cfg),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
        # The Test button of Admin > Connections (off by default in Airflow 3).
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        # Spark: the venv's python on the workers, the venv's spark-submit on PATH for SparkSubmitHook.
        "PYSPARK_PYTHON": sys.executable,
        # The stack lives on loopback; without this a driver advertises the first non-loopback
        # interface to the cluster's executors (a job on a remote cluster must not use this env).
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "LAGSCHED_SPARK_JARS": ",".join(str(p) for p in spark_jars(cfg)),
        # The operator's slots start from a class-data archive kept with the stack's data, the one
        # the tests' slots use (recorded by whichever started first).
        "LAGSCHED_CLASS_ARCHIVE_DIR": str(cfg.home / "spark-classes"),
        # The local standalone cluster's master, up after `lagsched-dev stack up --spark-cluster`:
        # `spark-submit --master "$LAGSCHED_SPARK_MASTER_URL" ...` (the Connection stays local[2]).
        "LAGSCHED_SPARK_MASTER_URL": cfg.spark_master_url,
        # Kafka's jars (broker and CLI tools): lagsched_dev.kafka_tools runs the tools from them.
        "LAGSCHED_KAFKA_JARS": str(cfg.kafka_jars),
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(cfg.repo / "plugins"), os.environ.get("PYTHONPATH")])),
    }
    env.update(connection_environment(cfg))
    env.update(s3_environment(cfg))
    if cfg.airflow_executor == "celery":
        env.update(celery_environment(cfg))
    return env


def celery_environment(cfg: StackConfig) -> dict[str, str]:
    """Airflow with the CeleryExecutor: the stack's Redis as the broker (a DB of its own), the metadata
    DB as the result backend. Every Airflow process of the stack gets these (docs/celery.md)."""
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": cfg.celery_broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + airflow_metadata_url(cfg),
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(cfg.celery_concurrency),
        # A task instance records the worker that ran it as its hostname (the UI's Hostname column):
        # LAGSCHED_WORKER, the Celery node name the stack gives each worker, as the slots' locks do.
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "lagsched.adapters.slots.worker_name",
        # A task whose worker died is failed (and retried elsewhere) after a minute without its
        # heartbeat, not Airflow's default five.
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": os.environ.get(
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", "60"
        ),
    }
