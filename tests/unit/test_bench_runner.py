"""``python -m lagsched_dev.bench``: which benchmarks run, and the flags that reach one (no benchmark runs here)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lagsched_dev.bench import __main__ as runner


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []

    def fake_import(name: str) -> Any:
        return SimpleNamespace(main=lambda args: calls.append((name, list(args))) or 0)

    monkeypatch.setattr(runner.importlib, "import_module", fake_import)
    return calls


def test_flags_after_one_benchmarks_name_reach_it(ran: list[tuple[str, list[str]]]) -> None:
    assert runner.main(["consumer", "--help"]) == 0
    assert ran == [("lagsched_dev.bench.consumer", ["--help"])]


def test_names_select_benchmarks_with_their_own_arguments(ran: list[tuple[str, list[str]]]) -> None:
    assert runner.main(["sink", "lagsched_dev.bench.decode"]) == 0
    assert ran == [("lagsched_dev.bench.sink", []), ("lagsched_dev.bench.decode", [])]


def test_flags_for_several_or_unknown_benchmarks_are_refused(
    ran: list[tuple[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert runner.main(["sink", "decode", "--draws", "3"]) == 2
    assert runner.main(["no_such_bench"]) == 2
    assert ran == []
    assert "name exactly one" in capsys.readouterr().err


def test_help_alone_lists_the_benchmarks(ran: list[tuple[str, list[str]]], capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "consumer" in out and "lagsched_dev.sim.__main__" in out and ran == []
