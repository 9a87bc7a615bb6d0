"""The local stack's services: Apache Kafka (KRaft), MariaDB, Redis, Airflow, an optional Spark
standalone cluster and an optional Prometheus, on loopback.

Each service knows how to prepare its data folder once, start, report health and stop. Start is
idempotent: a service that is already up and healthy is left alone, so tests and the demo can share
one running stack.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lagsched_dev.stack import process
from lagsched_dev.stack.config import (
    MYSQL_DATABASE,
    MYSQL_USER,
    POSTGRES_SOCKET_PORT,
    REGISTRY_DATABASE,
    REGISTRY_USER,
    StackConfig,
    airflow_uses_postgres,
    stack_secrets,
)
from lagsched_dev.stack.environment import CONSUME_POOL, CONSUME_POOL_SLOTS, stack_environment
from lagsched_dev.stack.process import ServiceError


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True, slots=True)
class Status:
    name: str
    running: bool
    healthy: bool
    detail: str


class Service:
    """Base: a named process with a pid file, a log and a health check."""

    name = ""
    start_timeout_s = 60.0
    stop_signal: int = signal.SIGTERM

    def __init__(self, cfg: StackConfig) -> None:
        self.cfg = cfg

    @property
    def log(self) -> Path:
        return self.cfg.logs / f"{self.name}.log"

    def pid(self) -> int | None:
        return process.read_pid(self.cfg.run / f"{self.name}.pid")

    def is_healthy(self) -> bool:
        raise NotImplementedError

    def detail(self) -> str:
        raise NotImplementedError

    def prepare(self) -> None:
        """One-time set-up of the data folder (idempotent)."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        return None

    def after_start(self) -> None:
        """Work that needs the running service (users, databases); idempotent."""

    def start(self) -> None:
        start_together([self])

    def launch(self) -> bool:
        """Spawn the service unless it is already up; True if it was spawned (then see :meth:`await_healthy`)."""
        if self.pid() is not None and self.is_healthy():
            return False
        if self.pid() is None and self.is_healthy():
            raise ServiceError(
                f"{self.name}: something not started by lagsched already answers on its port "
                f"({self.detail()}); stop it or choose another port (see README, 'Ports')."
            )
        self.prepare()
        process.spawn(self.name, self.command(), logs=self.cfg.logs, run=self.cfg.run, env=self.environment())
        return True

    def await_healthy(self) -> None:
        process.wait_until(
            self.is_healthy,
            what=self.name,
            timeout_s=self.start_timeout_s,
            log=self.log,
            alive=lambda: self.pid() is not None,
        )

    def stop(self) -> bool:
        return process.stop(self.name, self.cfg.run, sig=self.stop_signal)

    def status(self) -> Status:
        pid = self.pid()
        healthy = pid is not None and self.is_healthy()
        return Status(self.name, pid is not None, healthy, self.detail())


class Redis(Service):
    name = "redis"
    start_timeout_s = 20.0

    def command(self) -> list[str]:
        data = self.cfg.home / "redis"
        data.mkdir(parents=True, exist_ok=True)
        return [
            _require_binary("redis-server", "apt-get install -y redis-server"),
            "--port", str(self.cfg.redis_port),
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            # Lag history is short-lived by design; tests want a clean slate on restart.
            "--save", "",
            "--appendonly", "no",
            "--dir", str(data),
            "--daemonize", "no",
        ]  # fmt: skip

    def is_healthy(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.cfg.redis_port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def detail(self) -> str:
        return f"redis://127.0.0.1:{self.cfg.redis_port}"


class MariaDB(Service):
    name = "mariadb"
    start_timeout_s = 60.0

    @property
    def datadir(self) -> Path:
        return self.cfg.home / "mysql" / "data"

    @property
    def socket_path(self) -> Path:
        return self.cfg.home / "mysql" / "mysqld.sock"

    def _as_root(self) -> bool:
        return os.geteuid() == 0

    def prepare(self) -> None:
        top = self.datadir.parent
        top.mkdir(parents=True, exist_ok=True)
        if self._as_root():
            shutil.chown(top, "mysql", "mysql")
        if (self.datadir / "mysql").is_dir():
            return
        install_db = _require_binary("mariadb-install-db", "apt-get install -y mariadb-server")
        argv = [install_db, "--no-defaults", f"--datadir={self.datadir}", "--skip-test-db",
                "--auth-root-authentication-method=socket"]  # fmt: skip
        if self._as_root():
            argv.append("--user=mysql")
        # A temporary directory of its own: two installs at once (the stack and a test's own server)
        # collided on a temporary table in a shared /tmp ("Unknown table 'mysql.tmp_user_sys'").
        scratch = top / "install-tmp"
        scratch.mkdir(exist_ok=True)
        if self._as_root():
            shutil.chown(scratch, "mysql", "mysql")
        env = {**os.environ, "TMPDIR": str(scratch)}
        result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)  # noqa: S603
        shutil.rmtree(scratch, ignore_errors=True)
        if result.returncode != 0:
            raise ServiceError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")

    def command(self) -> list[str]:
        argv = [
            _require_binary("mariadbd", "apt-get install -y mariadb-server", extra=("/usr/sbin",)),
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket_path}",
            f"--port={self.cfg.mysql_port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={self.cfg.home / 'mysql' / 'mariadbd.pid'}",
            # Timestamps are UTC end to end; the claim protocol compares them across processes.
            "--default-time-zone=+00:00",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
            # The claim benchmark runs 16+ concurrent claimers plus checkers.
            "--max-connections=300",
            "--innodb-buffer-pool-size=256M",
            "--innodb-lock-wait-timeout=10",
            "--skip-name-resolve",
        ]
        if self._as_root():
            argv.append("--user=mysql")
        return argv

    def is_healthy(self) -> bool:
        if not self.socket_path.exists():
            return False
        result = self._sql("SELECT 1")
        return result.returncode == 0

    def detail(self) -> str:
        return f"mysql://127.0.0.1:{self.cfg.mysql_port}/{MYSQL_DATABASE}"

    def _sql(self, sql: str) -> subprocess.CompletedProcess[str]:
        """Run SQL as the server's root over the unix socket; the SQL goes through stdin, not argv."""
        client = _require_binary("mariadb", "apt-get install -y mariadb-client")
        return subprocess.run(  # noqa: S603
            [client, "--no-defaults", f"--socket={self.socket_path}", "-uroot", "--batch"],
            input=sql,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )

    def after_start(self) -> None:
        secret = stack_secrets(self.cfg)
        quoted, registry_quoted = (
            secret[key].replace("\\", "\\\\").replace("'", "\\'")
            for key in ("LAGSCHED_MYSQL_PASSWORD", "LAGSCHED_REGISTRY_DB_PASSWORD")
        )
        # Least privilege: data and DDL on lagsched's own schemas (tests use lagsched_t_*), nothing else.
        sql = f"""
            CREATE DATABASE IF NOT EXISTS `{MYSQL_DATABASE}`;
            CREATE USER IF NOT EXISTS '{MYSQL_USER}'@'127.0.0.1' IDENTIFIED BY '{quoted}';
            ALTER USER '{MYSQL_USER}'@'127.0.0.1' IDENTIFIED BY '{quoted}';
            GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES
              ON `{MYSQL_DATABASE}`.* TO '{MYSQL_USER}'@'127.0.0.1';
            GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES
              ON `{MYSQL_DATABASE}\\_%`.* TO '{MYSQL_USER}'@'127.0.0.1';
            -- The schema registry's storage: its own database and user, nothing of lagsched's.
            CREATE DATABASE IF NOT EXISTS `{REGISTRY_DATABASE}`;
            CREATE USER IF NOT EXISTS '{REGISTRY_USER}'@'127.0.0.1' IDENTIFIED BY '{registry_quoted}';
            ALTER USER '{REGISTRY_USER}'@'127.0.0.1' IDENTIFIED BY '{registry_quoted}';
            GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES
              ON `{REGISTRY_DATABASE}`.* TO '{REGISTRY_USER}'@'127.0.0.1';
        """
        result = self._sql(sql)
        if result.returncode != 0:
            raise ServiceError(
                f"could not create the databases and users (lagsched's, the registry's): {result.stderr}"
            )


#: Kafka's internal topics on brokers without replicas to spare (one copy, four offsets partitions).
ONE_REPLICA_INTERNAL_TOPICS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A random KRaft cluster id, by Kafka's own rule (``Uuid.randomUuid``): 16 bytes in URL-safe
    base64 without padding, never one that starts with ``-``, which a command line reads as an option
    (1 id in 64 did, and the storage format then failed with "expected one argument")."""
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class Kafka(Service):
    """One Apache Kafka node in KRaft mode (combined broker and controller)."""

    name = "kafka"
    start_timeout_s = 90.0

    @property
    def dir(self) -> Path:
        return self.cfg.home / "kafka"

    @property
    def jars(self) -> Path:
        return self.cfg.kafka_jars

    def _classpath(self) -> str:
        if not any(self.jars.glob("kafka_2.13-*.jar")):
            raise ServiceError(f"no Kafka jars in {self.jars}; run `make deps` first")
        return str(self.jars / "*")

    def _java(self) -> str:
        return java_binary()

    def _write_config(self) -> Path:
        c = self.cfg
        data = self.dir / "data"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{c.kafka_controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{c.kafka_port},CONTROLLER://127.0.0.1:{c.kafka_controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{c.kafka_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            # An unknown topic must be an error, never silently created by a lag probe.
            "auto.create.topics.enable": "false",
            **ONE_REPLICA_INTERNAL_TOPICS,
            "group.initial.rebalance.delay.ms": "0",
            # Retention is enforced quickly so tests of lost records need not wait minutes.
            "log.retention.check.interval.ms": "2000",
            "log.segment.delete.delay.ms": "1000",
        }
        return self._write_node_files(props)

    def _write_node_files(self, props: Mapping[str, str], *, root_level: str = "INFO") -> Path:
        """Write this node's ``server.properties`` (``props``) and its log4j2 configuration
        (console, ``root_level``, the state-change and request loggers at WARN); the former's path."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.dir / "log4j2.properties").write_text(
            "status = warn\n"
            "appender.out.type = Console\nappender.out.name = STDOUT\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            f"rootLogger.level = {root_level}\nrootLogger.appenderRef.out.ref = STDOUT\n"
            "logger.state.name = state.change.logger\nlogger.state.level = WARN\n"
            "logger.request.name = kafka.request.logger\nlogger.request.level = WARN\n"
        )
        return path

    def prepare(self) -> None:
        config = self._write_config()
        if (self.dir / "data" / "meta.properties").exists():
            return
        self._format_storage(config, new_cluster_id(), "--standalone")

    def _format_storage(self, config: Path, cluster_id: str, *options: str) -> None:
        """Kafka's StorageTool ``format`` of this node's log dirs (once, before its first start)."""
        result = subprocess.run(  # noqa: S603
            [self._java(), "-cp", self._classpath(), f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
             "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config), *options],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if result.returncode != 0:
            raise ServiceError(f"formatting {self.name}'s storage failed:\n{result.stdout}\n{result.stderr}")

    def command(self) -> list[str]:
        return self._kafka_command(initial_heap="256m", max_heap=os.environ.get("LAGSCHED_KAFKA_HEAP", "768m"))

    def _kafka_command(self, *, initial_heap: str, max_heap: str) -> list[str]:
        return [
            self._java(), f"-Xms{initial_heap}", f"-Xmx{max_heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
            "-cp", self._classpath(), "kafka.Kafka", str(self.dir / "server.properties"),
        ]  # fmt: skip

    def is_healthy(self) -> bool:
        if not _port_open(self.cfg.kafka_port):
            return False
        from confluent_kafka.admin import AdminClient

        try:
            meta = AdminClient({"bootstrap.servers": self.cfg.kafka_bootstrap}).list_topics(timeout=3)
        except Exception:  # noqa: BLE001 - any failure means "not healthy yet"
            return False
        return bool(meta.brokers)

    def detail(self) -> str:
        return f"kafka://{self.cfg.kafka_bootstrap}"


class Postgres(Service):
    """PostgreSQL from Debian's packages, as Airflow's metadata DB (unless ``LAGSCHED_AIRFLOW_DB=sqlite``).

    Unix socket only (``listen_addresses=''``: nothing listens on TCP), in ``.local/postgres/run``;
    local connections are trusted, so there is no password to keep: who can reach the socket
    directory (root and the postgres user) can connect. One role and database, ``airflow``.
    Started before Airflow's DB migration (`migrate_airflow_db`), stopped after Airflow.
    """

    name = "postgres"
    start_timeout_s = 60.0
    # SIGINT is PostgreSQL's "fast" shutdown: active transactions are rolled back, clients closed.
    stop_signal = signal.SIGINT
    port = POSTGRES_SOCKET_PORT  # names the socket file only

    @property
    def datadir(self) -> Path:
        return self.cfg.home / "postgres" / "data"

    @property
    def socket_dir(self) -> Path:
        return self.cfg.postgres_socket_dir

    def _bin(self, name: str) -> str:
        return _require_binary(
            name, "apt-get install -y postgresql", extra=tuple(sorted(_postgres_bins(), reverse=True))
        )

    def _as_postgres(self, argv: list[str]) -> list[str]:
        # PostgreSQL refuses to run as root; setpriv execs in place, so the pid is the postmaster's.
        if os.geteuid() != 0:
            return argv
        return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]

    def prepare(self) -> None:
        for folder in (self.datadir.parent, self.socket_dir):
            folder.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(folder, "postgres", "postgres")
        if (self.datadir / "PG_VERSION").exists():
            return
        argv = [self._bin("initdb"), "-D", str(self.datadir), "-U", "postgres", "--auth-local=trust",
                "--auth-host=reject", "-E", "UTF8", "--locale=C.UTF-8"]  # fmt: skip
        result = subprocess.run(self._as_postgres(argv), capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise ServiceError(f"initdb failed:\n{result.stdout}\n{result.stderr}")

    def command(self) -> list[str]:
        argv = [self._bin("postgres"), "-D", str(self.datadir), "-k", str(self.socket_dir), "-p", str(self.port),
                "-c", "listen_addresses=", "-c", "max_connections=200", "-c", "timezone=UTC"]  # fmt: skip
        return self._as_postgres(argv)

    def _psql(self, sql: str, database: str = "postgres") -> subprocess.CompletedProcess[str]:
        argv = [self._bin("psql"), "-h", str(self.socket_dir), "-p", str(self.port), "-U", "postgres",
                "-d", database, "-v", "ON_ERROR_STOP=1", "-tA"]  # fmt: skip
        return subprocess.run(argv, input=sql, capture_output=True, text=True, check=False, timeout=30)  # noqa: S603

    def is_healthy(self) -> bool:
        if not (self.socket_dir / f".s.PGSQL.{self.port}").exists():
            return False
        return self._psql("SELECT 1").returncode == 0

    def detail(self) -> str:
        return f"postgresql://airflow@/airflow?host={self.socket_dir}"

    def after_start(self) -> None:
        steps = [
            ("postgres", "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'airflow') "
                         "THEN CREATE ROLE airflow LOGIN; END IF; END $$;"),
        ]  # fmt: skip
        exists = self._psql("SELECT 1 FROM pg_database WHERE datname = 'airflow'")
        if exists.returncode == 0 and exists.stdout.strip() != "1":
            steps.append(("postgres", "CREATE DATABASE airflow OWNER airflow ENCODING 'UTF8';"))
        # Airflow's migrations create tables in the public schema (PostgreSQL 15 no longer grants it).
        steps.append(("airflow", "GRANT ALL ON SCHEMA public TO airflow;"))
        for database, sql in steps:
            result = self._psql(sql, database)
            if result.returncode != 0:
                raise ServiceError(f"could not create Airflow's role and database in PostgreSQL: {result.stderr}")


def _postgres_bins() -> list[str]:
    """Debian keeps PostgreSQL's server binaries in /usr/lib/postgresql/<version>/bin, off PATH."""
    root = Path("/usr/lib/postgresql")
    return [str(p / "bin") for p in root.iterdir() if (p / "bin").is_dir()] if root.is_dir() else []


class Airflow(Service):
    """``airflow standalone``: API server with the UI, scheduler, DAG processor and triggerer.

    With the CeleryExecutor (``cfg.airflow_executor``), which standalone would replace by the local
    one, only ``airflow api-server``: the other processes are services of their own
    (`lagsched_dev.stack.celery`).
    """

    name = "airflow"
    start_timeout_s = 180.0
    # SIGTERM orphans the scheduler's workers (STACK-NOTES); SIGINT shuts standalone down cleanly.
    stop_signal = signal.SIGINT

    def prepare(self) -> None:
        if self.cfg.airflow_executor == "celery" and not airflow_uses_postgres():
            raise ServiceError(
                "the CeleryExecutor needs PostgreSQL as Airflow's metadata DB (its result backend too); "
                "unset LAGSCHED_AIRFLOW_DB=sqlite"
            )
        migrate_airflow_db(self.cfg)  # starts PostgreSQL first when it is the metadata DB
        self._migrate_lagsched_schema()
        self._write_admin_password()

    def _migrate_lagsched_schema(self) -> None:
        """lagsched's tables in the stack's database before the scheduler starts.

        The stack's DAGs are not paused at creation, so the maintenance, topic sync and lag monitor
        DAGs run as soon as Airflow parses them; on a new stack those first runs failed (red in the
        grid) on a schema the setup DAG had not applied yet. The setup DAG stays the way a
        deployment applies the migrations; on the stack it then finds them applied.
        """
        from lagsched.adapters.migrations import migrate_database
        from lagsched.connections import MySQLParams

        password = stack_secrets(self.cfg)["LAGSCHED_MYSQL_PASSWORD"]
        migrate_database(MySQLParams("127.0.0.1", self.cfg.mysql_port, MYSQL_USER, password, MYSQL_DATABASE))

    def _write_admin_password(self) -> None:
        """Generate the admin's password ourselves, so Airflow never prints one into its log.

        The simple auth manager prints every password it generates to stdout, which is
        ``.local/logs/airflow.log``; it generates none for a user already in its file.
        """
        import secrets

        from lagsched_dev.airflow_api import PASSWORDS_FILE

        path = self.cfg.airflow_home / PASSWORDS_FILE
        if path.exists():
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps({"admin": secrets.token_urlsafe(12)}) + "\n")

    def stop(self, *, with_database: bool = True) -> bool:
        """Stop Airflow, then its metadata DB (a no-op when PostgreSQL is not running) unless
        ``with_database`` is False: the stack without Airflow still has it (`migrate_airflow_db`),
        for ``dag.test()`` and for the tests that read it."""
        stopped = super().stop()
        if with_database:
            Postgres(self.cfg).stop()
        return stopped

    def mode(self) -> dict[str, str]:
        """What this Airflow was started with that a later `up` cannot change while it runs."""
        c = self.cfg
        return {
            "executor": f"celery ({c.celery_workers} workers)" if c.airflow_executor == "celery" else "local",
            "slots": c.spark_master_url if c.slots_on_spark_cluster else "local[1]",
        }

    @property
    def mode_file(self) -> Path:
        return self.cfg.run / "airflow-mode.json"

    def running_mode(self) -> dict[str, str] | None:
        """The `mode` the running Airflow was started with; None when none runs or it is not known."""
        if self.pid() is None:
            return None
        try:
            running = json.loads(self.mode_file.read_text())
        except (OSError, ValueError):
            return None
        return running if isinstance(running, dict) else None

    def launch(self) -> bool:
        """As `Service.launch`; an Airflow already running with another executor or Spark master for
        the slots is an error (stop the stack first), never silently the wrong one."""
        if self.pid() is not None and self.is_healthy():
            running = self.running_mode()
            if running is not None and running != self.mode():
                raise ServiceError(
                    f"Airflow already runs with executor {running['executor']} and slots on {running['slots']}; "
                    f"this start asks for {self.mode()['executor']} and {self.mode()['slots']}: "
                    "`lagsched-dev stack down` (or `make demo-down`) first"
                )
            return False
        spawned = super().launch()
        if spawned:
            self.mode_file.write_text(json.dumps(self.mode()) + "\n")
        return spawned

    def command(self) -> list[str]:
        mode = "api-server" if self.cfg.airflow_executor == "celery" else "standalone"
        return [airflow_binary(), mode]

    def environment(self) -> dict[str, str]:
        return airflow_environment(self.cfg)

    def after_start(self) -> None:
        """Create the consume DAG's pool (its size bounds the slots running at once) unless it exists."""
        from lagsched_dev.airflow_api import AirflowAPI

        api = AirflowAPI.for_simple_auth(f"http://127.0.0.1:{self.cfg.airflow_port}", self.cfg.airflow_home)
        api.ensure_pool(
            CONSUME_POOL, CONSUME_POOL_SLOTS, "lagsched consumer slots running at once (lagsched_consume DAG)"
        )

    def is_healthy(self) -> bool:
        return airflow_health(self.cfg) is not None

    def detail(self) -> str:
        return f"http://127.0.0.1:{self.cfg.airflow_port}"


def airflow_binary() -> str:
    """The venv's ``airflow`` command."""
    return str(Path(sys.executable).parent / "airflow")


def airflow_environment(cfg: StackConfig) -> dict[str, str]:
    """What every Airflow process of the stack runs with: this environment and the stack's."""
    return {**os.environ, **stack_environment(cfg)}


def airflow_health(cfg: StackConfig) -> dict[str, object] | None:
    """The API server's ``/api/v2/monitor/health`` (each component's status), None if it does not answer."""
    url = f"http://127.0.0.1:{cfg.airflow_port}/api/v2/monitor/health"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def pyspark_home() -> Path:
    """The installed pyspark package: a complete Spark (jars, ``bin/spark-class``, ``bin/spark-submit``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("pyspark is not installed in this Python; run `make deps`")
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").exists() or not (home / "jars").is_dir():
        raise ServiceError(f"{home} is not a complete Spark (no bin/spark-class or jars/); run `make deps`")
    return home


def spark_master_state(cfg: StackConfig, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The local master's own JSON status (``/json`` of its web UI), or None if it does not answer."""
    url = f"http://127.0.0.1:{cfg.spark_master_webui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            state = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


class _SparkDaemon(Service):
    """A Spark standalone daemon run through pyspark's ``spark-class``, bound to loopback only."""

    start_timeout_s = 60.0
    main_class = ""

    def command(self) -> list[str]:
        return [str(pyspark_home() / "bin" / "spark-class"), self.main_class, *self.arguments()]

    def arguments(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        # Executors inherit the daemons' environment; the Connections (with the MySQL password) of
        # whichever process started the cluster are no business of theirs: jobs bring their own.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_")}
        env.update(
            {
                # spark-class would honour a SPARK_HOME of some other Spark; run pyspark's own.
                "SPARK_HOME": str(pyspark_home()),
                # The RPC endpoints follow --host; the web UIs bind SPARK_LOCAL_IP (else 0.0.0.0).
                "SPARK_LOCAL_IP": "127.0.0.1",
                # The daemons only track workers and applications; executors get the worker's memory.
                "SPARK_DAEMON_MEMORY": "512m",
                # Long-lived but nearly idle: C1 alone and the serial collector start them with
                # about half the CPU, which a 2-core machine running Kafka and tests notices.
                "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            }
        )
        return env


class SparkMaster(_SparkDaemon):
    """The standalone master: ``spark://127.0.0.1:<LAGSCHED_SPARK_MASTER_PORT>``."""

    name = "spark-master"
    main_class = "org.apache.spark.deploy.master.Master"

    def arguments(self) -> list[str]:
        c = self.cfg
        return ["--host", "127.0.0.1", "--port", str(c.spark_master_port),
                "--webui-port", str(c.spark_master_webui_port)]  # fmt: skip

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["SPARK_MASTER_OPTS"] = " ".join(
            [
                # The REST submission server (port 6066) serves cluster-mode submits; lagsched makes none.
                "-Dspark.master.rest.enabled=false",
                f"-Dspark.deploy.defaultCores={self.cfg.spark_app_cores}",
            ]
        )
        return env

    def is_healthy(self) -> bool:
        state = spark_master_state(self.cfg)
        # The URL check tells our master from some other Spark answering on the web UI port.
        return state is not None and state.get("status") == "ALIVE" and state.get("url") == self.cfg.spark_master_url

    def detail(self) -> str:
        return f"{self.cfg.spark_master_url} (UI http://127.0.0.1:{self.cfg.spark_master_webui_port})"


class SparkWorker(_SparkDaemon):
    """Worker ``index`` (0-based) of the standalone cluster, with its own work dir and web UI port."""

    main_class = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, cfg: StackConfig, index: int) -> None:
        super().__init__(cfg)
        self.index = index
        self.name = f"spark-worker-{index + 1}"

    @property
    def webui_port(self) -> int:
        return self.cfg.spark_worker_webui_ports[self.index]

    @property
    def work_dir(self) -> Path:
        return self.cfg.spark_data / self.name

    def prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)

    def arguments(self) -> list[str]:
        c = self.cfg
        return [
            "--host", "127.0.0.1",
            "--webui-port", str(self.webui_port),
            "--cores", str(c.spark_worker_cores),
            "--memory", c.spark_worker_memory,
            "--work-dir", str(self.work_dir),
            c.spark_master_url,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        env = super().environment()
        # Executors inherit the worker's environment: the venv's Python (with pyarrow), and the
        # lagsched package importable in Python workers as on the driver.
        env["PYSPARK_PYTHON"] = sys.executable
        plugins = str(self.cfg.repo / "plugins")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [plugins, os.environ.get("PYTHONPATH")]))
        # Every test run is an application with its own folder of executor logs: drop those of
        # finished applications after a day.
        env["SPARK_WORKER_OPTS"] = (
            "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=3600 "
            "-Dspark.worker.cleanup.appDataTtl=86400"
        )
        return env

    def is_healthy(self) -> bool:
        """Registered with the master and alive (a worker that cannot reach its master is no use)."""
        state = spark_master_state(self.cfg)
        if state is None:
            return False
        return any(
            w.get("state") == "ALIVE" and str(w.get("webuiaddress", "")).endswith(f":{self.webui_port}")
            for w in state.get("workers", [])
        )

    def detail(self) -> str:
        c = self.cfg
        return (
            f"{c.spark_worker_cores} core(s), {c.spark_worker_memory} for executors, "
            f"UI http://127.0.0.1:{self.webui_port}, work dir {self.work_dir}"
        )


def migrate_airflow_db(cfg: StackConfig) -> None:
    """``airflow db migrate`` once per Airflow version (a stamp file skips the ~15 s no-op run)."""
    from importlib.metadata import version

    postgres = airflow_uses_postgres()
    if postgres:
        Postgres(cfg).start()  # a no-op when it runs; `stack down` stops it with Airflow
        present = (Postgres(cfg).datadir / "PG_VERSION").exists()
    else:
        present = (cfg.airflow_home / "airflow.db").exists()
    stamp = cfg.airflow_home / (".migrated-postgres" if postgres else ".migrated")
    wanted = version("apache-airflow-core")
    if stamp.exists() and stamp.read_text().strip() == wanted and present:
        return
    cfg.airflow_home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(stack_environment(cfg))
    result = subprocess.run(  # noqa: S603
        [airflow_binary(), "db", "migrate"],
        env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        raise ServiceError(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    stamp.write_text(wanted + "\n")


def start_together(services: Sequence[Service]) -> None:
    """Start ``services`` side by side: spawn every one that is not up, then wait for each.

    Independent services (the Spark workers) thus pay one JVM start-up between them, not one each.
    Each service's ``after_start`` runs once it is healthy, also when it was already running.
    """
    for service in services:
        service.launch()
    for service in services:
        service.await_healthy()
        service.after_start()


class S3Proxy(Service):
    """An S3 API server (S3Proxy, filesystem backend under ``<home>/s3``), so ``s3a://`` warehouses
    are tested against a real S3 API. One bucket, ``lagsched`` (a folder of the backend); AWS v4
    signatures with the stack's generated key pair (``secrets.env``)."""

    name = "s3proxy"
    bucket = "lagsched"
    start_timeout_s = 60.0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.cfg.s3_port}"

    def prepare(self) -> None:
        (self.cfg.home / "s3" / self.bucket).mkdir(parents=True, exist_ok=True)
        secret = stack_secrets(self.cfg)
        conf = self.cfg.run / "s3proxy.properties"
        conf.parent.mkdir(parents=True, exist_ok=True)
        # The file holds the secret key.
        write_private(
            conf,
            f"s3proxy.endpoint={self.endpoint}\n"
            "s3proxy.authorization=aws-v4\n"
            f"s3proxy.identity={secret['LAGSCHED_S3_ACCESS_KEY']}\n"
            f"s3proxy.credential={secret['LAGSCHED_S3_SECRET_KEY']}\n"
            "s3proxy.ignore-unknown-headers=true\n"
            "jclouds.provider=filesystem\n"
            f"jclouds.filesystem.basedir={self.cfg.home / 's3'}\n",
        )
        # S3Proxy's jar from Maven Central carries no logback.xml, and logback's default is DEBUG for
        # everything: every request's Jetty internals, 400 MB of log in an hour of tests. Warnings only.
        self.logback_conf.write_text(
            "<configuration>\n"
            '  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">\n'
            "    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{36} - %msg%n</pattern></encoder>\n"
            "  </appender>\n"
            '  <root level="WARN"><appender-ref ref="out"/></root>\n'
            "</configuration>\n"
        )

    @property
    def logback_conf(self) -> Path:
        return self.cfg.run / "s3proxy-logback.xml"

    def command(self) -> list[str]:
        jars = self.cfg.jars / "s3proxy"
        if not any(jars.glob("s3proxy-*.jar")):
            raise ServiceError(f"S3Proxy's jars are missing from {jars}; run `make deps`")
        return [
            java_binary(), "-Xmx256m", "-XX:TieredStopAtLevel=1", f"-Dlogback.configurationFile={self.logback_conf}",
            "-cp", f"{jars}/*", "org.gaul.s3proxy.Main", "--properties", str(self.cfg.run / "s3proxy.properties"),
        ]  # fmt: skip

    def is_healthy(self) -> bool:
        # Anonymous requests are refused with S3's own error document: the API answers.
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=2)  # noqa: S310 - our loopback endpoint
        except urllib.error.HTTPError as exc:
            return exc.code == 403 and b"AccessDenied" in exc.read()
        except OSError:
            return False
        return False

    def detail(self) -> str:
        return f"s3a://{self.bucket} at {self.endpoint}"


class SchemaRegistry(Service):
    """Apicurio Registry (its runnable app, fetched by `make deps`) on loopback: the schema registry
    typed topics are decoded through, answering the Confluent-compatible API at
    ``/apis/ccompat/v7`` (:attr:`StackConfig.schema_registry_url`).

    Its schemas live in the stack's MariaDB (database ``apicurio_registry``, its own user), not in
    Apicurio's default in-memory store: a schema id must mean the same schema for as long as records
    carrying it exist, and an in-memory registry would hand the ids out again after a restart.
    No authentication: like the stack's Redis, it listens on loopback only.
    """

    name = "schema-registry"
    start_timeout_s = 120.0  # a Quarkus app; its first start also creates its tables

    @property
    def url(self) -> str:
        return self.cfg.schema_registry_url

    def command(self) -> list[str]:
        # The version is deps/schema-registry/pom.xml's alone: whichever runner `make deps` unpacked.
        folder = self.cfg.jars / "schema-registry"
        runner = next(iter(sorted(folder.glob("apicurio-registry-app-*-runner.jar"))), None)
        if runner is None:
            raise ServiceError(f"the schema registry's app is missing from {folder}; run `make deps`")
        return [
            java_binary(), "-Xmx384m", "-XX:TieredStopAtLevel=1",
            f"-Dquarkus.http.port={self.cfg.schema_registry_port}", "-Dquarkus.http.host=127.0.0.1",
            # A line per request and a banner are noise in an hour of tests; its warnings stay.
            "-Dquarkus.banner.enabled=false", "-Dquarkus.http.access-log.enabled=false",
            "-Dquarkus.log.category.\"io.quarkus.vertx.http.runtime.filters.accesslog\".level=WARN",
            "-jar", str(runner),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        # The database password goes through the environment, never the command line (ps shows that);
        # the Connections of whichever process started the stack are none of its business.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "APICURIO_"))}
        env.update(
            {
                "APICURIO_STORAGE_KIND": "sql",
                "APICURIO_STORAGE_SQL_KIND": "mysql",
                "APICURIO_DATASOURCE_URL": f"jdbc:mysql://127.0.0.1:{self.cfg.mysql_port}/{REGISTRY_DATABASE}",
                "APICURIO_DATASOURCE_USERNAME": REGISTRY_USER,
                "APICURIO_DATASOURCE_PASSWORD": stack_secrets(self.cfg)["LAGSCHED_REGISTRY_DB_PASSWORD"],
            }
        )
        return env

    def is_healthy(self) -> bool:
        # The API lagsched uses, not only a health page: the list of subjects answers.
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as resp:  # noqa: S310 - loopback
                return bool(resp.status == 200) and isinstance(json.loads(resp.read()), list)
        except (OSError, ValueError):
            return False

    def detail(self) -> str:
        return self.url


class Prometheus(Service):
    """Debian's Prometheus server (``lagsched-dev stack up --prometheus``) on loopback, scraping the
    lagsched page's ``/lagsched/metrics`` on the stack's Airflow API server with the stack's scrape
    token, and evaluating the shipped alert rules (``lagsched/monitoring/alerts.yml``, package data).

    Everything it writes is under ``<home>/prometheus/<name>``: ``prometheus.yml`` (generated at
    each start), the token's file (mode 0600; the token itself is never logged or put on a command
    line) and the TSDB. The intervals default to 15 s; tests pass shorter ones, a rules file of their
    own, another name and port, so a test's server never disturbs the stack's.
    """

    start_timeout_s = 60.0

    def __init__(
        self,
        cfg: StackConfig,
        *,
        name: str = "prometheus",
        port: int | None = None,
        scrape_interval_s: float = 15.0,
        evaluation_interval_s: float = 15.0,
        rule_files: Sequence[Path] | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(cfg)
        self.name = name
        self.port = cfg.prometheus_port if port is None else port
        self.scrape_interval_s = scrape_interval_s
        self.evaluation_interval_s = evaluation_interval_s
        self._rule_files = None if rule_files is None else [Path(p) for p in rule_files]
        self._token = token

    @property
    def dir(self) -> Path:
        return self.cfg.prometheus_home / self.name

    @property
    def config_file(self) -> Path:
        return self.dir / "prometheus.yml"

    @property
    def token_file(self) -> Path:
        return self.dir / "metrics.token"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rule_files(self) -> list[Path]:
        """The rules it loads: the shipped ones, resolved through the installed package."""
        if self._rule_files is not None:
            return self._rule_files
        from importlib.resources import as_file, files

        # The package is a folder on disk (a checkout or an unpacked wheel): as_file returns its path.
        with as_file(files("lagsched") / "monitoring" / "alerts.yml") as path:
            return [Path(path)]

    def configuration(self) -> dict[str, Any]:
        """prometheus.yml as data (JSON is YAML: it is written with json.dumps)."""

        def seconds(value: float) -> str:
            return f"{round(value * 1000)}ms"

        return {
            "global": {
                "scrape_interval": seconds(self.scrape_interval_s),
                "scrape_timeout": seconds(min(self.scrape_interval_s, 10.0)),
                "evaluation_interval": seconds(self.evaluation_interval_s),
            },
            "rule_files": [str(p) for p in self.rule_files()],
            "scrape_configs": [
                {
                    "job_name": "lagsched",
                    "metrics_path": "/lagsched/metrics",
                    "authorization": {"type": "Bearer", "credentials_file": str(self.token_file)},
                    "static_configs": [{"targets": [f"127.0.0.1:{self.cfg.airflow_port}"]}],
                }
            ],
        }

    def prepare(self) -> None:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        token = self._token if self._token is not None else stack_secrets(self.cfg)["LAGSCHED_METRICS_TOKEN"]
        write_private(self.token_file, token)  # rewritten at each start: the token may have been added since
        self.config_file.write_text(json.dumps(self.configuration(), indent=2) + "\n")

    def command(self) -> list[str]:
        return [
            _require_binary("prometheus", "apt-get install -y --no-install-recommends prometheus"),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            "--storage.tsdb.retention.time=7d",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--web.external-url={self.url}/",
        ]

    def is_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:  # noqa: S310 - loopback
                return bool(resp.status == 200)
        except OSError:
            return False

    def detail(self) -> str:
        return self.url


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (like secrets.env): a file that holds
    a secret, rewritten at each start."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)  # a file from before keeps its mode through O_TRUNC


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return str(Path(java_home, "bin", "java"))
    return _require_binary("java", "apt-get install -y openjdk-17-jre-headless")


def _require_binary(name: str, install_hint: str, extra: tuple[str, ...] = ()) -> str:
    path = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *extra, "/usr/sbin", "/usr/bin"]))
    if path is None:
        raise ServiceError(f"`{name}` is not installed; run `make deps` (or `{install_hint}`)")
    return path


def core_services(cfg: StackConfig) -> list[Service]:
    """The data services, in start order (stop in reverse)."""
    return [Redis(cfg), MariaDB(cfg), Kafka(cfg), S3Proxy(cfg), SchemaRegistry(cfg)]


def spark_cluster_services(cfg: StackConfig) -> tuple[SparkMaster, list[SparkWorker]]:
    """The optional Spark standalone cluster: its master, and its workers (started together after it)."""
    return SparkMaster(cfg), [SparkWorker(cfg, i) for i in range(cfg.spark_workers)]
