"""The worker a slot names in its lock token, which the page shows as the slot's host."""

from __future__ import annotations

import socket

import pytest

from lagsched.adapters.slots import lock_token, token_worker, worker_name

pytestmark = pytest.mark.unit


def test_unset_it_is_the_machines_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAGSCHED_WORKER", raising=False)
    assert worker_name() == socket.gethostname()
    monkeypatch.setenv("LAGSCHED_WORKER", "  ")
    assert worker_name() == socket.gethostname()


def test_the_environment_names_the_worker_and_the_token_carries_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAGSCHED_WORKER", "lagsched-w2@box")
    token = lock_token()
    assert token_worker(token) == "lagsched-w2@box"
    worker, pid, rand = token.split(":")
    assert worker == "lagsched-w2@box"
    assert pid.isdigit() and len(rand) == 8


@pytest.mark.parametrize("bad", ["w1:box", "w\n1", "x" * 201])
def test_a_name_that_would_break_the_token_is_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("LAGSCHED_WORKER", bad)
    with pytest.raises(ValueError, match="LAGSCHED_WORKER"):
        worker_name()
