"""``/metrics`` by the book: a realistic scrape, rendered from the status model with no service,
passes ``promtool check metrics`` (base units in the names, ``_total`` only on counters, help on
every family), and every family is documented in docs/ui.md."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lagsched.core.status import (
    COUNTERS,
    METRIC_HELP,
    ClusterStatus,
    Metric,
    PartitionFigures,
    SlotView,
    TableCareRuns,
    TopicView,
    metric_families,
    render_prometheus,
)
from promtool_support import output, promtool

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_764_300_000.0


def topic(name: str, **changes: Any) -> TopicView:
    """A measured, healthy topic of three partitions, with ``changes``."""
    base = TopicView(
        topic_id="id-" + name,
        name=name,
        partitions=3,
        lag=1200,
        lost=0,
        time_lag_s=42.5,
        ingress_rate=310.0,
        consumption_rate=295.5,
        measured_at=NOW - 20.0,
        linker_workers=2,
        owners=("slot-a",),
        max_workers=3,
    )
    return replace(base, **changes)


def scrape() -> str:
    """Two clusters: measured, never measured, stalled, stopped, lossy and transaction-held topics, a
    live and a dead slot, per-partition figures, table commits and table care runs of every outcome,
    a planned slot count, and label values that need escaping."""
    a = ClusterStatus(
        "prod-eu",
        NOW,
        (
            topic("orders", owners=("slot-a", "slot-b")),
            topic("clicks", state="stalled", state_reason="no progress in 5 measurements", lost=1500),
            topic("payments", lag=0, time_lag_s=0.0, held_by_transaction=40, transaction_open_s=420.0),
            topic("new-topic", lag=None, measured_at=None, owners=()),
        ),
        (SlotView("slot-a", "prod-eu-slot-0", NOW - 3, True), SlotView("slot-b", None, NOW - 300, False)),
        (),
        planned_slots=2,
        table_commits={("lake.prod_eu", "ok"): 812, ("lake.prod_eu", "refused"): 2, ("lake.prod_eu", "error"): 1},
        table_care=(TableCareRuns("ok", 5, NOW - 600), TableCareRuns("failed", 1, NOW - 4000)),
        dead_letters={"orders": 3},
        late_records={"lagsched.kafka.orders": 7},
    )
    b = ClusterStatus("staging", NOW, (topic('odd"name\\x', state="stopped", owners=()),), (), ())
    figures = [PartitionFigures("orders", p, 10_000 + p, 9_400 + p, 600, 12.0 * p, NOW - 20.0) for p in range(3)]
    return render_prometheus(metric_families([(a, figures), (b, [])]))


def test_a_scrape_passes_promtool_check_metrics() -> None:
    text = scrape()
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), output(result)


def test_promtool_does_fail_a_family_off_the_book() -> None:
    # The check above is only worth something if promtool reads the text: an off-book name fails it.
    bad = Metric("lagsched_x_milliseconds", "Off the book.", "gauge", (({}, 1.0),))
    result = promtool("check", "metrics", stdin=render_prometheus([bad]))
    assert result.returncode != 0 and "base unit" in result.stdout + result.stderr, output(result)


def test_every_family_is_declared_with_help_once() -> None:
    text = scrape()
    declared = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert [name for name, _ in declared] == list(METRIC_HELP)
    assert {name for name, kind in declared if kind == "counter"} == COUNTERS
    assert {kind for name, kind in declared if name not in COUNTERS} == {"gauge"}
    assert all(name.endswith("_total") for name in COUNTERS)
    assert re.findall(r"^# HELP (\S+) \S", text, re.M) == list(METRIC_HELP)


def test_dead_letters_are_a_counter_per_topic_and_the_status_command_names_them() -> None:
    from lagsched.cli.status import format_status

    assert 'lagsched_dead_letters_total{cluster="prod-eu",topic="orders"} 3' in scrape()
    st = ClusterStatus("c", NOW, (), (), (), dead_letters={"orders": 1234})
    assert st.as_dict()["dead_letters"] == {"orders": 1234}
    assert "DEAD LETTERS orders: 1,234 record(s) in the dead-letter table" in format_status(st)


def test_late_records_are_a_counter_per_table_and_the_status_command_names_them() -> None:
    from lagsched.cli.status import format_status

    assert 'lagsched_late_records_total{cluster="prod-eu",table="lagsched.kafka.orders"} 7' in scrape()
    st = ClusterStatus("c", NOW, (), (), (), late_records={"lagsched.kafka.orders": 1234})
    assert st.as_dict()["late_records"] == {"lagsched.kafka.orders": 1234}
    assert "LATE RECORDS lagsched.kafka.orders: 1,234 record(s) landed in hours already complete" in format_status(st)
    assert "LATE RECORDS" not in format_status(ClusterStatus("c", NOW, (), (), ()))


def test_a_topic_never_measured_has_no_lag_figures() -> None:
    lines = [x for x in scrape().splitlines() if 'topic="new-topic"' in x]
    assert {x.split("{")[0] for x in lines} == {
        "lagsched_topic_linker_workers",
        "lagsched_topic_owners",
        "lagsched_topic_state",
        # Its thresholds are settings, known before any measurement: its alerts can be judged at once.
        "lagsched_topic_max_workers",
        "lagsched_topic_time_lag_slo_seconds",
        "lagsched_topic_open_transaction_bound_seconds",
        "lagsched_topic_watermark_slo_seconds",
    }


def test_every_family_is_documented() -> None:
    doc = (ROOT / "docs" / "ui.md").read_text()
    missing = [name for name in METRIC_HELP if f"`{name}`" not in doc]
    assert not missing, f"docs/ui.md does not list {missing}"
