"""The classification of client errors: which a retry can fix, and which Connection they name."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest
import redis
from airflow.sdk.exceptions import AirflowFailException
from confluent_kafka import KafkaError, KafkaException

from lagsched.adapters.failures import (
    KafkaConnection,
    Kind,
    classify,
    is_permanent,
    mysql_target,
    naming_connections,
    redis_target,
)
from lagsched.airflow.tasks import fail_fast
from lagsched.connections import MySQLParams, RedisParams
from lagsched.core.errors import (
    ConfigError,
    ConnectionFailure,
    ConnectionInvalid,
    ConnectionNotFound,
    KafkaOffsetsError,
    TopicNameError,
)

MYSQL = MySQLParams("db.example", 3307, "app", "s3cret-pw", "lagsched")
REDIS = RedisParams("cache.example", 6380, 2, "r3dis-pw")


def kafka_exc(code: int, reason: str = "", *, fatal: bool = False, retriable: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, reason or None, fatal=fatal, retriable=retriable))


def wrapped(cause: BaseException) -> KafkaOffsetsError:
    """What the Kafka adapter raises: its own error, from the client's."""
    try:
        raise KafkaOffsetsError(f"cannot read topic metadata from the broker: {cause}") from cause
    except KafkaOffsetsError as exc:
        return exc


# (error, service, kind): one row per line of the table in lagsched.adapters.failures.
TABLE: list[tuple[BaseException, str, Kind]] = [
    (pymysql.err.OperationalError(1045, "Access denied for user 'app'@'10.0.0.1' (using password: YES)"), "mysql",
     Kind.DENIED),
    (pymysql.err.OperationalError(1044, "Access denied for user 'app'@'%' to database 'x'"), "mysql", Kind.DENIED),
    (pymysql.err.OperationalError(1049, "Unknown database 'x'"), "mysql", Kind.DENIED),
    (pymysql.err.ProgrammingError(1146, "Table 'lagsched.topics' doesn't exist"), "mysql", Kind.SCHEMA),
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server on 'db' ([Errno 111] refused)"), "mysql",
     Kind.UNREACHABLE),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), "mysql", Kind.UNREACHABLE),
    (pymysql.err.InterfaceError(0, ""), "mysql", Kind.UNREACHABLE),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), "mysql", Kind.BUSY),
    (pymysql.err.OperationalError(1213, "Deadlock found"), "mysql", Kind.BUSY),
    (pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), "mysql", Kind.OTHER),
    (redis.exceptions.AuthenticationError("invalid username-password pair"), "redis", Kind.DENIED),
    (redis.exceptions.NoPermissionError("NOPERM this user has no permissions"), "redis", Kind.DENIED),
    (redis.exceptions.ResponseError("DB index is out of range"), "redis", Kind.INVALID),
    (redis.exceptions.ConnectionError("Error 111 connecting to cache:6380. Connection refused."), "redis",
     Kind.UNREACHABLE),
    (redis.exceptions.TimeoutError("Timeout reading from socket"), "redis", Kind.UNREACHABLE),
    (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), "redis", Kind.UNREACHABLE),
    (redis.exceptions.ResponseError("WRONGTYPE Operation against a key"), "redis", Kind.OTHER),
    (kafka_exc(KafkaError._INVALID_ARG, 'No such configuration property: "foo"'), "kafka", Kind.INVALID),
    (kafka_exc(KafkaError._SSL, "certificate verify failed"), "kafka", Kind.INVALID),
    (kafka_exc(KafkaError._AUTHENTICATION, "SASL authentication error"), "kafka", Kind.DENIED),
    (kafka_exc(KafkaError.TOPIC_AUTHORIZATION_FAILED), "kafka", Kind.DENIED),
    (kafka_exc(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"), "kafka",
     Kind.UNREACHABLE),
    (kafka_exc(KafkaError._ALL_BROKERS_DOWN), "kafka", Kind.UNREACHABLE),
    (kafka_exc(KafkaError._TIMED_OUT), "kafka", Kind.UNREACHABLE),
    (kafka_exc(KafkaError.NOT_LEADER_FOR_PARTITION, retriable=True), "kafka", Kind.UNREACHABLE),
    (kafka_exc(KafkaError.UNKNOWN, fatal=True), "kafka", Kind.INVALID),
    (kafka_exc(KafkaError.UNKNOWN), "kafka", Kind.OTHER),
    # The adapter's own error is judged by the client error it was raised from...
    (wrapped(kafka_exc(KafkaError._AUTHENTICATION, "SASL authentication error")), "kafka", Kind.DENIED),
    (wrapped(kafka_exc(KafkaError._TRANSPORT)), "kafka", Kind.UNREACHABLE),
    # ... and is transient on its own (a leader election, a broker restart).
    (KafkaOffsetsError("broker returned no offset"), "kafka", Kind.UNREACHABLE),
]  # fmt: skip


@pytest.mark.parametrize(("error", "service", "kind"), TABLE, ids=lambda v: type(v).__name__)
def test_classification_table(error: BaseException, service: str, kind: Kind) -> None:
    verdict = classify(error)
    assert verdict is not None
    assert (verdict.service, verdict.kind) == (service, kind)
    assert is_permanent(error) is kind.permanent


def test_permanent_kinds() -> None:
    assert {k for k in Kind if k.permanent} == {Kind.DENIED, Kind.INVALID, Kind.SCHEMA}


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("invalid lagsched settings: defaults.max_lag = 'lots'"),
        TopicNameError("cluster name 'a b' is not usable"),
        ConnectionNotFound("Connection 'lagsched_mysql' is not defined", conn_id="lagsched_mysql"),
        ConnectionInvalid("Connection 'lagsched_kafka' needs 'bootstrap.servers'", conn_id="lagsched_kafka"),
        ConnectionFailure("Connection 'lagsched_mysql' (...): access denied", conn_id="lagsched_mysql", permanent=True),
    ],
    ids=lambda e: type(e).__name__,
)
def test_input_a_person_must_fix_is_permanent(error: Exception) -> None:
    assert is_permanent(error)


@pytest.mark.parametrize(
    "error",
    [
        ConnectionFailure("Connection 'lagsched_mysql' (...): cannot reach", conn_id="lagsched_mysql", permanent=False),
        KeyError("a bug"),
        OSError("disk full"),
        TimeoutError(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_anything_else_is_retried(error: Exception) -> None:
    assert not is_permanent(error)
    assert classify(error) is None or not classify(error).permanent  # type: ignore[union-attr]


def test_only_an_explicit_cause_is_followed() -> None:
    """A bug raised while handling an access-denied error is a bug, not "access denied"."""
    try:
        try:
            raise pymysql.err.OperationalError(1045, "Access denied")
        except pymysql.err.OperationalError:
            raise KeyError("bug in a handler")  # the point: no `from`
    except KeyError as exc:
        bug = exc
    assert bug.__context__ is not None
    assert classify(bug) is None
    assert not is_permanent(bug)


def raise_in(targets: list[Any], error: BaseException) -> ConnectionFailure:
    with pytest.raises(ConnectionFailure) as info, naming_connections(*targets):
        raise error
    assert info.value.__cause__ is error
    return info.value


def test_mysql_failure_names_the_connection_without_the_password() -> None:
    failure = raise_in(
        [mysql_target(MYSQL), redis_target(REDIS)],
        pymysql.err.OperationalError(1045, "Access denied for user 'app'@'10.0.0.1' (using password: YES)"),
    )
    message = str(failure)
    assert message.startswith("Connection 'lagsched_mysql' (db.example:3307, user app, database lagsched): ")
    assert "Access denied for user 'app'" in message
    assert message.endswith("fix it in Admin > Connections")
    assert "s3cret-pw" not in message
    assert (failure.conn_id, failure.permanent) == ("lagsched_mysql", True)


def test_unreachable_failure_is_transient_and_says_so() -> None:
    failure = raise_in([mysql_target(MYSQL), redis_target(REDIS)], redis.exceptions.ConnectionError("refused"))
    assert str(failure).startswith("Connection 'lagsched_redis' (cache.example:6380, db 2, with a password): ")
    assert "cannot reach the server" in str(failure)
    assert "A retry may help" in str(failure)
    assert "r3dis-pw" not in str(failure)
    assert (failure.conn_id, failure.permanent) == ("lagsched_redis", False)


def test_errors_of_other_services_and_bugs_pass_through() -> None:
    error = redis.exceptions.ConnectionError("refused")
    with pytest.raises(redis.exceptions.ConnectionError), naming_connections(mysql_target(MYSQL)):
        raise error
    with pytest.raises(KeyError), naming_connections(mysql_target(MYSQL)):
        raise KeyError("a bug")
    inner = ConnectionFailure("named already", conn_id="x", permanent=True)
    with pytest.raises(ConnectionFailure) as info, naming_connections(mysql_target(MYSQL)):
        raise inner
    assert info.value is inner


class FakeAdmin:
    """Stands for a confluent-kafka client: `poll` serves the queued error callbacks."""

    def __init__(self, config: dict[str, Any], queued: list[KafkaError]) -> None:
        self.error_cb = config["error_cb"]
        self.queued = queued

    def poll(self, timeout: float) -> int:
        for error in self.queued:
            self.error_cb(error)
        self.queued = []
        return 0


def test_kafka_failure_carries_what_the_client_reported() -> None:
    config = {"bootstrap.servers": "kafka.invalid:9092", "sasl.password": "k4fka-pw", "sasl.username": "svc"}
    kafka = KafkaConnection(config)
    refused = KafkaError(KafkaError._RESOLVE, "kafka.invalid:9092/bootstrap: Failed to resolve 'kafka.invalid:9092'")
    kafka.client(lambda cfg: FakeAdmin(cfg, [refused, refused]))
    failure = raise_in([kafka.target], kafka_exc(KafkaError._TRANSPORT, "Failed to get metadata"))
    message = str(failure)
    assert message.startswith("Connection 'lagsched_kafka' (bootstrap.servers=kafka.invalid:9092, sasl.username=svc)")
    assert message.count("Failed to resolve 'kafka.invalid:9092'") == 1  # reported twice, shown once
    assert "k4fka-pw" not in message
    assert not failure.permanent


def test_a_sasl_refusal_behind_a_transport_failure_is_permanent() -> None:
    """librdkafka says "Broker transport failure"; its error callback says why: a refused login."""
    kafka = KafkaConnection({"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL"})
    denied = KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed")
    kafka.client(lambda cfg: FakeAdmin(cfg, [denied]))
    failure = raise_in([kafka.target], wrapped(kafka_exc(KafkaError._TRANSPORT, "Failed to get metadata")))
    assert failure.permanent
    assert "the server refused the credentials" in str(failure)
    assert "Authentication failed" in str(failure)


def test_a_kafka_setting_the_client_refuses_is_permanent() -> None:
    kafka = KafkaConnection({"bootstrap.servers": "b:9092"}, conn_id="lagsched_kafka_eu")

    def refuse(config: dict[str, Any]) -> Any:
        raise TypeError("expected error_cb property as a callable function")

    with pytest.raises(
        ConnectionFailure, match=r"^Connection 'lagsched_kafka_eu' \(bootstrap\.servers=b:9092\)"
    ) as info:
        kafka.client(refuse)
    assert info.value.permanent


def test_fail_fast_fails_what_a_retry_cannot_fix() -> None:
    cause = ConnectionFailure(
        "Connection 'lagsched_mysql' (h:1): access denied", conn_id="lagsched_mysql", permanent=True
    )
    named = r"^Connection 'lagsched_mysql' \(h:1\): access denied$"
    with pytest.raises(AirflowFailException, match=named) as info, fail_fast():
        raise cause
    assert info.value.__cause__ is cause


def test_fail_fast_leaves_the_rest_to_the_retries() -> None:
    for error in (
        ConnectionFailure("Connection 'lagsched_mysql' (h:1): cannot reach", conn_id="lagsched_mysql", permanent=False),
        KeyError("a bug"),
    ):
        with pytest.raises(type(error)) as info, fail_fast():
            raise error
        assert info.value is error
