"""The lagsched page in a real browser (Debian's chromium driven by Playwright): log into Airflow,
open the page from the navigation and directly, and find the seeded topic, slots and decisions in
its charts and tables. Saves a screenshot: into the test's temporary folder, or over the one the README shows
(docs/img/lagsched-page.png) with ``LAGSCHED_UPDATE_SCREENSHOT=1``, so a test run leaves the checkout clean.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lagsched_dev.airflow_api import PASSWORDS_FILE, AirflowAPI
from lagsched_dev.stack.config import StackConfig

from .test_ui import Seed, host_of, seed_cluster

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = Path(__file__).parents[2] / "docs" / "img" / "lagsched-page.png"
#: Generous: the first page load of a cold API server imports the app (seconds on 2 shared cores).
TIMEOUT_MS = 60_000


@pytest.fixture
def seeded(airflow: AirflowAPI, kafka_config: dict[str, Any], new_topic: Callable[..., str]) -> Iterator[Seed]:
    seed = seed_cluster(kafka_config, new_topic)
    yield seed
    for f in reversed(seed.cleanup):
        f()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium", pytrace=False)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def check_page(frame: Any, seed: Seed) -> None:
    """The seeded cluster's topic, slots, claims and decisions are on the page (a Page or a FrameLocator)."""
    from playwright.sync_api import expect

    row = frame.locator(f'#topics tr[data-topic="{seed.topic}"]')
    expect(row).to_be_visible(timeout=TIMEOUT_MS)
    expect(row.locator("td").nth(2)).to_have_text("240")  # lag at the newest measurement
    expect(row.locator("td").nth(7)).to_have_text("2")  # linker_workers after both decisions
    expect(row.locator("td").nth(9)).to_have_text("ok")
    # How old the row's figures are: the seed's measurement is seconds to minutes old (issue 17).
    expect(row.locator("td.age")).to_have_text(re.compile(r"^(just now|[0-9.]+ (s|min) ago)$"))
    # Its watermark: unknown ("-") until a partition commits a record or is read caught up, then its age.
    expect(row.locator("td.watermark")).to_have_text(re.compile(r"^(-|just now|.+ ago)$"))

    card = frame.locator(f'.chart-card[data-topic="{seed.topic}"]')
    expect(card.locator("svg.chart")).to_have_count(2)  # lag and time lag
    expect(card.locator('svg.chart[data-series="lag"] path.lag')).to_have_count(1)
    expect(card.locator('svg.chart[data-series="lag"] path.workers')).to_have_count(1)
    dots = card.locator('svg.chart[data-series="lag"] circle.decision')
    expect(dots).to_have_count(2)
    titles = [dots.nth(i).locator("title").text_content() for i in range(2)]
    assert [t.splitlines()[-1] for t in titles] == seed.reasons  # each decision's reason on hover

    for n, slot in enumerate(seed.slots):
        slot_row = frame.locator(f'#slots tr[data-slot="{slot}"]')
        expect(slot_row).to_contain_text(f"{seed.cluster}-slot-{n}")
        expect(slot_row).to_contain_text("live")
        expect(slot_row.locator("td.host")).to_have_text(host_of(n))
    first = frame.locator(f'#slots tr[data-slot="{seed.slots[0]}"]')
    expect(first.locator(".claim")).to_have_count(2)
    expect(first.locator(f'.claim[data-claim="{seed.topic}[0]"]')).to_contain_text("@100 until")
    expect(frame.locator(f'#slots tr[data-slot="{seed.slots[1]}"] .claim')).to_contain_text(
        f"{seed.topic}[2] @102 until"
    )
    for reason in seed.reasons:
        expect(frame.locator("#decisions")).to_contain_text(reason)
    expect(frame.locator("#stuck")).to_contain_text("none: every measured pipeline is moving")


def test_lagsched_page_in_airflow(
    browser: Any, airflow: AirflowAPI, stack: StackConfig, seeded: Seed, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    password = json.loads((stack.airflow_home / PASSWORDS_FILE).read_text())["admin"]
    context = browser.new_context(viewport={"width": 1440, "height": 1500})
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{airflow.base_url}/", timeout=TIMEOUT_MS)
        page.fill("input[name=username]", "admin", timeout=TIMEOUT_MS)
        page.fill("input[name=password]", password)
        page.keyboard.press("Enter")
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=TIMEOUT_MS)

        # From Airflow's navigation: the page renders inside Airflow, logged in by its cookie.
        page.locator('a[href$="/plugin/lagsched"]').click(timeout=TIMEOUT_MS)
        page.wait_for_url("**/plugin/lagsched", timeout=TIMEOUT_MS)
        # The nav icon stands out from its entry's background, also when selected (issue 17: blank).
        assert icon_contrast(page) >= 40, "the lagsched nav icon is lost in its background"
        frame = page.frame_locator("iframe")
        expect(frame.locator("body[data-loaded='1']")).to_have_count(1, timeout=TIMEOUT_MS)
        frame.locator("#cluster").select_option(seeded.cluster)
        check_page(frame, seeded)
        # Hovering a decision's dot shows its reason next to the pointer.
        frame.locator(f'.chart-card[data-topic="{seeded.topic}"] circle.decision').first.hover()
        expect(frame.locator("#tip")).to_be_visible()
        expect(frame.locator("#tip")).to_contain_text(seeded.reasons[0])
        shot = SCREENSHOT if os.environ.get("LAGSCHED_UPDATE_SCREENSHOT") == "1" else tmp_path / SCREENSHOT.name
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000  # a rendered page, not an empty image

        # Directly, with the cluster in the address (what a bookmark or a link from a runbook does).
        page.goto(f"{airflow.base_url}/lagsched/?cluster={seeded.cluster}", timeout=TIMEOUT_MS)
        expect(page.locator("body[data-loaded='1']")).to_have_count(1, timeout=TIMEOUT_MS)
        check_page(page, seeded)
        expect(page.locator("#error")).to_be_hidden()
    finally:
        context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def icon_contrast(page: Any) -> int:
    """Pixels of the lagsched nav icon, drawn over its link's own background colour, that differ
    from that colour by a clear margin (the icon is an <img>: it cannot take the nav's text colour)."""
    return int(
        page.evaluate(
            """async () => {
              const img = document.querySelector('a[href$="/plugin/lagsched"] img');
              if (!img) return -1;
              await img.decode();
              let el = img.parentElement, bg = 'rgba(0, 0, 0, 0)';
              while (el && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent')) {
                bg = getComputedStyle(el).backgroundColor; el = el.parentElement;
              }
              const c = document.createElement('canvas'); c.width = c.height = 48;
              const x = c.getContext('2d');
              // The canvas turns the CSS colour (Airflow's are oklch) into RGB.
              x.fillStyle = bg; x.fillRect(0, 0, 48, 48);
              const [r, g, b] = x.getImageData(0, 0, 1, 1).data;
              x.drawImage(img, 0, 0, 48, 48);
              const d = x.getImageData(0, 0, 48, 48).data;
              let n = 0;
              for (let i = 0; i < d.length; i += 4) {
                if (Math.abs(d[i] - r) + Math.abs(d[i + 1] - g) + Math.abs(d[i + 2] - b) > 200) n++;
              }
              return n;
            }"""
        )
    )


def test_the_page_refuses_a_browser_that_is_not_logged_in(browser: Any, airflow: AirflowAPI) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(f"{airflow.base_url}/lagsched/", timeout=TIMEOUT_MS)
        assert response is not None and response.status == 401
        assert "lagsched" not in (page.title() or "")
    finally:
        context.close()
