"""Short-lived lag history in Redis: offset samples per partition, lag records per topic.

As in Hevo, this data only has to outlive a few evaluation windows, so it lives in Redis and
expires on its own. Keys (``<prefix>`` is ``lagsched:`` by default; names are Kafka-legal so they
never contain ``:``):

* ``<prefix><cluster>:latest:<topic>``: HASH, field ``<partition>`` = that partition's (time, high
  watermark) samples;
* ``<prefix><cluster>:committed:<topic>``: HASH, the same for committed offsets;
* ``<prefix><cluster>:lag:<topic>``: ZSET of per-measurement `LagRecord` s of the topic;
* ``<prefix><cluster>:evaluated:<topic>``: time of the topic's last evaluation (a string).

A partition's samples are addressed as ``<prefix><cluster>:latest:<topic>:<partition>`` (the hash
and its field). A field holds exactly the samples of a `lagsched.core.lag.SampleWindow`, oldest
first, as ``<offset>@<time>;...``: the window decides what is kept (N newest, max age, an idle run
kept as its first and last sample so the time since the head last moved survives trimming), and
the store rewrites only the fields that changed. One hash per topic keeps a measurement to about
three Redis commands per topic (a ZSET per partition cost four per partition: 40,000 commands
for 10,000 partitions). Lag ZSETs (score = time, member = JSON) are trimmed to the N newest
and the max age. Every key written gets an EXPIRE of the TTL, so a topic that is no longer
measured leaves nothing behind.

Writes are one MULTI/EXEC per measurement; two concurrent monitors would at worst drop one
sample (last writer wins), never corrupt a window, so no WATCH loop is used.

**Round trips and commands.** A measurement reads and writes every topic's hashes and lag ZSET,
so its cost is the number of Redis commands more than the bytes: redis-py spends about 50 µs of
Python per command (packing, queueing, parsing its reply), which was 0.4-0.8 s of a 1,000-topic
measurement with one HMGET, HSET and EXPIRE per hash and four commands per lag ZSET. So each of
those steps is one Lua script per `SCRIPT_KEYS` keys (`_HMGET_ALL`, `_HSET_ALL`, `_ADD_RECORDS`)
doing the same commands inside Redis: the same keys, values and TTLs, a few commands in all. The
sample scripts take one argument and give one reply string per topic, not per partition, since
redis-py's cost is per argument and reply element too.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from lagsched.connections import RedisParams
from lagsched.core.chunks import chunked
from lagsched.core.lag import OffsetSample, SampleWindow
from lagsched.core.names import validate_cluster_name, validate_topic_name

__all__ = [
    "DEFAULT_PREFIX",
    "SCALING_CHANNEL",
    "LagRecord",
    "LagStore",
    "PackedRecords",
    "PackedSamples",
    "PartitionKey",
    "StoredWindow",
    "append_member",
    "redis_client",
]

DEFAULT_PREFIX = "lagsched:"
SCALING_CHANNEL = "lagsched:scaling"

_T = TypeVar("_T")
"""The pub/sub channel scaling decisions are announced on (see docs/lag.md)."""

PartitionKey = tuple[str, int]
"""(topic, partition)."""

#: Keys per script call: bounds how long one call holds Redis (a script, like MULTI/EXEC, runs
#: alone) and how many arguments one call carries.
SCRIPT_KEYS = 1000

# One argument and one reply string per topic, not per partition: redis-py's Python cost is per
# argument and per reply element too (a window never holds "\n" or ","; partition fields are
# numbers). Lua's unpack() takes a few thousand values at most, hence the slices of 500.
_HMGET_ALL = r"""
local out = {}
for k = 1, #KEYS do
  local fields = {}
  for f in string.gmatch(ARGV[k], '[^,]+') do fields[#fields + 1] = f end
  local values = {}
  for j = 1, #fields, 500 do
    local part = redis.call('HMGET', KEYS[k], unpack(fields, j, math.min(#fields, j + 499)))
    for _, v in ipairs(part) do values[#values + 1] = v or '' end
  end
  out[k] = table.concat(values, '\n')
end
return out
"""
"""KEYS: hashes; ARGV: per key its fields joined by ``,``. Returns per key its values joined by a
newline, in field order, ``''`` for a field that is absent."""

_HSET_ALL = r"""
local ttl = ARGV[1]
for k = 1, #KEYS do
  local items = {}
  for x in string.gmatch(ARGV[k + 1], '[^\n]+') do items[#items + 1] = x end
  for j = 1, #items, 1000 do
    redis.call('HSET', KEYS[k], unpack(items, j, math.min(#items, j + 999)))
  end
  redis.call('EXPIRE', KEYS[k], ttl)
end
return #KEYS
"""
"""KEYS: hashes; ARGV: the TTL, then per key its changed fields and values, alternating, joined by
a newline (may be empty: the EXPIRE is refreshed all the same)."""

_ADD_RECORDS = """
local ttl, keep = ARGV[1], tonumber(ARGV[2])
for k = 1, #KEYS do
  local b = 3 * k
  redis.call('ZADD', KEYS[k], ARGV[b + 1], ARGV[b])
  redis.call('ZREMRANGEBYRANK', KEYS[k], 0, -(keep + 1))
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', '(' .. ARGV[b + 2])
  redis.call('EXPIRE', KEYS[k], ttl)
end
return #KEYS
"""
"""KEYS: lag ZSETs; ARGV: the TTL, the records kept, then per key its member, score and the
oldest score kept (exclusive)."""


@dataclass(frozen=True, slots=True)
class LagRecord:
    """One measurement of one topic, as stored in its lag ZSET.

    Attributes:
        at: measurement time, seconds since the epoch (UTC).
        lag: total records behind (lost records excluded).
        lost: records lost to retention at this measurement.
        time_lag_s: worst partition's time lag, seconds.
        ingress_rate: records/s produced into the topic over the sample window.
        consumption_rate: records/s the pipeline committed over the sample window.
        worker_rate: records/s per active worker while the topic had a backlog throughout the
            window, None when not observed (see `lagsched.workflows.lag_monitor`).
        state: the pipeline's state at this measurement: ``ok``, ``stalled`` (a backlog, live
            holders, no committed offset moving) or ``stopped`` (the same with no live holder);
            see `lagsched.core.pipeline_state`.
        state_reason: why it is stalled or stopped, in words (empty when ``ok``).
        held_by_transaction: offsets behind the partitions' last stable offsets (an open
            transaction and what follows it), summed over partitions.
        transaction_open_s: how long the oldest such hold has stood, seconds (0: none).
    """

    at: float
    lag: int
    lost: int = 0
    time_lag_s: float = 0.0
    ingress_rate: float = 0.0
    consumption_rate: float = 0.0
    worker_rate: float | None = None
    state: str = "ok"
    state_reason: str = ""
    held_by_transaction: int = 0
    transaction_open_s: float = 0.0

    def to_member(self) -> str:
        """The ZSET member: compact JSON, unique per measurement because it holds ``at``."""
        # The fields read directly: asdict() deep-copies each value, a tenth of a 1,000-topic write.
        return json.dumps({f: getattr(self, f) for f in _RECORD_FIELDS}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_member(cls, member: str) -> LagRecord:
        data = json.loads(member)
        wr = data.get("worker_rate")
        return cls(
            at=float(data["at"]),
            lag=int(data["lag"]),
            lost=int(data.get("lost", 0)),
            time_lag_s=float(data.get("time_lag_s", 0.0)),
            ingress_rate=float(data.get("ingress_rate", 0.0)),
            consumption_rate=float(data.get("consumption_rate", 0.0)),
            worker_rate=None if wr is None else float(wr),
            # Records stored before the state existed are "ok": nothing was known to be stuck.
            state=str(data.get("state", "ok")),
            state_reason=str(data.get("state_reason", "")),
            held_by_transaction=int(data.get("held_by_transaction", 0)),
            transaction_open_s=float(data.get("transaction_open_s", 0.0)),
        )


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(LagRecord))


def redis_client(params: RedisParams, *, db: int | None = None) -> Any:
    """A ``redis.Redis`` for `params` (``db`` overrides the Connection's DB); no I/O until used."""
    import redis

    return redis.Redis(
        host=params.host,
        port=params.port,
        db=params.db if db is None else db,
        username=params.username,
        password=params.password,
        **params.tls_kwargs,
        decode_responses=True,
        socket_timeout=10,
        socket_connect_timeout=10,
    )


class LagStore:
    """Reads and writes the lag history of one cluster.

    Args:
        client: a ``redis.Redis`` (either ``decode_responses`` setting works).
        cluster: the cluster name used in keys (Kafka-legal characters).
        max_samples: samples kept per key (``Settings.sample_window``).
        max_age_s: samples older than this relative to the newest are dropped, and every key
            expires this long after its last write (``Settings.sample_ttl_s``).
        prefix: key prefix, ``lagsched:`` by default.
    """

    def __init__(
        self,
        client: Any,
        cluster: str,
        *,
        max_samples: int = 120,
        max_age_s: float = 7200.0,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        if max_samples < 2:
            raise ValueError(f"max_samples must be >= 2, got {max_samples}")
        if max_age_s <= 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self.client = client
        self.cluster = validate_cluster_name(cluster)
        self.max_samples = max_samples
        self.max_age_s = max_age_s
        self.prefix = prefix
        self._ttl = max(1, math.ceil(max_age_s))
        self._valid_names: set[str] = set()
        self._hmget_all = client.register_script(_HMGET_ALL)
        self._hset_all = client.register_script(_HSET_ALL)
        self._add_records = client.register_script(_ADD_RECORDS)

    # -- keys ---------------------------------------------------------------------------------

    def _name(self, topic: str) -> str:
        # A measurement builds four keys per partition: the name is checked once, not 40,000 times.
        if not isinstance(topic, str) or topic not in self._valid_names:
            self._valid_names.add(validate_topic_name(topic))
        return topic

    def latest_key(self, topic: str, partition: int) -> str:
        return f"{self.prefix}{self.cluster}:latest:{self._name(topic)}:{int(partition)}"

    def committed_key(self, topic: str, partition: int) -> str:
        return f"{self.prefix}{self.cluster}:committed:{self._name(topic)}:{int(partition)}"

    def lag_key(self, topic: str) -> str:
        return f"{self.prefix}{self.cluster}:lag:{self._name(topic)}"

    def evaluated_key(self, topic: str) -> str:
        return f"{self.prefix}{self.cluster}:evaluated:{self._name(topic)}"

    # -- offset samples -----------------------------------------------------------------------

    def read_windows(self, keys: Sequence[str]) -> list[SampleWindow]:
        """The stored `SampleWindow` of each key (empty when absent), in one round trip."""
        return [self._window(v) for v in self._read(keys)]

    def _read(self, keys: Sequence[str]) -> list[str | None]:
        return self._read_at([_location(k) for k in keys])

    def _read_at(self, locations: Sequence[tuple[str, str]]) -> list[str | None]:
        # One HMGET per topic hash, run by a script per SCRIPT_KEYS hashes (module docstring).
        fields: dict[str, list[str]] = {}
        for h, f in locations:
            fields.setdefault(h, []).append(f)
        found: dict[tuple[str, str], str | None] = {}
        for hashes in chunked(list(fields), SCRIPT_KEYS):
            replies = self._hmget_all(keys=hashes, args=[",".join(fields[h]) for h in hashes])
            for h, joined in zip(hashes, replies, strict=True):
                values = _text(joined).split("\n")
                found.update({(h, f): v or None for f, v in zip(fields[h], values, strict=True)})
        return [found[loc] for loc in locations]

    def add_samples(self, samples: Mapping[str, OffsetSample]) -> dict[str, StoredWindow]:
        """Append one sample to each key's window; returns the windows as now stored.

        One read of all keys, then one MULTI/EXEC that rewrites the windows that changed (one
        HSET per topic) and refreshes the EXPIREs. The windows are appended to as text
        (`append_member`, the rule of `SampleWindow.add` on the stored text) and returned
        unparsed (`PackedSamples`): a full window holds 120 samples and the lag math reads a few
        of them, so parsing every window whole was most of a measurement once windows filled.
        """
        keys = list(samples)
        locations = [_location(k) for k in keys]
        stored = self._read_at(locations)
        after: dict[str, StoredWindow] = {}
        writes: dict[str, dict[str, str]] = {}
        for key, (h, f), raw in zip(keys, locations, stored, strict=True):
            encoded = append_member(_checked(raw), samples[key], self.max_samples, self.max_age_s)
            after[key] = StoredWindow(_samples_of(encoded))
            writes.setdefault(h, {})
            if encoded != (raw or ""):
                writes[h][f] = encoded
        if writes:
            pipe = self.client.pipeline(transaction=True)
            for hashes in chunked(list(writes), SCRIPT_KEYS):
                joined = ["\n".join(x for pair in writes[h].items() for x in pair) for h in hashes]
                self._hset_all(keys=hashes, args=[self._ttl, *joined], client=pipe)
            pipe.execute()
        return after

    def _window(self, raw: str | None) -> SampleWindow:
        samples = _decode(raw) if raw else ()
        # Stored samples already satisfy the window's invariants, so they are taken as they are
        # (re-adding them one by one could reset on a stored offset reset and lose history).
        return SampleWindow(self.max_samples, self.max_age_s, samples)

    # -- lag records --------------------------------------------------------------------------

    def add_lag_records(self, records: Mapping[str, LagRecord]) -> None:
        """Append one `LagRecord` per topic, trim to the N newest and the max age, refresh TTLs."""
        if not records:
            return
        pipe = self.client.pipeline(transaction=True)
        for topics in chunked(list(records), SCRIPT_KEYS):
            args: list[Any] = [self._ttl, self.max_samples]
            for topic in topics:
                rec = records[topic]
                args += [rec.to_member(), repr(float(rec.at)), repr(rec.at - self.max_age_s)]
            self._add_records(keys=[self.lag_key(t) for t in topics], args=args, client=pipe)
        pipe.execute()

    def read_lag_records(self, topics: Sequence[str]) -> dict[str, PackedRecords]:
        """Each topic's stored lag records, oldest first (empty when none), in one round trip.

        Parsed on access (`PackedRecords`): a topic keeps 120 records and most readers look at the
        newest few. The ZSET's order is the records' time order (score = time, ties by member).
        """
        pipe = self.client.pipeline(transaction=False)
        for topic in topics:
            pipe.zrange(self.lag_key(topic), 0, -1)
        rows = pipe.execute() if topics else []
        return {topic: PackedRecords([_text(m) for m in members]) for topic, members in zip(topics, rows, strict=True)}

    # -- evaluation marks ---------------------------------------------------------------------

    def last_evaluated(self, topics: Sequence[str]) -> dict[str, float | None]:
        """When each topic was last evaluated (None when unknown or expired)."""
        values = self.client.mget([self.evaluated_key(t) for t in topics]) if topics else []
        return {t: (None if v is None else float(_text(v))) for t, v in zip(topics, values, strict=True)}

    def mark_evaluated(self, topic: str, at: float) -> None:
        """Remember that `topic` was evaluated at `at` (expires with the history)."""
        self.client.set(self.evaluated_key(topic), repr(float(at)), ex=self._ttl)


def _member(sample: OffsetSample) -> str:
    return f"{sample.offset}@{sample.at!r}"


@dataclass(frozen=True, slots=True)
class StoredWindow:
    """A window as `LagStore.add_samples` stored it: its samples, oldest first, parsed on access."""

    samples: Sequence[OffsetSample]


class _ParsedOnRead(Sequence[_T]):
    """A stored sequence whose items are parsed when first read and kept: readers of a full window
    or history look at a few items, often the same one again and again. Compared by value with any
    sequence, like a list (so not hashable); a slice is a list of the items."""

    __slots__ = ("_len", "_parsed")

    def __init__(self, length: int) -> None:
        self._len = length
        self._parsed: dict[int, _T] = {}

    def _parse(self, i: int) -> _T:
        raise NotImplementedError

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> _T: ...
    @overload
    def __getitem__(self, index: slice) -> list[_T]: ...
    def __getitem__(self, index: int | slice) -> _T | list[_T]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError(index)
        found = self._parsed.get(i)
        if found is None:
            found = self._parsed[i] = self._parse(i)
        return found

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]


class PackedSamples(_ParsedOnRead[OffsetSample]):
    """A stored window's text (``<offset>@<time>;...``), a member parsed only when it is read; the
    ends are read without splitting the rest.

    >>> w = PackedSamples("5@0.0;9@60.0;9@300.0")
    >>> len(w), w[0], w[-1].offset, list(w[1:]) == [OffsetSample(60.0, 9), OffsetSample(300.0, 9)]
    (3, OffsetSample(at=0.0, offset=5), 9, True)
    """

    __slots__ = ("_members", "_raw")

    def __init__(self, raw: str) -> None:
        super().__init__(raw.count(";") + 1 if raw else 0)
        self._raw = raw
        self._members: list[str] | None = None

    def _parse(self, i: int) -> OffsetSample:
        if i == 0:
            return _sample(self._raw[: _end(self._raw, 0)])
        if i == self._len - 1:
            return _sample(self._raw[self._raw.rfind(";") + 1 :])
        if self._members is None:
            self._members = self._raw.split(";")
        return _sample(self._members[i])

    def __repr__(self) -> str:
        return f"PackedSamples({self._raw!r})"


class PackedRecords(_ParsedOnRead[LagRecord]):
    """A topic's lag records as stored (ZSET members, oldest first), each parsed when first read."""

    __slots__ = ("_members",)

    def __init__(self, members: Sequence[str]) -> None:
        super().__init__(len(members))
        self._members = members

    def _parse(self, i: int) -> LagRecord:
        return LagRecord.from_member(self._members[i])

    def __repr__(self) -> str:
        return f"PackedRecords({self._len} records)"


#: Windows up to this many samples are parsed whole: for an idle partition's two samples, a tuple
#: read ten times costs less than parsing on access (at 100,000 partitions it cost 2 s a measurement).
EAGER_SAMPLES = 8


def _samples_of(raw: str) -> Sequence[OffsetSample]:
    """A stored window's samples: parsed now when it is short, on access (`PackedSamples`) when long."""
    if raw.count(";") < EAGER_SAMPLES:
        return _decode(raw)
    return PackedSamples(raw)


def _end(raw: str, start: int) -> int:
    """Where the member starting at ``start`` ends (the next ``;``, or the end of the text)."""
    end = raw.find(";", start)
    return len(raw) if end < 0 else end


def _sample(member: str) -> OffsetSample:
    offset, at, *rest = member.split("@")
    if rest:
        raise ValueError(f"malformed sample {member!r}: expected <offset>@<time>")
    return OffsetSample(float(at), int(offset))


def _checked(raw: str | None) -> str:
    """A stored window's text, checked for shape (each member ``<offset>@<time>``); "" when absent."""
    if not raw:
        return ""
    if raw.count("@") != raw.count(";") + 1:
        raise ValueError(f"malformed sample window {raw[:80]!r}: each member must be <offset>@<time>")
    return raw


def append_member(raw: str, sample: OffsetSample, max_samples: int, max_age_s: float | None) -> str:
    """`SampleWindow.add` on a stored window's text: the text of the window it returns.

    The same rules (a late sample ignored, a reset on an offset going back, an idle run kept as its
    first and last sample, the age and count bounds), reading only the members they look at (the
    newest two and the oldest few) and cutting the text rather than splitting it.
    ``tests/unit/test_lag_store_encoding.py`` replays random histories through both.
    """
    newest = _member(sample)
    if not raw:
        return newest
    tail = raw.rsplit(";", 2)
    last = _sample(tail[-1])
    if sample.at < last.at:
        return raw
    if sample.offset < last.offset:
        return newest  # a reset starts afresh: one sample, inside every bound
    if len(tail) >= 2 and last.offset == sample.offset and _sample(tail[-2]).offset == sample.offset:
        raw = raw[: raw.rfind(";") + 1] + newest  # extend the flat run: keep its first and last sample
    else:
        raw = f"{raw};{newest}"
    count = raw.count(";") + 1
    if max_age_s is not None:
        horizon = sample.at - max_age_s
        starts = [0, _end(raw, 0) + 1]  # where members 0, 1, ... start, found as far as needed
        first_kept = 0
        while (
            first_kept < count - 2
            and _sample(raw[starts[first_kept + 1] : _end(raw, starts[first_kept + 1])]).at < horizon
        ):
            first_kept += 1
            starts.append(_end(raw, starts[first_kept]) + 1)
        if first_kept < count - 2:
            first = _sample(raw[starts[first_kept] : starts[first_kept + 1] - 1])
            second = _sample(raw[starts[first_kept + 1] : _end(raw, starts[first_kept + 1])])
            if first.at < horizon and first.offset != second.offset:
                first_kept += 1
                starts.append(_end(raw, starts[first_kept]) + 1)
        raw, count = raw[starts[first_kept] :], count - first_kept
    start = 0
    for _ in range(count - max_samples):
        start = raw.index(";", start) + 1
    return raw[start:]


def _decode(raw: str) -> tuple[OffsetSample, ...]:
    """The samples of an encoded window, parsed in bulk (a full window holds 120 of them)."""
    parts = raw.replace("@", ";").split(";")
    if len(parts) != 2 * (raw.count(";") + 1):
        raise ValueError(f"malformed sample window {raw[:80]!r}: each member must be <offset>@<time>")
    return tuple(map(OffsetSample, map(float, parts[1::2]), map(int, parts[0::2])))


def _location(key: str) -> tuple[str, str]:
    """(Redis hash, field) of a sample key ``...:<kind>:<topic>:<partition>``: one hash per topic."""
    h, _, field = key.rpartition(":")
    return h, field


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
