"""Rules of the claim protocol, with no database in sight.

The claim table (``topic_partitions``) is a queue of topic-partitions that worker slots take rows
from (Hevo, seed 003). What is decided here, so it can be tested without MySQL:

* **The row** (``PartitionRow``): one ``topic_partitions`` row, the one type every reader of the
  table uses (a claim a slot holds is one); ``claim_terms`` is what a row presented as a claim
  must carry.
* **Lock mode** (``select_lock_mode``): ``SELECT ... FOR UPDATE SKIP LOCKED`` where the server has
  it (MariaDB >= 10.6, MySQL >= 8.0.1), else an optimistic compare-and-set on ``claim_epoch``.
  ``for_update`` (plain ``FOR UPDATE``, Hevo's MySQL 5.7 query) is kept as a baseline and can be
  forced; so can the others.
* **How many rows to take or give back** (``slot_wants``, ``rows_to_claim``, ``shortfall``,
  ``rows_to_release``): the owner at lane position ``i`` of a topic with ``P`` partitions and ``k``
  owners holds ``fair_share(P, k, i)`` rows; a claim takes only what is missing from what the slot
  already holds, and a rebalance hands over what is above it.
* **What a claim tells the caller** (``ClaimResult``, ``claim_status``): everything the slot holds
  afterwards, which rows are new, and whether a shortfall means "nothing is free" or "gave up on
  contention".
* **Why a claim was lost** (``judge_claim``, ``ClaimLostError``): read from the row as it is now.
* **Leases** (``lease_expiry``, ``is_lease_live``, ``is_renew_due``): pure arithmetic over an
  injected ``now``. The claim store feeds it the database's clock so every host judges a lease by
  the same clock; a worker uses ``is_renew_due`` with a safety margin for its own clock's skew.
* **Retries** (``RetryPolicy``): bounded attempts with full-jitter exponential backoff from a
  seeded ``random.Random``; one budget per operation covers lock-wait/deadlock errors and lost
  races alike.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from lagsched.core.errors import ConfigError, StaleClaimError
from lagsched.core.rendezvous import Assignment, TopicSpec, fair_share

__all__ = [
    "DEFAULT_LEASE_S",
    "LOCK_MODE_SETTINGS",
    "ClaimLostError",
    "ClaimResult",
    "ClaimStatus",
    "LockMode",
    "PartitionRow",
    "RetryPolicy",
    "ServerVersion",
    "StaleReason",
    "Staleness",
    "check_lease_s",
    "claim_status",
    "claim_terms",
    "held_counts",
    "is_lease_live",
    "is_renew_due",
    "judge_claim",
    "lease_expiry",
    "lost_claim",
    "parse_server_version",
    "rows_to_claim",
    "rows_to_release",
    "select_lock_mode",
    "shortfall",
    "slot_wants",
    "supports_skip_locked",
]

#: A lease long enough to survive a slow batch and a GC pause, short enough that a dead slot's
#: rows are picked up within a minute. Workers renew well before it runs out (``is_renew_due``).
DEFAULT_LEASE_S = 60.0


class LockMode(StrEnum):
    """How a claim keeps two slots off the same row.

    * ``skip_locked``: one transaction, ``SELECT ... FOR UPDATE SKIP LOCKED`` then ``UPDATE``;
      concurrent claimers pass over each other's rows instead of queueing behind them.
    * ``for_update``: the same transaction with plain ``FOR UPDATE`` (Hevo's MySQL 5.7 query);
      claimers of one topic queue behind whoever locked the oldest rows. A baseline.
    * ``optimistic``: an unlocked read, then ``UPDATE ... WHERE claim_epoch = <seen>`` per row;
      a lost race costs a retry. For servers without SKIP LOCKED.
    """

    SKIP_LOCKED = "skip_locked"
    FOR_UPDATE = "for_update"
    OPTIMISTIC = "optimistic"


#: Values the ``lock_mode`` setting accepts; ``auto`` picks from the server version.
LOCK_MODE_SETTINGS = ("auto", "skip_locked", "for_update", "optimistic")


@dataclass(frozen=True, slots=True, order=True)
class ServerVersion:
    """A MySQL or MariaDB server version, as reported by ``SELECT VERSION()``.

    Attributes:
        flavor: ``"mariadb"`` or ``"mysql"``.
        major, minor, patch: the numeric version.
    """

    flavor: str
    major: int
    minor: int
    patch: int


_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")


def parse_server_version(version: str) -> ServerVersion:
    """Parse ``VERSION()``; MariaDB says so in the string, anything else is MySQL.

    >>> parse_server_version("10.11.6-MariaDB-0+deb12u1")
    ServerVersion(flavor='mariadb', major=10, minor=11, patch=6)
    >>> parse_server_version("8.0.36")
    ServerVersion(flavor='mysql', major=8, minor=0, patch=36)
    """
    match = _VERSION.match(version)
    if match is None:
        raise ConfigError(
            f"server version {version!r} is not 'major.minor[.patch]...'; "
            "set lock_mode explicitly (skip_locked, for_update or optimistic)",
            field="lock_mode",
            value=version,
            allowed="a VERSION() string such as '10.11.6-MariaDB' or '8.0.36'",
        )
    major, minor, patch = int(match[1]), int(match[2]), int(match[3] or 0)
    # MariaDB 10.x replication once prefixed "5.5.5-" to fool old MySQL clients.
    if version.startswith("5.5.5-") and "mariadb" in version.lower():
        return parse_server_version(version[len("5.5.5-") :])
    flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
    return ServerVersion(flavor, major, minor, patch)


def supports_skip_locked(version: ServerVersion) -> bool:
    """MariaDB >= 10.6 and MySQL >= 8.0.1 have ``SKIP LOCKED``.

    >>> supports_skip_locked(parse_server_version("5.7.44-log"))
    False
    """
    numeric = (version.major, version.minor, version.patch)
    if version.flavor == "mariadb":
        return numeric >= (10, 6, 0)
    return numeric >= (8, 0, 1)


def select_lock_mode(setting: str, server_version: str) -> LockMode:
    """The lock mode to use: the setting, or for ``auto`` the best the server supports.

    Forcing ``skip_locked`` on a server without it is refused here, rather than failing at the
    first claim with a SQL syntax error.

    >>> select_lock_mode("auto", "10.11.6-MariaDB-0+deb12u1")
    <LockMode.SKIP_LOCKED: 'skip_locked'>
    >>> select_lock_mode("auto", "5.7.44")
    <LockMode.OPTIMISTIC: 'optimistic'>
    """
    if setting not in LOCK_MODE_SETTINGS:
        raise ConfigError(
            f"lock_mode={setting!r} is not one of {', '.join(LOCK_MODE_SETTINGS)}",
            field="lock_mode",
            value=setting,
            allowed=", ".join(LOCK_MODE_SETTINGS),
        )
    parsed = parse_server_version(server_version)
    if setting == "auto":
        return LockMode.SKIP_LOCKED if supports_skip_locked(parsed) else LockMode.OPTIMISTIC
    mode = LockMode(setting)
    if mode is LockMode.SKIP_LOCKED and not supports_skip_locked(parsed):
        raise ConfigError(
            f"lock_mode='skip_locked' but server {server_version!r} has no SKIP LOCKED "
            "(needs MariaDB >= 10.6 or MySQL >= 8.0.1); use 'optimistic' or 'auto'",
            field="lock_mode",
            value=setting,
            allowed="auto, for_update, optimistic",
        )
    return mode


# --------------------------------------------------------------------------- shares


def slot_wants(slot_id: str, assignment: Assignment, topics: Sequence[TopicSpec]) -> dict[str, int]:
    """Rows the slot should hold per owned topic: its lane's fair share of the partitions.

    The owner at lane position ``i`` of a topic with ``P`` partitions and ``k`` owners holds
    floor(P/k), plus one if ``i < P % k``; topics the slot does not own are absent.

    >>> a = Assignment({"t": ("s1", "s2")})
    >>> slot_wants("s2", a, [TopicSpec("t", 5, 2)])
    {'t': 2}
    """
    wants: dict[str, int] = {}
    for spec in topics:
        owners = assignment.owners_of(spec.topic_id)
        if slot_id in owners:
            wants[spec.topic_id] = fair_share(spec.partitions, len(owners), owners.index(slot_id))
    return wants


def rows_to_claim(target: int, held: int) -> int:
    """How many more rows to claim to reach ``target`` when ``held`` are already held.

    A slot above its target (after a join shrank its share) claims nothing; giving rows back is
    ``rows_to_release``'s rule (``ClaimStore.rebalance``), never a side effect of claiming.

    >>> rows_to_claim(4, 1), rows_to_claim(2, 3)
    (3, 0)
    """
    if target < 0 or held < 0:
        raise ValueError(f"target={target}, held={held}; both must be >= 0")
    return max(0, target - held)


# --------------------------------------------------------------------------- leases


def _check_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name}={value!r} is naive; pass a timezone-aware UTC datetime")


def lease_expiry(now: datetime, lease_s: float) -> datetime:
    """When a lease taken or renewed at ``now`` runs out.

    >>> from datetime import timezone
    >>> lease_expiry(datetime(2026, 1, 1, tzinfo=timezone.utc), 30).isoformat()
    '2026-01-01T00:00:30+00:00'
    """
    _check_aware("now", now)
    check_lease_s(lease_s)
    return now + timedelta(seconds=lease_s)


def check_lease_s(lease_s: float) -> None:
    """Refuse a lease that would not last (``lease_s`` must be > 0), before any I/O is spent on it."""
    if not lease_s > 0:
        raise ValueError(f"lease_s={lease_s}; a lease must last > 0 seconds")


def is_lease_live(expires_at: datetime | None, now: datetime) -> bool:
    """A lease is live strictly before its expiry; ``None`` (unclaimed) is never live."""
    _check_aware("now", now)
    if expires_at is None:
        return False
    _check_aware("expires_at", expires_at)
    return now < expires_at


def is_renew_due(expires_at: datetime, now: datetime, lease_s: float, fraction: float = 1 / 3) -> bool:
    """Renew once less than ``fraction`` of the lease is left.

    A third leaves two renewals' worth of slack for a slow database and for skew between the
    worker's clock and the database's, which is what judges expiry.
    """
    _check_aware("now", now)
    _check_aware("expires_at", expires_at)
    if not 0 < fraction < 1:
        raise ValueError(f"fraction={fraction}; must be between 0 and 1")
    return expires_at - now <= timedelta(seconds=lease_s * fraction)


# --------------------------------------------------------------------------- claims and retries


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One ``topic_partitions`` row: the one type of that row wherever it is read, with the table's
    column names. A row a slot holds (a *claim*) is one of these, as is the row the claim protocol
    judges a lost claim by, the lag monitor's and the status page's.

    A read fills the columns it loads; the others stay ``None`` (each reader says which it loads).
    What is not a column travels beside the row, never in it: the database's ``now`` of a read (a
    lease is live by that clock alone: ``holder_at``), a topic's name from a join.

    Attributes:
        topic_id: registry UUID of the topic.
        partition_id: Kafka partition number.
        committed_offset: next offset to consume, ``None`` before the first commit.
        claimed_by: the slot named as holder, ``None`` when unclaimed or released. Its lease may
            have run out: a dead lease means the row is free (``holder_at``).
        claim_epoch: fencing token, bumped by every claim; every commit must present the one its
            claim set. ``None`` when not loaded (the status and lag monitor reads).
        lease_expires_at: when the claim lapses unless renewed (UTC, database clock); ``None`` when
            unclaimed or released, or not loaded.
        last_picked_at: when the latest claim (the one that set ``claim_epoch``) was made; ``None``
            when never picked, or not loaded (a claim's reads leave it out).
        pending_start, pending_end: the batch ``[start, end)`` recorded (``begin_batch``) and not yet
            committed; ``None`` when there is none, or not loaded (only the status read loads them).
    """

    topic_id: str
    partition_id: int
    _: KW_ONLY
    committed_offset: int | None = None
    claimed_by: str | None = None
    claim_epoch: int | None = None
    lease_expires_at: datetime | None = None
    last_picked_at: datetime | None = None
    pending_start: int | None = None
    pending_end: int | None = None

    @property
    def key(self) -> tuple[str, int]:
        """The row's primary key."""
        return (self.topic_id, self.partition_id)

    @property
    def pending(self) -> tuple[int, int] | None:
        """The recorded batch ``(pending_start, pending_end)``, or ``None``."""
        if self.pending_start is None or self.pending_end is None:
            return None
        return (self.pending_start, self.pending_end)

    def holder_at(self, now: datetime) -> str | None:
        """The slot holding the row at ``now`` (the database's time of the read): ``claimed_by``
        while its lease is live, else ``None`` (a dead slot is no holder).

        >>> from datetime import timezone
        >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
        >>> row = PartitionRow("t", 0, claimed_by="s1", lease_expires_at=t + timedelta(seconds=30))
        >>> row.holder_at(t), row.holder_at(t + timedelta(seconds=30))
        ('s1', None)
        """
        if self.claimed_by is None or not is_lease_live(self.lease_expires_at, now):
            return None
        return self.claimed_by


def claim_terms(claim: PartitionRow) -> tuple[int, datetime]:
    """The epoch and lease a row presented as a claim carries (what fences its writes).

    A row read without them (the status or lag monitor reads) is no claim: refused, so that it can
    never be taken for one.

    >>> from datetime import timezone
    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> claim_terms(PartitionRow("t", 0, claimed_by="s1", claim_epoch=3, lease_expires_at=t))[0]
    3
    """
    if claim.claim_epoch is None or claim.lease_expires_at is None:
        raise ValueError(
            f"{claim.topic_id}[{claim.partition_id}] has no claim_epoch or lease_expires_at; present the "
            "claim as the claim store last returned it"
        )
    return claim.claim_epoch, claim.lease_expires_at


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries with full-jitter exponential backoff.

    Attributes:
        max_attempts: attempts in all, >= 1 (1 means no retry).
        base_s: backoff ceiling of the first retry; doubles per attempt.
        cap_s: largest backoff ceiling.
    """

    max_attempts: int = 6
    base_s: float = 0.005
    cap_s: float = 0.25

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts={self.max_attempts}; must be >= 1", field="max_attempts")
        if not 0 < self.base_s <= self.cap_s:
            raise ConfigError(f"base_s={self.base_s}, cap_s={self.cap_s}; need 0 < base_s <= cap_s", field="base_s")

    def backoff_s(self, attempt: int, rng: random.Random) -> float:
        """Sleep before retry number ``attempt`` (1 = first retry): uniform in [0, ceiling].

        Full jitter spreads claimers that collided apart instead of sending them back in step.

        >>> RetryPolicy(base_s=0.01, cap_s=0.04).backoff_s(5, random.Random(1)) <= 0.04
        True
        """
        if attempt < 1:
            raise ValueError(f"attempt={attempt}; retries count from 1")
        ceiling = min(self.cap_s, self.base_s * 2 ** (attempt - 1))
        return rng.uniform(0.0, ceiling)

    def backoffs(self, rng: random.Random) -> list[float]:
        """Every backoff of a run that exhausts its attempts, in order."""
        return [self.backoff_s(a, rng) for a in range(1, self.max_attempts)]


def held_counts(claims: Sequence[PartitionRow]) -> Mapping[str, int]:
    """Rows held per topic."""
    counts: dict[str, int] = {}
    for c in claims:
        counts[c.topic_id] = counts.get(c.topic_id, 0) + 1
    return counts


def shortfall(wants: Mapping[str, int], held: Sequence[PartitionRow]) -> dict[str, int]:
    """Rows still missing per wanted topic; topics with nothing missing are absent.

    >>> shortfall({"a": 3, "b": 1, "c": 0}, [PartitionRow("a", 0), PartitionRow("b", 0)])
    {'a': 2}
    """
    counts = held_counts(held)
    missing = {t: rows_to_claim(n, counts.get(t, 0)) for t, n in wants.items()}
    return {t: n for t, n in sorted(missing.items()) if n}


# --------------------------------------------------------------------------- giving rows back


def rows_to_release(
    wants: Mapping[str, int], held: Sequence[PartitionRow], targets: Mapping[str, Collection[int]] | None = None
) -> list[PartitionRow]:
    """The rows a slot should hand over now: per topic, those held beyond ``wants[topic]``.

    A topic absent from ``wants`` (the slot no longer owns it) is handed over whole. Within a topic
    the slot keeps its lowest partitions and gives back the highest, so two calls from the same view
    choose the same rows. The result is sorted by (topic, partition), the order rows are locked in.

    ``targets`` (rack-aware consumption, ``core.rack.rack_targets``): for a topic listed there, the
    rows outside the slot's target are handed over too (their target owner claims them), and the
    excess above the share is taken from the rest. Topics not listed follow the plain rule.

    >>> held = [PartitionRow("a", p) for p in (3, 0, 2, 1)] + [PartitionRow("b", 0)]
    >>> [c.key for c in rows_to_release({"a": 2}, held)]
    [('a', 2), ('a', 3), ('b', 0)]
    >>> [c.key for c in rows_to_release({"a": 2, "b": 1}, held, {"a": {1, 3}})]
    [('a', 0), ('a', 2)]
    """
    for topic_id, n in wants.items():
        if n < 0:
            raise ValueError(f"wants[{topic_id!r}]={n}; must be >= 0")
    by_topic: dict[str, list[PartitionRow]] = {}
    for c in held:
        by_topic.setdefault(c.topic_id, []).append(c)
    give: list[PartitionRow] = []
    for topic_id, rows in by_topic.items():
        rows.sort(key=lambda c: c.partition_id)
        target = targets.get(topic_id) if targets is not None else None
        kept = rows if target is None else [c for c in rows if c.partition_id in target]
        give.extend(c for c in rows if c not in kept)
        give.extend(kept[wants.get(topic_id, 0) :])
    return sorted(give, key=lambda c: c.key)


# --------------------------------------------------------------------------- what a claim returns


class ClaimStatus(StrEnum):
    """How a claim ended, so a worker knows whether to wait or to try again soon.

    * ``complete``: the slot holds every row it wants.
    * ``none_free``: short, and every other row of the short topics is held under a live lease:
      wait for a lease to run out or a holder to hand rows over (``ClaimStore.rebalance``).
    * ``contended``: short although rows were free: other claimers took them first, or lock waits
      and deadlocks used up the retry budget. Claim again soon.
    """

    COMPLETE = "complete"
    NONE_FREE = "none_free"
    CONTENDED = "contended"


def claim_status(short: Mapping[str, int], *, free_left: bool, gave_up: bool) -> ClaimStatus:
    """The status of a claim from what is still missing, whether free rows remain, and whether
    the retry budget ran out.

    >>> claim_status({}, free_left=True, gave_up=True)
    <ClaimStatus.COMPLETE: 'complete'>
    >>> claim_status({"t": 1}, free_left=False, gave_up=False)
    <ClaimStatus.NONE_FREE: 'none_free'>
    >>> claim_status({"t": 1}, free_left=True, gave_up=False)
    <ClaimStatus.CONTENDED: 'contended'>
    """
    if not any(short.values()):
        return ClaimStatus.COMPLETE
    return ClaimStatus.CONTENDED if gave_up or free_left else ClaimStatus.NONE_FREE


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What the slot holds after a claim, so a worker replaces its holding instead of merging.

    Attributes:
        claims: every row the slot holds after the call (live lease), in every topic, sorted by
            (topic, partition): the rows it held before and the rows just claimed, each with the
            committed offset and lease the table has now.
        new: the rows this call claimed, a subset of ``claims``. Consume each from its
            ``committed_offset``. A row the slot held before under an older epoch is new again when
            its lease had run out and this call claimed it back: the old epoch is fenced, so drop
            any output of it not yet committed.
        short: rows wanted but not held, per topic; topics with nothing missing are absent.
        status: why it is short, if it is (``ClaimStatus``).
        lapsed: rows this call claimed whose lease ran out before it returned (a claim of several
            rounds that took longer than the lease). Not held and not in ``claims``: never consume
            them. Each took an epoch, which is why they are reported; any of them means the lease
            is too short for the database's latency.
    """

    claims: tuple[PartitionRow, ...]
    new: tuple[PartitionRow, ...] = ()
    lapsed: tuple[PartitionRow, ...] = ()
    short: Mapping[str, int] = field(default_factory=dict)
    status: ClaimStatus = ClaimStatus.COMPLETE

    @property
    def contended(self) -> bool:
        """Short because of contention (claim again soon), not because nothing is free."""
        return self.status is ClaimStatus.CONTENDED

    def is_new(self, claim: PartitionRow) -> bool:
        """Whether this call claimed ``claim`` (same row and epoch)."""
        return claim in self.new


# --------------------------------------------------------------------------- why a claim was lost


class StaleReason(StrEnum):
    """Why a slot no longer holds a row it presents a claim for.

    * ``lease_expired``: the row is still the slot's at that epoch, but its lease ran out; nobody
      has claimed it since (the slot may claim it again, under a new epoch).
    * ``released``: the row was released at that epoch (by the slot itself: ``release`` or
      ``rebalance``) and nobody has claimed it since.
    * ``taken_over``: the row was claimed again under a newer epoch, after the slot's lease ran
      out or the slot released it; ``holder`` holds it now (possibly this same slot, under the new
      epoch), or is ``None`` if that claim was released in turn.
    * ``unknown_epoch``: the epoch presented was never issued for the row.
    * ``no_such_row``: the row does not exist.
    """

    LEASE_EXPIRED = "lease_expired"
    RELEASED = "released"
    TAKEN_OVER = "taken_over"
    UNKNOWN_EPOCH = "unknown_epoch"
    NO_SUCH_ROW = "no_such_row"


@dataclass(frozen=True, slots=True)
class Staleness:
    """Why a claim is no longer held: a ``StaleReason``, a sentence, and who holds the row now."""

    reason: StaleReason
    detail: str
    holder: str | None = None
    current_epoch: int | None = None


def lost_claim(slot_id: str, claim: PartitionRow, verdict: Staleness, consequence: str) -> ClaimLostError:
    """The ``ClaimLostError`` for ``claim`` judged lost, its message ending with ``consequence``."""
    epoch, _ = claim_terms(claim)
    return ClaimLostError(
        f"slot {slot_id} lost the claim on {claim.topic_id}[{claim.partition_id}] (epoch {epoch}): "
        f"{verdict.detail}. {consequence}",
        reason=verdict.reason,
        topic_id=claim.topic_id,
        partition_id=claim.partition_id,
        epoch=epoch,
        holder=verdict.holder,
        current_epoch=verdict.current_epoch,
    )


def _ts(value: datetime | None) -> str:
    return "never" if value is None else value.isoformat(sep=" ", timespec="microseconds")


def judge_claim(slot_id: str, claim: PartitionRow, row: PartitionRow | None, now: datetime) -> Staleness | None:
    """``None`` if the slot still holds ``claim`` at ``now``, else what happened to it.

    ``row`` is the row as the table has it now (its claim columns and ``last_picked_at`` loaded),
    ``None`` if there is none; ``now`` is the database's time it was read at.

    Only what the row proves is said. The table keeps the latest claim's holder, epoch and time
    (``last_picked_at``) but not how an earlier claim ended; a claim takes only a free or expired
    row, so a takeover before the lease this slot knew of had run out proves it had been released.

    >>> from datetime import timezone
    >>> t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    >>> mine = PartitionRow("t", 0, committed_offset=500, claimed_by="a", claim_epoch=3,
    ...                     lease_expires_at=t + timedelta(seconds=30))
    >>> later = t + timedelta(seconds=45)
    >>> b_row = PartitionRow("t", 0, claimed_by="b", claim_epoch=4, lease_expires_at=later + timedelta(seconds=30),
    ...                      last_picked_at=later)
    >>> judge_claim("a", mine, b_row, later).detail  # doctest: +ELLIPSIS
    'slot b claimed it under epoch 4 at 2026-01-01 00:00:45..., after the lease of epoch 3 ran out at ...'
    >>> judge_claim("a", mine, PartitionRow("t", 0, claim_epoch=4, last_picked_at=later), later).reason
    <StaleReason.TAKEN_OVER: 'taken_over'>
    """
    e, lease = claim_terms(claim)
    if row is None:
        return Staleness(StaleReason.NO_SUCH_ROW, "the row does not exist")
    if row.claim_epoch is None:
        raise ValueError(
            f"{row.topic_id}[{row.partition_id}] was read without its claim_epoch; it cannot judge a claim"
        )
    n, holder = row.claim_epoch, row.claimed_by
    live = row.lease_expires_at is not None and now < row.lease_expires_at
    if e > n:
        return Staleness(
            StaleReason.UNKNOWN_EPOCH, f"epoch {e} was never issued for the row (its latest is {n})", holder, n
        )
    if e == n:
        if holder == slot_id:
            if live:
                return None
            return Staleness(
                StaleReason.LEASE_EXPIRED,
                f"its lease ran out at {_ts(row.lease_expires_at)} (database time {_ts(now)}) "
                "and nobody has claimed it since",
                holder,
                n,
            )
        if holder is None:
            return Staleness(
                StaleReason.RELEASED,
                f"this slot released it at epoch {e} and nobody has claimed it since",
                None,
                n,
            )
        # Every claim bumps the epoch, so only a hand edit of the table gets here.
        return Staleness(StaleReason.TAKEN_OVER, f"slot {holder} holds it at the same epoch {n}", holder, n)
    who = "this slot" if holder == slot_id else f"slot {holder}" if holder is not None else "a slot"
    picked = row.last_picked_at
    if n == e + 1 and picked is not None:
        # Epoch n's claim is the latest one, so last_picked_at is its time.
        how = (
            f"after the lease of epoch {e} ran out at {_ts(lease)}"
            if picked >= lease
            else f"before the lease of epoch {e} ran out at {_ts(lease)}, so it had been released"
        )
        detail = f"{who} claimed it under epoch {n} at {_ts(picked)}, {how}"
    else:
        detail = f"it was claimed {n - e} times since epoch {e}; the latest, epoch {n}, by {who} at {_ts(picked)}"
    if holder is None:
        detail += ", and that claim was released since"
    elif not live:
        detail += f", whose lease ran out too at {_ts(row.lease_expires_at)}"
    return Staleness(StaleReason.TAKEN_OVER, detail, holder, n)


class ClaimLostError(StaleClaimError):
    """A commit presented a claim the slot no longer holds; nothing was written.

    Raised for every lost claim, whatever happened to it, with the reason read from the row:

    Attributes:
        reason: a ``StaleReason``.
        holder: who holds the row now (``None`` if nobody).
        current_epoch: the row's latest epoch (``None`` if the row does not exist).
        topic_id, partition_id, epoch: the claim presented.

    The fix is the caller's: stop consuming the partition, drop its output not yet committed, and
    claim again (the row comes back under a new epoch if it is still the slot's to take).
    """

    def __init__(
        self,
        message: str,
        *,
        reason: StaleReason,
        topic_id: str,
        partition_id: int,
        epoch: int,
        holder: str | None = None,
        current_epoch: int | None = None,
    ) -> None:
        super().__init__(message, topic_id=topic_id, partition_id=partition_id, epoch=epoch)
        self.reason = reason
        self.holder = holder
        self.current_epoch = current_epoch
