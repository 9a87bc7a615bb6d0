"""The demo's own logic: Variables merged without losing anyone's entries, the sink count behind the
exactly-once verdict, the profile and the load generator's arguments, the status line."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pytest

from lagsched.core.errors import ConfigError
from lagsched_dev.demo import (
    DEMO_ROUTES,
    DEMO_TOPIC_SETTINGS,
    Snapshot,
    _loadgen_argv,
    _profile,
    _slot_hosts,
    demo_lake,
    merge_clusters,
    merge_settings,
    sink_rows,
    status_line,
)
from lagsched_dev.loadgen import add_arguments as loadgen_arguments


def test_merge_settings_sets_the_demo_topics_and_keeps_everything_else() -> None:
    current = json.dumps(
        {
            "measure_every_s": 60,
            "defaults": {"max_workers": 8},
            "topics": {"orders": {"policy": "capacity"}, "demo.orders": {"min_workers": 2}},
        }
    )
    merged = json.loads(merge_settings(current, ["demo.orders", "demo.clicks"]))
    assert merged["measure_every_s"] == 60
    assert merged["defaults"] == {"max_workers": 8}
    assert merged["topics"]["orders"] == {"policy": "capacity"}
    assert merged["topics"]["demo.clicks"] == DEMO_TOPIC_SETTINGS
    # A field of the user's own the demo does not set stays.
    assert merged["topics"]["demo.orders"] == {"min_workers": 2, **DEMO_TOPIC_SETTINGS}
    assert json.loads(merge_settings(None, ["demo.a"]))["topics"] == {"demo.a": DEMO_TOPIC_SETTINGS}


def test_merge_settings_refuses_a_result_the_dags_would_reject() -> None:
    # A global sample window smaller than the demo's window: the DAGs would fail on it, so the demo does first.
    with pytest.raises(ConfigError, match="window"):
        merge_settings(json.dumps({"sample_window": 2}), ["demo.a"])


def test_merge_clusters_restricts_the_demo_cluster_and_keeps_the_others() -> None:
    merged = json.loads(merge_clusters(json.dumps({"eu": {"kafka_conn_id": "kafka_eu"}, "lagsched_kafka": {}})))
    assert merged["eu"] == {"kafka_conn_id": "kafka_eu"}
    assert merged["lagsched_kafka"] == {
        "topic_pattern": r"demo\..*",
        "max_slots": 3,
        "slot_max_rate": 500,
        "commit_interval_s": 5.0,
        "routes": DEMO_ROUTES,
    }
    assert set(json.loads(merge_clusters(None))) == {"lagsched_kafka"}
    # The routes are ones a slot accepts: orders and clicks get tables of their own, the rest the shared one.
    from lagsched.core.clusters import parse_clusters

    (cluster,) = parse_clusters({"lagsched_kafka": merged["lagsched_kafka"]})
    routed = cluster.routes_for(["demo.orders", "demo.clicks", "demo.payments"])
    assert {t: r and (r.namespace, r.table) for t, r in routed.items()} == {
        "demo.orders": ("demo", "orders"), "demo.clicks": ("demo", "clicks"), "demo.payments": None,
    }  # fmt: skip


def rows(*batches: tuple[str, int, int, int]) -> pa.Table:
    """A table's (topic, partition, offset) columns holding each ``(topic, partition, start, end)`` range."""
    topic: list[str] = []
    partition: list[int] = []
    offset: list[int] = []
    for t, p, start, end in batches:
        topic += [t] * (end - start)
        partition += [p] * (end - start)
        offset += list(range(start, end))
    return pa.table({"topic": topic, "partition": partition, "offset": offset})


def test_sink_rows_counts_only_the_consumed_ranges_and_sees_duplicates() -> None:
    ranges = {("demo.orders", 0): (50, 150), ("demo.orders", 1): (0, 40)}
    table = rows(
        ("demo.orders", 0, 0, 100),  # before this run's baseline (offset 50)
        ("demo.orders", 0, 100, 180),  # 150..180 were written, not committed
        ("demo.orders", 1, 0, 40),
        ("demo.other", 0, 0, 500),  # not a demo topic: never counted
    )
    assert sink_rows(table, ranges) == (140, 140)
    # The same range twice: more rows than distinct offsets.
    assert sink_rows(pa.concat_tables([table, rows(("demo.orders", 1, 0, 40))]), ranges) == (180, 140)


def test_the_demo_table_follows_the_clusters_variable(tmp_path: Path) -> None:
    from lagsched_dev.stack.config import load

    cfg = load()
    default = demo_lake(cfg, None)
    assert default.warehouse == f"file://{cfg.home}/warehouse"
    assert default.identifier == "lagsched.kafka.lagsched_kafka"
    mine = demo_lake(cfg, json.dumps({"lagsched_kafka": {"sink": {"warehouse": "s3a://lake/demo", "table": "t"}}}))
    assert (mine.warehouse, mine.table) == ("s3a://lake/demo", "t")


@pytest.mark.parametrize("duration", [None, 240.0, 600.0, 30.0])
def test_the_load_generator_gets_exactly_the_demos_profile(duration: float | None) -> None:
    import argparse

    loads = _profile(duration, 1234.0)
    argv = _loadgen_argv(loads, 1234.0, Path("/tmp/stats.json"))
    assert argv[1:3] == ["-m", "lagsched_dev.loadgen"]
    parser = argparse.ArgumentParser()
    loadgen_arguments(parser)
    args = parser.parse_args(argv[3:])
    from lagsched.core.load_profile import demo_profile

    rebuilt = demo_profile(
        peak_rate=args.peak_rate,
        ramp_at_s=args.ramp_at_s,
        ramp_s=args.ramp_s,
        hold_s=args.hold_s,
        fall_s=args.fall_s,
        prefix=args.prefix,
    )
    flat = [x for lt in loads for point in lt.points for x in point]
    assert [x for lt in rebuilt for point in lt.points for x in point] == pytest.approx(flat)
    assert [lt.topic for lt in rebuilt] == [lt.topic for lt in loads]
    # The hot topic is back to a trickle by 45 % of the run (270 s, the default profile, from 600 s
    # on), leaving time to drain and scale down.
    hot_ends = loads[0].points[-1][0]
    assert hot_ends == pytest.approx(270.0 if duration is None or duration >= 600 else 0.45 * max(duration, 60.0))


def test_status_line_marks_stuck_topics() -> None:
    snap = Snapshot(0.0, {"demo.orders": 1200}, {"demo.orders": 2}, {}, 1, {"demo.orders": "stalled"})
    assert status_line(61, snap, None) == "[ 1:01] orders lag 1,200 w2 STALLED | 1 live slot"


def test_the_demo_settings_scale_the_demo_profile_up_step_by_step_and_back_in_the_simulator() -> None:
    """The simulator check of the demo's settings: `make demo`'s hot topic, slots capped at the
    demo cluster's slot_max_rate, through the real evaluator with DEMO_TOPIC_SETTINGS. One slot
    cannot carry the peak, so the hevo policy steps 1 -> 2 -> 3 on the ramp (one worker a step: the
    topic keeps a week), drains, and comes back to 1 after it; nothing is lost."""
    from lagsched.core.config import TopicPolicyConfig
    from lagsched_dev.demo import DEMO_SLOT_MAX_RATE, DEMO_TOPIC_SETTINGS
    from lagsched_dev.sim.engine import simulate
    from lagsched_dev.sim.traces import TRACES

    trace = TRACES["demo"]
    assert trace.worker_rate == DEMO_SLOT_MAX_RATE
    assert max(trace.ingress()[1]) / trace.tick_s > 2 * DEMO_SLOT_MAX_RATE  # the peak needs 3 slots
    run = simulate(trace, TopicPolicyConfig(**DEMO_TOPIC_SETTINGS))
    workers = [int(w) for w in run.workers]
    changes = [(a, b) for a, b in itertools.pairwise(workers) if a != b]
    assert changes[:2] == [(1, 2), (2, 3)], workers
    assert workers[-1] == 1 and run.figures.records_lost == 0 and run.figures.final_lag == 0, run.figures
    # It reached 3 workers within the ramp's hold (the hot phase ends at 300 s).
    assert run.times[workers.index(3)] <= 360, workers


def test_the_summary_names_every_worker_each_slot_ran_on() -> None:
    def snap(hosts: dict[str, str]) -> Snapshot:
        return Snapshot(0.0, {}, {}, {}, len(hosts), slot_hosts=hosts)

    history = [
        snap({"slot-1": "lagsched-w1@vm"}),
        snap({"slot-1": "lagsched-w1@vm", "slot-2": "lagsched-w2@vm"}),
        snap({}),  # a reading while both were restarting
        snap({"slot-2": "lagsched-w1@vm"}),  # slot 2 came back on the other worker
    ]
    assert _slot_hosts(history) == {"slot-1": ["lagsched-w1@vm"], "slot-2": ["lagsched-w1@vm", "lagsched-w2@vm"]}
    assert _slot_hosts([]) == {}


def test_the_seeded_hours_are_the_three_before_the_demos_and_the_reader_is_the_docs_example(tmp_path: Path) -> None:
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from lagsched_dev.demo import HOUR_READER, _hours_lines, history_hours, install_hour_reader, remove_hour_reader

    started = datetime(2026, 12, 2, 14, 25, 7, tzinfo=UTC).timestamp()
    assert history_hours(started) == ["2026-12-02T11:00:00", "2026-12-02T12:00:00", "2026-12-02T13:00:00"]
    (tmp_path / "dags").mkdir()
    cfg = SimpleNamespace(repo=tmp_path)
    path = install_hour_reader(cfg)  # type: ignore[arg-type]
    text = path.read_text()
    assert path.name == f"{HOUR_READER}.py" and f"dag_id={HOUR_READER!r}" in text
    assert 'TABLE = "lagsched.kafka.lagsched_kafka"' in text  # the demo cluster's shared table
    remove_hour_reader(cfg)  # type: ignore[arg-type]
    assert not path.exists()
    event = {"rows": 120, "snapshot_id": 7, "valid_through": "2026-12-02T14:20:00.000+00:00"}
    lines = _hours_lines({"hours": {"2026-12-02T11:00:00": {"event": event, "read": {"read": 120}},
                                    "2026-12-02T12:00:00": {"event": None, "read": None}}})  # fmt: skip
    assert lines[1] == (
        "  2026-12-02T11:00:00: event: 120 row(s), snapshot 7, valid through 2026-12-02T14:20:00.000+00:00; "
        "read 120 row(s)"
    )
    assert lines[2] == "  2026-12-02T12:00:00: not announced yet"
