"""Exception types a user can act on, one per failure, each naming the bad value and the fix."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConnectionFailure",
    "ConnectionInvalid",
    "ConnectionNotFound",
    "KafkaOffsetsError",
    "LagschedError",
    "StaleClaimError",
    "TopicNameError",
    "UnknownSchemaId",
    "UnknownTopicError",
]


class LagschedError(Exception):
    """Base class, so callers can catch everything lagsched raises on purpose and nothing else."""


class ConfigError(LagschedError, ValueError):
    """The settings Variable (or another configuration source) holds a value we cannot use.

    `field` is the dotted path of the first offending field (``topics.orders.max_lag``), `value` the
    value found there and `allowed` what would have been accepted; the message lists every problem
    found, so one edit of the Variable can fix them all.
    """

    def __init__(self, message: str, *, field: str = "", value: object = None, allowed: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.allowed = allowed


class StaleClaimError(LagschedError):
    """A commit, renewal or release presented a claim the slot no longer holds.

    The row was taken over by another slot (its ``claim_epoch`` moved on), released, or the lease
    ran out. Nothing was written. The fix is on the caller's side: stop consuming the partition,
    drop any output not yet committed, and claim again.
    """

    def __init__(self, message: str, *, topic_id: str = "", partition_id: int = -1, epoch: int = -1) -> None:
        super().__init__(message)
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.epoch = epoch


class TopicNameError(LagschedError, ValueError):
    """A topic or cluster name Kafka would not accept (legal: ``[a-zA-Z0-9._-]``, 1 to 249 chars)."""


class UnknownTopicError(LagschedError, LookupError):
    """A topic asked about does not exist on the broker; `topics` lists every such name.

    The fix: correct the name, or disable the topic in the registry if it was deleted on purpose.
    """

    def __init__(self, message: str, *, topics: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.topics = topics


class KafkaOffsetsError(LagschedError):
    """The broker could not report offsets or metadata (unreachable, no leader, an error code).

    Usually transient (a leader election, a broker restart): the task's retries cover it. The
    message names the partition and the broker's error.
    """


class ConnectionNotFound(LagschedError, LookupError):
    """No Connection with this id is defined in Airflow or the environment.

    A retry cannot fix it: someone has to add the Connection (Admin > Connections) or set
    ``AIRFLOW_CONN_<ID>``. `conn_id` is the Connection's id.
    """

    def __init__(self, message: str, *, conn_id: str = "") -> None:
        super().__init__(message)
        self.conn_id = conn_id


class ConnectionInvalid(LagschedError, ValueError):
    """A Connection is defined but unusable as written: malformed JSON or URI, a required field
    missing, a field of the wrong type. The message names the Connection and the field; a retry
    cannot fix it.
    """

    def __init__(self, message: str, *, conn_id: str = "") -> None:
        super().__init__(message)
        self.conn_id = conn_id


class ConnectionFailure(LagschedError):
    """A service reached through a Connection failed: it refused the credentials, is unreachable,
    timed out, or answered an error.

    The message names the Connection, where it points (host and port, user; never a password),
    what failed, and where to fix it. `permanent` says whether a retry can help: a wrong
    password, an unknown database or an invalid client setting cannot heal (the task fails at
    once); a server that is down, unreachable or timing out can (the task's retries cover it).
    """

    def __init__(self, message: str, *, conn_id: str, permanent: bool) -> None:
        super().__init__(message)
        self.conn_id = conn_id
        self.permanent = permanent


class RegistryUnreachable(LagschedError):
    """The schema registry could not answer (down, timing out): transient. A slot rides it through
    as a Kafka outage, and no record becomes a dead letter for it."""

    unreachable = True


class UnknownSchemaId(LagschedError, LookupError):
    """The schema registry answered that no schema has this id: permanent, as a registry never
    reuses an id, so the record that carries it is a dead letter. `schema_id` is the id."""

    def __init__(self, message: str, *, schema_id: int) -> None:
        super().__init__(message)
        self.schema_id = schema_id
