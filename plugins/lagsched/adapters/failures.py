"""Which client errors a retry can fix, and which Connection each one is about.

One table for the three clients built from lagsched's Connections (PyMySQL, redis-py,
confluent-kafka). `classify` reads an exception (and the exceptions it was raised from) and says
which service failed, how (`Kind`), and so whether a retry can help:

===========  ==========================================================  =========
kind         what                                                        retry?
===========  ==========================================================  =========
denied       wrong password or user, no access to the database, SASL    no
             or ACL refusal (MySQL 1044, 1045, 1049, 1130, 1142, ...;
             Redis AUTH/WRONGPASS/NOAUTH/NOPERM; Kafka ``_AUTHENTICATION``,
             ``SASL_AUTHENTICATION_FAILED``, ``*_AUTHORIZATION_FAILED``)
invalid      a client setting the client refuses (Kafka ``_INVALID_ARG``,  no
             ``_SSL``; Redis DB number out of range)
schema       the lagsched tables are missing or older than the code        no
             (MySQL 1146, 1054): run the ``lagsched_setup`` DAG
unreachable  down, refused, unresolvable, timed out, connection lost       yes
             (MySQL 2002, 2003, 2006, 2013, 1040, 1053, and the Iceberg
             JDBC catalog's connection exceptions from Spark; Redis
             ConnectionError/TimeoutError; Kafka ``_TRANSPORT``,
             ``_ALL_BROKERS_DOWN``, ``_RESOLVE``, ``_TIMED_OUT``, retriable;
             a ``KafkaOffsetsError`` not raised from a client error)
busy         lock wait timeout, deadlock (MySQL 1205, 1213)                yes
other        any other error of these clients                            yes
===========  ==========================================================  =========

An unknown host is "unreachable", not "invalid": a resolver that is briefly down looks the same
from here, and a wrong name costs only the task's few retries, each naming the Connection and host.
"other" is retried because that is what Airflow did before this table existed; an error only
becomes permanent by being listed here.

`naming_connections` turns a client error raised inside it into a `ConnectionFailure` that names
the Connection it came from, where that points (never a password), what failed and where to fix
it. `is_permanent` is the one decision the task wrapper (`lagsched.airflow.tasks.fail_fast`) makes.

Client modules are never imported here: an exception of a client can only exist once its module
is loaded, so the checks look the module up in ``sys.modules`` (importing the Redis adapter must
not load Kafka).
"""

from __future__ import annotations

import enum
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from lagsched.connections import (
    KAFKA_CONN_ID,
    SCHEMA_REGISTRY_CONN_ID,
    MySQLParams,
    RedisParams,
    where_kafka,
    where_mysql,
    where_redis,
)
from lagsched.core.errors import (
    ConfigError,
    ConnectionFailure,
    ConnectionInvalid,
    ConnectionNotFound,
    KafkaOffsetsError,
    RegistryUnreachable,
    TopicNameError,
)

__all__ = [
    "KafkaConnection",
    "Kind",
    "Target",
    "Verdict",
    "classify",
    "failure_for",
    "is_permanent",
    "kafka_kind",
    "mysql_target",
    "naming_connections",
    "redis_target",
    "short_reason",
]

Service = Literal["kafka", "mysql", "redis", "schema_registry"]


class Kind(enum.Enum):
    """How a client call failed; `permanent` says a retry cannot fix it."""

    DENIED = "the server refused the credentials or access"
    INVALID = "a client setting is invalid"
    SCHEMA = "the lagsched schema is missing or out of date"
    UNREACHABLE = "cannot reach the server"
    BUSY = "the server is busy (lock wait or deadlock)"
    OTHER = "the call failed"

    @property
    def permanent(self) -> bool:
        return self in _PERMANENT


_PERMANENT = frozenset({Kind.DENIED, Kind.INVALID, Kind.SCHEMA})

#: PyMySQL error codes (the first argument of every ``pymysql.err.MySQLError``).
MYSQL_KINDS: Mapping[int, Kind] = {
    1044: Kind.DENIED,  # access denied to the database (MariaDB's answer to an unknown one, too)
    1045: Kind.DENIED,  # access denied for user (wrong password)
    1049: Kind.DENIED,  # unknown database
    1130: Kind.DENIED,  # host not allowed to connect
    1142: Kind.DENIED,  # command denied on a table (missing privilege)
    1143: Kind.DENIED,  # column command denied
    1227: Kind.DENIED,  # needs a privilege the user lacks
    1251: Kind.DENIED,  # the server wants an auth plugin PyMySQL does not speak
    1698: Kind.DENIED,  # access denied (unix_socket / auth plugin)
    1820: Kind.DENIED,  # the password has expired and must be reset
    1862: Kind.DENIED,  # the password has expired
    3118: Kind.DENIED,  # the account is locked
    1146: Kind.SCHEMA,  # table does not exist
    1054: Kind.SCHEMA,  # unknown column
    0: Kind.UNREACHABLE,  # InterfaceError: the connection is closed
    1040: Kind.UNREACHABLE,  # too many connections
    1053: Kind.UNREACHABLE,  # server shutdown in progress
    1927: Kind.UNREACHABLE,  # MariaDB: connection was killed
    2002: Kind.UNREACHABLE,  # cannot connect through the socket
    2003: Kind.UNREACHABLE,  # cannot connect (refused, unknown host, timeout)
    2006: Kind.UNREACHABLE,  # server has gone away
    2013: Kind.UNREACHABLE,  # lost connection during query
    2055: Kind.UNREACHABLE,  # lost connection (system error)
    1205: Kind.BUSY,  # lock wait timeout
    1213: Kind.BUSY,  # deadlock
}

#: confluent-kafka error names (`KafkaError.name()`) that a retry cannot fix.
KAFKA_PERMANENT: Mapping[str, Kind] = {
    "_INVALID_ARG": Kind.INVALID,
    "_INVALID_TYPE": Kind.INVALID,
    "_SSL": Kind.INVALID,
    "_UNKNOWN_PROTOCOL": Kind.INVALID,
    "_NOT_IMPLEMENTED": Kind.INVALID,
    "_AUTHENTICATION": Kind.DENIED,
    "SASL_AUTHENTICATION_FAILED": Kind.DENIED,
    "UNSUPPORTED_SASL_MECHANISM": Kind.DENIED,
    "ILLEGAL_SASL_STATE": Kind.DENIED,
    "TOPIC_AUTHORIZATION_FAILED": Kind.DENIED,
    "GROUP_AUTHORIZATION_FAILED": Kind.DENIED,
    "CLUSTER_AUTHORIZATION_FAILED": Kind.DENIED,
}

#: confluent-kafka error names that mean the brokers could not be reached (retried).
KAFKA_UNREACHABLE = frozenset(
    {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT"}
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What `classify` found: the service whose client raised `error`, and how it failed."""

    service: Service
    kind: Kind
    error: BaseException

    @property
    def permanent(self) -> bool:
        return self.kind.permanent


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was explicitly raised from (``raise ... from``), without cycles.

    Only ``__cause__``: an error raised while another was being handled (``__context__``) is a
    different failure, and judging it by the first would call a bug in a handler "access denied".
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__


def _mysql_kind(exc: BaseException) -> Kind | None:
    pymysql = sys.modules.get("pymysql")
    if pymysql is None or not isinstance(exc, pymysql.err.MySQLError):
        return None
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    return MYSQL_KINDS.get(code, Kind.OTHER) if code is not None else Kind.OTHER


#: Java exceptions (JDBC) that say the database cannot be reached: the Iceberg JDBC catalog, which
#: lives in lagsched's MySQL, reaches Python from Spark's JVM as a Py4J error carrying them.
JDBC_UNREACHABLE = (
    "java.sql.SQLNonTransientConnectionException",
    "java.sql.SQLTransientConnectionException",
    "CommunicationsException",
)


def _jdbc_kind(exc: BaseException) -> Kind | None:
    """An error of the JVM (Spark) whose cause is the catalog's database being unreachable."""
    py4j = sys.modules.get("py4j.protocol")
    captured = sys.modules.get("pyspark.errors.exceptions.captured")
    java_errors = tuple(
        t for t in (getattr(py4j, "Py4JJavaError", None), getattr(captured, "CapturedException", None)) if t
    )
    if not java_errors or not isinstance(exc, java_errors):
        return None
    try:
        text = str(exc)  # the Java exception with its causes
    except Exception:  # noqa: BLE001 - a JVM that cannot describe its error tells nothing either
        return None
    return Kind.UNREACHABLE if any(name in text for name in JDBC_UNREACHABLE) else None


def short_reason(exc: BaseException) -> str:
    """One line that says what failed: a JVM error's JDBC cause, else the error's first line."""
    text = str(exc).strip()
    for line in text.splitlines():
        if any(name in line for name in JDBC_UNREACHABLE):
            return line.strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _redis_kind(exc: BaseException) -> Kind | None:
    redis = sys.modules.get("redis")
    if redis is None or not isinstance(exc, redis.exceptions.RedisError):
        return None
    errors = redis.exceptions
    # AuthenticationError and AuthorizationError subclass ConnectionError: test them first.
    if isinstance(exc, (errors.AuthenticationError, errors.AuthorizationError, errors.NoPermissionError)):
        return Kind.DENIED
    if isinstance(exc, (errors.ConnectionError, errors.TimeoutError)):
        return Kind.UNREACHABLE
    if isinstance(exc, errors.ResponseError) and "db index" in str(exc).lower():
        return Kind.INVALID  # SELECT of a database number the server does not have
    return Kind.OTHER


def kafka_kind(name: str, *, retriable: bool = False, fatal: bool = False) -> Kind:
    """The kind of a confluent-kafka error, from its name (`KafkaError.name()`)."""
    if name in KAFKA_PERMANENT:
        return KAFKA_PERMANENT[name]
    if name in KAFKA_UNREACHABLE:
        return Kind.UNREACHABLE
    if fatal:
        return Kind.INVALID  # librdkafka gave the client up for good: a new try cannot differ
    return Kind.UNREACHABLE if retriable else Kind.OTHER


def _kafka_kind(exc: BaseException) -> Kind | None:
    kafka = sys.modules.get("confluent_kafka")
    if kafka is not None and isinstance(exc, kafka.KafkaException):
        error = exc.args[0] if exc.args else None
        if isinstance(error, kafka.KafkaError):
            return kafka_kind(str(error.name()), retriable=bool(error.retriable()), fatal=bool(error.fatal()))
        return Kind.OTHER
    if isinstance(exc, KafkaOffsetsError):
        # Ours, raised by the Kafka adapter; "usually transient" (a leader election, a restart).
        return Kind.UNREACHABLE
    return None


def _registry_kind(exc: BaseException) -> Kind | None:
    if isinstance(exc, RegistryUnreachable):
        return Kind.UNREACHABLE
    if isinstance(exc, ConnectionFailure) and exc.conn_id == SCHEMA_REGISTRY_CONN_ID and not exc.permanent:
        return Kind.UNREACHABLE
    return None


_JUDGES: tuple[tuple[Service, Callable[[BaseException], Kind | None]], ...] = (
    ("mysql", _mysql_kind),
    ("mysql", _jdbc_kind),
    ("redis", _redis_kind),
    ("kafka", _kafka_kind),
    ("schema_registry", _registry_kind),
)


def classify(exc: BaseException) -> Verdict | None:
    """The verdict on the first client error in `exc`'s chain, or None if no client raised it.

    The chain is `exc`, then its ``__cause__``, and so on: an adapter that
    wraps a client error (``KafkaOffsetsError(...) from exc``) is judged by the client's error.
    """
    found: Verdict | None = None
    for error in _chain(exc):
        for service, judge in _JUDGES:
            kind = judge(error)
            if kind is not None:
                verdict = Verdict(service, kind, error)
                if not isinstance(error, KafkaOffsetsError):
                    return verdict
                # Our wrapper: the client error it was raised from, if any, says more.
                found = found or verdict
    return found


#: lagsched's own errors that no retry can fix: the input is wrong until someone changes it.
_PERMANENT_ERRORS = (ConfigError, TopicNameError, ConnectionNotFound, ConnectionInvalid)


def is_permanent(exc: BaseException) -> bool:
    """Whether a retry of the task cannot fix `exc`: fail the run at once if so.

    True for a malformed settings Variable (`ConfigError`), a bad cluster or topic name
    (`TopicNameError`), a missing or malformed Connection (`ConnectionNotFound`,
    `ConnectionInvalid`), a `ConnectionFailure` marked permanent, and a raw client error that
    `classify` calls permanent. Everything else is retried, as Airflow does by default.
    """
    for error in _chain(exc):
        if isinstance(error, ConnectionFailure):
            return error.permanent
        if isinstance(error, _PERMANENT_ERRORS):
            return True
    verdict = classify(exc)
    return verdict is not None and verdict.permanent


@dataclass(frozen=True, slots=True)
class Target:
    """One Connection a block of code uses: which service, its id, where it points (no secret).

    `reported` returns what the client reported on its own, outside any call (librdkafka's
    error callback): the reason a Kafka call only says "Broker transport failure".
    """

    service: Service
    conn_id: str
    where: str
    reported: Callable[[], Sequence[tuple[str, str]]] = lambda: ()


def mysql_target(params: MySQLParams) -> Target:
    return Target("mysql", params.conn_id, where_mysql(params))


def redis_target(params: RedisParams) -> Target:
    return Target("redis", params.conn_id, where_redis(params))


class KafkaConnection:
    """A Kafka Connection's clients, with the errors librdkafka reports through ``error_cb``.

    confluent-kafka builds a client without any I/O, and a call that cannot reach the brokers says
    only "Broker transport failure": the reason (an unresolvable host, a refused connection, a
    failed SASL handshake) goes to the client's ``error_cb``, served by ``poll()``. Clients made by
    `client` report to this object, and `target` reads those reports into the error message.

    Args:
        config: the Connection's confluent-kafka settings (`lagsched.connections.kafka_config`).
        conn_id: the Connection's id, for messages.
        keep: reports kept (the most recent).
    """

    def __init__(self, config: Mapping[str, Any], conn_id: str = KAFKA_CONN_ID, keep: int = 16) -> None:
        self.conn_id = conn_id
        self.config = dict(config)
        self._reports: deque[tuple[str, str]] = deque(maxlen=keep)
        self._clients: list[Any] = []

    def _record(self, error: Any) -> None:
        self._reports.append((str(error.name()), str(error.str())))

    def client(self, factory: Callable[[dict[str, Any]], Any]) -> Any:
        """``factory(config)`` with this object as the ``error_cb``; a refused setting is permanent.

        Raises:
            ConnectionFailure: the client refused a setting (permanent), naming the Connection.
        """
        with naming_connections(self.target):
            try:
                made = factory({**self.config, "error_cb": self._record})
            except (TypeError, ValueError) as exc:  # confluent-kafka's own checks of setting types
                raise ConnectionFailure(
                    _message(self.target, Kind.INVALID, str(exc)), conn_id=self.conn_id, permanent=True
                ) from exc
        self._clients.append(made)
        return made

    def reported(self) -> list[tuple[str, str]]:
        """Each distinct (error name, message) the clients reported, oldest first."""
        for made in self._clients:
            poll = getattr(made, "poll", None)
            if poll is not None:
                poll(0)  # serves the queued error callbacks
        return list(dict.fromkeys(self._reports))

    @property
    def target(self) -> Target:
        return Target("kafka", self.conn_id, where_kafka(self.config), self.reported)


_FIXES: Mapping[Kind, str] = {
    Kind.DENIED: "fix it in Admin > Connections",
    Kind.INVALID: "fix it in Admin > Connections",
    Kind.SCHEMA: "run the lagsched_setup DAG, or check the Connection's schema in Admin > Connections",
    Kind.UNREACHABLE: (
        "is the service up and reachable from here? A retry may help; "
        "if the address is wrong, fix it in Admin > Connections"
    ),
    Kind.BUSY: "a retry may help",
    Kind.OTHER: "a retry may help",
}


def _message(target: Target, kind: Kind, detail: str) -> str:
    return f"Connection {target.conn_id!r} ({target.where}): {kind.value}: {detail}; {_FIXES[kind]}"


def _kafka_detail(verdict: Verdict, reports: Sequence[tuple[str, str]]) -> tuple[Kind, str]:
    """Fold librdkafka's own reports into the verdict: a SASL refusal behind a transport failure."""
    detail = str(verdict.error)
    if not reports:
        return verdict.kind, detail
    kind = verdict.kind
    for name, _ in reports:
        reported = kafka_kind(name)
        if reported.permanent and not kind.permanent:
            kind = reported
    shown = [text for _, text in reports][-3:]
    return kind, f"{detail} (the client reported: {'; '.join(shown)})"


def failure_for(exc: BaseException, targets: Sequence[Target]) -> ConnectionFailure | None:
    """A `ConnectionFailure` naming the Connection whose client raised `exc`, if one of `targets`."""
    verdict = classify(exc)
    if verdict is None:
        return None
    target = next((t for t in targets if t.service == verdict.service), None)
    if target is None:
        return None
    kind, detail = verdict.kind, str(verdict.error)
    if verdict.service == "kafka":
        kind, detail = _kafka_detail(verdict, target.reported())
    return ConnectionFailure(_message(target, kind, detail), conn_id=target.conn_id, permanent=kind.permanent)


@contextmanager
def naming_connections(*targets: Target) -> Iterator[None]:
    """Re-raise a client error of one of `targets` as a `ConnectionFailure` naming its Connection.

    Anything else (lagsched's own errors, bugs, a `ConnectionFailure` already raised inside)
    passes through unchanged. The original error is the new one's ``__cause__``.
    """
    try:
        yield
    except ConnectionFailure:
        raise
    except Exception as exc:
        failure = failure_for(exc, targets)
        if failure is None:
            raise
        raise failure from exc
