"""Worker slots against the real Redis, with an injected clock (only the lock's TTL test sleeps)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lagsched.adapters.slots import SlotLock, SlotRegistry, new_slot_id, slot_id_for
from lagsched.core.times import Clock

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
TIMEOUT = 30.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def registry(redis_client: Any) -> SlotRegistry:
    return SlotRegistry(redis_client, namespace="lagsched_test", cluster="c1")


def test_heartbeat_timeout_and_leave(registry: SlotRegistry, redis_client: Any) -> None:
    a, b, c = sorted(new_slot_id() for _ in range(3))
    registry.heartbeat(a, at(0), TIMEOUT)
    registry.heartbeat(b, at(10), TIMEOUT)
    registry.heartbeat(c, at(20), TIMEOUT)
    assert registry.live_slots(at(20), TIMEOUT) == [a, b, c]
    # a's last beat is exactly TIMEOUT old: silent for the timeout means dead
    assert registry.live_slots(at(30), TIMEOUT) == [b, c]
    assert registry.live_slots(at(29.999), TIMEOUT) == [a, b, c]
    registry.heartbeat(a, at(31), TIMEOUT)  # a came back
    assert registry.live_slots(at(35), TIMEOUT) == [a, b, c]
    registry.leave(b)  # graceful: gone at once, long before its timeout
    assert registry.live_slots(at(35), TIMEOUT) == [a, c]
    assert registry.last_seen(b) is None
    assert redis_client.exists(f"lagsched_test:slot:{b}") == 0
    # the per-slot key carries the beat for operators and expires on Redis's clock
    assert redis_client.get(f"lagsched_test:slot:{a}") == at(31).isoformat()
    assert 0 < redis_client.ttl(f"lagsched_test:slot:{a}") <= TIMEOUT
    assert registry.live_slots(at(100), TIMEOUT) == []


def test_a_reader_with_a_slower_clock_still_sees_a_fresh_beat(registry: SlotRegistry) -> None:
    s = new_slot_id()
    registry.heartbeat(s, at(5), TIMEOUT)
    assert registry.live_slots(at(0), TIMEOUT) == [s]


def test_prune_drops_only_long_silent_slots(registry: SlotRegistry) -> None:
    old, fresh = new_slot_id(), new_slot_id()
    registry.heartbeat(old, at(0), TIMEOUT)
    registry.heartbeat(fresh, at(290), TIMEOUT)
    assert registry.prune(at(301), older_than_s=10 * TIMEOUT) == 1
    assert registry.last_seen(old) is None
    assert registry.last_seen(fresh) == at(290).timestamp()


def test_namespaces_do_not_mix(redis_client: Any) -> None:
    one, two = SlotRegistry(redis_client, "ns1", cluster="c1"), SlotRegistry(redis_client, "ns2", cluster="c1")
    s = new_slot_id()
    one.heartbeat(s, at(0), TIMEOUT)
    assert two.live_slots(at(0), TIMEOUT) == []


def test_clusters_have_their_own_live_sets(redis_client: Any) -> None:
    one, two = (SlotRegistry(redis_client, "ns_clusters", cluster=c) for c in ("east", "west"))
    a, b = new_slot_id(), new_slot_id()
    one.heartbeat(a, at(0), TIMEOUT)
    two.heartbeat(b, at(1), TIMEOUT)
    assert one.live_slots(at(2), TIMEOUT) == [a] and two.live_slots(at(2), TIMEOUT) == [b]
    assert one.last_seen(b) is None and one.prune(at(500), 10 * TIMEOUT) == 1
    assert two.live_slots(at(2), TIMEOUT) == [b]  # the other cluster's prune left it alone
    with pytest.raises(ValueError, match="cluster name 'no/such' is not usable"):
        SlotRegistry(redis_client, cluster="no/such")


def test_slot_ids_are_stable_uuids_and_validated(registry: SlotRegistry) -> None:
    assert slot_id_for("worker-03") == slot_id_for("worker-03") != slot_id_for("worker-04")
    with pytest.raises(ValueError, match="not a UUID"):
        registry.heartbeat("worker-03", at(0), TIMEOUT)
    with pytest.raises(ValueError, match="naive"):
        registry.heartbeat(new_slot_id(), datetime(2026, 1, 1), TIMEOUT)


def test_a_late_beat_never_moves_a_fresher_one_back(registry: SlotRegistry) -> None:
    slot = new_slot_id()
    registry.heartbeat(slot, at(100), TIMEOUT)
    registry.heartbeat(slot, at(10), TIMEOUT)  # a process thawed with a beat from before its freeze
    assert registry.last_seen(slot) == at(100).timestamp()
    assert registry.live_slots(at(120), TIMEOUT) == [slot]


def test_the_slot_lock_admits_one_process_and_frees_itself(redis_client: Any) -> None:
    lock, slot = SlotLock(redis_client, namespace="lagsched_test"), new_slot_id()
    assert lock.acquire(slot, "host:1:a", 10) is None
    assert lock.renew(slot, "host:1:a", 10) is None  # its holder keeps it
    assert lock.acquire(slot, "host:2:b", 10) == "host:1:a"  # a second start sees who runs it
    assert lock.holders([slot, new_slot_id()]) == {slot: "host:1:a"}
    assert lock.release(slot, "host:2:b") is False  # never another's
    assert lock.holders([slot]) == {slot: "host:1:a"}
    assert lock.release(slot, "host:1:a") is True
    assert lock.holders([slot]) == {}
    # A key that vanished (Redis restarted empty) is taken back by its holder at the next renewal.
    assert lock.acquire(slot, "host:2:b", 0.3) is None
    time.sleep(0.5)  # the TTL ran out: a killed process's lock frees itself
    assert lock.holders([slot]) == {}
    assert lock.renew(slot, "host:3:c", 10) is None
    assert lock.renew(slot, "host:2:b", 10) == "host:3:c"  # the frozen one learns it was replaced
    with pytest.raises(ValueError, match="not a UUID"):
        lock.acquire("slot-1", "t", 10)


def test_a_lock_held_by_a_dead_process_of_this_host_is_taken_over_at_once(redis_client: Any) -> None:
    import socket
    import subprocess
    import sys

    from lagsched.adapters.slots import holder_is_gone, lock_token

    lock, slot = SlotLock(redis_client, namespace="lagsched_test"), new_slot_id()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    dead = f"{socket.gethostname()}:{int(gone.stdout)}:deadbeef"
    mine = lock_token()
    assert holder_is_gone(dead)
    assert not holder_is_gone(mine)  # this very process
    assert not holder_is_gone(f"elsewhere:{int(gone.stdout)}:x")  # another host's: never judged from here
    assert not holder_is_gone("garbage")
    # A Celery worker of this machine (name@host), killed with its slot: another worker here judges it.
    assert holder_is_gone(f"w1@{socket.gethostname()}:{int(gone.stdout)}:deadbeef")
    assert not holder_is_gone(f"w1@elsewhere:{int(gone.stdout)}:deadbeef")
    assert lock.acquire(slot, dead, 60) is None
    assert lock.acquire(slot, mine, 60) == dead
    assert lock.take_over(slot, "someone-else", mine, 60) is False  # only from the holder named
    assert lock.take_over(slot, dead, mine, 60) is True
    assert lock.holders([slot]) == {slot: mine}


def test_the_slot_keeper_heartbeats_on_its_injected_wall_clock(registry: SlotRegistry, mysql_db: Any) -> None:
    from lagsched.adapters.claims import open_claim_store
    from lagsched.workflows.slot_keeper import SlotKeeper

    s = new_slot_id()
    frozen_at_7 = Clock(now=lambda: at(7), monotonic=time.monotonic)
    keeper = SlotKeeper(registry, open_claim_store(mysql_db), s, heartbeat_s=1.0, lease_s=6.0, clock=frozen_at_7)
    try:
        keeper.go_live()
        assert registry.last_seen(s) == at(7).timestamp()
        assert registry.live_slots(at(7 + keeper.timeout_s - 0.001), keeper.timeout_s) == [s]
        keeper.stand_by()
        assert registry.live_slots(at(8), keeper.timeout_s) == []
    finally:
        keeper.stop()
