"""The Kafka Admin API as lagsched uses it: the cluster's topics, stable and high watermarks, log starts.

`fetch_broker_topics` lists every topic with its partition count, ``retention.ms`` and Kafka topic
id in three requests however many topics there are (metadata, ``DescribeTopics``,
``DescribeConfigs``).

Every partition of every requested topic is read in three Admin ``list_offsets`` calls per 250
partitions (`MAX_PARTITIONS_PER_REQUEST`): ``latest()`` read committed (the last stable offset),
``latest()`` read uncommitted (the high watermark) and ``earliest()``, two calls in flight at a
time, plus one metadata request for the partition counts. librdkafka groups each call into one request per partition
leader, so the number of round trips grows with the number of brokers and thousands of
partitions, never with one per partition (one call per partition is what made naive lag
checkers slow on clusters with thousands of partitions). The calls are cut at 250 partitions
because librdkafka's own handling of one call grows faster than its size: on the local broker,
10,000 partitions took 1.6 s in one call and 0.35 s as ten calls of 1,000; the three specs of
10,000 partitions cost 0.39 s of CPU in calls of 1,000, 0.19 s in calls of 250 and 0.26 s in calls
of 50, where the requests' own cost takes over.

``list_offsets`` takes a dict keyed by `TopicPartition` and one isolation level, so a partition
can appear only once per call: hence one call per spec and isolation level, not a single call.

Why read committed: lagsched's reads are read committed (records of aborted transactions never
reach the lake, docs/consumer.md), and such a consumer can read only up to the **last stable
offset** (LSO): the first offset of the oldest transaction still open, or the high watermark when
none is. So `BrokerOffsets.latest` is the LSO: a batch never plans past it, and lag counts what
the pipeline can actually read. The high watermark comes along so that a partition held back by a
long open transaction (LSO below the high watermark) can be told apart and reported.

Example:
    >>> from confluent_kafka.admin import AdminClient  # doctest: +SKIP
    >>> admin = AdminClient({"bootstrap.servers": "127.0.0.1:19092"})  # doctest: +SKIP
    >>> offsets = fetch_offsets(admin, ["orders"])  # doctest: +SKIP
    >>> offsets["orders"][0].latest  # doctest: +SKIP
    1200
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from lagsched.core.chunks import chunked
from lagsched.core.errors import KafkaOffsetsError, TopicNameError, UnknownTopicError
from lagsched.core.names import validate_topic_name
from lagsched.core.registry import BrokerTopic

__all__ = [
    "BrokerOffsets",
    "BrokerTopics",
    "OffsetsAdmin",
    "admin_client",
    "broker_racks",
    "fetch_broker_topics",
    "fetch_offsets",
    "leader_racks",
    "list_partitions",
    "read_offsets",
]

log = logging.getLogger(__name__)


class OffsetsAdmin(Protocol):
    """The two Admin API calls used here (`confluent_kafka.admin.AdminClient` satisfies it)."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:  # pragma: no cover - protocol
        ...

    def list_offsets(
        self, topic_partition_offsets: dict[Any, Any], **kwargs: Any
    ) -> dict[Any, Any]:  # pragma: no cover
        ...


@dataclass(frozen=True, slots=True)
class BrokerOffsets:
    """What the broker reports for one partition at one moment.

    Attributes:
        topic: topic name.
        partition: partition number.
        latest: the last stable offset (LSO): where a read-committed consumer's reading ends, the
            first offset of the oldest open transaction, or the high watermark when none is open.
            Everything lagsched plans and measures counts up to here.
        log_start: first offset still retained; records below it were deleted by retention.
        high_watermark: the offset the next produced record will get (read uncommitted); above
            ``latest`` while a transaction is open; None when not read.
    """

    topic: str
    partition: int
    latest: int
    log_start: int
    high_watermark: int | None = None

    @property
    def held_by_transaction(self) -> int:
        """Offsets behind the LSO that a read-committed consumer cannot read yet (0 when none)."""
        return 0 if self.high_watermark is None else max(0, self.high_watermark - self.latest)


#: Partitions per ``list_offsets`` call: librdkafka's handling of one call grows faster than its
#: size (10,000 partitions: 1.6 s in one call, 0.35 s in ten; CPU halved again from 1,000 to 250),
#: so a large read is cut into calls of this size (module docstring).
MAX_PARTITIONS_PER_REQUEST = 250
#: ``list_offsets`` calls of one read in flight at once (both specs count): two, as before the
#: calls were cut (one per spec). Four gained little once each call is one future (0.16 s for 10,000
#: partitions per spec, sequentially), and a benchmark process with four in flight, retrying
#: thousands of leaderless new partitions with metadata refreshes, died of a segfault in libc
#: (librdkafka or confluent-kafka, not reproduced): no more concurrency than was proven is used.
MAX_REQUESTS_IN_FLIGHT = 2


def admin_client(config: Mapping[str, Any]) -> Any:
    """An `AdminClient` for the Connection's confluent-kafka settings (no I/O until first use)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(dict(config))


def list_partitions(
    admin: OffsetsAdmin, topics: Iterable[str], *, timeout_s: float = 10.0, ignore_missing: bool = False
) -> dict[str, int]:
    """Partition counts of `topics`, from one metadata request for the whole cluster.

    Asking for all topics at once (rather than ``list_topics(topic=...)`` per topic) keeps it one
    round trip however many topics are measured.

    Args:
        admin: the Admin client.
        topics: topic names (validated).
        timeout_s: metadata request timeout.
        ignore_missing: leave topics the broker does not know out of the result instead of raising.

    Raises:
        UnknownTopicError: a topic does not exist on the broker (unless `ignore_missing`), naming
            every such topic.
        KafkaOffsetsError: the broker reported an error for a topic's metadata.
    """
    wanted = [validate_topic_name(t) for t in dict.fromkeys(topics)]
    if not wanted:
        return {}
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception as exc:  # confluent_kafka raises KafkaException; keep adapters' callers client-agnostic
        raise KafkaOffsetsError(f"cannot read topic metadata from the broker: {exc}") from exc
    counts: dict[str, int] = {}
    missing: list[str] = []
    for name in wanted:
        tmeta = meta.topics.get(name)
        if tmeta is None or _is_unknown_topic(tmeta.error):
            missing.append(name)
            continue
        if tmeta.error is not None:
            raise KafkaOffsetsError(f"broker reported an error for topic {name!r}: {tmeta.error}")
        counts[name] = len(tmeta.partitions)
    if missing and not ignore_missing:
        raise UnknownTopicError(
            f"topic(s) not found on the broker: {', '.join(repr(t) for t in missing)}; "
            "check the name, or disable the topic in the registry if it was deleted",
            topics=tuple(missing),
        )
    return counts


def read_offsets(
    admin: OffsetsAdmin,
    partitions: Mapping[str, int],
    *,
    timeout_s: float = 10.0,
    max_partitions_per_request: int = MAX_PARTITIONS_PER_REQUEST,
) -> dict[str, tuple[BrokerOffsets, ...]]:
    """Last stable, high watermark and log-start offsets of partitions ``0 .. n-1`` of each topic.

    Three ``list_offsets`` calls per `max_partitions_per_request` partitions: ``OffsetSpec.latest()``
    read committed (``latest``, the last stable offset: what lagsched's read-committed reads can
    reach), ``OffsetSpec.latest()`` read uncommitted (``high_watermark``) and
    ``OffsetSpec.earliest()`` (up to 250 partitions, three calls in all).

    Returns:
        Per topic, its partitions' offsets in partition order; topics in the order given.

    Raises:
        KafkaOffsetsError: the broker failed for some partition (names the partition and error).
    """
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

    spec: Any = _OffsetSpec  # untyped in confluent-kafka

    keys = [(validate_topic_name(t), p) for t, n in partitions.items() for p in range(n)]
    if not keys:
        return {t: () for t in partitions}
    chunks = chunked(keys, max_partitions_per_request)
    kinds = (
        (spec.latest(), IsolationLevel.READ_COMMITTED),
        (spec.latest(), IsolationLevel.READ_UNCOMMITTED),
        (spec.earliest(), None),
    )
    jobs = [(s, isolation, chunk) for s, isolation in kinds for chunk in chunks]
    # Several calls in flight at once: each waits on the broker and librdkafka's thread, not on this one.
    workers = min(len(jobs), MAX_REQUESTS_IN_FLIGHT)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="list-offsets") as pool:
        futures = [
            pool.submit(_list, admin, chunk, s, TopicPartition, timeout_s=timeout_s, isolation=isolation)
            for s, isolation, chunk in jobs
        ]
        answers = [f.result() for f in futures]
    n = len(chunks)
    stable, high, earliest = ({k: v for a in answers[i * n : (i + 1) * n] for k, v in a.items()} for i in range(3))
    result: dict[str, list[BrokerOffsets]] = {t: [] for t in partitions}
    for topic, p in keys:
        key = (topic, p)
        # The two latest offsets are two requests, moments apart: a transaction that ended in between
        # can leave the stable offset a little above the high watermark read before it. The high
        # watermark is never below the stable offset, so the later reading stands for both.
        latest = stable[key]
        result[topic].append(
            BrokerOffsets(topic, p, latest=latest, log_start=earliest[key], high_watermark=max(high[key], latest))
        )
    return {t: tuple(v) for t, v in result.items()}


def fetch_offsets(
    admin: OffsetsAdmin, topics: Collection[str], *, timeout_s: float = 10.0
) -> dict[str, tuple[BrokerOffsets, ...]]:
    """`list_partitions` then `read_offsets`: every partition of `topics`, unknown topics an error.

    Raises:
        UnknownTopicError: naming each topic the broker does not know.
        KafkaOffsetsError: the broker failed.
    """
    return read_offsets(admin, list_partitions(admin, topics, timeout_s=timeout_s), timeout_s=timeout_s)


#: A partition whose leader is moving (a new topic, a broker restart) answers these for a moment;
#: librdkafka refreshes its metadata on them, so asking again shortly after is enough.
RETRY_BACKOFFS_S = (0.2, 0.5, 1.0)


def _list(
    admin: OffsetsAdmin,
    keys: Sequence[tuple[str, int]],
    spec: Any,
    topic_partition: Any,
    *,
    timeout_s: float,
    backoffs_s: Sequence[float] = RETRY_BACKOFFS_S,
    sleep: Callable[[float], None] = time.sleep,
    isolation: Any = None,
) -> dict[tuple[str, int], int]:
    """``spec``'s offset of each of ``keys``; ``isolation`` an `IsolationLevel` (None: the client's
    default, read uncommitted)."""
    out: dict[tuple[str, int], int] = {}
    pending = list(keys)
    for attempt in range(len(backoffs_s) + 1):
        failed = _list_once(admin, pending, spec, topic_partition, timeout_s=timeout_s, out=out, isolation=isolation)
        if not failed:
            return out
        retriable = [k for k, exc in failed.items() if _is_retriable(exc)]
        if len(retriable) < len(failed) or attempt == len(backoffs_s):
            # Name a partition that cannot heal if there is one: that is the error to act on.
            topic, partition = next((k for k in failed if k not in retriable), next(iter(failed)))
            exc = failed[(topic, partition)]
            raise KafkaOffsetsError(
                f"cannot read {type(spec).__name__} offset of {topic}[{partition}] "
                f"({len(failed)} partition(s) failed, after {attempt + 1} attempt(s)): {exc}"
            ) from exc
        log.info("%d partition(s) answered a retriable error; asking again", len(retriable))
        _refresh_metadata(admin, {t for (t, _), exc in failed.items() if _is_unknown_partition(exc)}, timeout_s)
        sleep(backoffs_s[attempt])
        pending = retriable
    return out  # pragma: no cover - the loop returns or raises


def _list_once(
    admin: OffsetsAdmin,
    keys: Sequence[tuple[str, int]],
    spec: Any,
    topic_partition: Any,
    *,
    timeout_s: float,
    out: dict[tuple[str, int], int],
    isolation: Any = None,
) -> dict[tuple[str, int], BaseException]:
    """One ``list_offsets`` call; fills `out`, returns the partitions that failed with their error."""
    call = _whole_call if _has_whole_call(admin) else _futures_call
    try:
        answers = call(admin, keys, spec, topic_partition, timeout_s, isolation=isolation)
    except Exception as exc:  # KafkaException / ValueError from the client
        raise KafkaOffsetsError(f"list_offsets({type(spec).__name__}) failed: {exc}") from exc
    failed: dict[tuple[str, int], BaseException] = {}
    for key, answer in answers.items():
        if isinstance(answer, BaseException):
            failed[key] = answer
        else:
            out[key] = answer
    absent = [k for k in keys if k not in out and k not in failed]
    if absent:
        raise KafkaOffsetsError(f"broker returned no {type(spec).__name__} offset for {absent[:5]}")
    return failed


_Answers = dict[tuple[str, int], "int | BaseException"]


def _futures_call(
    admin: OffsetsAdmin,
    keys: Sequence[tuple[str, int]],
    spec: Any,
    topic_partition: Any,
    timeout_s: float,
    *,
    isolation: Any = None,
) -> _Answers:
    """The public ``AdminClient.list_offsets``: one future per partition, each an offset or an error."""
    extra = {} if isolation is None else {"isolation_level": isolation}
    futures = admin.list_offsets({topic_partition(t, p): spec for t, p in keys}, request_timeout=timeout_s, **extra)
    answers: _Answers = {}
    for tp, future in futures.items():
        try:
            answers[(tp.topic, tp.partition)] = int(future.result(timeout=timeout_s + 5).offset)
        except Exception as exc:  # noqa: BLE001 - judged by the caller: retried or raised
            answers[(tp.topic, tp.partition)] = exc
    return answers


def _has_whole_call(admin: Any) -> bool:
    """Whether `admin` is confluent-kafka's own ``AdminClient`` (not a wrapper, a subclass that
    overrides ``list_offsets``, or a test double), whose C call `_whole_call` can use."""
    from confluent_kafka.admin import AdminClient

    return isinstance(admin, AdminClient) and type(admin).list_offsets is AdminClient.list_offsets


def _whole_call(
    admin: Any,
    keys: Sequence[tuple[str, int]],
    spec: Any,
    topic_partition: Any,
    timeout_s: float,
    *,
    isolation: Any = None,
) -> _Answers:
    """What `_futures_call` returns, from the C call underneath ``AdminClient.list_offsets``.

    The public method makes one Python future per partition and sets each from librdkafka's
    thread: at 10,000 partitions that was 80% of a read (0.79 s against 0.16 s for the same
    request with one future, measured on the local broker), and all of it holding the GIL. The C
    call answers the whole request in one future, a dict of `TopicPartition` to its result or
    `KafkaError`, which is what the public method spreads over its futures; its errors are turned
    into the same `KafkaException` s the per-partition futures raise.
    """
    from concurrent.futures import Future

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.cimpl import _AdminClientImpl

    done: Future[Any] = Future()
    done.set_running_or_notify_cancel()
    request = [topic_partition(t, p, int(spec._value)) for t, p in keys]
    # The public method passes its IsolationLevel to the C call as its integer value, like this.
    extra = {} if isolation is None else {"isolation_level_value": isolation.value}
    _AdminClientImpl.list_offsets(admin, request, done, request_timeout=timeout_s, **extra)
    try:
        results = done.result(timeout=timeout_s + 5)
    except Exception as exc:  # noqa: BLE001 - a failed request fails each partition, as the public method does
        return dict.fromkeys(keys, exc)
    answers: _Answers = {}
    for tp, result in results.items():
        key = (tp.topic, tp.partition)
        answers[key] = KafkaException(result) if isinstance(result, KafkaError) else int(result.offset)
    return answers


def _is_unknown_partition(exc: BaseException) -> bool:
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and error.code() == KafkaError._UNKNOWN_PARTITION


def _refresh_metadata(admin: OffsetsAdmin, topics: Collection[str], timeout_s: float) -> None:
    """Ask for ``topics``' metadata again: a long-lived client keeps its partition list from its
    last metadata request, and ``list_offsets`` alone never refreshes it, so partitions added since
    answer "unknown partition" until something does (seen with a consumer slot's client)."""
    for topic in sorted(topics):
        try:
            admin.list_topics(topic=topic, timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - the retry that follows reports what still fails
            log.info("metadata refresh of %s failed: %s", topic, exc)


def _is_retriable(exc: BaseException) -> bool:
    from confluent_kafka import KafkaError

    if _is_unknown_partition(exc):
        return True  # after a metadata refresh (_refresh_metadata); a partition that really is gone fails again

    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and (
        bool(error.retriable())
        or error.code()
        in {
            KafkaError.NOT_LEADER_FOR_PARTITION,
            KafkaError.LEADER_NOT_AVAILABLE,
            KafkaError.UNKNOWN_LEADER_EPOCH,
            KafkaError.FENCED_LEADER_EPOCH,
            KafkaError.REQUEST_TIMED_OUT,
            KafkaError._TIMED_OUT,
            # A group coordinator loading its log (a broker just started) or moving: for group requests.
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.NOT_COORDINATOR,
        }
    )


def _is_unknown_topic(error: Any) -> bool:
    if error is None:
        return False
    from confluent_kafka import KafkaError

    return bool(error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)


@dataclass(frozen=True, slots=True)
class BrokerTopics:
    """The cluster's topics as one sync sees them.

    Attributes:
        topics: every non-internal topic the broker answered for without error.
        uncertain: topics it answered with an error for (mid-creation, no leader): neither there
            nor gone, so a sync leaves them alone.
    """

    topics: tuple[BrokerTopic, ...]
    uncertain: tuple[str, ...] = ()


def fetch_broker_topics(admin: Any, timeout_s: float = 15.0) -> BrokerTopics:
    """Every non-internal topic with its partition count, ``retention.ms`` and Kafka topic id.

    Topics whose names Kafka itself should have refused are skipped with a warning rather than
    failing the whole sync.

    Raises:
        KafkaOffsetsError: the broker could not be read at all.
    """
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception as exc:  # KafkaException: keep callers client-agnostic
        raise KafkaOffsetsError(f"cannot read topic metadata from the broker: {exc}") from exc
    counts: dict[str, int] = {}
    uncertain: list[str] = []
    for name, meta in (metadata.topics or {}).items():
        if name.startswith("__"):
            continue
        try:
            validate_topic_name(name)
        except TopicNameError as exc:
            log.warning("skipping topic: %s", exc)
            continue
        if meta.error is not None or not meta.partitions:
            log.warning("topic %s: the broker answered %s; leaving it as it is until it answers", name, meta.error)
            uncertain.append(name)
            continue
        counts[name] = len(meta.partitions)
    if not counts:
        return BrokerTopics((), tuple(sorted(uncertain)))
    names = sorted(counts)
    ids: dict[str, str] = {}
    for name, future in admin.describe_topics(TopicCollection(names), request_timeout=timeout_s).items():
        try:
            ids[name] = str(future.result(timeout=timeout_s + 5).topic_id)
        except Exception as exc:  # noqa: BLE001 - deleted between the two requests, or no answer: proves nothing
            log.warning("topic %s: cannot read its topic id (%s); leaving it as it is", name, exc)
    retention: dict[str, int] = {}
    appended: set[str] = set()
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names if n in ids]
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            configs = future.result(timeout=timeout_s + 5)
        except Exception as exc:  # noqa: BLE001 - one topic's answer must not fail the sync
            log.warning("topic %s: cannot read its configuration (%s); leaving it as it is", resource.name, exc)
            continue
        entry, stamp = configs.get("retention.ms"), configs.get("message.timestamp.type")
        retention[resource.name] = _retention(entry.value if entry is not None else None)
        if stamp is not None and stamp.value == "LogAppendTime":
            appended.add(resource.name)
    known = [n for n in names if n in ids and n in retention]
    uncertain += [n for n in names if n not in known]
    return BrokerTopics(
        tuple(BrokerTopic(n, counts[n], retention[n], ids[n], n in appended) for n in known), tuple(sorted(uncertain))
    )


def _retention(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


#: Waits between attempts of a mirror the broker answered with a retriable error: a group
#: coordinator still loading (a broker just started or restarted) answers so for a few seconds.
MIRROR_BACKOFFS_S = (0.5, 1.0, 2.0, 4.0)


def mirror_group_offsets(
    admin: Any,
    group: str,
    offsets: Mapping[tuple[str, int], int],
    timeout_s: float = 10.0,
    *,
    backoffs_s: Sequence[float] = MIRROR_BACKOFFS_S,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Store ``offsets`` (topic, partition -> next offset) in Kafka consumer group ``group``.

    A copy for the Kafka ecosystem (``kafka-consumer-groups``, lag exporters); the claim table stays
    the source of truth. The broker accepts it only while the group has no active members, which
    holds because Spark's consumers ``assign`` partitions and never join a group. Retriable answers
    (a coordinator loading or moving) are asked again after ``backoffs_s``.

    Raises:
        KafkaOffsetsError: the broker refused the group or one of the partitions.
    """
    if not offsets:
        return
    # Asking again is for a coordinator that answers "not yet"; a broker that does not answer at
    # all has had its chance once the first request's timeout is spent.
    give_up_at = time.monotonic() + timeout_s
    for attempt in range(len(backoffs_s) + 1):
        exc = _mirror_once(admin, group, offsets, timeout_s)
        if exc is None:
            return
        if attempt == len(backoffs_s) or not _is_retriable(exc) or time.monotonic() >= give_up_at:
            raise KafkaOffsetsError(
                f"could not mirror offsets into consumer group {group!r} (after {attempt + 1} attempt(s)): {exc}"
            ) from exc
        sleep(backoffs_s[attempt])


def _mirror_once(admin: Any, group: str, offsets: Mapping[tuple[str, int], int], timeout_s: float) -> Exception | None:
    """One alter-offsets request: None on success, else the first error (the group's or a partition's)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    parts = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    try:
        futures = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, parts)], request_timeout=timeout_s
        )
        result = futures[group].result(timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - KafkaException, a timeout: returned to be judged and reported
        return exc
    for tp in result.topic_partitions:
        if tp.error is not None:
            return KafkaException(tp.error) if not isinstance(tp.error, Exception) else tp.error
    return None


def kafka_topic_ids(admin: Any, names: Iterable[str], timeout_s: float = 10.0) -> dict[str, str]:
    """Kafka's own topic id of each of ``names``; topics the broker says do not exist are left out.

    A consumer compares it with the registry's before reading: a topic deleted and re-created
    under the same name has new offsets, which old committed offsets must never be applied to.

    Raises:
        KafkaOffsetsError: the broker did not answer for a topic (down, timed out): that proves
            nothing about the topic, so it is an error rather than a missing id.
    """
    from confluent_kafka import TopicCollection

    wanted = sorted({validate_topic_name(n) for n in names})
    if not wanted:
        return {}
    ids: dict[str, str] = {}
    try:
        futures = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout_s)
    except Exception as exc:  # KafkaException: keep callers client-agnostic
        raise KafkaOffsetsError(f"cannot describe topics {wanted}: {exc}") from exc
    for name, future in futures.items():
        try:
            ids[name] = str(future.result(timeout=timeout_s + 5).topic_id)
        except Exception as exc:  # KafkaException, a timeout
            error = exc.args[0] if exc.args else None
            if _is_unknown_topic(error) or getattr(error, "code", lambda: None)() == _unknown_topic_id_code():
                continue  # the broker says it does not exist: the caller treats it as gone
            # Anything else (no broker, a timeout) proves nothing about the topic: fail, do not skip.
            raise KafkaOffsetsError(f"cannot read the topic id of {name!r} from the broker: {exc}") from exc
    return ids


def leader_racks(admin: Any, names: Iterable[str], timeout_s: float = 10.0) -> dict[str, dict[int, str | None]]:
    """Each partition's leader rack (``broker.rack``) for ``names``, from one ``DescribeTopics``.

    A partition without a leader, or led by a broker without ``broker.rack``, maps to None. Topics
    the broker does not know are left out (rack awareness is a preference: the caller then simply
    has none for them).

    Raises:
        KafkaOffsetsError: the broker did not answer (down, timed out).
    """
    from confluent_kafka import TopicCollection

    wanted = sorted({validate_topic_name(n) for n in names})
    if not wanted:
        return {}
    try:
        futures = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout_s)
    except Exception as exc:  # KafkaException: keep callers client-agnostic
        raise KafkaOffsetsError(f"cannot describe topics {wanted}: {exc}") from exc
    racks: dict[str, dict[int, str | None]] = {}
    for name, future in futures.items():
        try:
            described = future.result(timeout=timeout_s + 5)
        except Exception as exc:  # KafkaException, a timeout
            error = exc.args[0] if exc.args else None
            if _is_unknown_topic(error):
                continue
            raise KafkaOffsetsError(f"cannot read the partition leaders of {name!r}: {exc}") from exc
        racks[name] = {
            int(p.id): (p.leader.rack or None) if p.leader is not None and p.leader.id >= 0 else None
            for p in described.partitions
        }
    return racks


def broker_racks(admin: Any, timeout_s: float = 10.0) -> dict[int, str | None]:
    """Every live broker's id and rack (``DescribeCluster``; plain metadata carries no rack in
    confluent-kafka's ``BrokerMetadata``).

    Raises:
        KafkaOffsetsError: the cluster did not answer.
    """
    try:
        described = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 5)
    except Exception as exc:  # KafkaException, a timeout
        raise KafkaOffsetsError(f"cannot describe the Kafka cluster (its brokers' racks): {exc}") from exc
    return {int(n.id): (n.rack or None) for n in described.nodes}


def _unknown_topic_id_code() -> int:
    from confluent_kafka import KafkaError

    return int(getattr(KafkaError, "UNKNOWN_TOPIC_ID", KafkaError.UNKNOWN_TOPIC_OR_PART))
