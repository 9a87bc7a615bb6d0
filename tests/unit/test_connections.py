from __future__ import annotations

import json

import pytest

from lagsched.connections import (
    ConnectionInvalid,
    ConnectionNotFound,
    MySQLParams,
    RedisParams,
    get_connection,
    kafka_config,
    mysql_params,
    redis_params,
    where_kafka,
    where_mysql,
    where_redis,
)
from lagsched.core.errors import LagschedError


def test_json_connection_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "mysql", "host": "db", "port": 3307, "login": "u", "password": "p@ss", "schema": "s"}
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", json.dumps(conn))
    params = mysql_params("lagsched_x")
    assert (params.host, params.port, params.user, params.password, params.database) == ("db", 3307, "u", "p@ss", "s")
    assert "p@ss" not in repr(params)


def test_uri_connection_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", "mysql://user:p%40ss@db.example:3306/lagsched")
    info = get_connection("lagsched_x")
    assert (info.conn_type, info.host, info.port, info.login, info.password, info.schema) == (
        "mysql", "db.example", 3306, "user", "p@ss", "lagsched")  # fmt: skip


def test_kafka_connection_needs_bootstrap_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", json.dumps({"conn_type": "kafka", "extra": {"group.id": "g"}}))
    with pytest.raises(ValueError, match=r"bootstrap\.servers"):
        kafka_config("lagsched_x")


def test_malformed_json_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", "{not json")
    with pytest.raises(ValueError, match="AIRFLOW_CONN_LAGSCHED_X is not valid JSON"):
        get_connection("lagsched_x")


def test_missing_connection_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_LAGSCHED_NOPE", raising=False)
    with pytest.raises(ConnectionNotFound, match="lagsched_nope"):
        get_connection("lagsched_nope")


def test_missing_and_malformed_connections_are_lagsched_errors_naming_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both are permanent (a retry cannot fix them), so they must be told from a service outage."""
    monkeypatch.delenv("AIRFLOW_CONN_LAGSCHED_NOPE", raising=False)
    with pytest.raises(ConnectionNotFound) as missing:
        get_connection("lagsched_nope")
    assert isinstance(missing.value, LagschedError)
    assert missing.value.conn_id == "lagsched_nope"
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", json.dumps({"conn_type": "kafka", "extra": {}}))
    with pytest.raises(ConnectionInvalid) as invalid:
        kafka_config("lagsched_x")
    assert (invalid.value.conn_id, isinstance(invalid.value, ValueError)) == ("lagsched_x", True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (json.dumps({"conn_type": "mysql", "host": "h", "port": "abc", "login": "u", "schema": "s"}), "port 'abc'"),
        (json.dumps({"conn_type": "mysql", "host": "h", "port": 70000, "login": "u", "schema": "s"}), "port 70000"),
        (json.dumps({"conn_type": "mysql", "host": "h", "login": "u", "schema": "s", "extra": "{oops"}), "extra"),
        (json.dumps({"conn_type": "mysql", "host": "h", "login": "u", "schema": "s", "extra": [1]}), "JSON object"),
        ("mysql://u:p@h:notaport/s", "port"),
        (json.dumps({"conn_type": "mysql", "host": "h", "login": "u"}), "missing: schema"),
    ],
)
def test_malformed_connection_fields_are_named(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", value)
    with pytest.raises(ConnectionInvalid, match=r"lagsched_x|LAGSCHED_X") as info:
        mysql_params("lagsched_x")
    assert message in str(info.value)


@pytest.mark.parametrize("db", ["x", -1, 1.5, True, "01"])
def test_redis_db_must_be_a_database_number(monkeypatch: pytest.MonkeyPatch, db: object) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", json.dumps({"conn_type": "redis", "host": "h", "extra": {"db": db}}))
    with pytest.raises(ConnectionInvalid, match="extra 'db' must be a database number"):
        redis_params("lagsched_x")


def test_redis_db_from_json_or_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", json.dumps({"conn_type": "redis", "host": "h", "extra": {"db": 3}}))
    assert redis_params("lagsched_x").db == 3
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", "redis://:pw@h:6380?db=4")
    params = redis_params("lagsched_x")
    assert (params.host, params.port, params.db, params.password, params.conn_id) == ("h", 6380, 4, "pw", "lagsched_x")


def test_descriptions_never_hold_a_secret() -> None:
    mysql = MySQLParams("db", 3306, "app", "pw-mysql", "lagsched", conn_id="lagsched_mysql")
    assert where_mysql(mysql) == "db:3306, user app, database lagsched"
    assert where_redis(RedisParams("r", 6379, 1, "pw-redis")) == "r:6379, db 1, with a password"
    assert where_redis(RedisParams("r", 6379)) == "r:6379, db 0"
    kafka = {
        "bootstrap.servers": "b1:9092,b2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": "pw-kafka",
        "ssl.key.password": "pw-key",
    }
    assert where_kafka(kafka) == (
        "bootstrap.servers=b1:9092,b2:9092, security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512, sasl.username=svc"
    )
