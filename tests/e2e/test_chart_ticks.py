"""The page's chart ticks (``lagsched/ui/static/ticks.js``) in a real browser: round values only.

Issue 17 saw axis labels like 3,221.75 and 9,665.25 (a quarter of the largest value times 1.1).
The tick code is loaded alone into Debian's chromium (no Airflow needed) and asked for the ticks of
the values the demo shows.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def ticks_page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)
    code = resources.files("lagsched.ui").joinpath("static", "ticks.js").read_text(encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_content("<!doctype html><title>ticks</title>")
        page.add_script_tag(content=code)
        yield page
        browser.close()


def is_one_two_five(step: float) -> bool:
    mantissa = f"{step:.6e}".split("e")[0]
    return mantissa in {"1.000000", "2.000000", "5.000000"}


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        (12_887, [0, 5000, 10000, 15000]),  # the demo's 3,221.75 axis
        (35_150, [0, 10000, 20000, 30000, 40000]),
        (240, [0, 100, 200, 300]),
        (1_000, [0, 500, 1000]),
        (7, [0, 2, 4, 6, 8]),
        (3, [0, 1, 2, 3]),  # whole records: never a 0.5 tick
        (0, [0, 1]),
    ],
)
def test_count_ticks_are_round(ticks_page: Any, top: float, expected: list[float]) -> None:
    assert ticks_page.evaluate("([m]) => lagschedTicks.valueTicks(m, 4, 1)", [top]) == expected


@pytest.mark.parametrize(
    "top", [1, 9, 11, 99, 101, 999, 1234, 3221.75 * 4 * 1.1, 9665.25 * 4, 77_777, 1_234_567, 9.9e8]
)
def test_count_ticks_cover_the_data_in_one_two_five_steps(ticks_page: Any, top: float) -> None:
    ticks = ticks_page.evaluate("([m]) => lagschedTicks.valueTicks(m, 4, 1)", [top])
    step = ticks[1] - ticks[0]
    assert ticks[0] == 0 and ticks[-1] >= top and ticks[-2] < top
    assert 2 <= len(ticks) <= 5
    assert is_one_two_five(step), ticks
    assert all(t == i * step for i, t in enumerate(ticks)), ticks  # evenly spaced, no float drift


@pytest.mark.parametrize(
    ("top", "labels"),
    [
        (42.0, ["0 s", "15 s", "30 s", "45 s"]),
        (100.0, ["0 s", "30 s", "60 s", "90 s", "120 s"]),
        (200.0, ["0 min", "1 min", "2 min", "3 min", "4 min"]),
        (1_000.0, ["0 min", "5 min", "10 min", "15 min", "20 min"]),
        (3_000.0, ["0 min", "15 min", "30 min", "45 min", "60 min"]),
        (20_000.0, ["0 h", "2 h", "4 h", "6 h"]),
        (0.3, ["0 s", "0.1 s", "0.2 s", "0.3 s"]),
        (0.0, ["0 s", "1 s"]),
    ],
)
def test_time_lag_ticks_are_clock_steps_in_one_unit(ticks_page: Any, top: float, labels: list[str]) -> None:
    got = ticks_page.evaluate("([m]) => lagschedTicks.formatTimeTicks(lagschedTicks.timeTicks(m, 4))", [top])
    assert got == labels
