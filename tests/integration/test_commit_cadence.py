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
    if not slot.stats.exists():
        return []
    rows = [json.loads(line) for line in slot.stats.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("event") == kind]


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

    # [waiting] 1,000 records a partition in batches of 200: all written within seconds, none committed.
    slot = consumer.start("c", "--max-records", "200", "--commit-interval-s", "600")
    wait_until(lambda: sum(b["records"] for b in slot.batches()) >= 2_000, 240, "[waiting] the backlog written")
    assert len(slot.batches()) >= 5 and events(slot, "commit") == [], slot.tail()
    # Nothing of a waiting batch is recorded or committed: the offsets have not moved.
    assert consumer.pending(topic_id) == {}
    assert set(consumer.committed(topic_id).values()) == {None}
    slot.kill()
    assert snapshots(consumer) == 0
    assert consumer.pending(topic_id) == {} and set(consumer.committed(topic_id).values()) == {None}

    # [interval] the next run reads it all again and commits it after ~4 s, many batches in one snapshot.
    slot = consumer.start("c", "--max-records", "200", "--commit-interval-s", "4")
    wait_until(lambda: bool(events(slot, "commit")), 240, "[interval] the first commit")
    first = events(slot, "commit")[0]
    assert first["reason"] == "interval" and first["batches"] >= 5 and first["records"] == 2_000, first
    assert 4.0 <= first["waited_s"] < 4.0 + 5.0, first  # due at 4 s; a boundary looks at least every second
    assert first["freshness_s"] >= first["waited_s"]
    for i in range(3):  # a trickle: each commit waits its interval, one snapshot per interval at most
        produce(kafka_config, topic, 50, start=2_000 + 50 * i, partitions=PARTITIONS)
        time.sleep(1.5)
    wait_until(lambda: sum(c["records"] for c in events(slot, "commit")) >= 2_150, 120, "[interval] the trickle")
    commits = events(slot, "commit")
    assert all(c["reason"] == "interval" for c in commits), commits
    gaps = [b["t_end"] - a["t_end"] for a, b in itertools.pairwise(commits)]
    assert all(g >= 3.5 for g in gaps), gaps  # never more often than the interval (less the commit's own time)
    assert len(slot.batches()) > len(commits)
    slot.terminate()
    assert slot.wait(120) == 0, slot.tail()

    # [volume] a long interval, a bound of 300 records: commits as soon as 300 wait, and the rest at idle.
    produce(kafka_config, topic, 1_000, start=2_150, partitions=PARTITIONS)
    slot = consumer.run(
        "c", "--max-records", "100", "--commit-interval-s", "3600", "--commit-max-records", "300", "--exit-when-idle"
    )
    commits = events(slot, "commit")
    assert [c["reason"] for c in commits[:-1]] == ["records"] * (len(commits) - 1) and len(commits) >= 3, commits
    assert commits[-1]["reason"] == "flush"  # the idle exit lands what waits
    assert all(300 <= c["records"] < 300 + 200 for c in commits[:-1]), commits  # one read of 2 x 100 past the bound

    latest = latest_offsets(kafka_config, topic, PARTITIONS)
    assert sum(latest.values()) == 3_150
    assert consumer.committed(topic_id) == latest and consumer.pending(topic_id) == {}
    table = consumer.sink_table()
    assert_exactly_once(table, topic, latest)
    assert table.num_rows == 3_150
