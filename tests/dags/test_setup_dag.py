"""The setup DAG runs in-process against the real stack with dag.test()."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

DAGS = Path(__file__).parents[2] / "dags"


@pytest.fixture
def setup_dag(stack: Any) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS / "lagsched_setup.py"))
    assert bag.import_errors == {}
    return bag.get_dag("lagsched_setup")


def test_setup_dag_succeeds_and_migrates(setup_dag: Any, empty_mysql_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from lagsched.adapters.migrations import discover
    from lagsched.adapters.mysql import connect

    db = empty_mysql_db
    # Point the DAG's MySQL Connection at this test's own empty database.
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAGSCHED_MYSQL",
        json.dumps(
            {"conn_type": "mysql", "host": db.host, "port": db.port, "login": db.user,
             "password": db.password, "schema": db.database}
        ),
    )  # fmt: skip
    run = setup_dag.test()
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    conn = connect(db)
    with conn.cursor() as cur:
        cur.execute("SELECT name FROM schema_migrations ORDER BY version")
        assert [r[0] for r in cur.fetchall()] == [m.name for m in discover()]
        cur.execute("SHOW TABLES LIKE 'topic_partitions'")
        assert cur.fetchone() is not None
    conn.close()
