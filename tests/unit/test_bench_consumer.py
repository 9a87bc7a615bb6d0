"""The consumer benchmark's own logic: the raw consumer's conversion and file cutting, and the arithmetic.

A benchmark that loses or repeats records, or divides the wrong times, reports nonsense; these pin
the pieces that need no broker.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Message

from lagsched_dev.bench.consumer import (
    CpuSnapshot,
    Knobs,
    check_sink,
    cpu_usage,
    env_int,
    knobs_from,
    parse_stats,
    reader_order,
    spark_figures,
    steady_from,
    summarize,
    thread_group,
    window_cpu,
)
from lagsched_dev.bench.raw_consumer import SCHEMA, PartitionFiles, batch_arrays, file_name, runs

DAY_MS = 86_400_000
T0 = 20_000 * DAY_MS  # 2024-10-04T00:00:00Z


def message(partition: int, offset: int, ts_ms: int = T0 + 1000, headers: Any = "default") -> Any:
    hdrs = [("trace-id", b"%d" % offset)] if headers == "default" else headers
    return Message(
        topic="t",
        partition=partition,
        offset=offset,
        key=b"k%d" % offset,
        value=b"v%d" % offset,
        headers=hdrs,
        timestamp=(1, ts_ms),
    )


# --------------------------------------------------------------------------- raw consumer


def test_batch_arrays_keeps_every_field_in_the_job_schema() -> None:
    msgs = [
        message(2, 10),
        message(2, 11, headers=None),
        message(0, 5, ts_ms=T0 + DAY_MS + 7, headers=[("a", b""), ("b", b"\x00")]),
    ]
    batch, parts, days = batch_arrays(msgs)
    assert batch.schema == SCHEMA
    rows = batch.to_pylist()
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == [
        (2, 10, b"k10", b"v10"),
        (2, 11, b"k11", b"v11"),
        (0, 5, b"k5", b"v5"),
    ]
    assert [r["headers"] for r in rows] == [
        [{"key": "trace-id", "value": b"10"}],
        None,
        [{"key": "a", "value": b""}, {"key": "b", "value": b"\x00"}],
    ]
    # Kafka's milliseconds become microseconds, UTC.
    assert batch.column(2).cast(pa.int64()).to_pylist() == [(T0 + 1000) * 1000] * 2 + [(T0 + DAY_MS + 7) * 1000]
    assert parts.tolist() == [2, 2, 0]
    assert days.tolist() == [20_000, 20_000, 20_001]


@pytest.mark.parametrize(
    ("parts", "days", "expected"),
    [
        ([], [], []),
        ([3], [1], [(0, 1)]),
        ([1, 1, 1], [5, 5, 5], [(0, 3)]),
        ([0, 1, 0, 1], [5, 5, 5, 5], [(0, 1), (1, 2), (2, 3), (3, 4)]),
        ([0, 0, 0, 0], [5, 5, 6, 6], [(0, 2), (2, 4)]),
        ([0, 0, 1, 1], [5, 6, 6, 6], [(0, 1), (1, 2), (2, 4)]),
    ],
)
def test_runs_split_where_partition_or_day_changes(parts: list[int], days: list[int], expected: list[Any]) -> None:
    assert runs(np.array(parts, dtype=np.int32), np.array(days, dtype=np.int64)) == expected


def feed(files: PartitionFiles, msgs: list[Any]) -> list[tuple[str, pa.Table]]:
    return files.add(*batch_arrays(msgs))


def test_partition_files_cut_at_max_records_and_at_the_end() -> None:
    files = PartitionFiles("t", {0: 0, 1: 0}, {0: 5, 1: 2}, max_records=2)
    out = feed(files, [message(0, o) for o in range(3)] + [message(1, 0)])
    assert [p for p, _t in out] == [
        "topic=t/date=2024-10-04/00000-00000000000000000000-00000000000000000002.parquet",
    ]
    out = feed(files, [message(1, 1), message(0, 3), message(0, 4)])
    assert [p for p, _t in out] == [
        "topic=t/date=2024-10-04/00001-00000000000000000000-00000000000000000002.parquet",
        "topic=t/date=2024-10-04/00000-00000000000000000002-00000000000000000004.parquet",
        "topic=t/date=2024-10-04/00000-00000000000000000004-00000000000000000005.parquet",
    ]
    assert [t.column("offset").to_pylist() for _p, t in out] == [[0, 1], [2, 3], [4]]
    assert files.done and files.records == 7


def test_partition_files_split_a_batch_at_midnight_and_name_it_by_its_range() -> None:
    files = PartitionFiles("t", {0: 0}, {0: 4}, max_records=10)
    msgs = [message(0, 0, T0 - 2), message(0, 1, T0 - 1), message(0, 2, T0), message(0, 3, T0 + 1)]
    out = feed(files, msgs)
    assert [(p, t.num_rows) for p, t in out] == [
        ("topic=t/date=2024-10-03/00000-00000000000000000000-00000000000000000004.parquet", 2),
        ("topic=t/date=2024-10-04/00000-00000000000000000000-00000000000000000004.parquet", 2),
    ]


def test_partition_files_drop_records_past_the_end_and_refuse_a_gap() -> None:
    files = PartitionFiles("t", {0: 10}, {0: 12}, max_records=5)
    out = feed(files, [message(0, 10), message(0, 11), message(0, 12)])
    assert [t.column("offset").to_pylist() for _p, t in out] == [[10, 11]]
    assert files.done and files.records == 2
    assert feed(files, [message(0, 13)]) == []  # a late fetch of a finished partition is ignored

    gappy = PartitionFiles("t", {0: 0}, {0: 10}, max_records=5)
    with pytest.raises(RuntimeError, match=r"t\[0\] jumped from offset 1 to 2"):
        feed(gappy, [message(0, 0), message(0, 2)])
    with pytest.raises(RuntimeError, match="not assigned"):
        feed(gappy, [message(7, 0)])


def test_partition_files_skip_empty_partitions() -> None:
    files = PartitionFiles("t", {0: 3, 1: 0}, {0: 3, 1: 1}, max_records=5)
    assert files.ends == {1: 1}
    feed(files, [message(1, 0)])
    assert files.done


def test_partition_files_hand_over_every_record_once_whatever_the_batching() -> None:
    rng = random.Random(7)
    for _ in range(30):
        partitions = rng.randint(1, 5)
        ends = {p: rng.randint(0, 40) for p in range(partitions)}
        files = PartitionFiles("t", dict.fromkeys(ends, 0), ends, max_records=rng.randint(1, 12))
        # Fetches arrive as runs of one partition, interleaved in any order, of random lengths.
        queue = {p: list(range(n)) for p, n in ends.items()}
        got: list[tuple[int, int]] = []
        while any(queue.values()):
            msgs = []
            for _ in range(rng.randint(1, 4)):
                if not any(queue.values()):
                    break
                p = rng.choice([p for p, q in queue.items() if q])
                k = rng.randint(1, 9)
                take, queue[p] = queue[p][:k], queue[p][k:]
                msgs += [message(p, o) for o in take]
            for path, table in files.add(*batch_arrays(msgs)):
                assert table.num_rows <= files.max_records
                rows = table.column("offset").to_pylist()
                start, end = (int(x) for x in Path(path).stem.split("-")[1:3])
                assert rows == list(range(start, end))
                got += [(int(p), o) for p, o in zip(table.column("partition").to_pylist(), rows, strict=True)]
        assert files.done
        assert sorted(got) == sorted((p, o) for p, n in ends.items() for o in range(n))


# --------------------------------------------------------------------------- sink check


def write_sink(root: Path, topic: str, rows: list[tuple[int, int]], name: str) -> None:
    folder = root / f"topic={topic}" / "date=2024-10-04"
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "partition": pa.array([p for p, _o in rows], pa.int32()),
            "offset": pa.array([o for _p, o in rows], pa.int64()),
        }
    )
    pq.write_table(table, folder / name)


def test_check_sink_counts_exactly_once(tmp_path: Path) -> None:
    write_sink(tmp_path, "t", [(0, 0), (0, 1), (1, 0)], "a.parquet")
    write_sink(tmp_path, "t", [(0, 2)], "b.parquet")
    write_sink(tmp_path, "other", [(0, 0)], "c.parquet")
    assert check_sink(tmp_path, "t", {0: 3, 1: 1}) == 4


@pytest.mark.parametrize(
    "rows",
    [
        [(0, 0), (0, 1), (0, 1), (1, 0)],  # a duplicate ...
        [(0, 0), (0, 2), (0, 1), (0, 2)],  # ... also when the count of the partition is right
        [(0, 0), (1, 0)],  # a lost record
        [(0, 0), (0, 1), (0, 2), (1, 0)],  # an offset past the end
        [(0, 0), (0, 1), (1, 0), (2, 0)],  # a partition that should not be there
    ],
)
def test_check_sink_refuses_a_duplicate_a_gap_or_extras(tmp_path: Path, rows: list[tuple[int, int]]) -> None:
    write_sink(tmp_path, "t", rows, "a.parquet")
    with pytest.raises(RuntimeError, match="sink"):
        check_sink(tmp_path, "t", {0: 2, 1: 1})


def test_raw_files_read_back_as_the_dataset_the_contract_describes(tmp_path: Path) -> None:
    files = PartitionFiles("t", {0: 0}, {0: 3}, max_records=10)
    for path, table in feed(files, [message(0, o) for o in range(3)]):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp_path / path)
    table = ds.dataset(tmp_path, format="parquet", partitioning="hive").to_table()
    assert table.column("topic").to_pylist() == ["t"] * 3
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert check_sink(tmp_path, "t", {0: 3}) == 3


# --------------------------------------------------------------------------- arithmetic


def test_env_int() -> None:
    assert env_int({"X": " 12 "}, "X", 1) == 12
    assert env_int({"X": ""}, "X", 4) == 4
    with pytest.raises(ValueError, match=r"X='many' is not an integer"):
        env_int({"X": "many"}, "X", 1)
    with pytest.raises(ValueError, match="below the minimum 1"):
        env_int({"X": "0"}, "X", 1)


def stats_lines(batches: list[tuple[int, float, float]], ready: float = 3.0) -> list[str]:
    """(records, wall_s, t_end) per batch."""
    lines = [json.dumps({"event": "started", "spark_ready_s": ready})]
    lines += [
        json.dumps(
            {
                "event": "batch",
                "n": i + 1,
                "records": r,
                "read_s": w * 0.9,
                "table_commit_s": w * 0.05,
                "commit_s": w * 0.01,
                "wall_s": w,
                "t_end": t,
            }
        )
        for i, (r, w, t) in enumerate(batches)
    ]
    return [*lines, "", json.dumps({"event": "stopped", "reason": "idle", "records": sum(r for r, _w, _t in batches)})]


def test_spark_figures_exclude_the_first_batch_and_count_gaps_between_batches() -> None:
    stats = parse_stats(stats_lines([(600, 6.0, 106.0), (600, 2.0, 109.0), (600, 2.0, 112.0)]))
    f = spark_figures(stats)
    assert f["first_batch_records_per_s"] == 100.0
    # 1,200 records from the first batch's end to the last's: 6 s, although the batches took 4 s.
    assert (f["steady_records"], f["steady_wall_s"], f["records_per_s"]) == (1200, 6.0, 200.0)
    assert f["steady_batch_wall_s"] == 4.0 and f["batches"] == 3
    assert f["steady_between_batches_s"] == 2.0  # the driver's loop between batches
    assert (f["steady_spark_job_s"], f["steady_table_commit_s"]) == (3.6, 0.2)
    assert stats.records == 1800


def test_spark_figures_start_the_steady_state_after_the_slots_first_minute() -> None:
    # Batch 1 starts at 100 (cold: 20 s), then 10 s batches back to back, 1 s apart.
    batches = [(1000, 20.0, 120.0)] + [(1000, 10.0, 120.0 + 11.0 * i) for i in range(1, 20)]
    f = spark_figures(parse_stats(stats_lines(batches)), warmup_s=60.0)
    # Batch n (n >= 2) runs from 99 + 11 n to 109 + 11 n: batch 5 starts at 154 (54 s after 100: not
    # yet), batch 6 at 165 (65 s): the steady state is batches 6..20, from batch 5's end (164) to 329.
    assert (f["steady_from_batch"], f["steady_after_s"]) == (6, 64.0)
    assert (f["steady_records"], f["steady_wall_s"]) == (15_000, 165.0)
    assert f["records_per_s"] == round(15_000 / 165.0, 1)
    assert f["warmup_records_per_s"] == round(5000 / 64.0, 1)
    assert f["consumed_s"] == 229.0 and f["first_batch_records_per_s"] == 50.0


def test_steady_from_falls_back_to_the_second_batch_on_a_short_run() -> None:
    batches = [{"t_end": 10.0, "wall_s": 10.0}, {"t_end": 20.0, "wall_s": 10.0}]
    assert steady_from(batches, 60.0) == 1
    assert steady_from(batches, 0.0) == 1
    assert steady_from([], 60.0) == 0


def test_spark_figures_of_a_single_batch_have_no_steady_state() -> None:
    f = spark_figures(parse_stats(stats_lines([(500, 5.0, 50.0)])))
    assert (f["records_per_s"], f["steady_records"]) == (0.0, 0)


def test_parse_stats_refuses_a_run_that_never_started_or_ran_no_batch() -> None:
    with pytest.raises(ValueError, match="no 'started' event"):
        parse_stats([json.dumps({"event": "batch", "records": 1})])
    with pytest.raises(ValueError, match="no batch"):
        spark_figures(parse_stats(stats_lines([])))


def run_of(partitions: int, draw: int, spark: float, raw: float, perf: float = 900.0) -> dict[str, Any]:
    return {
        "partitions": partitions,
        "draw": draw,
        "spark": {"records_per_s": spark, "first_batch_records_per_s": spark / 2, "startup_s": 10.0 + draw},
        "raw": {"records_per_s": raw},
        "perf": {"records_per_s": perf},
    }


def test_summarize_reports_the_run_with_the_lowest_ratio_consistently() -> None:
    runs = [run_of(4, 1, 300, 200), run_of(4, 2, 240, 250, 800), run_of(12, 1, 100, 90), run_of(12, 2, 280, 200)]
    s = summarize(3_000_000, runs)
    # The lowest throughput (100) is not the worst ratio (240 / 250 = 0.96 < 100 / 90).
    assert s["ratio"] == 0.96 and s["worst_run"] == {"partitions": 4, "draw": 2}
    assert (s["spark_records_per_s"], s["raw_records_per_s"], s["perf_test_records_per_s"]) == (240, 250, 800)
    assert s["ratio"] == round(s["spark_records_per_s"] / s["raw_records_per_s"], 3)
    assert s["spark_first_batch_records_per_s"] == 50.0 and s["spark_startup_s"] == 12.0
    assert s["spread"]["spark_records_per_s"] == {"min": 100.0, "median": 260.0, "max": 300.0}
    assert s["target"] == {
        "ratio": 1.0,
        "ratio_aim": 1.2,
        "ratio_met": False,
        "cpu_vs_raw": 1.3,
        "cpu_met": False,  # the runs give no CPU figures
        "first_batch_vs_steady": 0.5,
        "first_batch_met": True,
    }
    assert s["spark_vs_perf_test"] == 0.3  # 240 / 800
    assert s["first_batch_vs_steady"] == 0.5  # the lowest first batch (50) over the lowest steady rate (100)
    assert list(s)[:7] == [
        "records",
        "spark_records_per_s",
        "spark_first_batch_records_per_s",
        "raw_records_per_s",
        "perf_test_records_per_s",
        "ratio",
        "spark_startup_s",
    ]
    assert s["runs"] == runs


def test_knobs_come_from_the_environment() -> None:
    assert knobs_from({}) == Knobs()
    k = knobs_from({"LAGSCHED_BENCH_CONSUMER_RECORDS": "2000", "LAGSCHED_BENCH_PARTITIONS": "4, 12",
                    "LAGSCHED_BENCH_WARMUP_S": "0", "LAGSCHED_BENCH_JFR": "1"})  # fmt: skip
    assert (k.records, k.partitions, k.warmup_s, k.jfr) == (2000, (4, 12), 0, True)


def test_thread_groups_and_the_cores_each_kept_busy() -> None:
    assert thread_group("Executor task l") == "spark task threads"
    assert thread_group("C1 CompilerThre") == "JIT C1"
    samples = [
        (0.0, {"spark task threads": 0.0, "GC": 0.0, "broker": 0.0, "machine busy": 0.0}),
        (1.0, {"spark task threads": 9.0, "GC": 9.0, "broker": 9.0, "machine busy": 9.0}),  # outside the window
        (5.0, {"spark task threads": 10.0, "GC": 1.0, "broker": 2.0, "machine busy": 16.0}),
        (15.0, {"spark task threads": 25.0, "GC": 2.0, "broker": 3.0, "machine busy": 36.0}),
    ]
    w = window_cpu(samples, 2.0, 20.0)
    assert w["seconds"] == 10.0
    assert w["cores"] == {"spark task threads": 1.5, "GC": 0.1, "broker": 0.1, "others": 0.3, "machine busy": 2.0}
    assert window_cpu(samples, 14.0, 20.0) == {"seconds": 0.0, "cores": {}}


def test_reader_order_puts_each_reader_first_in_turn() -> None:
    firsts = [reader_order(d)[0] for d in range(3)]
    assert sorted(firsts) == ["perf", "raw", "spark"]
    assert all(sorted(reader_order(d)) == ["perf", "raw", "spark"] for d in range(5))


def test_cpu_usage_separates_the_reader_the_broker_and_the_rest() -> None:
    before = CpuSnapshot(wall=100.0, machine_busy=1000.0, own=10.0, children=20.0, broker=300.0)
    after = CpuSnapshot(wall=110.0, machine_busy=1017.0, own=12.0, children=30.0, broker=303.0)
    assert cpu_usage(before, after) == {
        "wall_s": 10.0,
        "reader_cpu_s": 12.0,
        "broker_cpu_s": 3.0,
        "others_cpu_s": 2.0,
        "cores_busy": 1.7,
    }


def test_file_names_sort_by_partition_then_offset() -> None:
    names = [file_name(2, (900, 1_000)), file_name(10, (0, 5)), file_name(2, (1_000, 1_100))]
    assert sorted(names) == [names[0], names[2], names[1]]
