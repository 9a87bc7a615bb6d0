"""list_offsets retries partitions whose leader is moving, and only those; a large read is cut into calls of
at most `MAX_PARTITIONS_PER_REQUEST` partitions (a fake Admin client)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition

from lagsched.adapters.kafka_admin import (
    MAX_PARTITIONS_PER_REQUEST,
    _has_whole_call,
    _list,
    mirror_group_offsets,
    read_offsets,
)
from lagsched.core.errors import KafkaOffsetsError


class Info:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class FlakyAdmin:
    """Answers each partition with the next scripted outcome: an offset, or a Kafka error code."""

    def __init__(self, script: dict[tuple[str, int], list[int | str]]) -> None:
        self.script = script
        self.requests: list[list[tuple[str, int]]] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        raise NotImplementedError

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        self.requests.append(sorted((tp.topic, tp.partition) for tp in request))
        out = {}
        for tp in request:
            step = self.script[(tp.topic, tp.partition)].pop(0)
            future: Future[Any] = Future()
            if isinstance(step, int):
                future.set_result(Info(step))
            else:
                future.set_exception(KafkaException(KafkaError(getattr(KafkaError, step))))
            out[tp] = future
        return out


def test_only_the_partitions_that_failed_are_asked_again() -> None:
    admin = FlakyAdmin({("t", 0): [10], ("t", 1): ["NOT_LEADER_FOR_PARTITION", "UNKNOWN_LEADER_EPOCH", 20]})
    sleeps: list[float] = []
    got = _list(admin, [("t", 0), ("t", 1)], "latest", TopicPartition, timeout_s=1, sleep=sleeps.append)
    assert got == {("t", 0): 10, ("t", 1): 20}
    assert admin.requests == [[("t", 0), ("t", 1)], [("t", 1)], [("t", 1)]]
    assert sleeps == [0.2, 0.5]


def test_a_leader_that_never_comes_back_fails_naming_the_partition() -> None:
    admin = FlakyAdmin({("t", 0): ["NOT_LEADER_FOR_PARTITION"] * 4})
    with pytest.raises(KafkaOffsetsError, match=r"t\[0\] .*after 4 attempt\(s\)"):
        _list(admin, [("t", 0)], "latest", TopicPartition, timeout_s=1, sleep=lambda _s: None)


def test_an_error_that_cannot_heal_is_not_retried() -> None:
    admin = FlakyAdmin({("t", 0): ["TOPIC_AUTHORIZATION_FAILED"], ("t", 1): ["NOT_LEADER_FOR_PARTITION"]})
    with pytest.raises(KafkaOffsetsError, match=r"t\[0\].*after 1 attempt"):
        _list(admin, [("t", 0), ("t", 1)], "latest", TopicPartition, timeout_s=1, sleep=lambda _s: None)
    assert len(admin.requests) == 1


class RefreshingAdmin(FlakyAdmin):
    """Like librdkafka: a partition added since the last metadata request is unknown until a refresh."""

    def __init__(self, script: dict[tuple[str, int], list[int | str]]) -> None:
        super().__init__(script)
        self.refreshed: list[str | None] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        self.refreshed.append(topic)
        return None


def test_an_unknown_partition_refreshes_the_topics_metadata_then_asks_again() -> None:
    admin = RefreshingAdmin({("t", 0): [5], ("t", 12): ["_UNKNOWN_PARTITION", 7]})
    got = _list(admin, [("t", 0), ("t", 12)], "latest", TopicPartition, timeout_s=1, sleep=lambda _s: None)
    assert got == {("t", 0): 5, ("t", 12): 7}
    assert admin.refreshed == ["t"]


class CountingFake(FlakyAdmin):
    """Answers every partition with its number plus 100 (latest read committed: the LSO), plus 150
    (latest read uncommitted: the high watermark) or its number (earliest)."""

    def __init__(self, script: dict[tuple[str, int], list[int | str]]) -> None:
        super().__init__(script)
        self.isolation: list[str | None] = []

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
        self.requests.append(sorted((tp.topic, tp.partition) for tp in request))
        level = kwargs.get("isolation_level")
        self.isolation.append(None if level is None else level.name)
        out = {}
        for tp, spec in request.items():
            future: Future[Any] = Future()
            latest = 100 if level == IsolationLevel.READ_COMMITTED else 150
            extra = latest if type(spec).__name__ == "LatestSpec" else 0
            future.set_result(Info(tp.partition + extra))
            out[tp] = future
        return out


def test_a_large_read_is_cut_into_calls_of_at_most_the_chunk_size_per_spec() -> None:
    admin = CountingFake({})
    got = read_offsets(admin, {"a": 5, "b": 3}, max_partitions_per_request=3)
    # 8 partitions in calls of 3, 3, 2, for each of the three kinds; every partition asked exactly once per kind.
    assert sorted(len(r) for r in admin.requests) == [2, 2, 2, 3, 3, 3, 3, 3, 3]
    asked = sorted(k for r in admin.requests for k in r)
    assert asked == sorted(3 * ([("a", p) for p in range(5)] + [("b", p) for p in range(3)]))
    got_a = [(o.partition, o.latest, o.high_watermark, o.log_start) for o in got["a"]]
    assert got_a == [(p, p + 100, p + 150, p) for p in range(5)]
    got_b = [(o.partition, o.latest, o.high_watermark, o.log_start) for o in got["b"]]
    assert got_b == [(p, p + 100, p + 150, p) for p in range(3)]


def test_latest_is_the_last_stable_offset_and_the_high_watermark_comes_along() -> None:
    """``latest`` is asked read committed (the LSO, what lagsched's reads can reach); the high
    watermark read uncommitted; the log start with the client's default."""
    admin = CountingFake({})
    got = read_offsets(admin, {"a": 2})["a"]
    assert sorted(admin.isolation, key=str) == [None, "READ_COMMITTED", "READ_UNCOMMITTED"]
    assert [(o.latest, o.high_watermark, o.held_by_transaction) for o in got] == [(100, 150, 50), (101, 151, 50)]


def test_a_read_below_the_chunk_size_is_one_call_per_spec() -> None:
    admin = CountingFake({})
    read_offsets(admin, {"a": 5, "b": 3})
    assert sorted(len(r) for r in admin.requests) == [8, 8, 8]
    assert MAX_PARTITIONS_PER_REQUEST >= 8


def test_a_failing_chunk_fails_the_whole_read_naming_its_partition() -> None:
    class OneBadChunk(CountingFake):
        def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Any]:
            if any(tp.topic == "b" for tp in request):
                bad: Future[Any] = Future()
                bad.set_exception(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
                return {tp: bad for tp in request}
            return super().list_offsets(request, **kwargs)

    with pytest.raises(KafkaOffsetsError, match=r"b\[\d\]"):
        read_offsets(OneBadChunk({}), {"a": 4, "b": 2}, max_partitions_per_request=2)


def test_the_public_list_offsets_is_used_for_anything_but_confluent_kafkas_own_client() -> None:
    assert not _has_whole_call(CountingFake({}))


# ------------------------------------------------------------------ mirroring into a consumer group


class GroupAdmin:
    """Answers each alter-offsets request with the next scripted outcome: None (accepted), a Kafka
    error code for the whole group, or ``("partition", code)`` for the first partition only."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.requests = 0

    def alter_consumer_group_offsets(self, requests: list[Any], **kwargs: Any) -> dict[str, Any]:
        from types import SimpleNamespace

        self.requests += 1
        (request,) = requests
        step = self.script.pop(0)
        future: Future[Any] = Future()
        if step is None or isinstance(step, tuple):
            # The broker's answer: each partition with its error (a TopicPartition's is read-only).
            parts = [
                SimpleNamespace(topic=tp.topic, partition=tp.partition, error=None) for tp in request.topic_partitions
            ]
            if step is not None:
                parts[0].error = KafkaError(getattr(KafkaError, step[1]))
            future.set_result(SimpleNamespace(group_id=request.group_id, topic_partitions=parts))
        else:
            future.set_exception(KafkaException(KafkaError(getattr(KafkaError, step))))
        return {request.group_id: future}


def test_a_mirror_asks_again_while_the_group_coordinator_is_loading() -> None:
    admin = GroupAdmin(["COORDINATOR_LOAD_IN_PROGRESS", ("partition", "NOT_COORDINATOR"), None])
    slept: list[float] = []
    mirror_group_offsets(admin, "g", {("t", 0): 5, ("t", 1): 7}, backoffs_s=(0.1, 0.2, 0.3), sleep=slept.append)
    assert admin.requests == 3 and slept == [0.1, 0.2]


def test_a_mirror_refused_for_good_fails_at_once_naming_the_group() -> None:
    admin = GroupAdmin(["GROUP_AUTHORIZATION_FAILED"])
    with pytest.raises(KafkaOffsetsError, match=r"consumer group 'g' \(after 1 attempt"):
        mirror_group_offsets(admin, "g", {("t", 0): 5}, backoffs_s=(0.1,), sleep=lambda _: None)
    assert admin.requests == 1


def test_a_mirror_still_loading_after_every_attempt_fails_naming_the_attempts() -> None:
    admin = GroupAdmin(["COORDINATOR_LOAD_IN_PROGRESS"] * 3)
    with pytest.raises(KafkaOffsetsError, match=r"after 3 attempt\(s\).*Coordinator load"):
        mirror_group_offsets(admin, "g", {("t", 0): 5}, backoffs_s=(0.0, 0.0), sleep=lambda _: None)
