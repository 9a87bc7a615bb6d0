"""The load generator against the real broker: the profile's records arrive, once, and it stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagsched.core.load_profile import demo_profile

REPO = Path(__file__).resolve().parents[2]
# A short profile: the hot topic ramps at 1 s to 400 records/s, holds 2 s, falls back by 5 s.
PROFILE = {"peak_rate": 400.0, "ramp_at_s": 1.0, "ramp_s": 1.0, "hold_s": 2.0, "fall_s": 1.0}


@pytest.fixture
def prefix(kafka_config: dict[str, Any]) -> Iterator[str]:
    """A unique topic prefix; the generator's topics are deleted afterwards."""
    from confluent_kafka.admin import AdminClient

    name = f"t-loadgen-{uuid.uuid4().hex[:8]}."
    yield name
    admin = AdminClient(kafka_config)
    made = [t for t in admin.list_topics(timeout=15).topics if t.startswith(name)]
    if made:
        for future in admin.delete_topics(made, operation_timeout=30).values():
            future.result(timeout=30)


def start(prefix: str, kafka_config: dict[str, Any], stats: Path, *extra: str) -> subprocess.Popen[str]:
    args = [f"--{k.replace('_', '-')}={v}" for k, v in PROFILE.items()]
    argv = [sys.executable, "-m", "lagsched_dev.loadgen", "--prefix", prefix, "--stats-file", str(stats), *args, *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO / "plugins")}
    env.pop("AIRFLOW_HOME", None)
    argv += ["--bootstrap", kafka_config["bootstrap.servers"]]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def high_watermarks(kafka_config: dict[str, Any], topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_config, "group.id": f"t-{uuid.uuid4().hex}", "enable.auto.commit": False})
    try:
        parts = consumer.list_topics(topic, timeout=15).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in parts}
    finally:
        consumer.close()


def test_produces_the_profile_once_per_record_and_ends_by_itself(
    kafka_config: dict[str, Any], prefix: str, tmp_path: Path
) -> None:
    stats_path = tmp_path / "stats.json"
    proc = start(prefix, kafka_config, stats_path, "--duration-s", "6", "--report-every-s", "2")
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    stats = json.loads(stats_path.read_text())
    assert stats["done"] is True
    assert stats["elapsed_s"] == pytest.approx(6.0)
    assert "loadgen 2 s:" in output  # a progress line at each report
    for load in demo_profile(prefix=prefix, **PROFILE):
        counts = stats["topics"][load.topic]
        marks = high_watermarks(kafka_config, load.topic)
        # The topics were created with the profile's partition counts.
        assert len(marks) == load.partitions, load.topic
        # Every record sent was delivered, once: the broker holds exactly what was acknowledged.
        assert counts["sent"] == counts["acked"] == sum(marks.values()), (load.topic, counts, marks)
        assert counts["failed"] == 0
        # ... and what was sent is the profile's integral, to the record.
        expected = load.records_between(0, 6.0)
        assert expected - 1.001 < counts["sent"] <= expected + 0.001, (load.topic, counts["sent"], expected)
    hot = stats["topics"][f"{prefix}orders"]["sent"]
    assert hot > 1000  # the hot topic ramped
    assert stats["topics"][f"{prefix}archive"]["sent"] == 0  # the idle one stayed idle
    # Keys spread the hot topic over its partitions.
    assert all(n > 0 for n in high_watermarks(kafka_config, f"{prefix}orders").values())


def test_sigterm_stops_it_cleanly_with_everything_sent_delivered(
    kafka_config: dict[str, Any], prefix: str, tmp_path: Path
) -> None:
    stats_path = tmp_path / "stats.json"
    proc = start(prefix, kafka_config, stats_path, "--report-every-s", "0.5")
    try:
        deadline = time.monotonic() + 60
        # Wait until it is producing the hot ramp (the stats file is written at each report).
        while not (stats_path.exists() and json.loads(stats_path.read_text())["topics"][f"{prefix}orders"]["sent"]):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the load generator wrote no stats within 60 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "loadgen stopped after" in output
    stats = json.loads(stats_path.read_text())
    assert stats["done"] is True
    for topic, counts in stats["topics"].items():
        assert counts["sent"] == counts["acked"] == sum(high_watermarks(kafka_config, topic).values()), topic


def test_rack_aware_producing_delivers_everything_and_says_how_it_routed(
    kafka_config: dict[str, Any], prefix: str, tmp_path: Path
) -> None:
    # The single-broker stack has no racks: every partition is a candidate (the rack producer's
    # fallback), and the generator reports that none went to a leader in rack a.
    stats_path = tmp_path / "stats.json"
    proc = start(prefix, kafka_config, stats_path, "--rack", "a", "--duration-s", "2")
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "rack a" in output
    stats = json.loads(stats_path.read_text())
    total = sum(c["acked"] for c in stats["topics"].values())
    assert total > 0
    assert f"0 of {total:,} records to a leader in rack a" in output


def test_an_empty_rack_is_refused_naming_the_option(kafka_config: dict[str, Any], prefix: str, tmp_path: Path) -> None:
    proc = start(prefix, kafka_config, tmp_path / "s.json", "--rack", " ", "--duration-s", "1")
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, output
    assert "--rack ' '" in output
