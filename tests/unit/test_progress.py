"""The progress helper: a redrawn bar on a terminal, throttled plain lines elsewhere."""

from __future__ import annotations

import io

import pytest

from lagsched_dev.progress import Progress, bar, format_duration, render


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (59.9, "59 s"), (60, "1 min 00 s"), (3599, "59 min 59 s"), (3600, "1 h 00 min"), (-3, "0 s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_bar_fills_in_proportion_and_clamps() -> None:
    assert bar(0, 10, width=10) == "[" + "." * 10 + "]"
    assert bar(5, 10, width=10) == "[" + "#" * 5 + "." * 5 + "]"
    assert bar(-1, 10, width=4) == "[....]"
    assert bar(20, 10, width=4) == "[####]"
    assert bar(3, 0, width=4) == "[....]"  # an unknown total is no division by zero


def test_render_with_and_without_a_total() -> None:
    assert render("jars", 6, 12, 3, detail="a.jar") == f"jars {bar(6, 12)} 6/12 50% 3 s  a.jar"
    assert render("up", 0, None, 125, tick=2) == "up - 2 min 05 s"
    assert render("up", 0, None, 125, tick=-1, detail="kafka") == "up: 2 min 05 s  kafka"
    assert render("sent", 1500.5, 3000, 0) == f"sent {bar(1, 2)} 1,500.5/3,000 50% 0 s"


def test_log_mode_prints_start_throttled_updates_and_the_end() -> None:
    clock, out = FakeClock(), io.StringIO()
    with Progress("fetching", total=4, stream=out, log_every_s=10, clock=clock) as p:
        p.advance()  # right after the start line: throttled
        clock.now += 3
        p.advance()  # 3 s later: throttled
        clock.now += 10
        p.advance(detail="c.jar")
        p.note("kafka up")
        clock.now += 10
        p.total = None
        p.update(detail="waiting")  # no total: no spinner in a log, the label and the time
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0] == "fetching ..."
    assert lines[1].startswith("fetching [") and " 3/4 75% 13 s  c.jar" in lines[1]
    assert lines[2] == "kafka up"
    assert lines[3] == "fetching: 23 s  waiting"
    assert lines[4] == "fetching: done in 23 s  waiting"
    assert len(lines) == 5


def test_terminal_mode_redraws_one_line_and_ends_it() -> None:
    clock, out = FakeClock(), Terminal()
    with Progress("starting", stream=out, clock=clock) as p:
        clock.now += 61
        p.update(detail="redis")
        p.note("redis up")
    text = out.getvalue()
    assert text.count("\n") == 2  # the note and the final line; every redraw is a carriage return
    assert "\rstarting / 1 min 01 s  redis" in text
    assert text.endswith("starting: done in 1 min 01 s  redis\n")


def test_a_failing_step_says_failed() -> None:
    out = io.StringIO()
    with pytest.raises(RuntimeError), Progress("migrating", stream=out, clock=FakeClock()):
        raise RuntimeError("boom")
    assert out.getvalue().splitlines()[-1] == "migrating: failed in 0 s"
