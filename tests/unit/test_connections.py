from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lagsched.connections import (
    ConnectionInvalid,
    ConnectionLookupFailed,
    ConnectionNotFound,
    MySQLParams,
    RedisParams,
    child_environment,
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


# --- Airflow's own forms and order (issue #10 item 1) -----------------------------------------


@pytest.fixture
def no_secrets_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Airflow builds its backends once per process when one is configured: start and end clean."""
    from airflow.sdk.configuration import clear_secrets_backends_cache

    for name in ("AIRFLOW__SECRETS__BACKEND", "AIRFLOW__SECRETS__BACKEND_KWARGS", "AIRFLOW__WORKERS__SECRETS_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    clear_secrets_backends_cache()
    yield
    clear_secrets_backends_cache()


def use_file_backend(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Airflow's LocalFilesystemBackend as the configured secrets backend (as Vault would be)."""
    from airflow.sdk.configuration import clear_secrets_backends_cache

    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND", "airflow.secrets.local_filesystem.LocalFilesystemBackend")
    monkeypatch.setenv("AIRFLOW__SECRETS__BACKEND_KWARGS", json.dumps({"connections_file_path": str(path)}))
    clear_secrets_backends_cache()


SASL = {
    "bootstrap.servers": "b1:9093,b2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "svc",
    "sasl.password": "s3cr=t&x",
    "ssl.ca.location": "/etc/ssl/ca.pem",
}


def test_kafka_uri_with_extra_json_is_the_client_config_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The form the issue reports broken: ``kafka://?__extra__=<json>`` (Airflow's URI form)."""
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", "kafka://?__extra__=" + quote(json.dumps(SASL)))
    assert kafka_config("lagsched_x") == SASL


@pytest.mark.parametrize("extra", [SASL, json.dumps(SASL)], ids=["object", "string"])
def test_kafka_json_form_with_extra_as_object_or_string(monkeypatch: pytest.MonkeyPatch, extra: object) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", json.dumps({"conn_type": "kafka", "extra": extra}))
    assert kafka_config("lagsched_x") == SASL


def test_a_connection_of_another_type_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", json.dumps({"conn_type": "postgres", "host": "h", "login": "u",
                                                               "schema": "s"}))  # fmt: skip
    with pytest.raises(ConnectionInvalid, match="has type 'postgres'; lagsched reads it as 'mysql'"):
        mysql_params("lagsched_x")


def test_redis_reads_both_types_and_the_providers_none_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", "lagsched-redis://:none@h:6380?db=2")
    params = redis_params("lagsched_x")
    assert (params.host, params.port, params.db, params.password) == ("h", 6380, 2, None)


def test_the_secrets_backend_comes_before_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_secrets_backend: None
) -> None:
    path = tmp_path / "connections.json"
    path.write_text(json.dumps({"lagsched_x": {"conn_type": "mysql", "host": "from-backend", "login": "u",
                                               "schema": "s"}}))  # fmt: skip
    use_file_backend(monkeypatch, path)
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_X", "mysql://u@from-env/s")
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_Y", "mysql://u@from-env/s")
    assert mysql_params("lagsched_x").host == "from-backend"
    assert mysql_params("lagsched_y").host == "from-env"  # the backend has none: the environment next


def test_a_failing_secrets_backend_is_a_retryable_lookup_failure_not_a_missing_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_secrets_backend: None
) -> None:
    from lagsched.adapters.failures import is_permanent

    path = tmp_path / "connections.json"
    path.write_text("{broken")  # a backend that cannot answer, as a Vault that is down
    use_file_backend(monkeypatch, path)
    monkeypatch.delenv("AIRFLOW_CONN_LAGSCHED_NOPE", raising=False)
    with pytest.raises(ConnectionLookupFailed) as info:
        mysql_params("lagsched_nope")
    message = str(info.value)
    assert "'lagsched_nope' could not be looked up" in message
    assert "LocalFilesystemBackend failed" in message
    assert "not defined" not in message
    assert info.value.conn_id == "lagsched_nope"
    assert not is_permanent(info.value)
    # Airflow falls through to the environment, and so do we.
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_Y", "mysql://u@from-env/s")
    assert mysql_params("lagsched_y").host == "from-env"


class SupervisorAnswering:
    """The task runner's channel to its supervisor (``task_runner.SUPERVISOR_COMMS``), answering every
    ``GetConnection`` the way the real supervisor does: an API server that fails comes back as an
    error frame, which the real channel raises as ``AirflowRuntimeError``; "not found" as a body.
    """

    def __init__(self, error: str, detail: dict[str, Any]) -> None:
        self.error, self.detail, self.asked = error, detail, 0

    def send(self, msg: Any) -> Any:
        from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
        from airflow.sdk.execution_time.comms import ErrorResponse, GetConnection

        assert isinstance(msg, GetConnection)
        self.asked += 1
        answer = ErrorResponse(error=ErrorType(self.error), detail=self.detail)
        if answer.error == ErrorType.CONNECTION_NOT_FOUND:
            return answer
        raise AirflowRuntimeError(answer)


@pytest.mark.parametrize(
    ("error", "detail", "expected"),
    [
        (
            "API_SERVER_ERROR",
            {"status_code": None, "message": "[Errno 111] Connection refused", "exception_type": "ConnectError"},
            ConnectionLookupFailed,
        ),
        ("API_SERVER_ERROR", {"status_code": 500, "message": "Internal Server Error"}, ConnectionLookupFailed),
        ("CONNECTION_NOT_FOUND", {"conn_id": "lagsched_nope"}, ConnectionNotFound),
    ],
    ids=["api-server-down", "api-server-500", "not-defined"],
)
def test_in_a_task_an_api_server_outage_is_not_a_missing_connection(
    monkeypatch: pytest.MonkeyPatch, no_secrets_backend: None, error: str, detail: dict[str, Any], expected: type
) -> None:
    from airflow.sdk.execution_time import task_runner

    supervisor = SupervisorAnswering(error, detail)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_LAGSCHED_NOPE", raising=False)
    with pytest.raises(expected) as info:
        redis_params("lagsched_nope")
    assert supervisor.asked == 2  # Airflow's lookup, then ours that keeps the answer
    if expected is ConnectionLookupFailed:
        assert "the Airflow API server answered API_SERVER_ERROR" in str(info.value)
        assert str(detail["message"]) in str(info.value)
    else:
        assert "is not defined" in str(info.value)


def test_child_environment_hands_over_connections_in_airflows_json_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """A URI with ``__extra__`` and a password that needs quoting comes back field for field."""
    password = "p@ss:/w?rd%é"
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_K", "kafka://?__extra__=" + quote(json.dumps(SASL)))
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_M", f"mysql://app:{quote(password, safe='')}@db.example:3307/lagsched")
    before = (kafka_config("lagsched_k"), mysql_params("lagsched_m"))
    env = child_environment(["lagsched_k", "lagsched_m"])
    assert sorted(env) == ["AIRFLOW_CONN_LAGSCHED_K", "AIRFLOW_CONN_LAGSCHED_M"]
    assert json.loads(env["AIRFLOW_CONN_LAGSCHED_M"])["password"] == password
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert (kafka_config("lagsched_k"), mysql_params("lagsched_m")) == before


def test_child_environment_values_are_masked_in_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_M", "mysql://app:a-long-secret@db/lagsched")
    env = child_environment(["lagsched_m"])
    value = env["AIRFLOW_CONN_LAGSCHED_M"]
    assert "a-long-secret" in value
    # The whole value, not only the password Airflow masked on lookup: the host and login are the
    # child's too, and a password JSON escapes differently would otherwise slip through.
    assert redact(f"env: {value}") == "env: ***"


def test_child_environment_of_a_missing_connection_raises_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_LAGSCHED_NOPE", raising=False)
    with pytest.raises(ConnectionNotFound, match="lagsched_nope"):
        child_environment(["lagsched_nope"])
