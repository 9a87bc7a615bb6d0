"""Rules of the claim protocol, with no database in sight.

The claim table (``topic_partitions``) is a queue of topic-partitions that worker slots take rows
from (Hevo, seed 003). What is decided here, so it can be tested without MySQL:

* **Lock mode** (``select_lock_mode``): ``SELECT ... FOR UPDATE SKIP LOCKED`` where the server has
  it (MariaDB >= 10.6, MySQL >= 8.0.1), else an optimistic compare-and-set on ``claim_epoch``.
  ``for_update`` (plain ``FOR UPDATE``, Hevo's MySQL 5.7 query) is kept as a baseline and can be
  forced; so can the others.
* **How many rows to take** (``slot_wants``, ``rows_to_claim``): the owner at lane position ``i``
  of a topic with ``P`` partitions and ``k`` owners holds ``fair_share(P, k, i)`` rows; a claim
  takes only what is missing from what the slot already holds.
* **Leases** (``lease_expiry``, ``is_lease_live``, ``is_renew_due``): pure arithmetic over an
  injected ``now``. The claim store feeds it the database's clock so every host judges a lease by
  the same clock; a worker uses ``is_renew_due`` with a safety margin for its own clock's skew.
* **Retries** (``RetryPolicy``): bounded attempts with full-jitter exponential backoff from a
  seeded ``random.Random``, used both for lock-wait/deadlock errors and optimistic CAS losses.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from lagsched.core.errors import ConfigError
from lagsched.core.rendezvous import Assignment, TopicSpec, fair_share

__all__ = [
    "DEFAULT_LEASE_S",
    "LOCK_MODE_SETTINGS",
    "Claim",
    "LockMode",
    "RetryPolicy",
    "ServerVersion",
    "held_counts",
    "is_lease_live",
    "is_renew_due",
    "lease_expiry",
    "parse_server_version",
    "rows_to_claim",
    "select_lock_mode",
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
    the caller's decision (release at the end of a run), never a side effect of claiming.

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
    if not lease_s > 0:
        raise ValueError(f"lease_s={lease_s}; a lease must last > 0 seconds")
    return now + timedelta(seconds=lease_s)


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
class Claim:
    """One row a slot holds.

    Attributes:
        topic_id: registry UUID of the topic.
        partition_id: Kafka partition number.
        committed_offset: next offset to consume, ``None`` before the first commit.
        claim_epoch: fencing token the claim set; every commit must present it.
        lease_expires_at: when the claim lapses unless renewed (UTC, database clock).
    """

    topic_id: str
    partition_id: int
    committed_offset: int | None
    claim_epoch: int
    lease_expires_at: datetime

    @property
    def key(self) -> tuple[str, int]:
        """The row's primary key."""
        return (self.topic_id, self.partition_id)


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


def held_counts(claims: Sequence[Claim]) -> Mapping[str, int]:
    """Rows held per topic."""
    counts: dict[str, int] = {}
    for c in claims:
        counts[c.topic_id] = counts.get(c.topic_id, 0) + 1
    return counts
