"""Two Kafka clusters in one lagsched database and one Redis DB (issue 17, item 3).

The stack's single broker and its 3-broker rack cluster each get a topic of the same name, and
slots of their own: two for the single broker, one for the rack cluster, all running at once,
against one MySQL database (registry, claim table, ownership, Iceberg catalog) and one Redis DB
(heartbeats, locks, pub/sub). Before ownership was per cluster, the three slots were one live set:
each topic's two lanes went to two of the three slots, so one lane of the rack cluster's topic was
always handed to a slot of the other cluster, which never claimed it, and its partitions were never
read. Here every record of each cluster lands once in that cluster's table, no slot ever holds a
row of the other cluster, each cluster counts only its own slots, and the stored ownership of each
names only its own slots.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from consumer_support import ConsumerHarness, assert_exactly_once, produce, wait_until
from rack_support import RackHarness, wait_for_leaders

from lagsched.adapters.mysql import connect
from lagsched.adapters.slots import SlotRegistry, slot_id_for
from lagsched_dev.stack.config import StackConfig

SINGLE_PARTITIONS, RACK_PARTITIONS = 4, 6
RECORDS = 6_000


def _grouped(mysql: Any, sql: str) -> dict[str, set[str]]:
    """The rows of a two-column ``sql`` as first column -> the set of its second column's values."""
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            out: dict[str, set[str]] = {}
            for key, value in cur.fetchall():
                out.setdefault(str(key), set()).add(str(value))
        conn.commit()
    finally:
        conn.close()
    return out


def _rows_by_holder(mysql: Any) -> dict[str, set[str]]:
    """Claim-table rows with a live holder: slot id -> the clusters of its rows."""
    return _grouped(
        mysql,
        "SELECT p.claimed_by, t.cluster FROM topic_partitions p JOIN topics t ON t.topic_id = p.topic_id"
        " WHERE p.claimed_by IS NOT NULL AND p.lease_expires_at > UTC_TIMESTAMP(6)",
    )


def _stored_owners(mysql: Any) -> dict[str, set[str]]:
    """Slot ids named in each cluster's stored assignment (topic_owners)."""
    return _grouped(mysql, "SELECT cluster, slot_id FROM topic_owners")


def test_two_clusters_in_one_database_and_redis_db_each_land_every_record_once_with_their_own_slots(
    mysql_db: Any,
    kafka_config: dict[str, Any],
    redis_client: Any,
    rack_cluster: StackConfig,
    tmp_path: Path,
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = uuid.uuid4().hex[:8]
    topic = f"orders-{tag}"  # the same name on both clusters: names are not unique across clusters
    rack_config = {"bootstrap.servers": rack_cluster.kafka_rack_bootstrap}
    made = []
    for config, partitions, replicas in ((kafka_config, SINGLE_PARTITIONS, 1), (rack_config, RACK_PARTITIONS, 3)):
        admin = AdminClient(config)
        admin.create_topics([NewTopic(topic, partitions, replicas)])[topic].result(timeout=60)
        made.append(admin)
    wait_for_leaders(
        rack_cluster.kafka_rack_bootstrap, topic, timeout_s=60,
        accept=lambda r: len(r) == RACK_PARTITIONS and None not in r.values(),
    )  # fmt: skip
    produce(kafka_config, topic, RECORDS, partitions=SINGLE_PARTITIONS)
    produce(rack_config, topic, RECORDS, partitions=RACK_PARTITIONS)

    redis_db = int(redis_client.connection_pool.connection_kwargs["db"])
    single = ConsumerHarness(mysql_db, kafka_config, redis_db, f"single-{tag}", tmp_path / "single")
    rack = RackHarness(mysql_db, rack_config, redis_db, f"rack-{tag}", tmp_path / "rack")
    for h in (single, rack):
        h.workdir.mkdir()
    single_id = single.register(topic, linker_workers=2)
    rack_id = rack.register(topic, linker_workers=2)
    slots = {
        single.cluster: {slot_id_for(f"{single.cluster}-slot-{n}") for n in (1, 2)},
        rack.cluster: {slot_id_for(f"{rack.cluster}-slot-1")},
    }
    # Small batches, so the slots run long enough to overlap and share the single broker's topic.
    args = ("--max-records", "300")
    try:
        running = [
            single.start(f"{single.cluster}-slot-1", *args),
            single.start(f"{single.cluster}-slot-2", *args),
            rack.start(f"{rack.cluster}-slot-1", *args),
        ]
        registries = {h.cluster: SlotRegistry(redis_client, cluster=h.cluster) for h in (single, rack)}
        seen_holders: dict[str, set[str]] = {}

        def caught_up() -> bool:
            for slot in running:
                assert slot.proc.poll() is None, f"{slot.name} exited early:\n{slot.tail()}"
            for holder, clusters in _rows_by_holder(mysql_db).items():
                seen_holders.setdefault(holder, set()).update(clusters)
            for cluster, live in ((c, r.live_slots(datetime.now(UTC), 30)) for c, r in registries.items()):
                assert set(live) <= slots[cluster], f"{cluster}'s live set has another cluster's slot: {live}"
            done_single = single.committed(single_id) == {p: RECORDS // SINGLE_PARTITIONS for p in range(4)}
            done_rack = rack.committed(rack_id) == {p: RECORDS // RACK_PARTITIONS for p in range(6)}
            return done_single and done_rack

        wait_until(caught_up, 420, "both clusters' topics to be committed to their ends")
        # Every slot of each cluster is live in its own set, and only there; each cluster's stored
        # ownership names exactly its own live slots (the single broker's topic has two lanes).
        for cluster, registry in registries.items():
            assert set(registry.live_slots(datetime.now(UTC), 30)) == slots[cluster]
        wait_until(lambda: _stored_owners(mysql_db) == slots, 30, "each cluster's ownership to name its own slots")
        for slot in running:
            slot.terminate()
        for slot in running:
            assert slot.wait(120) == 0, slot.tail()
    finally:
        single.stop_all()
        rack.stop_all()

    for holder, clusters in seen_holders.items():
        (cluster,) = clusters  # a slot only ever held rows of one cluster ...
        assert holder in slots[cluster], f"slot {holder} held rows of {cluster}"  # ... its own
    assert_exactly_once(single.sink_table(), topic, {p: RECORDS // SINGLE_PARTITIONS for p in range(4)})
    assert_exactly_once(rack.sink_table(), topic, {p: RECORDS // RACK_PARTITIONS for p in range(6)})
    for admin in made:
        admin.delete_topics([topic])  # not awaited: the name is this test's own
