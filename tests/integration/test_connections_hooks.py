"""lagsched's Connections through Airflow against the real services: the hooks' Test button, the
provider entry point as Airflow's ProvidersManager discovers it, and an outage of Airflow's metadata
database told apart from a Connection that is not defined."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lagsched.airflow.hooks.mysql import MySQLHook
from lagsched.airflow.hooks.redis import RedisHook
from lagsched.connections import mysql_params, redis_params
from lagsched_dev.stack.config import StackConfig

pytestmark = pytest.mark.integration

PLUGINS = Path(__file__).parents[2] / "plugins"


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, value: dict[str, Any] | str) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value if isinstance(value, str) else json.dumps(value))


def mysql_form(**changes: Any) -> dict[str, Any]:
    p = mysql_params()
    form: dict[str, Any] = {"conn_type": "mysql", "host": p.host, "port": p.port, "login": p.user,
                            "password": p.password, "schema": p.database}  # fmt: skip
    form.update(changes)
    return form


def test_mysql_hook_test_button(stack: StackConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn(monkeypatch, "lagsched_t_ok", mysql_form())
    ok, message = MySQLHook("lagsched_t_ok").test_connection()
    assert ok, message
    assert "Connected to" in message
    assert "supports SKIP LOCKED" in message

    set_conn(monkeypatch, "lagsched_t_pw", mysql_form(password="wrong-password-123"))
    ok, message = MySQLHook("lagsched_t_pw").test_connection()
    assert not ok
    assert message.startswith(f"({mysql_params().host}:{mysql_params().port}, user ")
    assert "refused the credentials" in message
    assert "wrong-password-123" not in message

    port = free_port()
    set_conn(monkeypatch, "lagsched_t_port", mysql_form(port=port))
    ok, message = MySQLHook("lagsched_t_port").test_connection()
    assert not ok
    assert f"127.0.0.1:{port}" in message
    assert "cannot reach the server" in message


def test_redis_hook_test_button(stack: StackConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    p = redis_params()
    set_conn(monkeypatch, "lagsched_t_ok", {"conn_type": "lagsched_redis", "host": p.host, "port": p.port})
    ok, message = RedisHook("lagsched_t_ok").test_connection()
    assert ok, message
    assert message.startswith(f"Connected to {p.host}:{p.port}, db 0: Redis ")

    port = free_port()
    set_conn(monkeypatch, "lagsched_t_port", {"conn_type": "lagsched_redis", "host": p.host, "port": port})
    ok, message = RedisHook("lagsched_t_port").test_connection()
    assert (ok, f"{p.host}:{port}" in message, "cannot reach the server" in message) == (False, True, True), message


def test_redis_hook_is_the_providers_hook(stack: StackConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same fields, same client: the provider's get_conn on a lagsched_redis Connection works."""
    p = redis_params()
    set_conn(monkeypatch, "lagsched_t_ok", f"lagsched-redis://{p.host}:{p.port}?db=0")
    assert RedisHook("lagsched_t_ok").get_conn().ping() is True


def test_kafka_providers_test_button_on_the_extra_uri_form(stack: StackConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider's own hook and test on ``kafka://?__extra__=`` (the form the old parser broke)."""
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    from lagsched.connections import kafka_config

    servers = kafka_config()["bootstrap.servers"]
    set_conn(monkeypatch, "lagsched_t_k", "kafka://?__extra__=" + quote(json.dumps({"bootstrap.servers": servers})))
    assert kafka_config("lagsched_t_k") == {"bootstrap.servers": servers}
    assert KafkaBaseHook("lagsched_t_k").test_connection() == (True, "Connection successful.")


# --- Airflow's own machinery, in fresh processes (Airflow reads entry points and its database once) ---


def run_python(code: str, env: dict[str, str], timeout_s: float = 180) -> dict[str, Any]:
    """Run `code` in a fresh interpreter; it prints one JSON line last, returned here."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def base_env(tmp_path: Path, **more: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(AIRFLOW_HOME=str(tmp_path / "airflow_home"), PYTHONPATH=str(PLUGINS))
    env.update(more)
    return env


def provider_dist(tmp_path: Path) -> Path:
    """lagsched's distribution metadata with the provider entry point pyproject.toml declares.

    Stands in for the installed metadata until the package is reinstalled with the entry point;
    Airflow keeps the first distribution of a name it meets, and both name the same function.
    """
    root = tmp_path / "dist"
    info = root / "lagsched-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lagsched\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[apache_airflow_provider]\nprovider_info = lagsched.airflow.provider:get_provider_info\n"
    )
    return root


def test_airflow_discovers_the_provider_and_tests_connections_as_the_api_server_does(
    stack: StackConfig, tmp_path: Path
) -> None:
    """``POST /api/v2/connections/test`` runs ``airflow.models.Connection(...).test_connection()``:
    the hook comes from the ProvidersManager by conn type. Run exactly that, in a server process on
    the stack's metadata database (read only), where a Connection no backend has is "not defined"."""
    from lagsched_dev.stack.environment import stack_environment

    mysql = mysql_form()
    redis = redis_params()
    db_url = stack_environment(stack)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    missing = f"lagsched_t_{uuid.uuid4().hex[:8]}"
    env = base_env(tmp_path, _AIRFLOW_PROCESS_CONTEXT="server", AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=db_url)
    env["PYTHONPATH"] = f"{provider_dist(tmp_path)}{os.pathsep}{PLUGINS}"
    code = f"""
        import json
        import os
        from airflow.models.connection import Connection
        from airflow.providers_manager import ProvidersManager

        def test(conn):
            # What the endpoint does: the Connection under a transient id, in the environment.
            name = "AIRFLOW_CONN_" + conn.conn_id.upper()
            os.environ[name] = conn.get_uri()
            try:
                return conn.test_connection()
            finally:
                del os.environ[name]

        hooks = ProvidersManager().hooks
        types = ("mysql", "lagsched_redis", "lagsched_schema_registry")
        found = {{t: [hooks[t].hook_class_name, hooks[t].connection_testable] for t in types}}
        mysql = {mysql!r}
        tests = {{
            "mysql": test(Connection(conn_id="t1", **mysql)),
            "mysql_bad": test(Connection(conn_id="t2", **{{**mysql, "password": "wrong-password-123"}})),
            "redis": test(Connection(conn_id="t3", conn_type="lagsched_redis", host={redis.host!r}, port={redis.port})),
            "registry": test(Connection(conn_id="t4", conn_type="lagsched_schema_registry", host="127.0.0.1",
                                        port={stack.schema_registry_port}, schema="apis/ccompat/v7")),
        }}
        from lagsched.adapters.failures import is_permanent
        from lagsched.connections import mysql_params

        try:
            mysql_params({missing!r})
        except Exception as exc:
            missing = [type(exc).__name__, str(exc), is_permanent(exc)]
        print(json.dumps({{"hooks": found, "tests": tests, "missing": missing}}))
    """
    result = run_python(code, env)
    assert result["hooks"] == {
        "mysql": ["lagsched.airflow.hooks.mysql.MySQLHook", True],
        "lagsched_redis": ["lagsched.airflow.hooks.redis.RedisHook", True],
        "lagsched_schema_registry": ["lagsched.airflow.hooks.schema_registry.SchemaRegistryHook", True],
    }
    tests = result["tests"]
    assert tests["mysql"][0] is True, tests["mysql"]
    assert tests["redis"][0] is True, tests["redis"]
    assert tests["registry"][0] is True, tests["registry"]
    assert tests["registry"][1].startswith(f"Connected to {stack.schema_registry_url}: "), tests["registry"]
    ok, message = tests["mysql_bad"]
    assert not ok
    assert "refused the credentials" in message
    assert "wrong-password-123" not in message
    kind, message, permanent = result["missing"]
    assert (kind, permanent) == ("ConnectionNotFound", True)
    assert f"Connection {missing!r} is not defined" in message


def test_a_metadata_database_outage_is_a_retryable_lookup_failure(stack: StackConfig, tmp_path: Path) -> None:
    """In a server process (API server, scheduler) Airflow looks Connections up in its metadata
    database after the environment. With that database unreachable Airflow itself says "isn't
    defined"; lagsched says what failed, and a retry is allowed. The environment still works."""
    broken = f"sqlite:///{tmp_path / 'no-such-dir' / 'airflow.db'}"
    env = base_env(
        tmp_path,
        _AIRFLOW_PROCESS_CONTEXT="server",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=broken,
        AIRFLOW_CONN_LAGSCHED_T_ENV=json.dumps(mysql_form()),
    )
    code = """
        import json
        from lagsched.adapters.failures import is_permanent
        from lagsched.connections import mysql_params

        out = {"env": mysql_params("lagsched_t_env").host}
        try:
            mysql_params("lagsched_t_nowhere")
        except Exception as exc:
            out.update(type=type(exc).__name__, message=str(exc), permanent=is_permanent(exc))
        print(json.dumps(out))
    """
    result = run_python(code, env)
    assert result["env"] == mysql_params().host
    assert result["type"] == "ConnectionLookupFailed"
    assert "'lagsched_t_nowhere' could not be looked up: Airflow's metadata database failed" in result["message"]
    assert "unable to open database file" in result["message"]
    assert "not defined" not in result["message"]
    assert result["permanent"] is False
