"""The status read model's pure rules: Prometheus text, the workers step line, anomalies, states."""

from __future__ import annotations

import ast
import json
import math
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lagsched.core.claims import PartitionRow
from lagsched.core.decisions import EXAMPLE, DecisionRow
from lagsched.core.lag import OffsetSample
from lagsched.core.status import (
    MeasuredOffsets,
    Metric,
    PartitionLine,
    TopicView,
    escape_label_value,
    find_anomalies,
    linker_workers_steps,
    measured_offsets,
    partition_figures,
    render_prometheus,
    topic_state,
)


def test_prometheus_text_escapes_label_values_and_help() -> None:
    text = render_prometheus(
        [
            Metric(
                "lagsched_topic_lag_records",
                "Records behind\\ per topic\nsecond line.",
                "gauge",
                (({"topic": 'we"ird\\name\nx', "cluster": "c1"}, 12.0),),
            )
        ]
    )
    assert text == (
        "# HELP lagsched_topic_lag_records Records behind\\\\ per topic\\nsecond line.\n"
        "# TYPE lagsched_topic_lag_records gauge\n"
        'lagsched_topic_lag_records{cluster="c1",topic="we\\"ird\\\\name\\nx"} 12\n'
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (3.0, "3"),
        (0.25, "0.25"),
        (-2.0, "-2"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (1e20, "1e+20"),
    ],
)
def test_prometheus_values(value: float, shown: str) -> None:
    line = render_prometheus([Metric("x", "h", "gauge", (({}, value),))]).splitlines()[-1]
    assert line == f"x {shown}"


def test_a_family_without_samples_still_declares_itself() -> None:
    assert render_prometheus([Metric("lagsched_live_slots", "Live.", "gauge", ())]) == (
        "# HELP lagsched_live_slots Live.\n# TYPE lagsched_live_slots gauge\n"
    )
    assert render_prometheus([]) == ""


@pytest.mark.parametrize(
    ("name", "labels", "kind"),
    [("1bad", {}, "gauge"), ("bad-name", {}, "gauge"), ("ok", {"bad-label": "v"}, "gauge"),
     ("ok", {"__x": "v"}, "gauge"), ("ok", {}, "histogram")],
)  # fmt: skip
def test_illegal_metrics_are_refused(name: str, labels: dict[str, str], kind: str) -> None:
    with pytest.raises(ValueError, match=r"Prometheus|kind"):
        Metric(name, "h", kind, ((labels, 1.0),))


def test_escape_label_value_round_trips_through_a_parser() -> None:
    raw = 'a\\b"c\nd'
    escaped = escape_label_value(raw)
    assert "\n" not in escaped
    # Unescape the way Prometheus's text parser does.
    out, i = [], 0
    while i < len(escaped):
        if escaped[i] == "\\":
            out.append({"n": "\n", "\\": "\\", '"': '"'}[escaped[i + 1]])
            i += 2
        else:
            out.append(escaped[i])
            i += 1
    assert "".join(out) == raw


def decision(i: int, at: float, old: int, new: int, reason: str = "why") -> DecisionRow:
    return replace(
        EXAMPLE, decision_id=i, decided_at=at, previous_linker_workers=old, linker_workers=new, reason=reason
    )


@pytest.mark.parametrize(
    ("decisions", "current", "expected"),
    [
        # no decision at all: flat at the current value
        ([], 2, [(0.0, 2), (100.0, 2)]),
        # one inside the window: starts at its old value, steps to its new one
        ([decision(1, 50.0, 1, 3)], 3, [(0.0, 1), (50.0, 3), (100.0, 3)]),
        # one before the window: starts at its new value
        ([decision(1, -10.0, 1, 4)], 4, [(0.0, 4), (100.0, 4)]),
        # unordered input, two inside and one before
        ([decision(3, 80.0, 5, 2), decision(1, -5.0, 1, 3), decision(2, 40.0, 3, 5)], 2,
         [(0.0, 3), (40.0, 5), (80.0, 2), (100.0, 2)]),
        # changed by hand since the last decision: the line ends at the registry's value
        ([decision(1, 50.0, 1, 3)], 6, [(0.0, 1), (50.0, 3), (100.0, 6)]),
        # a decision exactly at the end: no duplicate end point
        ([decision(1, 100.0, 2, 3)], 3, [(0.0, 2), (100.0, 3)]),
        # a window that ends before a later decision shows the value that decision replaced
        ([decision(1, 150.0, 2, 3)], 3, [(0.0, 2), (100.0, 2)]),
    ],
)  # fmt: skip
def test_workers_steps(decisions: list[DecisionRow], current: int, expected: list[tuple[float, int]]) -> None:
    steps = linker_workers_steps(decisions, current, 0.0, 100.0)
    assert [(s.at, s.linker_workers) for s in steps] == expected


def test_workers_steps_carry_the_reason_of_each_decision() -> None:
    steps = linker_workers_steps([decision(7, 30.0, 1, 2, "lag 5000 above max_lag")], 2, 0.0, 60.0)
    assert steps[1].reason == "lag 5000 above max_lag"
    assert steps[1].as_dict()["at"] == "1970-01-01T00:00:30+00:00"


def topic(name: str, *, partitions: int = 2, lost: int = 0, measured: float | None = 10.0) -> TopicView:
    return TopicView("id-" + name, name, partitions, 0, lost, 0.0, 0.0, 0.0, measured, 1, ())


def line(
    topic: str, partition_id: int, committed: int | None, holder: str | None, lease: datetime | None, live: bool
) -> PartitionLine:
    row = PartitionRow(
        "id-" + topic, partition_id, committed_offset=committed, claimed_by=holder, lease_expires_at=lease
    )
    return PartitionLine(topic, row, live)


def test_a_partition_line_as_json_keeps_its_keys() -> None:
    """The page and ``lagsched status --json`` read these keys: the line is the row plus its topic's name."""
    lease = datetime(2026, 11, 1, 12, 0, 30, 250000, tzinfo=UTC)
    row = PartitionRow(
        "id-c", 3, committed_offset=120, claimed_by="slot-a", claim_epoch=7, lease_expires_at=lease,
        pending_start=120, pending_end=180,
    )  # fmt: skip
    assert json.dumps(PartitionLine("c", row, live=True).as_dict()) == (
        '{"topic": "c", "partition": 3, "committed_offset": 120,'
        ' "lease_expires_at": "2026-11-01T12:00:30.250000+00:00", "live": true, "pending": [120, 180]}'
    )
    free = PartitionLine("c", PartitionRow("id-c", 0), live=False)
    assert json.dumps(free.as_dict()) == (
        '{"topic": "c", "partition": 0, "committed_offset": null, "lease_expires_at": null, "live": false,'
        ' "pending": null}'
    )


def test_anomalies_each_kind() -> None:
    topics = [topic("a", lost=7), topic("b", measured=None), topic("c")]
    measured = {("c", 0): MeasuredOffsets(10.0, 120, 100), ("c", 1): MeasuredOffsets(10.0, 50, 60)}
    lease = datetime.fromtimestamp(1000.0, tz=UTC)
    claims = [
        line("c", 1, 50, "slot-live", lease, True),
        line("c", 0, 120, "slot-dead", lease, True),
        line("a", 1, None, "slot-dead", lease, False),  # lease over: the row is free, nothing to flag
    ]
    found = [(a.kind, a.topic, a.partition) for a in find_anomalies(topics, measured, claims, ["slot-live"])]
    assert found == [
        ("lost_records", "a", None),
        ("not_measured", "b", None),
        ("offset_ahead", "c", 0),
        ("holder_not_live", "c", 0),
    ]


def test_offset_ahead_names_the_numbers_and_the_measurement() -> None:
    [a] = find_anomalies([topic("c", partitions=1)], {("c", 0): MeasuredOffsets(60.0, 120, 100)}, [], [])
    assert "120" in a.detail and "20 beyond" in a.detail and "100" in a.detail
    assert "1970-01-01T00:01:00+00:00" in a.detail and a.as_dict()["seen_at"] == "1970-01-01T00:01:00+00:00"


def test_no_anomaly_when_all_is_well() -> None:
    assert find_anomalies([topic("c")], {("c", 0): MeasuredOffsets(10.0, 10, 10)}, [], []) == []


def test_a_consumer_ahead_of_an_older_watermark_is_not_ahead() -> None:
    """The page's false alarm (issue 17): MySQL's committed offset now against a minute-old watermark.

    The measurement at 60 s read committed 480 and then the watermark 500; by 100 s the consumer had
    committed 520. The readings of one moment are compared (480 <= 500): nothing to flag.
    """
    latest = [OffsetSample(0.0, 300), OffsetSample(60.0, 500)]
    committed = [OffsetSample(0.0, 290), OffsetSample(60.0, 480)]
    m = measured_offsets(latest, committed)
    assert m == MeasuredOffsets(60.0, 480, 500)
    assert find_anomalies([topic("c", partitions=1)], {("c", 0): m}, [], []) == []


def test_readings_of_different_measurements_are_not_compared() -> None:
    # The newest measurement found no committed offset (its sample is the earlier one): no pair.
    assert measured_offsets([OffsetSample(60.0, 10)], [OffsetSample(0.0, 900)]) is None
    assert measured_offsets([], [OffsetSample(0.0, 1)]) is None
    assert measured_offsets([OffsetSample(0.0, 1)], []) is None


@pytest.mark.parametrize(("recorded", "shown"), [(None, "ok"), ("ok", "ok"), ("stalled", "stalled"),
                                                 ("stopped", "stopped"), ("", "ok"), ("STALLED", "ok")])  # fmt: skip
def test_topic_state(recorded: str | None, shown: str) -> None:
    assert topic_state(recorded) == shown


def test_partition_figures_from_windows() -> None:
    latest = [OffsetSample(0.0, 0), OffsetSample(60.0, 600), OffsetSample(120.0, 1200)]
    committed = [OffsetSample(0.0, 0), OffsetSample(120.0, 300)]
    f = partition_figures("t", 3, latest, committed)
    assert f is not None
    assert (f.lag, f.latest, f.committed, f.at) == (900, 1200, 300, 120.0)
    assert f.time_lag_s == pytest.approx(90.0)  # offset 300 was the head at t=30
    assert partition_figures("t", 3, latest, []) is None  # nothing committed: no guess
    assert partition_figures("t", 3, [], committed) is None


def test_partition_figures_never_negative() -> None:
    f = partition_figures("t", 0, [OffsetSample(5.0, 10)], [OffsetSample(5.0, 15)])
    assert f is not None and f.lag == 0 and f.time_lag_s == 0.0


STATUS_QUERIES = Path(__file__).parents[2] / "plugins" / "lagsched" / "adapters" / "status_queries.py"


def test_status_queries_only_read() -> None:
    """The read model joins other repositories' tables, so it must never write them."""
    tree = ast.parse(STATUS_QUERIES.read_text())
    strings = [n.value.upper() for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    sql = [s for s in strings if "SELECT " in s or " FROM " in s]
    assert sql, "the check would pass vacuously: no SQL found"
    for word in ("INSERT ", "UPDATE ", "DELETE ", "REPLACE ", "FOR UPDATE", "ALTER ", "DROP "):
        assert not [s for s in strings if word in s], f"status_queries.py writes: {word}"
