"""The stack's Celery option without starting it: settings, the environment Airflow gets, the commands,
the refusals, and the process-tree kill the worker-loss test relies on."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lagsched_dev.demo import demo_config
from lagsched_dev.stack.celery import CeleryWorker, components
from lagsched_dev.stack.config import load
from lagsched_dev.stack.environment import connection_environment, stack_environment
from lagsched_dev.stack.process import ServiceError, kill_tree, process_tree
from lagsched_dev.stack.services import Airflow

pytestmark = pytest.mark.unit


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAGSCHED_HOME", str(tmp_path))
    for name in ("LAGSCHED_AIRFLOW_EXECUTOR", "LAGSCHED_CELERY_WORKERS", "LAGSCHED_SLOTS_ON_SPARK_CLUSTER",
                 "LAGSCHED_AIRFLOW_DB", "LAGSCHED_SPARK_WORKER_CORES", "LAGSCHED_SPARK_WORKER_MEMORY"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_the_executor_and_the_slots_master_come_from_the_environment(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (load().airflow_executor, load().celery_workers, load().slots_on_spark_cluster) == ("local", 2, False)
    monkeypatch.setenv("LAGSCHED_AIRFLOW_EXECUTOR", " Celery ")
    monkeypatch.setenv("LAGSCHED_CELERY_WORKERS", "3")
    monkeypatch.setenv("LAGSCHED_SLOTS_ON_SPARK_CLUSTER", "1")
    cfg = load()
    assert (cfg.airflow_executor, cfg.celery_workers, cfg.slots_on_spark_cluster) == ("celery", 3, True)
    for name, value, message in (
        ("LAGSCHED_AIRFLOW_EXECUTOR", "kubernetes", "is not one of local, celery"),
        ("LAGSCHED_CELERY_WORKERS", "9", "out of range"),
        ("LAGSCHED_SLOTS_ON_SPARK_CLUSTER", "maybe", "yes/no"),
    ):
        with monkeypatch.context() as m:
            m.setenv(name, value)
            with pytest.raises(ValueError, match=message):
                load()


def test_celery_airflow_gets_the_executor_the_broker_and_the_worker_names(home: Path) -> None:
    local = stack_environment(load())
    assert local["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert "AIRFLOW__CELERY__BROKER_URL" not in local
    cfg = replace(load(), airflow_executor="celery")
    env = stack_environment(cfg)
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == f"redis://127.0.0.1:{cfg.redis_port}/1"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+" + env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] == "lagsched.adapters.slots.worker_name"
    worker = CeleryWorker(cfg, 2)
    argv = worker.command()
    assert argv[1:3] == ["celery", "worker"]
    assert argv[argv.index("--celery-hostname") + 1] == worker.node
    assert worker.node.startswith("lagsched-w2@")
    assert worker.environment()["LAGSCHED_WORKER"] == worker.node
    assert Airflow(cfg).command()[1] == "api-server"
    assert Airflow(load()).command()[1] == "standalone"
    assert [c.name for c in components(cfg)] == ["airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]


def test_the_slots_submit_to_the_stack_master_when_asked(home: Path) -> None:
    cfg = load()
    spark = json.loads(connection_environment(cfg)["AIRFLOW_CONN_LAGSCHED_SPARK"])
    assert spark == {"conn_type": "spark", "host": "local[1]"}
    spark = json.loads(connection_environment(replace(cfg, slots_on_spark_cluster=True))["AIRFLOW_CONN_LAGSCHED_SPARK"])
    assert spark == {"conn_type": "spark", "host": "spark://127.0.0.1", "port": cfg.spark_master_port}


def test_celery_on_sqlite_is_refused_before_anything_starts(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAGSCHED_AIRFLOW_DB", "sqlite")
    with pytest.raises(ServiceError, match="needs PostgreSQL"):
        Airflow(replace(load(), airflow_executor="celery")).prepare()


def test_a_running_airflow_of_another_mode_is_an_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load()
    running = Airflow(cfg)
    cfg.run.mkdir(parents=True)
    running.mode_file.write_text(json.dumps(running.mode()))
    wanted = Airflow(replace(cfg, airflow_executor="celery"))
    monkeypatch.setattr(Airflow, "pid", lambda self: 4242)
    monkeypatch.setattr(Airflow, "is_healthy", lambda self: True)
    assert running.launch() is False  # the same mode: already up, nothing to do
    with pytest.raises(ServiceError, match=r"already runs with executor local.*stack down"):
        wanted.launch()


def test_the_demo_options_make_the_stack_they_name(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def args(**kw: object) -> argparse.Namespace:
        return argparse.Namespace(**{"celery": False, "celery_workers": None, "spark_cluster": False, **kw})

    assert demo_config(load(), args()) == load()
    cfg = demo_config(load(), args(celery=True, spark_cluster=True))
    assert (cfg.airflow_executor, cfg.celery_workers, cfg.slots_on_spark_cluster) == ("celery", 2, True)
    assert (cfg.spark_worker_cores, cfg.spark_worker_memory) == (2, "2g")  # three slots' executors fit
    monkeypatch.setenv("LAGSCHED_SPARK_WORKER_CORES", "3")
    assert demo_config(load(), args(spark_cluster=True)).spark_worker_cores == 3
    with pytest.raises(ValueError, match="out of range"):
        demo_config(load(), args(celery_workers=0))


def test_kill_tree_takes_the_children_too_even_in_their_own_process_group() -> None:
    # A task runs in a process group of its own below the worker: signalling the worker's group
    # would miss it. The snapshot of the tree does not.
    parent = subprocess.Popen(["/bin/sh", "-c", "setsid sleep 300 & sleep 300 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(process_tree(parent.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = process_tree(parent.pid)
        assert len(tree) == 3 and tree[0] == parent.pid
        assert kill_tree(parent.pid, signal.SIGKILL) == tree
        parent.wait(5)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in tree[1:]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in tree[1:])
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
