"""The Redis names of `lagsched.adapters.redis_store`, pinned: deployed data and the lagsched page
read them, so a change here is a migration, never a refactoring."""

from __future__ import annotations

from typing import Any

from lagsched.adapters import redis_store as names
from lagsched.adapters.lag_store import LagStore
from lagsched.adapters.slots import SlotLock, SlotRacks, SlotRegistry


class NoRedis:
    """Enough of a client for the stores' constructors, which register scripts and do no I/O."""

    def register_script(self, script: str) -> object:
        return script


def test_the_lag_history_keys() -> None:
    assert names.latest_key("eu-1", "orders") == "lagsched:eu-1:latest:orders"
    assert names.committed_key("eu-1", "orders") == "lagsched:eu-1:committed:orders"
    assert names.lag_key("eu-1", "orders") == "lagsched:eu-1:lag:orders"
    assert names.evaluated_key("eu-1", "orders") == "lagsched:eu-1:evaluated:orders"
    assert names.measured_key("eu-1") == "lagsched:eu-1:measured"
    assert names.HISTORY_KINDS == ("latest", "committed", "lag", "evaluated")


def test_the_notification_keys() -> None:
    from lagsched.adapters.notified import NotifiedStore

    assert names.notified_key("eu-1") == "lagsched:eu-1:notified"
    assert NotifiedStore(NoRedis(), "eu-1").key == "lagsched:eu-1:notified"  # type: ignore[arg-type]


def test_the_slot_keys_and_channels() -> None:
    slot = "5b0c1a0e-6c61-6773-6368-647300000001"
    assert names.slots_key("eu-1") == "lagsched:slots:eu-1"
    assert names.slot_key(slot) == f"lagsched:slot:{slot}"
    assert names.slot_lock_key(slot) == f"lagsched:slot_lock:{slot}"
    assert names.slot_racks_key() == "lagsched:slot_racks"
    assert names.slot_events_channel() == "lagsched:slot_events"
    assert names.SCALING_CHANNEL == "lagsched:scaling"


def test_the_stores_use_these_names() -> None:
    client: Any = NoRedis()
    store = LagStore(client, "eu-1")
    assert store.latest_key("orders", 3) == "lagsched:eu-1:latest:orders:3"
    assert store.committed_key("orders", 3) == "lagsched:eu-1:committed:orders:3"
    assert (store.lag_key("orders"), store.evaluated_key("orders")) == (
        "lagsched:eu-1:lag:orders",
        "lagsched:eu-1:evaluated:orders",
    )
    assert store.measured_key() == "lagsched:eu-1:measured"
    registry = SlotRegistry(client, cluster="eu-1")
    assert (registry.set_key, registry.events_channel) == ("lagsched:slots:eu-1", "lagsched:slot_events")
    assert SlotLock(client).key("s") == "lagsched:slot_lock:s"
    assert SlotRacks(client).key == "lagsched:slot_racks"
    other = SlotRegistry(client, "lagsched_test", cluster="eu-1")
    assert (other.set_key, other.events_channel) == ("lagsched_test:slots:eu-1", "lagsched_test:slot_events")
