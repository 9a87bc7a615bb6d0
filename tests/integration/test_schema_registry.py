"""The stack's schema registry (Apicurio, Confluent-compatible API) through the
lagsched_schema_registry Connection: schemas by id, an unknown id, ids that survive a restart of the
registry, and an outage that is transient."""

from __future__ import annotations

import json
import uuid

import pytest

from lagsched.adapters.schema_registry import RegistryClient, UnknownSchemaId
from lagsched.connections import schema_registry_params
from lagsched.core.errors import ConnectionFailure
from lagsched_dev.stack.config import StackConfig

pytestmark = pytest.mark.integration


def order_schema(*extra_fields: dict[str, object]) -> str:
    fields = [{"name": "id", "type": "long"}, {"name": "sku", "type": "string"}, *extra_fields]
    return json.dumps({"type": "record", "name": "Order", "namespace": "t.lagsched", "fields": fields})


def test_schemas_by_id_through_the_connection(stack: StackConfig) -> None:
    params = schema_registry_params()
    assert params.url == stack.schema_registry_url
    client = RegistryClient(params)
    subject = f"lagsched-t-{uuid.uuid4().hex[:8]}-value"
    v1 = order_schema()
    v2 = order_schema({"name": "note", "type": ["null", "string"], "default": None})
    first = client.register(subject, v1)
    assert client.register(subject, v1) == first  # the same schema again: the same id
    second = client.register(subject, v2)
    assert second != first

    fresh = RegistryClient(params)
    got = fresh.schema(first)
    assert (got.schema_id, got.schema_type) == (first, "AVRO")
    assert got.parsed() == json.loads(v1)
    assert fresh.schema(second).parsed() == json.loads(v2)
    assert fresh.schema(first) is got and fresh.cached == 2

    json_subject = f"lagsched-t-{uuid.uuid4().hex[:8]}-value"
    doc = {"type": "object", "properties": {"page": {"type": "string"}}, "required": ["page"]}
    json_id = client.register(json_subject, json.dumps(doc), "JSON")
    found = fresh.schema(json_id)
    assert (found.schema_type, found.parsed()) == ("JSON", doc)

    unknown = max(first, second, json_id) + 10_000
    with pytest.raises(UnknownSchemaId, match=f"has no schema with id {unknown}"):
        fresh.schema(unknown)

    checked = client.check()
    assert checked["subjects"] >= 2
    assert checked["compatibility"] != "unknown"


def test_the_test_button(stack: StackConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    from lagsched.airflow.hooks.schema_registry import SchemaRegistryHook

    ok, message = SchemaRegistryHook().test_connection()
    assert ok, message
    assert message.startswith(f"Connected to {stack.schema_registry_url}: ")
    assert "compatibility" in message

    base = {"conn_type": "lagsched_schema_registry", "host": "127.0.0.1", "port": stack.schema_registry_port}
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_T_NOPATH", json.dumps({**base, "schema": "no/such/api"}))
    ok, message = SchemaRegistryHook("lagsched_t_nopath").test_connection()
    assert not ok
    assert "404" in message and "is the Connection's schema (the API's path) right?" in message

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_T_DOWN", json.dumps({**base, "port": port}))
    ok, message = SchemaRegistryHook("lagsched_t_down").test_connection()
    assert not ok
    assert f"127.0.0.1:{port}" in message and "could not be reached" in message


@pytest.mark.serial
def test_ids_survive_a_restart_and_an_outage_is_transient(stack: StackConfig) -> None:
    """The stack's registry keeps its schemas in MariaDB: an id means the same schema after a restart
    (an in-memory registry would hand it out again for another schema). While it is down, a lookup
    is a transient failure, never an unknown id."""
    from lagsched_dev.stack.services import SchemaRegistry

    client = RegistryClient(schema_registry_params(), timeout_s=3)
    subject = f"lagsched-t-{uuid.uuid4().hex[:8]}-value"
    text = order_schema({"name": "restart", "type": "int", "default": 0})
    schema_id = client.register(subject, text)
    registry = SchemaRegistry(stack)
    assert registry.stop()
    try:
        with pytest.raises(ConnectionFailure, match="could not be reached") as caught:
            RegistryClient(schema_registry_params(), timeout_s=3).schema(schema_id)
        assert caught.value.permanent is False
    finally:
        registry.start()
    after = RegistryClient(schema_registry_params())
    assert after.schema(schema_id).parsed() == json.loads(text)
    other = after.register(f"lagsched-t-{uuid.uuid4().hex[:8]}-value", order_schema({"name": "n", "type": "int"}))
    assert other != schema_id
