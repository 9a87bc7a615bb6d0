from __future__ import annotations

import json

import pytest

from lagsched.connections import ConnectionNotFound, get_connection, kafka_config, mysql_params


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
