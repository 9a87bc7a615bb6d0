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


def test_setup_dag_succeeds_and_migrates(setup_dag: Any, mysql_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from lagsched.adapters.mysql import connect

    # Point the DAG's MySQL Connection at this test's own (empty) database.
    conn = connect(mysql_db)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE topic_partitions")
        cur.execute("DROP TABLE topics")
        cur.execute("DELETE FROM schema_migrations")
    conn.commit()
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAGSCHED_MYSQL",
        json.dumps({"conn_type": "mysql", "host": mysql_db.host, "port": mysql_db.port,
                    "login": mysql_db.user, "password": mysql_db.password, "schema": mysql_db.database}),
    )  # fmt: skip
    run = setup_dag.test()
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    with conn.cursor() as cur:
        cur.execute("SELECT name FROM schema_migrations ORDER BY version")
        assert [r[0] for r in cur.fetchall()] == ["topics_and_claims"]
        cur.execute("SHOW TABLES LIKE 'topic_partitions'")
        assert cur.fetchone() is not None
    conn.close()
