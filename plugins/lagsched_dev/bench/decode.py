"""Decoding typed values, a batch at a time: the columnar decoders against a record at a time.

Run from the repository root (no service needed)::

    PYTHONPATH=plugins python -m lagsched_dev.bench decode

What a slot's task will spend per record to turn a batch of Avro or JSON values into Arrow columns
(`lagsched.core.avro_decode.AvroDecoder`, `lagsched.core.json_decode.JsonDecoder`), against the
way a Python consumer decodes them otherwise, in the same process: fastavro's
``schemaless_reader`` (or ``json.loads``) per record, then ``pa.Table.from_pylist`` into the same
schema. The values are laid out as a Kafka value column holds them (a 5-byte header before each).

The records: the issue's 10 fields of mixed types (long, int, double, float, boolean, string, a
nullable string, an enum, a timestamp, a date) for Avro; the same as a JSON object for JSON.
``LAGSCHED_BENCH_DECODE_RECORDS`` per draw (default 100,000, the slot's batch), draws interleaved
(columnar, then the baseline) so that both see the same noise, ``LAGSCHED_BENCH_DECODE_DRAWS``
each (default 15); polars on one thread (``POLARS_MAX_THREADS=1``), as a task on one core has it.
The first draw of each is reported apart (``cold``: imports, polars' thread pool, caches). Reports
per record the worst and the median of the warm draws, the ratio baseline/columnar of the worst
draws, and where the columnar decode's time goes (one instrumented pass). Writes
``bench/results/decode.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # before polars is imported: one core, as a task has

import datetime as dt
import io
import itertools
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

DEFAULT_OUT = "bench/results/decode.json"

AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "score", "type": "float"},
        {"name": "paid", "type": "boolean"},
        {"name": "sku", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    ],
}
JSON_SCHEMA = {
    "type": "object",
    "required": ["id", "sku", "at"],
    "properties": {
        "id": {"type": "integer"},
        "qty": {"type": "integer"},
        "price": {"type": "number"},
        "score": {"type": "number"},
        "paid": {"type": "boolean"},
        "sku": {"type": "string"},
        "note": {"type": ["string", "null"]},
        "status": {"enum": ["NEW", "PAID", "SHIPPED"]},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
    },
}


def records(n: int, seed: int = 40) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    epoch = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return [
        {
            "id": i,
            "qty": rnd.randrange(1, 50),
            "price": round(rnd.uniform(1, 500), 2),
            "score": 0.5,
            "paid": rnd.random() < 0.5,
            "sku": f"sku-{rnd.randrange(100_000):05d}",
            "note": None if rnd.random() < 0.7 else "leave at the door",
            "status": rnd.choice(["NEW", "PAID", "SHIPPED"]),
            "at": epoch + dt.timedelta(milliseconds=rnd.randrange(10**10)),
            "day": dt.date(2026, 1, 1) + dt.timedelta(days=rnd.randrange(365)),
        }
        for i in range(n)
    ]


def avro_values(rows: Sequence[dict[str, Any]]) -> list[bytes]:
    import fastavro

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    out = []
    for row in rows:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, row)
        out.append(buf.getvalue())
    return out


def json_values(rows: Sequence[dict[str, Any]]) -> list[bytes]:
    return [json.dumps({**r, "at": r["at"].isoformat(), "day": r["day"].isoformat()}).encode() for r in rows]


def laid_out(values: Sequence[bytes]) -> tuple[Any, Any, Any]:
    import numpy as np

    lengths = np.array([len(v) for v in values], np.int64)
    ends = np.cumsum(lengths + 5)
    data = np.frombuffer(b"".join(b"\x00\x00\x00\x00\x01" + v for v in values), np.uint8)
    return data, ends - lengths, ends


def record_at_a_time_avro(values: Sequence[bytes], schema: Any) -> Any:
    import fastavro
    import pyarrow as pa

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    reader = fastavro.schemaless_reader
    return pa.Table.from_pylist([reader(io.BytesIO(v), parsed, None) for v in values], schema=schema)


def record_at_a_time_json(values: Sequence[bytes], schema: Any) -> Any:
    import pyarrow as pa

    rows = []
    for v in values:
        row = json.loads(v)
        row["at"] = dt.datetime.fromisoformat(row["at"])
        row["day"] = dt.date.fromisoformat(row["day"])
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=schema)


def draws(pairs: Sequence[tuple[str, Callable[[], Any]]], count: int) -> dict[str, list[float]]:
    """Each callable `count` times, interleaved; seconds per call."""
    seconds: dict[str, list[float]] = {name: [] for name, _ in pairs}
    for _ in range(count):
        for name, call in pairs:
            started = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - started)
    return seconds


def summary(seconds: list[float], n: int) -> dict[str, float]:
    warm = seconds[1:]
    return {
        "cold_us_per_record": round(seconds[0] / n * 1e6, 3),
        "worst_us_per_record": round(max(warm) / n * 1e6, 3),
        "median_us_per_record": round(statistics.median(warm) / n * 1e6, 3),
        "best_us_per_record": round(min(warm) / n * 1e6, 3),
    }


def avro_stages(values: Sequence[bytes]) -> dict[str, float]:
    """One columnar decode, step by step (the decoder's own steps): microseconds per record in each."""
    from lagsched.core.avro_decode import AvroDecoder

    decoder = AvroDecoder(json.dumps(AVRO_SCHEMA))
    data, starts, ends = laid_out(values)
    marks = [time.perf_counter()]
    blob = decoder.block(data, starts, ends)
    marks.append(time.perf_counter())
    table = decoder.read_block(blob)
    marks.append(time.perf_counter())
    assert decoder.sized(table, starts, ends)
    marks.append(time.perf_counter())
    names = ("gather the datums into one block", "polars reads it, in the table's types", "the size check")
    n = len(values)
    return {name: round((b - a) / n * 1e6, 3) for name, (a, b) in zip(names, itertools.pairwise(marks), strict=True)}


def run(n: int, count: int) -> dict[str, Any]:
    from lagsched.core.avro_decode import AvroDecoder
    from lagsched.core.json_decode import JsonDecoder

    rows = records(n)
    avro, plain = avro_values(rows), json_values(rows)
    avro_decoder, json_decoder = AvroDecoder(json.dumps(AVRO_SCHEMA)), JsonDecoder(JSON_SCHEMA)
    avro_layout, json_layout = laid_out(avro), laid_out(plain)
    # Both ways give the same table, or the figures would compare different work.
    assert avro_decoder.decode(*avro_layout).table.equals(record_at_a_time_avro(avro, avro_decoder.schema))
    json_table = json_decoder.decode(*json_layout).table
    assert json_table.equals(record_at_a_time_json(plain, json_decoder.schema).cast(json_table.schema))
    seconds = draws(
        [
            ("avro_columnar", lambda: avro_decoder.decode(*avro_layout)),
            ("avro_record_at_a_time", lambda: record_at_a_time_avro(avro, avro_decoder.schema)),
            ("json_columnar", lambda: json_decoder.decode(*json_layout)),
            ("json_record_at_a_time", lambda: record_at_a_time_json(plain, json_decoder.schema)),
        ],
        count,
    )
    figures: dict[str, Any] = {name: summary(s, n) for name, s in seconds.items()}
    for fmt in ("avro", "json"):
        columnar, baseline = figures[f"{fmt}_columnar"], figures[f"{fmt}_record_at_a_time"]
        figures[f"{fmt}_ratio_worst"] = round(baseline["worst_us_per_record"] / columnar["worst_us_per_record"], 2)
    figures["avro_columnar_stages_us_per_record"] = avro_stages(avro)
    figures["records_per_draw"], figures["draws"] = n, count
    figures["bytes_per_record"] = {
        "avro": round(sum(map(len, avro)) / n, 1),
        "json": round(sum(map(len, plain)) / n, 1),
    }
    figures["method"] = (
        "in one process, polars on one thread; each draw decodes the whole batch laid out as a Kafka value column; "
        "draws interleaved; worst and median over the warm draws (the first, cold, apart)"
    )
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m lagsched_dev.bench.decode", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    from lagsched_dev.bench.consumer import env_int

    n = env_int(os.environ, "LAGSCHED_BENCH_DECODE_RECORDS", 100_000, minimum=1000)
    count = env_int(os.environ, "LAGSCHED_BENCH_DECODE_DRAWS", 15, minimum=3)
    started = time.monotonic()
    figures = run(n, count)
    figures["elapsed_s"] = round(time.monotonic() - started, 1)
    figures["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_end": os.getloadavg(),
    }
    print(json.dumps(figures, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
