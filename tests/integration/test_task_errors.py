"""Task bodies against the real services with broken Connections: what fails at once, what is
retried, and that every failure names the Connection to fix (never its password)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from lagsched.adapters.health import check_kafka, check_redis
from lagsched.airflow.tasks import fail_fast, run_check_kafka, run_check_redis, run_evaluation, run_registry_sync
from lagsched.connections import RedisParams
from lagsched.core.errors import ConnectionFailure

#: Generous bound for "at once": the old behaviour took 35-80 s (two retries), and a wrong
#: password answers in milliseconds, so this only catches a retry or a timeout sneaking back in.
AT_ONCE_S = 5.0


def free_port() -> int:
    """A loopback port nothing listens on (bound then released: nothing else binds it meanwhile)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, value: dict[str, Any]) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(value))


def mysql_conn(db: Any, **changes: Any) -> dict[str, Any]:
    conn = {"conn_type": "mysql", "host": db.host, "port": db.port, "login": db.user, "password": db.password,
            "schema": db.database}  # fmt: skip
    conn.update(changes)
    return conn


@pytest.fixture
def env(mysql_db: Any, redis_client: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Connections on this test's database and Redis DB; returns the MySQLParams."""
    set_conn(monkeypatch, "lagsched_mysql", mysql_conn(mysql_db))
    p = redis_client.connection_pool.connection_kwargs
    set_conn(monkeypatch, "lagsched_redis", {"conn_type": "redis", "host": p["host"], "port": p["port"],
                                             "extra": {"db": p["db"]}})  # fmt: skip
    return mysql_db


def evaluate() -> dict[str, Any]:
    with fail_fast():
        return run_evaluation(f"c-{uuid.uuid4().hex[:8]}", None, evaluation_id=f"t-{uuid.uuid4().hex}")


def test_wrong_mysql_password_fails_at_once_naming_the_connection(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, "lagsched_mysql", mysql_conn(env, password="not-the-password"))
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as info:
        evaluate()
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert message.startswith(
        f"Connection 'lagsched_mysql' ({env.host}:{env.port}, user {env.user}, database {env.database}): "
        'the server refused the credentials or access: (1045, "Access denied for user'
    ), message
    assert message.endswith("fix it in Admin > Connections")
    assert "not-the-password" not in message and env.password not in message
    assert elapsed < AT_ONCE_S


def test_unknown_database_fails_at_once(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, "lagsched_mysql", mysql_conn(env, schema="lagsched_no_such_db"))
    with pytest.raises(AirflowFailException, match=r"^Connection 'lagsched_mysql' \(.*database lagsched_no_such_db\)"):
        evaluate()


def test_mysql_where_nothing_listens_is_retried_naming_the_connection(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    set_conn(monkeypatch, "lagsched_mysql", mysql_conn(env, port=port))
    with pytest.raises(ConnectionFailure) as info:  # fail_fast re-raised it: Airflow retries it
        evaluate()
    assert not info.value.permanent
    assert str(info.value).startswith(f"Connection 'lagsched_mysql' (127.0.0.1:{port}, user {env.user}, ")
    assert "cannot reach the server: (2003" in str(info.value)
    assert "A retry may help" in str(info.value)


def test_missing_connection_fails_at_once(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_LAGSCHED_MYSQL")
    with pytest.raises(AirflowFailException, match=r"Connection 'lagsched_mysql' is not defined"):
        evaluate()


def test_malformed_connection_fails_at_once(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, "lagsched_mysql", mysql_conn(env, port="thirteen"))
    with pytest.raises(AirflowFailException, match=r"Connection 'lagsched_mysql': port 'thirteen' is not a TCP port"):
        evaluate()


def test_bad_cluster_param_fails_at_once_before_connecting(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, "lagsched_mysql", mysql_conn(env, port=free_port()))  # would be retried if reached
    with pytest.raises(AirflowFailException, match=r"cluster name 'no spaces' is not usable"), fail_fast():
        run_evaluation("no spaces", None, evaluation_id="t")


def test_unknown_kafka_host_names_the_connection_and_the_servers(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """confluent-kafka builds the client without I/O and times out with "Broker transport failure";
    the failure names the Connection, its bootstrap servers, and what librdkafka reported."""
    set_conn(
        monkeypatch, "lagsched_kafka", {"conn_type": "kafka", "extra": {"bootstrap.servers": "kafka.invalid:9092"}}
    )
    with pytest.raises(ConnectionFailure) as info, fail_fast():
        run_registry_sync(f"c-{uuid.uuid4().hex[:8]}")
    message = str(info.value)
    assert message.startswith("Connection 'lagsched_kafka' (bootstrap.servers=kafka.invalid:9092): cannot reach"), (
        message
    )
    assert "Failed to resolve 'kafka.invalid:9092'" in message
    assert not info.value.permanent


def test_invalid_kafka_setting_fails_at_once(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"bootstrap.servers": stack.kafka_bootstrap, "securty.protocol": "SSL"}  # the typo is the point
    set_conn(monkeypatch, "lagsched_kafka", {"conn_type": "kafka", "extra": extra})
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as info, fail_fast():
        run_check_kafka()
    assert str(info.value).startswith(f"Connection 'lagsched_kafka' (bootstrap.servers={stack.kafka_bootstrap}): ")
    assert 'No such configuration property: "securty.protocol"' in str(info.value)
    assert time.monotonic() - started < AT_ONCE_S


def test_sasl_login_refused_by_the_broker_is_permanent(stack: Any) -> None:
    """Our broker speaks PLAINTEXT: a SASL client's handshake is refused (librdkafka reports
    ``_AUTHENTICATION`` through its error callback; the call itself says only "transport failure")."""
    config = {"bootstrap.servers": stack.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "svc", "sasl.password": "k4fka-pw"}  # fmt: skip
    with pytest.raises(ConnectionFailure) as info:
        check_kafka(config, timeout_s=3)
    assert info.value.permanent
    assert "the server refused the credentials" in str(info.value)
    assert "sasl.username=svc" in str(info.value) and "k4fka-pw" not in str(info.value)


def test_redis_password_the_server_ignores_fails_the_setup_check(stack: Any) -> None:
    """Our Redis has no password: redis-py 8 authenticates with HELLO ... AUTH, which such a server
    accepts whatever the password, so without an explicit check the password passes silently."""
    params = RedisParams("127.0.0.1", stack.redis_port, 0, "r3dis-pw")
    with pytest.raises(ConnectionFailure) as info:
        check_redis(params)
    assert info.value.permanent
    assert str(info.value).startswith(f"Connection 'lagsched_redis' (127.0.0.1:{stack.redis_port}, db 0, with a ")
    assert "the server has none (requirepass is not set)" in str(info.value)
    assert "r3dis-pw" not in str(info.value)
    assert check_redis(RedisParams("127.0.0.1", stack.redis_port, 0))["version"]


def test_redis_password_the_server_ignores_is_a_warning_in_the_tasks(
    env: Any, monkeypatch: pytest.MonkeyPatch, redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    p = redis_client.connection_pool.connection_kwargs
    set_conn(monkeypatch, "lagsched_redis", {"conn_type": "redis", "host": p["host"], "port": p["port"],
                                             "password": "r3dis-pw", "extra": {"db": p["db"]}})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="lagsched.airflow.tasks"):
        summary = evaluate()
    assert isinstance(summary, dict)
    assert any(
        "Connection 'lagsched_redis' sets a Redis password, but the server has none" in r.getMessage()
        for r in caplog.records
    ), caplog.text
    assert "r3dis-pw" not in caplog.text


def test_redis_where_nothing_listens_is_retried_naming_the_connection(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    set_conn(monkeypatch, "lagsched_redis", {"conn_type": "redis", "host": "127.0.0.1", "port": port})
    with pytest.raises(ConnectionFailure) as info:
        evaluate()
    assert not info.value.permanent
    assert str(info.value).startswith(f"Connection 'lagsched_redis' (127.0.0.1:{port}, db 0): cannot reach")


@pytest.fixture
def redis_with_password(tmp_path: Any) -> Iterator[tuple[int, str]]:
    """A throwaway redis-server with ``requirepass``, on a free port; stopped afterwards."""
    port, password = free_port(), uuid.uuid4().hex
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--requirepass", password,
         "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:  # readiness: the port accepts a connection
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield port, password
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_wrong_redis_password_fails_at_once(
    redis_with_password: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, password = redis_with_password
    assert check_redis(RedisParams("127.0.0.1", port, 0, password))["version"]  # the right one passes, no complaint
    set_conn(monkeypatch, "lagsched_redis", {"conn_type": "redis", "host": "127.0.0.1", "port": port,
                                             "password": "wrong-pw"})  # fmt: skip
    with pytest.raises(AirflowFailException) as info, fail_fast():
        run_check_redis()
    assert str(info.value).startswith(f"Connection 'lagsched_redis' (127.0.0.1:{port}, db 0, with a password): ")
    assert "the server refused the credentials" in str(info.value)
    assert "wrong-pw" not in str(info.value) and password not in str(info.value)


def test_each_task_reads_the_connections_it_is_given_when_it_runs(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A task's *_conn_id names the Connection its hook reads at execute time, as a provider's operator does:
    # here the defaults are fine and the given ids are not, so each failure must name the given id.
    set_conn(monkeypatch, "team_mysql", mysql_conn(env, password="wrong"))
    set_conn(monkeypatch, "team_redis", {"conn_type": "redis", "host": "127.0.0.1", "port": "six"})
    with pytest.raises(AirflowFailException, match=r"'team_mysql'"), fail_fast():
        run_evaluation("c-conn", None, evaluation_id=f"t-{uuid.uuid4().hex}", mysql_conn_id="team_mysql")
    malformed = r"Connection 'team_redis': port 'six' is not a TCP port"
    with pytest.raises(AirflowFailException, match=malformed), fail_fast():
        run_check_redis("team_redis")
    # The same Connection, changed between two tasks, is read again (never cached at parse or import time).
    set_conn(monkeypatch, "team_mysql", mysql_conn(env))
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_REDIS", os.environ["AIRFLOW_CONN_LAGSCHED_REDIS"])
    assert run_check_redis("team_redis")
    assert "outcomes" in run_evaluation("c-conn", None, evaluation_id=f"t-{uuid.uuid4().hex}",
                                        mysql_conn_id="team_mysql", redis_conn_id="team_redis")  # fmt: skip


def test_an_evaluation_parses_its_settings_once(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import lagsched.airflow.tasks as tasks
    import lagsched.workflows.scaling as scaling
    from lagsched.core.config import parse_settings

    parsed: list[object] = []

    def counting(raw: Any) -> Any:
        parsed.append(raw)
        return parse_settings(raw)

    monkeypatch.setattr(tasks, "parse_settings", counting)
    monkeypatch.setattr(scaling, "parse_settings", counting)
    summary = run_evaluation("c-once", '{"defaults": {"max_workers": 3}}', evaluation_id=f"t-{uuid.uuid4().hex}")
    assert "outcomes" in summary
    assert parsed == ['{"defaults": {"max_workers": 3}}']
