"""The Spark consumer on the real stack: how a run ends, and topics that change under it.

Exactly once with several slots is in test_consumer_scaling.py; kills and stale holders in
test_consumer_failures.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from consumer_support import ConsumerHarness, assert_exactly_once, offsets_by_topic, produce, wait_until

from lagsched.adapters.alert_figures import read_table_commits
from lagsched.adapters.slots import slot_id_for


def test_sigterm_finishes_the_batch_in_flight_commits_releases_and_exits_0(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], redis_client: Any
) -> None:
    topic = new_topic(2)
    produce(kafka_config, topic, 20_000, partitions=2)
    topic_id = consumer.register(topic)
    slot = consumer.start("w1", "--max-records", "1000")
    wait_until(lambda: len(slot.batches()) >= 1, 240, "the first batch")
    slot.terminate()
    assert slot.wait(120) == 0, slot.tail()
    stopped = [json.loads(line) for line in slot.stats.read_text().splitlines()][-1]
    assert stopped["event"] == "stopped" and stopped["reason"] == "signal"
    # Whatever was committed is in the sink, and nothing beyond it: the batch in flight was finished.
    committed = consumer.committed(topic_id)
    assert 0 < sum(v or 0 for v in committed.values()) < 20_000
    assert_exactly_once(consumer.sink_table(), topic, {p: committed[p] or 0 for p in range(2)})
    assert consumer.holders(topic_id) == {0: None, 1: None}  # released
    assert consumer.pending(topic_id) == {}
    assert redis_client.zscore(f"lagsched:slots:{consumer.cluster}", slot_id_for("w1")) is None  # left the slot set


def test_a_topic_recreated_since_the_last_sync_is_not_read_and_a_slot_whose_topics_all_went_away_ends_its_run(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """Two claims on one slot's run (one Spark start less than a run each): [recreated] a topic
    deleted and re-created since the last sync is not read with the old offsets, and said so once, not
    at every batch boundary; [went away] once every topic of the slot is disabled, it ends its run."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from lagsched.adapters.mysql import connect

    recreated = new_topic(1)
    produce(kafka_config, recreated, 100, partitions=1)
    recreated_id = consumer.register(recreated)
    admin = AdminClient(kafka_config)
    admin.delete_topics([recreated], operation_timeout=30)[recreated].result(timeout=30)
    wait_until(lambda: recreated not in admin.list_topics(timeout=10).topics, 60, "[recreated] the topic's deletion")
    admin.create_topics([NewTopic(recreated, 1, 1)], operation_timeout=30)[recreated].result(timeout=30)
    produce(kafka_config, recreated, 10, partitions=1)

    topic = new_topic(1)
    produce(kafka_config, topic, 5_000, partitions=1)
    topic_id = consumer.register(topic)
    slot = consumer.start("w1", "--max-records", "200", "--min-interval-s", "1")
    # [recreated] Several batch boundaries (each plans the recreated topic's row too) before the end.
    wait_until(lambda: len(slot.batches()) >= 3, 240, "[went away] the first batches")
    conn = connect(consumer.mysql)
    with conn.cursor() as cur:
        cur.execute("UPDATE topics SET enabled = FALSE WHERE topic_id IN (%s, %s)", (topic_id, recreated_id))
    conn.commit()
    conn.close()
    assert slot.wait(120) == 0, f"[went away] {slot.tail()}"
    text = slot.log.read_text()
    assert "deleted or re-created; not reading it until the topic sync" in text, f"[recreated] {slot.tail()}"
    assert text.count("deleted or re-created") == 1, "[recreated] said more than once, at every batch boundary?"
    table = consumer.sink_table()
    assert recreated not in offsets_by_topic(table), "[recreated] records of the re-created topic landed"

    stopped = [json.loads(line) for line in slot.stats.read_text().splitlines()][-1]
    assert stopped["reason"] == "rescaled", f"[went away] {stopped}"
    committed = consumer.committed(topic_id)[0] or 0
    assert_exactly_once(table, topic, {0: committed})
    assert consumer.holders(topic_id) == {0: None}, "[went away] the row is still held"


def test_a_rate_capped_slot_reads_at_its_cap_no_faster_and_lands_every_record_once(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any], redis_client: Any
) -> None:
    rate, window, total = 1_000, 4, 12_000
    topic = new_topic(3)
    produce(kafka_config, topic, total, partitions=3)
    topic_id = consumer.register(topic)
    # Batches of at most rate x window records; min_records out of reach, so only the cap's own
    # "full" rule can start a batch before the interval has passed since the previous one ended.
    args = ("--max-rate", str(rate), "--min-interval-s", str(window), "--min-records", "100000", "--exit-when-idle")
    commits_before = sum(
        n for (_, outcome), n in read_table_commits(redis_client, consumer.cluster).items() if outcome == "ok"
    )
    slot = consumer.run("w1", *args, timeout=300)
    batches = slot.batches()
    assert sum(b["records"] for b in batches) == total
    # The slot counts each table commit for the metrics (lagsched_table_commits_total): one per batch with files.
    commits = read_table_commits(redis_client, consumer.cluster)
    assert sum(n for (_, outcome), n in commits.items() if outcome == "ok") - commits_before == sum(
        1 for b in batches if b["files"]
    ), commits
    assert not [k for k, n in commits.items() if k[1] != "ok" and n], commits
    assert all(b["offsets"] <= rate * window for b in batches), [b["offsets"] for b in batches]
    starts = [b["t_end"] - b["wall_s"] for b in batches]
    ends = [b["t_end"] for b in batches]
    for i in range(1, len(batches)):
        before = sum(b["offsets"] for b in batches[:i])
        # Never faster than the cap (uncapped, the backlog is one batch of well under a second) ...
        assert starts[i] - starts[0] >= before / rate - 0.05, (i, before, starts[i] - starts[0])
        # ... and no slower than it lets: a full batch starts as soon as the cap allows (within a
        # poll), not an interval after the previous batch ended.
        allowed = max(ends[i - 1], starts[i - 1] + batches[i - 1]["offsets"] / rate)
        assert starts[i] - allowed < 1.5, (i, starts[i] - allowed)
    assert consumer.committed(topic_id) == {p: total // 3 for p in range(3)}
    assert_exactly_once(consumer.sink_table(), topic, {p: total // 3 for p in range(3)})
