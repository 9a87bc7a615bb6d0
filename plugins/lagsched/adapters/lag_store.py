"""Short-lived lag history in Redis: offset samples per partition, lag records per topic.

As in Hevo, this data only has to outlive a few evaluation windows, so it lives in Redis and
expires on its own. Keys, named in `lagsched.adapters.redis_store` (``<prefix>`` is ``lagsched:``
by default; names are Kafka-legal so they never contain ``:``):

* ``<prefix><cluster>:latest:<topic>``: HASH, field ``<partition>`` = that partition's (time, high
  watermark) samples;
* ``<prefix><cluster>:committed:<topic>``: HASH, the same for committed offsets;
* ``<prefix><cluster>:lag:<topic>``: ZSET of per-measurement `LagRecord` s of the topic;
* ``<prefix><cluster>:evaluated:<topic>``: time of the topic's last evaluation (a string);
* ``<prefix><cluster>:measured``: time of the cluster's last measurement (a string).

A partition's samples are addressed as ``<prefix><cluster>:latest:<topic>:<partition>`` (the hash
and its field). A field holds exactly the samples of a `lagsched.core.lag.SampleWindow`, oldest
first, as ``<count>:<offset>@<time>;...`` (a text without the count, as stored before it was
added, is read and rewritten with it): the window decides what is kept (N newest, max age, an idle run
kept as its first and last sample so the time since the head last moved survives trimming), and
the store rewrites only the fields that changed. One hash per topic keeps a measurement to about
three Redis commands per topic (a ZSET per partition cost four per partition: 40,000 commands
for 10,000 partitions). Lag ZSETs (score = time, member = JSON) are trimmed to the N newest
and the max age. Every key written gets an EXPIRE of the TTL, so a topic that is no longer
measured leaves nothing behind.

Samples are appended inside Redis (`_APPEND_SAMPLES`): each window is read, extended and
rewritten by a script, which runs alone, so two concurrent monitors cannot lose each other's
samples, and only what the lag math reads of each window (`WindowDigest`) comes back. The rule
(`SampleWindow.add`) thus lives twice, in Python for the simulator and in Lua for the store;
``tests/integration/test_sample_windows.py`` replays random histories through both.

**Round trips and commands.** A measurement reads and writes every topic's hashes and lag ZSET,
so its cost is the number of Redis commands more than the bytes: redis-py spends about 50 µs of
Python per command (packing, queueing, parsing its reply), which was 0.4-0.8 s of a 1,000-topic
measurement with one HMGET, HSET and EXPIRE per hash and four commands per lag ZSET. So each of
those steps is one Lua script per `SCRIPT_KEYS` keys (`_HMGET_ALL`, `_APPEND_SAMPLES`, `_ADD_RECORDS`)
doing the same commands inside Redis: the same keys, values and TTLs, a few commands in all. The
sample scripts take one argument and give one reply string per topic, not per partition, since
redis-py's cost is per argument and reply element too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from lagsched.adapters import redis_store
from lagsched.adapters.redis_store import HISTORY_KINDS
from lagsched.core.chunks import chunked
from lagsched.core.lag import OffsetSample, SampleWindow
from lagsched.core.names import validate_cluster_name, validate_topic_name

if TYPE_CHECKING:
    from redis import Redis
    from redis.typing import EncodableT, FieldT

__all__ = [
    "DEFAULT_PREFIX",
    "HISTORY_KINDS",
    "LagRecord",
    "LagStore",
    "PackedRecords",
    "PartitionKey",
    "WindowDigest",
    "trim_history",
]

log = logging.getLogger(__name__)

DEFAULT_PREFIX = redis_store.PREFIX

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

_APPEND_SAMPLES = r"""
local ttl, keep, max_age = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local find, sub, match = string.find, string.sub, string.match

-- A member's offset and time (numbers; nil when the text at s is not <offset>@<time>).
local function offset_at(raw, s)
  local off, at = match(raw, '^(-?%d+)@([^;@:]+)', s)
  return tonumber(off), tonumber(at)
end
local function offset(raw, s) return tonumber(match(raw, '^(-?%d+)@', s)) end
local function next_start(raw, s)  -- the member after the one at s; nil when that is the last
  local e = find(raw, ';', s, true)
  return e and e + 1
end
local function last_start(raw, b) return match(raw, '^.*;()') or b end
local function prev_start(raw, b) return match(raw, '^.*;()[^;]*;') or b end  -- of a window of 2 or more
local function members(raw, b)  -- a text stored without its count (plain find: gsub costs more)
  local n, s = 1, find(raw, ';', b, true)
  while s do n, s = n + 1, find(raw, ';', s + 1, true) end
  return n
end

-- SampleWindow.add (lagsched.core.lag) on the stored text ``<count>:<member>;...``: the new text,
-- and whether the stored text was malformed (then replaced by the new sample). Reads only the
-- members the rule reads; the count saves counting them.
local function add(raw, new, off, at)
  if not raw or raw == '' then return '1:' .. new, false end
  local colon = find(raw, ':', 1, true)
  local b = (colon or 0) + 1  -- where the first member starts
  local n = colon and tonumber(sub(raw, 1, colon - 1))
  if not n then n = members(raw, b) end  -- stored before the count was, or a bad count: count them
  local ls = last_start(raw, b)
  local last_off, last_at = offset_at(raw, ls)
  if not last_at then return '1:' .. new, true end
  if at < last_at then return raw, false end  -- a late sample changes nothing
  if off < last_off then return '1:' .. new, false end  -- a reset starts afresh
  if ls > b and last_off == off and offset(raw, prev_start(raw, b)) == off then
    raw = sub(raw, 1, ls - 1) .. new  -- extend the flat run: keep its first and last sample
  else
    raw, n = raw .. ';' .. new, n + 1
  end
  local first = b
  if max_age then
    local horizon = at - max_age
    while n > 2 do  -- drop the oldest while the one after it is older than the horizon too
      local s = next_start(raw, first)
      local _, s_at = offset_at(raw, s or #raw + 1)
      if not s_at then return '1:' .. new, true end  -- a bad member, or fewer than the count says
      if s_at >= horizon then break end
      first, n = s, n - 1
    end
    if n > 2 then  -- and the oldest itself if it is older and its run does not go on
      local s = next_start(raw, first)
      local f_off, f_at = offset_at(raw, first)
      local s_off = offset(raw, s or #raw + 1)
      if not f_at or not s_off then return '1:' .. new, true end
      if f_at < horizon and f_off ~= s_off then first, n = s, n - 1 end
    end
  end
  while n > keep do
    first, n = next_start(raw, first), n - 1
    if not first then return '1:' .. new, true end  -- fewer members than the count says
  end
  return n .. ':' .. sub(raw, first), false
end

-- What the lag math reads of a window: the oldest member, the newest two and, for a position
-- inside the window, the last member at or below it and the one after (bisected on the text).
-- Members next to each other are cut out together. nil when an offset it compares is malformed.
local function digest(raw, position)
  local b = (find(raw, ':', 1, true) or 0) + 1  -- a late sample leaves an old uncounted text as it is
  local ls = last_start(raw, b)
  local first_end = (find(raw, ';', b, true) or #raw + 1) - 1
  local tail = ls > b and prev_start(raw, b) or b
  local lo, hi_end
  if position then
    local first_off, last_off = offset(raw, b), offset(raw, ls)
    if not first_off or not last_off then return nil end
    if first_off <= position and position < last_off then
      local hi = ls  -- lo's offset <= position < hi's offset
      lo = b
      while true do
        local m = next_start(raw, math.floor((lo + hi) / 2))
        if m >= hi then m = next_start(raw, lo) end
        if m >= hi then break end
        local m_off = offset(raw, m)
        if not m_off then return nil end
        if m_off <= position then lo = m else hi = m end
      end
      hi_end = (find(raw, ';', hi, true) or #raw + 1) - 1
    end
  end
  if tail <= first_end + 2 then return sub(raw, b) end  -- a window of up to three members
  local out = sub(raw, b, first_end)
  if lo and hi_end < tail - 1 then
    if lo > first_end + 2 then out = out .. ';' .. sub(raw, lo, hi_end) else out = sub(raw, b, hi_end) end
  elseif lo and lo < tail then
    return (lo > first_end + 2 and out .. ';' or sub(raw, b, lo - 2) .. ';') .. sub(raw, lo)
  end
  return out .. ';' .. sub(raw, tail)
end

local out = {}
for k = 1, #KEYS do
  local fields, news, offs, ats, positions = {}, {}, {}, {}, {}
  for f, new, pos in string.gmatch(ARGV[k + 3], '([^ \n]+) ([^ \n]+) ([^ \n]+)') do
    local i = #fields + 1
    fields[i], news[i], positions[i] = f, new, tonumber(pos)
    offs[i], ats[i] = offset_at(new, 1)
  end
  local changed, replies = {}, {}
  for j = 1, #fields, 500 do
    local stored = redis.call('HMGET', KEYS[k], unpack(fields, j, math.min(#fields, j + 499)))
    for x, raw in ipairs(stored) do
      local i = j + x - 1
      local text, malformed = add(raw, news[i], offs[i], ats[i])
      local read = digest(text, positions[i])
      if not read then
        text, malformed, read = '1:' .. news[i], true, news[i]
      end
      if text ~= raw then
        changed[#changed + 1], changed[#changed + 2] = fields[i], text
      end
      replies[i] = (malformed and '!' or '') .. read
    end
  end
  for j = 1, #changed, 1000 do
    redis.call('HSET', KEYS[k], unpack(changed, j, math.min(#changed, j + 999)))
  end
  redis.call('EXPIRE', KEYS[k], ttl)
  out[k] = table.concat(replies, '\n')
end
return out
"""
"""KEYS: sample hashes; ARGV: the TTL, the samples kept, the max age in seconds ('' for none),
then per key one line per field: ``<field> <offset>@<time> <position>`` (``-`` for no position).
Appends each sample by `SampleWindow.add`'s rule, writes the fields that changed, refreshes the
EXPIRE; returns per key, one line per field in order, the window's digest (`WindowDigest`),
prefixed ``!`` when the stored text was malformed and was replaced by the new sample. Offsets
are compared as Lua numbers (doubles): exact below 2^53, far beyond any Kafka offset."""

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
        dead_letters: records of the topic committed to the cluster's dead-letter table so far (the
            slots' counter, docs/routing.md), at this measurement.
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
    dead_letters: int = 0

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
            dead_letters=int(data.get("dead_letters", 0)),
        )


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(LagRecord))


def trim_history(redis: Redis, cluster: str, keep: Sequence[str], *, prefix: str = DEFAULT_PREFIX) -> int:
    """Delete the lag history keys of ``cluster``'s topics not in ``keep``; returns how many.

    Only keys of the lag store's own shape (``<prefix><cluster>:<kind>:<topic>``, kind in
    `HISTORY_KINDS`) are considered, so slot keys and other clusters' keys are never touched.
    """
    wanted = set(keep)
    doomed: list[str] = []
    for raw in redis.scan_iter(match=f"{prefix}{cluster}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        parts = key[len(prefix) :].split(":")
        if len(parts) == 3 and parts[0] == cluster and parts[1] in HISTORY_KINDS and parts[2] not in wanted:
            doomed.append(key)
    for i in range(0, len(doomed), 500):
        redis.delete(*doomed[i : i + 500])
    return len(doomed)


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
        client: Redis,
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
        self._append_samples = client.register_script(_APPEND_SAMPLES)
        self._add_records = client.register_script(_ADD_RECORDS)

    # -- keys ---------------------------------------------------------------------------------

    def _name(self, topic: str) -> str:
        # A measurement builds four keys per partition: the name is checked once, not 40,000 times.
        if not isinstance(topic, str) or topic not in self._valid_names:
            self._valid_names.add(validate_topic_name(topic))
        return topic

    def latest_key(self, topic: str, partition: int) -> str:
        return f"{redis_store.latest_key(self.cluster, self._name(topic), prefix=self.prefix)}:{int(partition)}"

    def committed_key(self, topic: str, partition: int) -> str:
        return f"{redis_store.committed_key(self.cluster, self._name(topic), prefix=self.prefix)}:{int(partition)}"

    def lag_key(self, topic: str) -> str:
        return redis_store.lag_key(self.cluster, self._name(topic), prefix=self.prefix)

    def evaluated_key(self, topic: str) -> str:
        return redis_store.evaluated_key(self.cluster, self._name(topic), prefix=self.prefix)

    def measured_key(self) -> str:
        return redis_store.measured_key(self.cluster, prefix=self.prefix)

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

    def add_samples(
        self, samples: Mapping[str, OffsetSample], positions: Mapping[str, int] | None = None
    ) -> dict[str, WindowDigest]:
        """Append one sample to each key's window, in Redis; returns what the lag math reads of each.

        The windows are appended to where they are stored (`_APPEND_SAMPLES`, one script per
        `SCRIPT_KEYS` hashes in one MULTI/EXEC): a full window holds 120 samples, and moving
        every window to Python and back each minute, to read a few of its samples, was most of a
        measurement. The script applies `SampleWindow.add`'s rule (the simulator's; a test replays
        random histories through both), rewrites the fields that changed, refreshes the EXPIREs
        and returns each window's `WindowDigest`. ``positions``: per key, an offset whose
        neighbours the digest must hold (the committed position, for the time lag). A stored
        window that is not well formed is replaced by the new sample, with a warning.
        """
        positions = positions or {}
        by_hash: dict[str, list[tuple[str, str]]] = {}
        for key in samples:
            h, f = _location(key)
            by_hash.setdefault(h, []).append((f, key))
        found: dict[str, WindowDigest] = {}
        if not by_hash:
            return found
        pipe = self.client.pipeline(transaction=True)
        order = list(by_hash)
        for hashes in chunked(order, SCRIPT_KEYS):
            lines = [
                "\n".join(f"{f} {_member(samples[k])} {positions.get(k, '-')}" for f, k in by_hash[h]) for h in hashes
            ]
            self._append_samples(keys=hashes, args=[self._ttl, self.max_samples, self.max_age_s, *lines], client=pipe)
        replies = [r for chunk in pipe.execute() for r in chunk]
        repairs: dict[str, dict[FieldT, EncodableT]] = {}
        for h, reply in zip(order, replies, strict=True):
            for (f, key), read in zip(by_hash[h], _text(reply).split("\n"), strict=True):
                if read.startswith("!"):  # the script found it malformed and stored the new sample alone
                    log.warning("sample window %s was malformed; it starts afresh from this sample", key)
                try:
                    found[key] = WindowDigest(_decode(read.removeprefix("!")))
                except ValueError:
                    # The script parses only the offsets it compares; a bad time shows up here.
                    log.warning("sample window %s was malformed; it starts afresh from this sample", key)
                    found[key] = WindowDigest((samples[key],))
                    repairs.setdefault(h, {})[f] = _encode((samples[key],))
        if repairs:
            pipe = self.client.pipeline(transaction=True)
            for h, fields in repairs.items():
                pipe.hset(h, mapping=fields)
            pipe.execute()
        return found

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

    # -- measurement marks --------------------------------------------------------------------

    def last_measured(self) -> float | None:
        """When the cluster was last measured (None when never, or expired with the history)."""
        value = self.client.get(self.measured_key())
        return None if value is None else float(_text(value))

    def mark_measured(self, at: float) -> None:
        """Remember that the cluster was measured at `at` (expires with the history)."""
        self.client.set(self.measured_key(), repr(float(at)), ex=self._ttl)


def _member(sample: OffsetSample) -> str:
    return f"{sample.offset}@{sample.at!r}"


@dataclass(frozen=True, slots=True)
class WindowDigest:
    """What the lag math reads of a stored window, as `LagStore.add_samples` left it.

    ``samples``: a subsequence of the window's samples, oldest first: the oldest, the newest two
    and, when a position was given and lies inside the window, the last sample at or below it and
    the one after. That is all `offset_rate`, `estimate_time_lag` and `last_progress_at` read (a
    window's trailing run of equal offsets is at most two samples long), so on the digest they
    give what they give on the whole window; ``tests/integration/test_sample_windows.py`` checks
    it over random histories.
    """

    samples: tuple[OffsetSample, ...]


class PackedRecords(Sequence[LagRecord]):
    """A topic's lag records as stored (ZSET members, oldest first), each parsed when first read and
    kept: readers look at the newest few, often the same one again and again. Compared by value
    with any sequence, like a list (so not hashable); a slice is a list of the records."""

    __slots__ = ("_members", "_parsed")

    def __init__(self, members: Sequence[str]) -> None:
        self._members = members
        self._parsed: dict[int, LagRecord] = {}

    def __len__(self) -> int:
        return len(self._members)

    @overload
    def __getitem__(self, index: int) -> LagRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[LagRecord]: ...
    def __getitem__(self, index: int | slice) -> LagRecord | list[LagRecord]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(index)
        found = self._parsed.get(i)
        if found is None:
            found = self._parsed[i] = LagRecord.from_member(self._members[i])
        return found

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedRecords({len(self)} records)"


def _encode(samples: Sequence[OffsetSample]) -> str:
    """A window's stored text: ``<count>:<offset>@<time>;...``, oldest first (the count saves the
    script counting members to apply the count bound)."""
    return f"{len(samples)}:" + ";".join(map(_member, samples))


#: ``<offset>@<time>`` members joined by ``;``: checked whole before the bulk split below, which
#: alone would read ``1@2@3;4`` as two samples.
_WINDOW_MEMBERS = re.compile(r"(?:[^@;]+@[^@;]+;)*[^@;]+@[^@;]+")


def _decode(raw: str) -> tuple[OffsetSample, ...]:
    """The samples of a window's text (stored, with its count, or a digest, without), in bulk."""
    members = raw.rpartition(":")[2]  # the count only serves the script
    if not _WINDOW_MEMBERS.fullmatch(members):
        raise ValueError(f"malformed sample window {raw[:80]!r}: expected [<count>:]<offset>@<time>;...")
    parts = members.replace("@", ";").split(";")
    return tuple(map(OffsetSample, map(float, parts[1::2]), map(int, parts[0::2])))


def _location(key: str) -> tuple[str, str]:
    """(Redis hash, field) of a sample key ``...:<kind>:<topic>:<partition>``: one hash per topic."""
    h, _, field = key.rpartition(":")
    return h, field


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
