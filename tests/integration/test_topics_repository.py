"""The topics repository on the real MariaDB: a failed read reports its own error."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from lagsched.adapters.mysql import connect
from lagsched.adapters.topics import load_topics, load_topics_with_partitions


def kill(victim: Any, params: Any) -> None:
    """End `victim`'s session from another connection, as a server restart or a network cut would."""
    admin = connect(params)
    with admin.cursor() as cur:
        cur.execute("KILL CONNECTION %s", (victim.thread_id(),))
    admin.close()


@pytest.mark.parametrize("read", [lambda c: load_topics(c, "c1"), lambda c: load_topics_with_partitions(c, "c1")])
def test_a_read_on_a_broken_connection_raises_its_own_error(mysql_db: Any, read: Any) -> None:
    conn = connect(mysql_db)
    kill(conn, mysql_db)
    # Before, `finally: conn.commit()` ran on the dead connection and its InterfaceError replaced
    # the read's own error, which is the one that says what happened.
    with pytest.raises(pymysql.err.OperationalError) as err:
        read(conn)
    assert err.value.args[0] in {2006, 2013, 4031}, err.value


def _register(db: Any, cluster: str, name: str, partitions: int, *, enabled: bool = True) -> str:
    topic_id = f"id-{cluster}-{name}"[:36]
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO topics (topic_id, cluster, name, partition_count, enabled) VALUES (%s, %s, %s, %s, %s)",
            (topic_id, cluster, name, partitions, enabled),
        )
        for p in range(partitions):
            cur.execute("INSERT INTO topic_partitions (topic_id, partition_id) VALUES (%s, %s)", (topic_id, p))
    db.commit()
    return topic_id


def test_topics_with_partitions_reads_offsets_and_live_holders_only(db: Any) -> None:
    busy = _register(db, "c1", "orders", 12)
    _register(db, "c1", "archive", 2, enabled=False)
    _register(db, "c2", "orders", 3)
    with db.cursor() as cur:
        cur.execute("INSERT INTO topics (topic_id, cluster, name, partition_count) VALUES ('bare', 'c1', 'bare', 4)")
        cur.execute(
            "UPDATE topic_partitions SET committed_offset = partition_id * 1000"
            " WHERE topic_id = %s AND partition_id %% 2 = 0",
            (busy,),
        )
        # Holder ids are whatever a slot wrote: separators, spaces and non-ASCII come back whole.
        cur.execute(
            "UPDATE topic_partitions SET claimed_by = %s, lease_expires_at = CURRENT_TIMESTAMP(6) + INTERVAL 1 HOUR"
            " WHERE topic_id = %s AND partition_id IN (1, 10)",
            ("slot a,b c-é", busy),
        )
        cur.execute(
            "UPDATE topic_partitions SET claimed_by = 'gone',"
            " lease_expires_at = CURRENT_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE topic_id = %s AND partition_id = 2",
            (busy,),
        )
    db.commit()

    now, read = load_topics_with_partitions(db, "c1")

    assert [t.name for t, _ in read] == ["bare", "orders"]  # by name; disabled and other clusters left out
    assert read[0][1] == ()
    parts = read[1][1]
    assert [p.partition_id for p in parts] == list(range(12))  # partition order, 10 after 9
    assert [p.committed_offset for p in parts] == [p * 1000 if p % 2 == 0 else None for p in range(12)]
    assert {p.partition_id: p.holder_at(now) for p in parts if p.holder_at(now)} == {
        1: "slot a,b c-é",
        10: "slot a,b c-é",
    }
    # The columns as they are: the expired holder is still named, its lease judged by the database's now.
    named = {p.partition_id: p.claimed_by for p in parts if p.claimed_by}
    assert named == {1: "slot a,b c-é", 2: "gone", 10: "slot a,b c-é"}
    expired = parts[2].lease_expires_at
    assert expired is not None and expired.tzinfo is not None and expired < now
    assert parts[1].lease_expires_at is not None and parts[1].lease_expires_at > now
    assert all(p.topic_id == busy for p in parts)
    now_empty, none = load_topics_with_partitions(db, "c9")  # no topic: the time still comes
    assert none == [] and now_empty.tzinfo is not None and now_empty >= now


def test_topics_with_partitions_refuses_a_packed_text_cut_short(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from lagsched.adapters import topics

    _register(db, "c1", "wide", 300)
    monkeypatch.setattr(topics, "_PACKED_MAX_BYTES", 1024)  # MySQL cuts the text at the limit without an error
    with pytest.raises(RuntimeError, match="300 partition rows did not fit"):
        load_topics_with_partitions(db, "c1")
