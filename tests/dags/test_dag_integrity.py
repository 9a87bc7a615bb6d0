"""Every DAG imports without error, documents itself, and does no I/O at parse time."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

DAGS = Path(__file__).parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag(monkeypatch_module: Any) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


@pytest.fixture(scope="module")
def monkeypatch_module() -> Any:
    """Parsing happens with the network blocked: a DAG that connects at import fails here."""
    mp = pytest.MonkeyPatch()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a DAG file opened a network connection at parse time")

    mp.setattr(socket.socket, "connect", refuse)
    mp.setattr(socket, "create_connection", refuse)
    yield mp
    mp.undo()


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert dagbag.dag_ids, "no DAGs were found"


def test_every_dag_is_documented_tagged_and_retried(dagbag: Any) -> None:
    # dagbag.dags, not get_dag(): the integrity check must not need Airflow's metadata DB.
    for dag_id, dag in dagbag.dags.items():
        assert dag_id.startswith("lagsched_"), dag_id
        assert dag.doc_md and len(dag.doc_md) > 80, f"{dag_id} needs doc_md"
        assert "lagsched" in dag.tags, dag_id
        for t in dag.tasks:
            assert t.retries >= 1, f"{dag_id}.{t.task_id} has no retries"
