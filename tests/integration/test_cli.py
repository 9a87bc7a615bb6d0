"""The `lagsched` and `lagsched-dev` commands through their installed entry points, against the real
stack's services."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lagsched.adapters.lag_store import LagRecord, LagStore
from lagsched.adapters.topics import apply_sync
from lagsched.adapters.worker_changes import apply_change, create_override
from lagsched.core.evaluator import Decision
from lagsched.core.registry import BrokerTopic, plan_sync

REPO = Path(__file__).resolve().parents[2]
LAGSCHED = str(Path(sys.executable).parent / "lagsched")
LAGSCHED_DEV = str(Path(sys.executable).parent / "lagsched-dev")
SUBCOMMANDS = ("status", "override")
DEV_SUBCOMMANDS = ("simulate", "bench", "demo", "stack", "kafka-tool", "loadgen")


def run(command: str, *args: str, env: dict[str, str] | None, timeout: float) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "plugins"), **(env or {})}
    return subprocess.run([command, *args], env=full_env, capture_output=True, text=True, timeout=timeout, check=False)


def lagsched(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run(LAGSCHED, *args, env=env, timeout=timeout)


def lagsched_dev(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return run(LAGSCHED_DEV, *args, env=env, timeout=timeout)


@pytest.fixture
def connections(mysql_db: Any) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` for this test's database and Redis DB (never the stack's own)."""
    redis_db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    from lagsched.connections import redis_params

    r = redis_params()
    mysql = {
        "conn_type": "mysql",
        "host": mysql_db.host,
        "port": mysql_db.port,
        "login": mysql_db.user,
        "password": mysql_db.password,
        "schema": mysql_db.database,
    }
    redis = {"conn_type": "redis", "host": r.host, "port": r.port, "extra": {"db": redis_db}}
    return {"AIRFLOW_CONN_LAGSCHED_MYSQL": json.dumps(mysql), "AIRFLOW_CONN_LAGSCHED_REDIS": json.dumps(redis)}


def test_help_lists_every_subcommand() -> None:
    done = lagsched("--help")
    assert done.returncode == 0, done.stderr
    for name in SUBCOMMANDS:
        assert name in done.stdout, name
    dev = lagsched_dev("--help")
    assert dev.returncode == 0, dev.stderr
    for name in DEV_SUBCOMMANDS:
        assert name in dev.stdout, name


def test_the_runtime_command_offers_no_developer_tool() -> None:
    done = lagsched("stack", "status")
    assert done.returncode == 2
    assert "invalid choice: 'stack'" in done.stderr


@pytest.mark.parametrize(
    ("command", "subcommand", "option"),
    [(lagsched_dev, "demo", "--duration"), (lagsched_dev, "loadgen", "--peak-rate"), (lagsched, "status", "--json")],
)
def test_each_delegated_subcommand_has_its_modules_options(command: Any, subcommand: str, option: str) -> None:
    done = command(subcommand, "--help")
    assert done.returncode == 0, done.stderr
    assert option in done.stdout


def test_status_shows_the_registry_lag_and_decisions(
    db: Any, redis_client: Any, cluster: str, connections: dict[str, str]
) -> None:
    now = time.time()
    applied = apply_sync(db, cluster, lambda rows: plan_sync(rows, [BrokerTopic("orders", 3), BrokerTopic("idle", 1)]))
    orders = applied.topic_ids["orders"]
    LagStore(redis_client, cluster).add_lag_records(
        {"orders": LagRecord(at=now - 5, lag=4321, lost=0, time_lag_s=12.5, ingress_rate=3.0, consumption_rate=1.0)}
    )
    d = Decision("orders", 1, 2, 4321, 3.0, 1.0, 0.9, "keda", "keda_target", "ceil(lag 4321 / 2000) = 3", now - 30)
    assert apply_change(db, cluster=cluster, evaluation_id="eval-cli", topic_id=orders, d=d)[0] == "applied"

    done = lagsched("status", "--cluster", cluster, "--json", env=connections)
    assert done.returncode == 0, done.stderr
    assert " INFO " not in done.stderr  # Airflow's start-up chatter ("Reading the config from ...") stays quiet
    status = json.loads(done.stdout)
    topics = {t["name"]: t for t in status["topics"]}
    assert set(topics) == {"orders", "idle"}
    assert topics["orders"]["lag"] == 4321
    assert topics["orders"]["linker_workers"] == 2
    assert topics["idle"]["lag"] is None  # never measured
    assert [(x["topic"], x["previous_linker_workers"], x["linker_workers"]) for x in status["decisions"]] == [
        ("orders", 1, 2)
    ]


def test_status_names_the_connection_it_cannot_reach(connections: dict[str, str]) -> None:
    broken = {**connections, "AIRFLOW_CONN_LAGSCHED_MYSQL": connections["AIRFLOW_CONN_LAGSCHED_MYSQL"].replace(
        '"password": "', '"password": "wrong-'
    )}  # fmt: skip
    done = lagsched("status", "--cluster", "c-none", env=broken)
    assert done.returncode == 2
    assert "lagsched_mysql" in done.stderr
    assert "wrong-" not in done.stderr + done.stdout  # never the password


def test_bench_refuses_an_unknown_benchmark_without_running_any() -> None:
    done = lagsched_dev("bench", "lagsched_dev.bench.nope")
    assert done.returncode == 2
    assert "unknown benchmark(s) lagsched_dev.bench.nope" in done.stdout
    assert "lagsched_dev.bench.assignment" in done.stdout  # the choices are listed


def test_stack_status_reports_the_running_services(stack: Any) -> None:
    done = lagsched_dev("stack", "status")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("kafka", "mariadb", "redis"):
        assert any(line.startswith(name) and "healthy" in line for line in done.stdout.splitlines()), name


def test_override_lists_what_was_pinned(db: Any, cluster: str, connections: dict[str, str]) -> None:
    apply_sync(db, cluster, lambda rows: plan_sync(rows, [BrokerTopic("orders", 4)]))
    create_override(
        db, cluster=cluster, topic="orders", linker_workers=3, duration_s=3600, reason="black friday",
        created_by="ops", now=datetime.now(UTC),
    )  # fmt: skip
    done = lagsched("override", "--list", "--cluster", cluster, "--json", env=connections)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert (row["topic"], row["linker_workers"], row["reason"]) == ("orders", 3, "black friday")


def test_only_the_chosen_subcommands_module_is_imported() -> None:
    from lagsched import cli

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    # Not chosen: never imported, so a module that is missing or broken costs the others nothing.
    cli.add_delegated(sub, "other", "lagsched.not_written_yet", "status", help="y")
    cli.add_delegated(sub, "status", "lagsched.cli.status", "status", help="x")
    args = parser.parse_args(["status", "--json"])
    assert args.json is True and callable(args.func)
    with pytest.raises(ModuleNotFoundError):
        cli.add_delegated(sub, "later", "lagsched.not_written_yet", "later", help="z")
