"""The registry's sync rules (core.registry.plan_sync), one case per row of the module's table."""

from __future__ import annotations

import pytest

from lagsched.core.registry import BrokerTopic, TopicDefaults, TopicRow, plan_sync

A, B = "A" * 22, "B" * 22


def row(tid: str, name: str, kid: str | None, *, enabled: bool = True, parts: int = 2, workers: int = 1) -> TopicRow:
    return TopicRow(tid, "c", name, kid, parts, -1, workers, None, None, enabled)


def test_new_topic_gets_the_defaults() -> None:
    plan = plan_sync([], [BrokerTopic("t", 3, 1000, A)], TopicDefaults(linker_workers=2))
    [new] = plan.insert
    assert (new.topic.name, new.linker_workers, new.replaces) == ("t", 2, None)
    assert (new.min_workers, new.max_workers) == (None, None)
    assert plan.added == ("t",) and plan.recreated == ()


def test_unchanged_topic_writes_nothing() -> None:
    plan = plan_sync([row("r", "t", A)], [BrokerTopic("t", 2, -1, A)])
    assert (plan.insert, plan.update, plan.disable) == ((), (), ())
    assert [r.topic_id for r in plan.unchanged] == ["r"]


def test_a_topic_whose_timestamp_type_changed_is_updated_in_place() -> None:
    plan = plan_sync([row("r", "t", A)], [BrokerTopic("t", 2, -1, A, log_append_time=True)])
    [u] = plan.update
    assert (u.row.topic_id, u.topic.log_append_time, u.reenable) == ("r", True, False)
    again = plan_sync([TopicRow("r", "c", "t", A, 2, -1, 1, None, None, True, True)], [u.topic])
    assert again.update == () and [r.topic_id for r in again.unchanged] == ["r"]


def test_grown_topic_is_updated_in_place() -> None:
    plan = plan_sync([row("r", "t", A)], [BrokerTopic("t", 5, -1, A)])
    [u] = plan.update
    assert (u.row.topic_id, u.topic.partitions, u.reenable) == ("r", 5, False)


def test_a_row_without_a_kafka_id_adopts_the_brokers() -> None:
    plan = plan_sync([row("r", "t", None)], [BrokerTopic("t", 2, -1, A)])
    [u] = plan.update
    assert (u.row.topic_id, u.topic.kafka_topic_id) == ("r", A)
    assert plan.insert == () and plan.disable == ()


def test_recreated_topic_replaces_the_row_and_keeps_its_worker_settings() -> None:
    plan = plan_sync([row("r", "t", A, workers=4)], [BrokerTopic("t", 1, -1, B)])
    assert plan.disable == ("r",) and plan.disabled_names == ()
    [new] = plan.insert
    assert (new.replaces, new.linker_workers, new.topic.kafka_topic_id) == ("r", 4, B)
    assert plan.recreated == ("t",) and plan.added == ()


def test_deleted_topic_is_disabled() -> None:
    plan = plan_sync([row("r", "t", A), row("s", "u", B)], [BrokerTopic("u", 2, -1, B)])
    assert plan.disable == ("r",) and plan.disabled_names == ("t",)


def test_a_topic_that_only_looked_missing_comes_back_with_its_row() -> None:
    plan = plan_sync([row("r", "t", A, enabled=False)], [BrokerTopic("t", 2, -1, A)])
    [u] = plan.update
    assert (u.row.topic_id, u.reenable) == ("r", True)
    assert plan.reenabled == ("t",)


@pytest.mark.parametrize("old_id", [B, None])
def test_deleted_then_created_again_is_a_new_row(old_id: str | None) -> None:
    # A disabled row comes back only when the broker proves it is the same topic.
    plan = plan_sync([row("r", "t", old_id, enabled=False, workers=3)], [BrokerTopic("t", 2, -1, A)])
    [new] = plan.insert
    assert (new.replaces, new.linker_workers) == ("r", 3)
    assert plan.update == () and plan.disable == ()


def test_uncertain_topics_are_left_alone() -> None:
    plan = plan_sync([row("r", "t", A)], [], uncertain={"t"})
    assert (plan.insert, plan.update, plan.disable) == ((), (), ())


def test_only_restricts_what_may_be_added_or_disabled() -> None:
    plan = plan_sync([row("r", "t", A)], [BrokerTopic("x", 1, -1, B)], only={"x"})
    assert plan.added == ("x",) and plan.disable == ()


def test_broker_topic_validates_its_fields() -> None:
    with pytest.raises(ValueError, match="partitions"):
        BrokerTopic("t", 0)
    with pytest.raises(ValueError, match="partitions"):
        BrokerTopic("t", 2.5)  # type: ignore[arg-type]
