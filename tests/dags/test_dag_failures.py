"""DAG runs with a broken Connection fail at the first try, naming the Connection; and dag.test()
runs land in the session's own metadata DB, never in the stack's (a running scheduler's)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

DAGS = Path(__file__).parents[2] / "dags"


def load_dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / f"{dag_id}.py"))
    assert bag.import_errors == {}
    return bag.get_dag(dag_id)


def short(state: Any) -> str:
    return str(state).rsplit(".", 1)[-1].lower()


def tries(run: Any) -> dict[str, tuple[str, int]]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: (short(ti.state), ti.try_number) for ti in run.get_task_instances(session=session)}


def test_wrong_mysql_password_fails_the_setup_dag_at_the_first_try(
    empty_mysql_db: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    db = empty_mysql_db
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAGSCHED_MYSQL",
        json.dumps({"conn_type": "mysql", "host": db.host, "port": db.port, "login": db.user,
                    "password": "not-the-password", "schema": db.database}),
    )  # fmt: skip
    started = time.monotonic()
    run = load_dag("lagsched_setup").test()
    elapsed = time.monotonic() - started

    assert short(run.state) == "failed"
    states = tries(run)
    assert states["migrate_schema"] == ("failed", 1), states  # not up_for_retry, no second try
    assert states["check_kafka"][0] == states["check_redis"][0] == "success", states
    out, err = capfd.readouterr()
    log = out + err
    assert f"AirflowFailException: Connection 'lagsched_mysql' ({db.host}:{db.port}, user {db.user}, " in log, log[
        -3000:
    ]
    assert "not-the-password" not in log
    # Before: two retries 10 s apart on top of the failures (35-80 s in a scheduler). dag.test()
    # itself costs a few seconds; a retry would add at least its 10 s delay.
    assert elapsed < 30, elapsed


def stack_airflow_db() -> Path:
    from lagsched_dev.stack.config import load

    return load().airflow_home / "airflow.db"


def test_dag_test_runs_stay_out_of_the_stack_metadata_db(
    airflow_metadata_db: str, stack: Any, mysql_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler running on the stack's DB would take a dag.test() run over; so never share it."""
    from airflow import settings

    ours = Path(str(settings.engine.url.database))
    assert ours.resolve() != stack_airflow_db().resolve()
    assert str(settings.engine.url) == airflow_metadata_db

    db = mysql_db
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAGSCHED_MYSQL",
        json.dumps({"conn_type": "mysql", "host": db.host, "port": db.port, "login": db.user,
                    "password": db.password, "schema": db.database}),
    )  # fmt: skip
    run = load_dag("lagsched_setup").test()
    assert short(run.state) == "success"

    def run_ids(path: Path) -> set[str]:
        if not path.exists():
            return set()
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return {r[0] for r in conn.execute("SELECT run_id FROM dag_run WHERE dag_id = 'lagsched_setup'")}

    assert run.run_id in run_ids(ours)
    assert run.run_id not in run_ids(stack_airflow_db())
