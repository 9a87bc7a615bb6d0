"""Airflow's Test button (``POST /api/v2/connections/test``) on each Connection type lagsched reads,
through the running API server: a pass against the stack, a failure that says what is wrong."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any

import pytest

from lagsched.connections import kafka_config, mysql_params, redis_params
from lagsched_dev.airflow_api import AirflowAPI, AirflowAPIError
from lagsched_dev.stack.config import StackConfig

pytestmark = pytest.mark.e2e


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_button(airflow: AirflowAPI, conn_type: str, **fields: Any) -> tuple[bool, str]:
    """What the UI's Test button sends: the form's fields under an id no backend holds."""
    body = {"connection_id": f"lagsched_e2e_{uuid.uuid4().hex[:8]}", "conn_type": conn_type, **fields}
    try:
        answer = airflow._request("POST", "/api/v2/connections/test", body)
    except AirflowAPIError as exc:
        if "Testing connections is disabled" in str(exc):
            pytest.fail(
                "the running API server has the Test button off: it was started before "
                "AIRFLOW__CORE__TEST_CONNECTION=Enabled was in the stack's environment; restart Airflow",
                pytrace=False,
            )
        raise
    return bool(answer["status"]), str(answer["message"])


test_button.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def test_airflows_test_button_on_each_lagsched_connection_type(airflow: AirflowAPI, stack: StackConfig) -> None:
    mysql, redis, kafka = mysql_params(), redis_params(), kafka_config()
    mysql_fields = {"host": mysql.host, "port": mysql.port, "login": mysql.user, "schema": mysql.database}

    ok, message = test_button(airflow, "mysql", password=mysql.password, **mysql_fields)
    if "Unknown hook type" in message:
        pytest.fail(
            "Airflow does not know lagsched's Connection types: reinstall lagsched with its "
            "apache_airflow_provider entry point (pip install --no-deps -e .) and restart Airflow",
            pytrace=False,
        )
    assert ok, message
    assert "supports SKIP LOCKED" in message

    ok, message = test_button(airflow, "mysql", password="wrong-password-123", **mysql_fields)
    assert not ok
    assert "refused the credentials" in message
    assert "wrong-password-123" not in message

    ok, message = test_button(airflow, "lagsched_redis", host=redis.host, port=redis.port)
    assert ok, message
    assert message.startswith(f"Connected to {redis.host}:{redis.port}, db 0: Redis ")
    port = free_port()
    ok, message = test_button(airflow, "lagsched_redis", host=redis.host, port=port)
    assert not ok
    assert f"{redis.host}:{port}" in message
    assert "cannot reach the server" in message

    registry = {"host": "127.0.0.1", "port": stack.schema_registry_port, "schema": "apis/ccompat/v7"}
    ok, message = test_button(airflow, "lagsched_schema_registry", **registry)
    assert ok, message
    assert message.startswith(f"Connected to {stack.schema_registry_url}: ")
    ok, message = test_button(airflow, "lagsched_schema_registry", **{**registry, "schema": "no/such/api"})
    assert not ok
    assert "is the Connection's schema (the API's path) right?" in message

    # Kafka is the apache-kafka provider's own type and test (a metadata request, 10 s at most).
    ok, message = test_button(airflow, "kafka", extra=json.dumps(kafka))
    assert (ok, message) == (True, "Connection successful.")
    ok, message = test_button(airflow, "kafka", extra=json.dumps({"bootstrap.servers": f"127.0.0.1:{free_port()}"}))
    assert not ok
    assert "transport failure" in message.lower() or "timed out" in message.lower(), message
