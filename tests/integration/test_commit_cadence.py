"""The commit cadence on the real stack: batches written at the read pace wait for the cluster's
commit interval (or a volume bound) and land together, exactly once; a kill while they wait loses
and duplicates nothing (docs/lake.md, "The commit cadence").

One slot name through three runs (each a Spark start), so the table and the claim rows carry over.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

from consumer_support import ConsumerHarness, Slot, assert_exactly_once, latest_offsets, produce, wait_until

PARTITIONS = 2


def events(slot: Slot, kind: str) -> list[dict[str, Any]]:
    """The ``kind`` events of the slot's latest run (one stats file per slot name, appended to by each)."""
    if not slot.stats.exists():
        return []
    rows = [json.loads(line) for line in slot.stats.read_text().splitlines() if line.strip()]
    starts = [i for i, r in enumerate(rows) if r.get("event") == "started"]
    return [r for r in rows[starts[-1] if starts else 0 :] if r.get("event") == kind]


def batches(slot: Slot) -> list[dict[str, Any]]:
    return events(slot, "batch")


def snapshots(consumer: ConsumerHarness) -> int:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return int(consumer.table_stats().snapshots)
    except NoSuchTableError:
        return 0


def test_batches_wait_for_the_interval_land_together_once_and_a_kill_while_they_wait_loses_nothing(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    topic = new_topic(PARTITIONS)
    topic_id = consumer.register(topic)
    produce(kafka_config, topic, 2_000, partitions=PARTITIONS)

    # [waiting] 1,000 records a partition in batches of 200: a run's first batch commits at once (a new
    # slot shows at once), the other four are written within seconds and wait.
    slot = consumer.start("c", "--max-records", "200", "--commit-interval-s", "600")
    wait_until(lambda: sum(b["records"] for b in batches(slot)) >= 2_000, 240, "[waiting] the backlog written")
    assert len(batches(slot)) >= 5, slot.tail()
    (first,) = events(slot, "commit")
    assert (first["reason"], first["records"], first["batches"]) == ("first", 400, 1), first
    # Nothing of a waiting batch is recorded or committed: the offsets are where the first commit left them.
    assert consumer.pending(topic_id) == {}
    assert consumer.committed(topic_id) == {0: 200, 1: 200}
    slot.kill()
    assert snapshots(consumer) == 1
    assert consumer.pending(topic_id) == {} and consumer.committed(topic_id) == {0: 200, 1: 200}
    assert_exactly_once(consumer.sink_table(), topic, {0: 200, 1: 200})

    # [interval] the next run reads the rest again: its first batch at once, the others together ~4 s later.
    slot = consumer.start("c", "--max-records", "200", "--commit-interval-s", "4")
    wait_until(lambda: len(events(slot, "commit")) >= 2, 240, "[interval] two commits")
    first, second = events(slot, "commit")[:2]
    assert first["reason"] == "first", first
    assert second["reason"] == "interval" and second["batches"] >= 3 and first["records"] + second["records"] == 1_600
    assert 4.0 <= second["waited_s"] < 4.0 + 5.0, second  # due at 4 s; a boundary looks at least every second
    assert second["freshness_s"] >= second["waited_s"]
    for i in range(3):  # a trickle: each commit waits its interval, one snapshot per interval at most
        produce(kafka_config, topic, 50, start=2_000 + 50 * i, partitions=PARTITIONS)
        time.sleep(1.5)
    wait_until(lambda: sum(c["records"] for c in events(slot, "commit")) >= 1_750, 120, "[interval] the trickle")
    commits = events(slot, "commit")[1:]
    assert all(c["reason"] == "interval" for c in commits), commits
    gaps = [b["t_end"] - a["t_end"] for a, b in itertools.pairwise(commits)]
    assert all(g >= 3.5 for g in gaps), gaps  # never more often than the interval (less the commit's own time)
    assert len(batches(slot)) > len(commits) + 1
    slot.terminate()
    assert slot.wait(120) == 0, slot.tail()

    # [volume] a long interval, a bound of 300 records: commits as soon as 300 wait, and the rest at idle.
    produce(kafka_config, topic, 1_000, start=2_150, partitions=PARTITIONS)
    slot = consumer.run(
        "c", "--max-records", "100", "--commit-interval-s", "3600", "--commit-max-records", "300", "--exit-when-idle"
    )
    commits = events(slot, "commit")
    assert commits[0]["reason"] == "first", commits
    # The idle exit lands what waits: by its bound if it reached it, else as a flush.
    by_records = [c for c in commits[1:] if c["reason"] == "records"]
    assert [c["reason"] for c in commits[1:-1]] == ["records"] * (len(commits) - 2), commits
    assert commits[-1]["reason"] in {"records", "flush"} and len(by_records) >= 2, commits
    assert all(300 <= c["records"] < 300 + 200 for c in by_records), commits  # one read of 2 x 100 past the bound

    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    assert sum(latest.values()) == 3_150
    assert consumer.committed(topic_id) == latest and consumer.pending(topic_id) == {}
    table = consumer.sink_table()
    assert_exactly_once(table, topic, latest)
    assert table.num_rows == 3_150
