"""Every DAG imports without error, fast, documents itself, and does no I/O at parse time."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DAGS = Path(__file__).parents[2] / "dags"
#: The issue's bar: all DAG files together parse in under 2 s.
PARSE_BUDGET_S = 2.0
#: The DAG set (I5); lagsched_override is H3's and joins when its file exists.
EXPECTED = {
    "lagsched_setup",
    "lagsched_topic_sync",
    "lagsched_lag_monitor",
    "lagsched_scaling_evaluator",
    "lagsched_consume",
    "lagsched_maintenance",
    "lagsched_table_care",
    "lagsched_replay",
}


class ParseTimeIO(AssertionError):
    """A DAG file did I/O while it was parsed."""


@pytest.fixture(scope="module")
def no_io() -> Iterator[list[str]]:
    """Parsing happens with the network, Variables and Connections refused; what was tried is listed."""
    tried: list[str] = []
    mp = pytest.MonkeyPatch()

    def refuse(what: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            tried.append(what)
            raise ParseTimeIO(f"a DAG file used {what} at parse time")

        return call

    mp.setattr(socket.socket, "connect", refuse("a network connection"))
    mp.setattr(socket, "create_connection", refuse("a network connection"))
    from airflow.sdk import BaseHook, Variable

    mp.setattr(Variable, "get", refuse("Variable.get"))
    mp.setattr(BaseHook, "get_connection", refuse("BaseHook.get_connection"))
    yield tried
    mp.undo()


@pytest.fixture(scope="module")
def parsed(no_io: list[str]) -> tuple[Any, float]:
    """The DagBag of dags/ and how long filling it took (Airflow itself is imported beforehand)."""
    # Airflow itself (the task SDK) is loaded in the DAG processor before it parses anything;
    # everything a DAG file imports beyond it (the Spark provider, lagsched) is on the clock.
    import airflow.sdk  # noqa: F401
    from airflow.dag_processing.dagbag import DagBag

    started = time.perf_counter()
    bag = DagBag(dag_folder=str(DAGS))
    return bag, time.perf_counter() - started


def test_no_import_errors_and_every_dag_of_the_set(parsed: tuple[Any, float]) -> None:
    bag, _ = parsed
    assert bag.import_errors == {}
    expected = EXPECTED | ({"lagsched_override"} if (DAGS / "lagsched_override.py").exists() else set())
    assert expected <= set(bag.dag_ids), sorted(expected - set(bag.dag_ids))


def test_all_dags_parse_in_under_two_seconds(parsed: tuple[Any, float]) -> None:
    bag, elapsed = parsed
    per_file = {Path(s.file).name: round(s.duration.total_seconds(), 3) for s in bag.dagbag_stats}
    assert elapsed < PARSE_BUDGET_S, f"parsing dags/ took {elapsed:.2f} s (budget {PARSE_BUDGET_S} s): {per_file}"


def test_no_io_at_parse_time(parsed: tuple[Any, float], no_io: list[str]) -> None:
    assert no_io == [], f"DAG files did I/O at parse time: {sorted(set(no_io))}"


def test_every_dag_is_documented_tagged_and_retried(parsed: tuple[Any, float]) -> None:
    bag, _ = parsed
    # bag.dags, not get_dag(): the integrity check must not need Airflow's metadata DB.
    for dag_id, dag in bag.dags.items():
        assert dag_id.startswith("lagsched_"), dag_id
        assert dag.doc_md and len(dag.doc_md) > 80, f"{dag_id} needs doc_md"
        assert "lagsched" in dag.tags, dag_id
        for t in dag.tasks:
            assert t.retries >= 1, f"{dag_id}.{t.task_id} has no retries"


def test_evaluator_runs_on_the_asset_the_monitor_updates(parsed: tuple[Any, float]) -> None:
    bag, _ = parsed
    monitor, evaluator = bag.dags["lagsched_lag_monitor"], bag.dags["lagsched_scaling_evaluator"]
    outlets = {a.uri for a in monitor.get_task("measure_lag").outlets}
    assert outlets == {"lagsched://lag/measured"}
    assert {a.uri for a in evaluator.timetable.asset_condition.objects} == outlets


def test_consume_runs_on_scaling_and_slot_ends_with_a_refill_schedule_pooled_and_mapped(
    parsed: tuple[Any, float],
) -> None:
    bag, _ = parsed
    dag, evaluator, override = (
        bag.dags["lagsched_consume"], bag.dags["lagsched_scaling_evaluator"], bag.dags["lagsched_override"]
    )  # fmt: skip
    assert type(dag.timetable).__name__ == "AssetOrTimeSchedule"
    # Runs hold long-lived slots: later runs (a scale-up's) must not queue behind them.
    assert dag.max_active_runs > 1
    assert dag.is_paused_upon_creation is True  # consuming starts when someone unpauses it
    slot = dag.get_task("consume")
    assert type(slot).__name__ == "MappedOperator"
    assert slot.pool == "lagsched_consume"
    assert slot.partial_kwargs.get("retries", dag.default_args["retries"]) >= 1
    assert set(dag.params) >= {"cluster", "budget_s"}
    triggers = {a.uri for a in dag.timetable.asset_condition.objects}
    # It runs on what the evaluator and overrides announce, and on its own slots' ends.
    announced = {a.uri for a in evaluator.get_task("announce_changes").outlets}
    assert announced == {a.uri for a in override.get_task("apply_override").outlets}
    assert triggers == announced | {a.uri for a in slot.outlets}
    assert len(triggers) == 2
