"""Where a typed record's time goes in a slot's task, against the raw consumer doing the same decode.

Run from the repository root (no service needed)::

    PYTHONPATH=plugins python -m lagsched_dev.bench typed_task

The consumer benchmark's ``avro`` section (`lagsched_dev.bench.consumer`) measures the whole slot
against the project's raw consumer on a real broker; this one takes the Kafka read away and times,
in one process, what each does with the same records once they are in Arrow:

* **slot**: the task's code path for a routed partition (`adapters.typed_files.RoutedPartitionFiles`):
  ``add`` for each consume run (the columns `adapters.range_files._take` builds, `CONSUME_BATCH`
  records split per partition), then ``close``, which writes the Parquet files. Its stages are timed
  apart in a second, instrumented pass: the wire-format headers (`core.wire_format.frame_column`),
  the columnar decode (`core.avro_decode.AvroDecoder.decode`), the typed rows (the Kafka columns,
  the key, the values cast: `core.typed_rows`), the exactly-once check (`Split.check`), and the
  Parquet writing;
* **shared table**: the same records through the shared table's task path (raw bytes, no decode),
  so that what typing adds to a task is the difference;
* **raw**: the raw consumer's transform (`raw_consumer.avro_columns`: the same headers and decode,
  the columns appended) and its ``pq.write_table`` of the same records.

Both write to a local temporary folder, polars on one thread (as a task on one core has it). Each
draw is ``LAGSCHED_BENCH_TYPED_RUNS`` runs of ``LAGSCHED_BENCH_TYPED_RUN_RECORDS`` records (default
10 x 10,000: what one partition's fetches hand a task), the two paths interleaved so that both see
the same noise, ``LAGSCHED_BENCH_TYPED_DRAWS`` draws (default 15), the first reported apart
(``cold``). Figures per record, worst and median of the warm draws; the ratio raw/slot of the
worst draws (>= 1: the slot's task is as fast). Writes ``bench/results/typed_task.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # before polars is imported: one core, as a task has

import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

OUT = Path("bench/results/typed_task.json")
SCHEMA_ID = 7
TABLE = "lagsched.bench.orders"


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def raw_runs(runs: int, size: int) -> list[pa.RecordBatch]:
    """``runs`` consume runs of ``size`` records each, in the columns a task builds (`RAW_SCHEMA`)."""
    from lagsched.adapters.range_files import headers_array
    from lagsched.adapters.typed_files import RAW_SCHEMA
    from lagsched_dev.bench.consumer import avro_pool

    pool = avro_pool(SCHEMA_ID, min(50_000, runs * size))
    out, offset = [], 0
    for _ in range(runs):
        values = [pool[(offset + i) % len(pool)] for i in range(size)]
        ts = (1_780_000_000_000 + np.arange(offset, offset + size, dtype=np.int64)) * 1000
        out.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.DictionaryArray.from_arrays(pa.array(np.zeros(size, np.int32)), pa.array(["orders"])),
                    pa.array(np.zeros(size, np.int32)),
                    pa.array(np.arange(offset, offset + size, dtype=np.int64)),
                    pa.array(ts).view(pa.timestamp("us", tz="UTC")),
                    pa.array([f"k{offset + i}".encode() for i in range(size)], pa.binary()),
                    pa.array(values, pa.binary()),
                    headers_array([[("h", b"v")]] * size, RAW_SCHEMA.field("headers").type),
                ],
                schema=RAW_SCHEMA,
            )
        )
        offset += size
    return out


class _Registry:
    """The Connection a route reads through (its URL keys the workers' decoder cache, seeded below)."""

    url = "bench://registry"


def routed_tables(location: str) -> Any:
    """What the driver sends a batch's tasks, for one Avro topic routed to ``TABLE`` at ``location``."""
    from lagsched.adapters import typed_files
    from lagsched.core.avro_decode import AvroDecoder
    from lagsched.core.routing import TopicRoute
    from lagsched.core.typed_rows import VALUE
    from lagsched.core.wire_format import frame_column  # noqa: F401 - imported before timing
    from lagsched_dev.bench.consumer import AVRO_SCHEMA

    route = TopicRoute("orders", "bench", "orders", "avro", "raw")
    # A worker that resolved the writer schema once (what a long-lived slot's workers hold).
    typed_files._decoders.setdefault((_Registry.url, SCHEMA_ID, VALUE), AvroDecoder(json.dumps(AVRO_SCHEMA)))
    place = typed_files.TableFiles(TABLE, f"{location}/typed", {})
    return typed_files.RoutedTables(
        routes={"orders": route},
        tables={TABLE: place},
        dead_letters=typed_files.TableFiles(f"{TABLE}_dead_letters", f"{location}/dead", {}),
        registry=_Registry(),
    )


def slot_path(runs: list[pa.RecordBatch], location: str) -> int:
    """The task's path for a routed partition; the records written."""
    from lagsched.adapters.data_files import HOUR_US
    from lagsched.adapters.typed_files import RoutedPartitionFiles

    tables = routed_tables(location)
    files = RoutedPartitionFiles(tables.routes["orders"], 0, tables)
    for run in runs:
        hours = np.floor_divide(run.column("timestamp").cast(pa.int64()).to_numpy(), HOUR_US)
        files.add(run, hours)
    files.close()
    return sum(f.records for f in files.written)


def bytes_path(runs: list[pa.RecordBatch], location: str) -> int:
    """The task's path for a partition of the shared table (raw bytes, no decode): what a typed
    record costs on top of it is the typed path's figure less this one."""
    from lagsched.adapters.data_files import CREATED_SCHEMA, HOUR_US, DataFolder, FileSettings, PartitionFiles

    settings = FileSettings.of(location, CREATED_SCHEMA, {})
    files = PartitionFiles(DataFolder(settings.data_location, None), "orders", 0, settings)
    for run in runs:
        files.add(run, np.floor_divide(run.column("timestamp").cast(pa.int64()).to_numpy(), HOUR_US))
    files.close()
    return sum(f.records for f in files.written)


def raw_path(runs: list[pa.RecordBatch], location: str) -> int:
    """The raw consumer's: its transform of the records, then one ``write_table``."""
    from lagsched_dev.bench.consumer import AVRO_SCHEMA
    from lagsched_dev.bench.raw_consumer import avro_columns

    transform = avro_columns(json.dumps(AVRO_SCHEMA))
    table = transform(pa.Table.from_batches(runs).drop_columns(["topic"]))
    pq.write_table(
        table, f"{location}/raw.parquet", compression="snappy",
        use_dictionary=["partition", "headers.list.element.key"], row_group_size=1024 * 1024,
    )  # fmt: skip
    return int(table.num_rows)


def stages(runs: list[pa.RecordBatch], location: str) -> dict[str, float]:
    """One instrumented pass of the slot's path: seconds per stage."""
    from lagsched.adapters import typed_files
    from lagsched.core import typed_rows, wire_format
    from lagsched.core.typed_rows import Split

    spent: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - started

        return wrapper

    decoder = typed_files._decoders[(_Registry.url, SCHEMA_ID, typed_rows.VALUE)]
    patches = [
        (typed_rows, "frame_column", timed("wire-format headers", wire_format.frame_column)),
        (typed_rows, "_typed", timed("typed rows (Kafka columns, key, values cast)", typed_rows._typed)),
        (typed_rows, "_keys", timed("keys", typed_rows._keys)),
        (Split, "check", timed("exactly-once check", Split.check)),
        (decoder, "decode", timed("columnar decode", decoder.decode)),
        (typed_files, "split_batch", timed("split (all of the above)", typed_rows.split_batch)),
    ]
    saved = [(o, n, getattr(o, n)) for o, n, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        started = time.perf_counter()
        slot_path(runs, location)
        spent["whole task path"] = time.perf_counter() - started
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
        if "decode" in decoder.__dict__:
            del decoder.decode
    split = spent.pop("split (all of the above)")
    inside = sum(v for k, v in spent.items() if k not in ("whole task path",))
    spent["files (add and Parquet writing)"] = spent["whole task path"] - split
    spent["split, other"] = split - inside
    return spent


def _draw(fn: Callable[[list[pa.RecordBatch], str], int], runs: list[pa.RecordBatch], records: int) -> float:
    with tempfile.TemporaryDirectory(prefix="lagsched-typed-task-") as folder:
        started = time.perf_counter()
        written = fn(runs, Path(folder).as_uri())
        elapsed = time.perf_counter() - started
    if written != records:
        raise RuntimeError(f"{fn.__name__} wrote {written} records of {records}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    del argv
    runs_n = _env_int("LAGSCHED_BENCH_TYPED_RUNS", 10)
    size = _env_int("LAGSCHED_BENCH_TYPED_RUN_RECORDS", 10_000)
    draws = _env_int("LAGSCHED_BENCH_TYPED_DRAWS", 15)
    records = runs_n * size
    runs = raw_runs(runs_n, size)
    slot_s, raw_s, bytes_s = [], [], []
    for _ in range(draws):
        slot_s.append(_draw(slot_path, runs, records))
        raw_s.append(_draw(raw_path, runs, records))
        bytes_s.append(_draw(bytes_path, runs, records))
    with tempfile.TemporaryDirectory(prefix="lagsched-typed-task-") as folder:
        spent = stages(runs, Path(folder).as_uri())
    us = 1e6 / records

    def per_record(draws_s: list[float], cold: float | None = None) -> dict[str, float]:
        out = {"worst": round(max(draws_s) * us, 3), "median": round(statistics.median(draws_s) * us, 3)}
        return out if cold is None else {**out, "cold": round(cold * us, 3)}

    warm_slot, warm_raw, warm_bytes = slot_s[1:], raw_s[1:], bytes_s[1:]
    figures = {
        "records_per_draw": records,
        "run_records": size,
        "draws": draws,
        "slot_us_per_record": per_record(warm_slot, slot_s[0]),
        "raw_us_per_record": per_record(warm_raw, raw_s[0]),
        "shared_table_us_per_record": per_record(warm_bytes),
        "typed_extra_us_per_record_median": round(
            (statistics.median(warm_slot) - statistics.median(warm_bytes)) * us, 3
        ),
        "ratio_worst": round(max(warm_raw) / max(warm_slot), 3),
        "ratio_median": round(statistics.median(warm_raw) / statistics.median(warm_slot), 3),
        "slot_stages_us_per_record": {k: round(v * us, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])},
        "method": "one process, no Kafka: the slot task's RoutedPartitionFiles.add per run + close against the raw "
        "consumer's avro_columns transform + pq.write_table of the same records; interleaved draws, the first cold",
        "machine": {"python": sys.version.split()[0], "cpus": os.cpu_count(), "platform": platform.platform()},
    }  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
