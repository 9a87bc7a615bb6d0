"""A measurement and a registry sync pause Python's cycle collector and restore it as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from lagsched.adapters.gc_pause import cyclic_gc_paused


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_collector_is_off_inside_and_as_before_after(enabled_before: bool) -> None:
    (gc.enable if enabled_before else gc.disable)()
    with cyclic_gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled_before


def test_a_failed_measurement_turns_the_collector_back_on() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), cyclic_gc_paused():
        raise RuntimeError("broker down")
    assert gc.isenabled()


def test_a_measurement_runs_with_the_collector_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from lagsched.workflows import lag_monitor

    seen: list[bool] = []

    def registry_read(*_: object) -> dict[str, object]:
        seen.append(gc.isenabled())
        raise ConnectionError("MySQL down")

    monkeypatch.setattr(lag_monitor, "_load_registered", registry_read)
    gc.enable()
    with pytest.raises(ConnectionError):
        epoch = datetime.fromtimestamp(0, tz=UTC)
        lag_monitor.measure("c1", mysql=None, admin=None, store=None, settings=None, now=epoch)  # type: ignore[arg-type]
    assert seen == [False]
    assert gc.isenabled()


def test_a_sync_runs_with_the_collector_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from lagsched.workflows import topic_sync

    seen: list[bool] = []

    def broker_read(*_: object) -> None:
        seen.append(gc.isenabled())
        raise ConnectionError("broker down")

    monkeypatch.setattr(topic_sync, "fetch_broker_topics", broker_read)
    gc.enable()
    with pytest.raises(ConnectionError):
        topic_sync.sync_registry(None, None, "c1")
    assert seen == [False]
    assert gc.isenabled()
