"""Long-lived slots on the real stack: one process per slot id, a frozen slot replaced, and a
slot numbered above its cluster's need leaving at a batch boundary (docs/consumer.md, "Lifecycle")."""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from collections.abc import Callable
from typing import Any

from consumer_support import ConsumerHarness, Slot, assert_exactly_once, latest_offsets, produce, wait_until


def claim_state(consumer: ConsumerHarness, topic_id: str) -> dict[int, tuple[Any, ...]]:
    """Partition -> (holder, epoch, committed offset): what a second start must leave alone."""
    return consumer._by_partition(
        "SELECT partition_id, claimed_by, claim_epoch, committed_offset FROM topic_partitions WHERE topic_id = %s",
        topic_id,
    )


def events(slot: Slot) -> list[dict[str, Any]]:
    if not slot.stats.exists():
        return []
    return [json.loads(line) for line in slot.stats.read_text().splitlines() if line.strip()]


def set_workers(consumer: ConsumerHarness, topic_id: str, workers: int) -> None:
    from lagsched.adapters.mysql import connect

    conn = connect(consumer.mysql)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE topics SET linker_workers = %s WHERE topic_id = %s", (workers, topic_id))
        conn.commit()
    finally:
        conn.close()


def test_a_frozen_slot_is_replaced_and_a_second_start_of_its_successor_leaves_at_once_and_touches_nothing(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    """Two claims about two processes of one slot id, on one run (three Spark starts, not four):
    [frozen] a slot frozen past its timeout is replaced, and leaves its successor alone when it wakes;
    [second start] a second start of the running successor leaves at once and touches nothing."""
    topic = new_topic(2)
    produce(kafka_config, topic, 30_000, partitions=2)
    topic_id = consumer.register(topic)
    old = consumer.start("w1", "--max-records", "500", "--min-interval-s", "0.5")
    wait_until(lambda: len(old.batches()) >= 1, 240, "[frozen] the first process's first batch")
    old.signal(signal.SIGSTOP)  # the whole process group: Spark's JVM and the Python driver
    try:
        time.sleep(5)  # past the slot timeout (3 heartbeats of 1 s): its lock has run out
        # Its own stats file: the two processes share the slot's name.
        stats = consumer.workdir / "w1-successor.stats"
        new = consumer.start("w1", "--max-records", "500", "--min-interval-s", "0.5", "--stats-file", str(stats))
        new = dataclasses.replace(new, stats=stats)
        wait_until(lambda: len(new.batches()) >= 1, 240, "[frozen] the new process's first batch")
    finally:
        old.signal(signal.SIGCONT)
    # The old process wakes, finds the slot taken and leaves with 3, without releasing the
    # rows or the heartbeat that are its successor's now.
    assert old.wait(120) == 3, f"[frozen] the old process: {old.tail()}"
    assert "run by another process" in old.log.read_text(), f"[frozen] {old.tail()}"
    assert new.proc.poll() is None, f"[frozen] the new process exited: {new.tail()}"
    wait_until(
        lambda: all(h is not None for h, _, _ in claim_state(consumer, topic_id).values()), 60, "[frozen] the rows held"
    )

    # [second start] The successor is the running slot now; a second start of it leaves at once.
    wait_until(lambda: len(new.batches()) >= 2, 240, "[second start] the running slot's batches")
    before = claim_state(consumer, topic_id)
    assert {h for h, _, _ in before.values()} != {None}, f"[second start] {before}"
    second_stats = consumer.workdir / "w1-second.stats"
    second = consumer.start("w1", "--stats-file", str(second_stats))
    second = dataclasses.replace(second, stats=second_stats)
    assert second.wait(120) == 0, f"[second start] {second.tail()}"
    assert "already runs in another process" in second.log.read_text(), f"[second start] {second.tail()}"
    duplicate = [e for e in events(second) if e.get("event") == "duplicate"]
    assert len(duplicate) == 1 and duplicate[0]["holder"].split(":")[0], f"[second start] {duplicate}"
    # The running slot's rows kept their holder and epoch (offsets only ever move forward), and it
    # carries on consuming.
    after = claim_state(consumer, topic_id)
    assert {p: s[:2] for p, s in after.items()} == {p: s[:2] for p, s in before.items()}, "[second start]"
    assert new.proc.poll() is None, f"[second start] the running slot exited: {new.tail()}"
    done = len(new.batches())
    wait_until(
        lambda: len(new.batches()) > done, 120, "[second start] a batch of the running slot after the second start"
    )

    produce(kafka_config, topic, 10_000, start=30_000, partitions=2)
    latest = latest_offsets(kafka_config, topic, 2)
    wait_until(lambda: consumer.committed(topic_id) == latest, 180, "[frozen] the new process consuming to the end")
    assert new.proc.poll() is None, f"[frozen] {new.tail()}"
    new.terminate()
    assert new.wait(120) == 0, f"[frozen, second start] the running slot's graceful stop: {new.tail()}"
    assert_exactly_once(consumer.sink_table(), topic, latest)


def test_a_slot_numbered_above_the_clusters_need_leaves_at_a_batch_boundary(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    topic = new_topic(2)
    produce(kafka_config, topic, 20_000, partitions=2)
    topic_id = consumer.register(topic, linker_workers=2)
    numbered = ("--max-records", "500", "--min-interval-s", "0.5", "--max-slots", "4")
    one = consumer.start(f"{consumer.cluster}-slot-1", *numbered, "--slot-number", "1")
    two = consumer.start(f"{consumer.cluster}-slot-2", *numbered, "--slot-number", "2")
    wait_until(lambda: one.batches() and two.batches(), 240, "both slots' first batches")

    set_workers(consumer, topic_id, 1)  # the evaluator's scale-down
    assert two.wait(120) == 0, two.tail()
    assert events(two)[-1] == {"event": "stopped", "reason": "rescaled", "records": events(two)[-1]["records"],
                               "slot": events(two)[-1]["slot"]}  # fmt: skip
    # Slot 1 takes the partitions slot 2 handed back and consumes them to the end.
    produce(kafka_config, topic, 4_000, start=20_000, partitions=2)
    latest = latest_offsets(kafka_config, topic, 2)
    wait_until(lambda: consumer.committed(topic_id) == latest, 180, "slot 1 consuming both partitions")
    assert one.proc.poll() is None, one.tail()
    one.terminate()
    assert one.wait(120) == 0, one.tail()
    assert_exactly_once(consumer.sink_table(), topic, latest)


def test_a_standby_slot_holds_nothing_joins_warm_on_a_scale_up_and_stands_by_again_on_a_scale_down(
    consumer: ConsumerHarness, new_topic: Callable[..., str], kafka_config: dict[str, Any]
) -> None:
    topic = new_topic(2)
    produce(kafka_config, topic, 20_000, partitions=2)
    topic_id = consumer.register(topic, linker_workers=1)
    numbered = ("--max-records", "500", "--min-interval-s", "0.5", "--max-slots", "4", "--standby-slots", "1")
    one = consumer.start(f"{consumer.cluster}-slot-1", *numbered, "--slot-number", "1")
    two = consumer.start(f"{consumer.cluster}-slot-2", *numbered, "--slot-number", "2")
    one_id, two_id = (consumer.slot_id(f"{consumer.cluster}-slot-{n}") for n in (1, 2))

    def standbys() -> list[dict[str, Any]]:
        return [e for e in events(two) if e.get("event") == "standby"]

    # Slot 2 stands by: Spark up, no row held, not in the live set, while slot 1 reads both partitions.
    wait_until(lambda: standbys() and len(one.batches()) >= 2, 240, "slot 2 standing by, slot 1 reading")
    assert set(consumer.holders(topic_id).values()) == {one_id}
    assert two_id not in consumer.live_slots()
    assert not two.batches(), two.tail()

    set_workers(consumer, topic_id, 2)  # the evaluator's scale-up: slot 2 joins without a restart
    wait_until(two.batches, 120, "slot 2's first batch after the scale-up")
    assert "joining, warm" in two.log.read_text(), two.tail()
    wait_until(lambda: set(consumer.holders(topic_id).values()) == {one_id, two_id}, 120, "one partition each")

    set_workers(consumer, topic_id, 1)  # the scale-down: slot 2 hands its row back and stands by again
    wait_until(lambda: len(standbys()) == 2, 120, "slot 2 standing by again")
    assert two.proc.poll() is None, two.tail()
    wait_until(lambda: set(consumer.holders(topic_id).values()) == {one_id}, 120, "slot 1 holding both rows")
    assert two_id not in consumer.live_slots()
    produce(kafka_config, topic, 4_000, start=20_000, partitions=2)
    latest = latest_offsets(kafka_config, topic, 2)
    wait_until(lambda: consumer.committed(topic_id) == latest, 180, "slot 1 consuming both partitions")
    for slot in (one, two):
        slot.terminate()
        assert slot.wait(120) == 0, slot.tail()
    assert_exactly_once(consumer.sink_table(), topic, latest)
