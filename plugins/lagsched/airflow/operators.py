"""``LagschedSparkSubmitOperator``: the provider's SparkSubmitOperator, made fit to run a consumer slot.

Four things differ from the provider's operator (apache-spark provider 6.3):

1. **Connections reach the job without passing through Airflow's templates.** The Spark job has no
   Airflow; it reads its Connections from ``AIRFLOW_CONN_*`` variables (docs/consumer.md). They are
   resolved at execute time, through Airflow's secrets backends, and put into the environment of
   the ``spark-submit`` process only: never into ``env_vars`` (templated, so rendered in the UI and
   stored with the task instance), ``conf`` or the command line. The Kafka Connection of the slot's
   cluster (``kafka_conn_id``) is handed over under the id the job reads, ``lagsched_kafka``.
2. **A kill stops the slot at a batch boundary.** The provider's ``on_kill`` SIGKILLs
   ``spark-submit``, and Airflow's supervisor signals the task's whole process group, which reaches
   Spark's JVM: either way the batch in flight is abandoned (safe, it is redone, but wasted). Here
   ``spark-submit`` runs in a session of its own (the group signal never reaches it), and
   ``on_kill`` sends SIGTERM to the job's Python driver alone, which finishes the batch, commits,
   releases its rows and exits 0; then it waits up to ``stop_timeout_s`` and only then falls back to
   the provider's kill. If Airflow kills the task process before that (its escalation to SIGKILL
   comes a few seconds after SIGTERM), the detached driver still finishes its batch and exits;
   the job's ``--budget-s`` bounds how long it can outlive the task.
3. **Defaults for lagsched**: the master from the ``lagsched_spark`` Connection (host ``local[1]``,
   ``spark://...``, ``yarn``; a missing Connection fails the task, where the provider would silently
   use YARN), the lake's jars (Iceberg, its JDBC driver, S3A) from ``LAGSCHED_SPARK_JARS`` as ``spark.jars`` (never
   resolved from Maven at start), this Python on the executors, and the ``lagsched`` package on the
   driver's ``PYTHONPATH``.

4. **A start from a class-data archive** of the slot's classes (`lagsched.adapters.class_archive`),
   which the first run of a JDK and set of jars records as its JVM exits: a quarter less start-up
   time and CPU after that (docs/dags.md). And each run works in a scratch folder of its own
   (`lagsched.airflow.scratch`), which a later run sweeps if a kill left it behind.

Exit status 3 of the job (the slot lost a claim: it was a stale holder) fails the task like any
failure, so Airflow retries it and the retry claims again under a new epoch.

In ``deploy_mode=cluster`` the driver runs on the cluster and does not see this process's
environment: give the cluster the Connections through its own secret store instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from lagsched.adapters.class_archive import archive_dir, archive_file, archive_options, spark_java
from lagsched.airflow.scratch import scratch_folder
from lagsched.environment import lake_jars

__all__ = [
    "CHILD_CONNECTIONS",
    "EXIT_LOST_CLAIM",
    "LagschedSparkSubmitHook",
    "LagschedSparkSubmitOperator",
    "child_connections",
    "child_connections_environment",
    "spark_local_dir_chosen",
]

#: Connections the consumer job reads (docs/consumer.md), under these ids.
CHILD_CONNECTIONS = ("lagsched_kafka", "lagsched_mysql", "lagsched_redis")
#: `lagsched/jobs/consume.py` exits with 3 when the slot lost a claim (a stale holder).
EXIT_LOST_CLAIM = 3
_PLUGINS = Path(__file__).resolve().parents[2]  # the directory holding the lagsched package


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def child_connections(args: Sequence[str]) -> tuple[str, ...]:
    """The Connections a job with ``args`` reads: `CHILD_CONNECTIONS`, and the schema registry's when
    its ``--routes`` read Avro or JSON Schema through it.

    >>> child_connections(["--routes", '[{"topics": ["o"], "value_format": "avro"}]'])[-1]
    'lagsched_schema_registry'
    >>> child_connections(["--slot", "a"]) == CHILD_CONNECTIONS
    True
    """
    from lagsched.connections import SCHEMA_REGISTRY_CONN_ID
    from lagsched.core.routing import parse_routes

    args = list(args)
    if "--routes" not in args[:-1]:
        return CHILD_CONNECTIONS
    routes = parse_routes(json.loads(args[args.index("--routes") + 1]), "--routes", label="--routes")
    return (*CHILD_CONNECTIONS, SCHEMA_REGISTRY_CONN_ID) if any(r.needs_registry for r in routes) else CHILD_CONNECTIONS


def child_connections_environment(kafka_conn_id: str, conn_ids: Sequence[str] = CHILD_CONNECTIONS) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` values for the job: ``conn_ids``, with ``lagsched_kafka`` taken from ``kafka_conn_id``.

    Resolved inside a task, through Airflow's secrets backends (`lagsched.connections.child_environment`,
    which also masks them in logs). Never logged.
    """
    from lagsched.connections import child_environment

    resolve = [kafka_conn_id if cid == "lagsched_kafka" else cid for cid in conn_ids]
    resolved = child_environment(resolve)
    return {_env_name(cid): resolved[_env_name(asked)] for cid, asked in zip(conn_ids, resolve, strict=True)}


#: What Airflow's supervisor puts into a task's environment for the task process alone: a database URL
#: that refuses every connection, and the handles of its channel to the supervisor. A child that
#: imports Airflow (the job resolves its Connections through it) must not inherit them: it would fail
#: to parse the URL, or talk to a supervisor that is not its own.
_TASK_ONLY = re.compile(r"^(_AIRFLOW|__AIRFLOW)|^AIRFLOW__(DATABASE|CORE)__SQL_ALCHEMY_CONN$")
_BLOCKED_DB = "airflow-db-not-allowed"


def child_process_environment(
    base: Mapping[str, str], env_vars: Mapping[str, Any] | None, connections: Mapping[str, str]
) -> dict[str, str]:
    """The job's environment: ``base`` without what is the task process's alone, plus the rest.

    >>> env = child_process_environment(
    ...     {"PATH": "/bin", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "airflow-db-not-allowed:///",
    ...      "__AIRFLOW_SUPERVISOR_FD": "7", "AIRFLOW_HOME": "/a"},
    ...     {"X": 1}, {"AIRFLOW_CONN_LAGSCHED_MYSQL": "{}"})
    >>> sorted(env)
    ['AIRFLOW_CONN_LAGSCHED_MYSQL', 'AIRFLOW_HOME', 'PATH', 'X']
    """
    env = {
        k: v for k, v in base.items() if not (_TASK_ONLY.match(k) and (k.startswith("_") or v.startswith(_BLOCKED_DB)))
    }
    env.update({k: str(v) for k, v in (env_vars or {}).items()})
    env.update(connections)
    return env


def spark_local_dir_chosen(env: Mapping[str, str], conf: Mapping[str, Any]) -> bool:
    """Whether the deployment chose Spark's local dir: ``SPARK_LOCAL_DIRS``, ``spark.local.dir`` in the
    operator's ``conf``, or in the ``spark-defaults.conf`` of ``SPARK_CONF_DIR`` (else
    ``SPARK_HOME/conf``), which the scratch folder must not override.

    >>> spark_local_dir_chosen({"PATH": "/bin"}, {"spark.ui.enabled": "false"})
    False
    >>> spark_local_dir_chosen({"SPARK_LOCAL_DIRS": "/fast"}, {})
    True
    >>> spark_local_dir_chosen({}, {"spark.local.dir": "/fast"})
    True
    """
    if env.get("SPARK_LOCAL_DIRS") or "spark.local.dir" in conf:
        return True
    conf_dir = env.get("SPARK_CONF_DIR") or (os.path.join(env["SPARK_HOME"], "conf") if env.get("SPARK_HOME") else "")
    defaults = Path(conf_dir, "spark-defaults.conf") if conf_dir else None
    if defaults is None or not defaults.is_file():
        return False
    # A Java properties file: the key ends at whitespace, "=" or ":".
    return re.search(r"^[ \t]*spark\.local\.dir[ \t]*[=: \t]", defaults.read_text(errors="replace"), re.M) is not None


def with_driver_java_options(conf: Mapping[str, Any], options: Sequence[str]) -> dict[str, Any]:
    """`conf` with `options` appended to its ``spark.driver.extraJavaOptions``.

    >>> with_driver_java_options({"spark.driver.extraJavaOptions": "-Da=1"}, ["-Xss4m", ""])
    {'spark.driver.extraJavaOptions': '-Da=1 -Xss4m'}
    >>> with_driver_java_options({}, [])
    {}
    """
    joined = " ".join(filter(None, [conf.get("spark.driver.extraJavaOptions", ""), *options]))
    return {**conf, "spark.driver.extraJavaOptions": joined} if joined else dict(conf)


class LagschedSparkSubmitHook(SparkSubmitHook):
    """The provider's hook with the job's environment of our making, in a session of its own.

    Args:
        child_env: what the job's environment gets beyond the task's (its Connections, PYTHONPATH).
        class_archive: the slots' JVM class-data archive: mapped if it exists, else recorded by this run.
        kwargs: everything `SparkSubmitHook` takes.
    """

    def __init__(self, *, child_env: Mapping[str, str], class_archive: str | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lagsched_child_env = dict(child_env)
        self._lagsched_class_archive = class_archive
        #: The working directory of the newest run (removed when it ended).
        self.scratch_dir: str | None = None

    def _build_spark_submit_command(self, application: str) -> list[str]:
        command: list[str] = super()._build_spark_submit_command(application)
        # The provider would hand Popen os.environ plus `_env` (from env_vars); `submit` below
        # passes the whole environment instead, so the Connections go to the process only, never
        # into its argv, and the task process's own variables stay behind.
        self._env = None
        return command

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        kwargs["env"] = child_process_environment(os.environ, self._env_vars, self._lagsched_child_env)
        # Its own session: Airflow's SIGTERM to the task's process group must not reach Spark's JVM.
        kwargs.setdefault("start_new_session", True)
        # Spark 4 creates `artifacts/` (its ArtifactManager's root is the relative path "artifacts")
        # and more in its working directory, and a killed JVM leaves `artifacts/spark-<uuid>` there:
        # each run gets a scratch folder of its own as working directory, removed when it ends (or,
        # if the task and the JVM were killed, by a later run's sweep), so the task's own (often the
        # checkout the DAGs live in) stays clean.
        with scratch_folder() as scratch:
            self.scratch_dir = scratch.path
            kwargs.setdefault("cwd", scratch.path)
            # spark-submit, and so Spark's JVM, inherit the folder's lock: it stays held while the
            # JVM lives, also after the task process is gone.
            kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), scratch.lock_fd)
            # Spark copies the jars into its local dir at every start and deletes
            # them as it exits; a killed driver cannot. Unless the deployment chose a local dir, it is
            # the scratch folder, so they go with it whatever the end.
            if not spark_local_dir_chosen(kwargs["env"], self._conf or {}):
                kwargs["env"]["SPARK_LOCAL_DIRS"] = scratch.path
            recording = self._use_class_archive(scratch.path)
            result = super().submit(application, **kwargs)  # raises unless the job exited 0
            if recording is not None:
                self._keep_class_archive(recording)
            return result

    def _use_class_archive(self, scratch: str) -> str | None:
        """Have the driver's JVM map the class archive, or record it into `scratch` (returned) when there is
        none yet; nothing in cluster mode, where the driver is not started here."""
        archive = self._lagsched_class_archive
        if archive is None or self._connection["deploy_mode"] == "cluster":
            return None
        recording = None if os.path.isfile(archive) else os.path.join(scratch, "classes.jsa")
        conf = with_driver_java_options(self._conf or {}, archive_options(recording or archive, record=bool(recording)))
        class_path = [conf["spark.driver.extraClassPath"]] if conf.get("spark.driver.extraClassPath") else []
        conf["spark.driver.extraClassPath"] = os.pathsep.join([*class_path, *(self._jars or "").split(",")])
        self._conf = conf
        if recording is None:
            self.log.info("the driver maps the slots' class archive %s", archive)
        else:
            self.log.info("no class archive of this JDK and these jars yet: this run records %s as it exits", archive)
        return recording

    def _keep_class_archive(self, recording: str) -> None:
        archive = self._lagsched_class_archive
        assert archive is not None
        if not os.path.isfile(recording):
            self.log.warning("the driver's JVM wrote no class archive (a JDK without class-data sharing?)")
            return
        # An archive holds the classes its run loaded: one recorded meanwhile by a run that went
        # further (a run that left early, a second start of a running slot, records few) stays.
        if os.path.isfile(archive) and os.path.getsize(archive) >= os.path.getsize(recording):
            self.log.info("kept the class archive %s: another run recorded a fuller one meanwhile", archive)
            return
        # Moved next to its place first (/tmp may be another file system), then renamed into it at once:
        # a JVM starting meanwhile maps a whole archive or none.
        partial = f"{archive}.{uuid.uuid4().hex}.partial"
        try:
            shutil.move(recording, partial)
            os.replace(partial, archive)
        except OSError as exc:
            self.log.warning("could not keep the class archive %s: %s", archive, exc)
            Path(partial).unlink(missing_ok=True)
            return
        self.log.info(
            "recorded the slots' class archive %s (%.0f MB): later slots start from it",
            archive,
            os.path.getsize(archive) / 1e6,
        )


class LagschedSparkSubmitOperator(SparkSubmitOperator):
    """Run one lagsched Spark job (a consumer slot); see the module doc.

    Args:
        kafka_conn_id: the Kafka Connection of the slot's cluster, handed to the job as
            ``lagsched_kafka``.
        stop_timeout_s: after a kill, how long to wait for the job to finish its batch and exit.
        class_archive: start the driver's JVM from a class-data archive of the slot's classes (a
            quarter less start-up CPU), kept in ``LAGSCHED_CLASS_ARCHIVE_DIR`` (default
            ``~/.cache/lagsched/spark-classes``; empty: none) and recorded by the first run of a JDK
            and set of jars that exits normally; client mode only (docs/dags.md).
        conn_id: the Spark Connection (its host is the master).
        kwargs: everything `SparkSubmitOperator` takes (``application``, ``application_args``, ...).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "kafka_conn_id")

    def __init__(
        self,
        *,
        kafka_conn_id: str = "lagsched_kafka",
        stop_timeout_s: float = 120.0,
        class_archive: bool = True,
        conn_id: str = "lagsched_spark",
        name: str = "lagsched-consume",
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, name=name, **kwargs)
        self.kafka_conn_id = kafka_conn_id
        self.stop_timeout_s = stop_timeout_s
        self.class_archive = class_archive
        self._lagsched_child_env: dict[str, str] = {}
        self._lagsched_class_archive: str | None = None

    @property
    def slot(self) -> str:
        """The ``--slot`` argument, for logs and the mapped task's label."""
        args = list(self.application_args or [])
        return str(args[args.index("--slot") + 1]) if "--slot" in args[:-1] else ""

    def execute(self, context: Any) -> None:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(
                f"the Spark Connection {self._conn_id!r} is not defined (Admin > Connections): create it with "
                "type spark and the master as host (local[1], spark://host:7077, yarn); without it Spark "
                "would silently submit to YARN"
            ) from None
        if not self.jars:
            self.jars = ",".join(lake_jars())
        conf = {"spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable}
        log4j = os.path.join(os.path.dirname(os.path.abspath(self.application)), "log4j2.properties")
        if os.path.exists(log4j):  # the job's quiet logging (lagsched/jobs/log4j2.properties)
            conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{log4j}"
        # The caller's Java options come after ours (the JVM takes the last of a repeated one).
        given = dict(self.conf or {})
        callers = given.pop("spark.driver.extraJavaOptions", "")
        self.conf = with_driver_java_options({**conf, **given}, [callers])
        self._lagsched_class_archive = (
            self._class_archive_path(str(self.jars).split(",")) if self.class_archive else None
        )
        child = child_connections_environment(self.kafka_conn_id, child_connections(self.application_args or []))
        # The job imports the lagsched package; Airflow puts plugins/ on sys.path, not on PYTHONPATH.
        pythonpath = os.pathsep.join(filter(None, [str(_PLUGINS), os.environ.get("PYTHONPATH")]))
        self._lagsched_child_env = {**child, "PYTHONPATH": pythonpath}
        self.log.info("slot %s: submitting %s to %s", self.slot, self.application, self._conn_id)
        try:
            super().execute(context)
        except Exception:
            code = self._returncode()
            if code == EXIT_LOST_CLAIM:
                self.log.error(
                    "slot %s lost a claim (exit 3: a stale holder, another slot took its rows); "
                    "the retry claims again under a new epoch",
                    self.slot,
                )
            raise

    def _get_hook(self) -> LagschedSparkSubmitHook:
        return LagschedSparkSubmitHook(
            child_env=self._lagsched_child_env,
            class_archive=self._lagsched_class_archive,
            **self.hook_arguments(),
        )

    def hook_arguments(self) -> dict[str, Any]:
        """What the provider's operator (6.3) builds its `SparkSubmitHook` from. Listed here because the hook
        is ours; tests/unit/test_operators.py checks these names against the hook's signature, so an argument
        a newer provider adds cannot be dropped silently."""
        return {
            "conf": self.conf,
            "conn_id": self._conn_id,
            "files": self.files,
            "py_files": self.py_files,
            "archives": self._archives,
            "driver_class_path": self.driver_class_path,
            "jars": self.jars,
            "java_class": self._java_class,
            "packages": self.packages,
            "exclude_packages": self.exclude_packages,
            "repositories": self._repositories,
            "total_executor_cores": self._total_executor_cores,
            "executor_cores": self._executor_cores,
            "executor_memory": self._executor_memory,
            "driver_memory": self._driver_memory,
            "keytab": self.keytab,
            "principal": self.principal,
            "proxy_user": self.proxy_user,
            "name": self.name,
            "num_executors": self._num_executors,
            "status_poll_interval": self._status_poll_interval,
            "application_args": self.application_args,
            "env_vars": self.env_vars,
            "verbose": self._verbose,
            "spark_binary": self._spark_binary,
            "properties_file": self.properties_file,
            "yarn_queue": self._yarn_queue,
            "deploy_mode": self._deploy_mode,
            "use_krb5ccache": self._use_krb5ccache,
            "post_submit_commands": self.post_submit_commands,
            "track_driver_via_k8s_api": self._track_driver_via_k8s_api,
            "yarn_track_via_rm_api": self._yarn_track_via_rm_api,
            "yarn_rm_auth": self._yarn_rm_auth,
        }

    def _class_archive_path(self, jars: list[str]) -> str | None:
        directory = archive_dir(os.environ)
        if directory is None:
            return None
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            self.log.warning("slot %s: no class archive, its folder %s cannot be made: %s", self.slot, directory, exc)
            return None
        job = Path(self.application).stem  # consume, table_care
        return archive_file(
            directory, job=job, java=spark_java(os.environ), jars=jars, spark_home=os.environ.get("SPARK_HOME")
        )

    def _returncode(self) -> int | None:
        process = getattr(self._hook, "_submit_sp", None) if self._hook is not None else None
        return None if process is None else process.returncode

    def on_kill(self) -> None:
        """Ask the job's Python driver to stop at a batch boundary; kill only if it does not in time."""
        process: subprocess.Popen[str] | None = getattr(self._hook, "_submit_sp", None) if self._hook else None
        if process is None or process.poll() is not None:
            return
        drivers = python_drivers(process.pid, self.application)
        if not drivers:
            self.log.info("slot %s: no Python driver yet; stopping spark-submit", self.slot)
            super().on_kill()
            return
        for pid in drivers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        self.log.info(
            "slot %s: asked the driver (pid %s) to finish its batch and stop; waiting up to %.0f s",
            self.slot, drivers, self.stop_timeout_s,
        )  # fmt: skip
        try:
            code = process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            self.log.warning(
                "slot %s: the driver did not stop within %.0f s; killing spark-submit (its batch is redone "
                "by the next holder)",
                self.slot, self.stop_timeout_s,
            )  # fmt: skip
            super().on_kill()
            return
        self.log.info("slot %s: stopped at a batch boundary (exit %s)", self.slot, code)


def python_drivers(root_pid: int, application: str) -> list[int]:
    """Descendants of ``root_pid`` (spark-submit) that run ``application``: the job's Python driver."""
    import psutil  # type: ignore[import-untyped,unused-ignore]

    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    script = os.path.basename(application)
    found = []
    for child in children:
        try:
            cmdline = child.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        # The JVM's own command line also names the script (as SparkSubmit's argument): skip java.
        if cmdline and "java" not in os.path.basename(cmdline[0]) and any(a.endswith(script) for a in cmdline[1:]):
            found.append(child.pid)
    return found
