"""The lagsched_schema_registry Connection read into a registry URL, basic auth and TLS, and the
registry client's answers told apart (pure: a local HTTP server stands for the network's answers;
tests/integration/test_schema_registry.py runs the same client against the stack's Apicurio)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from lagsched.adapters.schema_registry import RegistryClient, UnknownSchemaId
from lagsched.connections import (
    ConnectionInvalid,
    SchemaRegistryParams,
    schema_registry_params,
    where_schema_registry,
)
from lagsched.core.errors import ConnectionFailure

pytestmark = pytest.mark.unit


def registry_conn(monkeypatch: pytest.MonkeyPatch, **fields: Any) -> SchemaRegistryParams:
    monkeypatch.setenv("AIRFLOW_CONN_LAGSCHED_T_REG", json.dumps({"conn_type": "lagsched_schema_registry", **fields}))
    return schema_registry_params("lagsched_t_reg")


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"host": "127.0.0.1", "port": 18081, "schema": "apis/ccompat/v7"}, "http://127.0.0.1:18081/apis/ccompat/v7"),
        ({"host": "registry.internal", "port": 8081}, "http://registry.internal:8081"),
        ({"host": "https://registry.example.com"}, "https://registry.example.com"),
        ({"host": "HTTPS://registry.example.com:8443/", "schema": "/v1/"}, "https://registry.example.com:8443/v1"),
        ({"host": "https://registry.example.com/base", "schema": "apis/ccompat/v7"},
         "https://registry.example.com/base/apis/ccompat/v7"),
    ],
)  # fmt: skip
def test_the_url_from_host_port_and_path(monkeypatch: pytest.MonkeyPatch, fields: dict[str, Any], url: str) -> None:
    params = registry_conn(monkeypatch, **fields)
    assert params.url == url
    assert (params.username, params.password, params.tls) == (None, None, ())
    assert params.confluent_config() == {"url": url}


def test_basic_auth_and_tls_reach_a_confluent_client_and_never_a_description(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "client.pem", "client.key"))
    for f in (ca, cert, key):
        f.write_text("x")
    params = registry_conn(
        monkeypatch,
        host="registry.example.com",
        login="svc",
        password="s3cret-pw",
        extra={"ssl": {"ca": str(ca), "cert": str(cert), "key": str(key)}},
    )
    assert params.url == "https://registry.example.com"  # ssl without a scheme: https
    assert params.uses_tls
    assert params.confluent_config() == {
        "url": "https://registry.example.com",
        "basic.auth.user.info": "svc:s3cret-pw",
        "ssl.ca.location": str(ca),
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
    }
    described = where_schema_registry(params)
    assert described == "https://registry.example.com, user svc, a client certificate"
    assert "s3cret-pw" not in described + repr(params)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "needs a host"),
        ({"host": "ftp://registry"}, "is not a registry host"),
        ({"host": "https://u:p@registry"}, "is not a registry host"),
        ({"host": "https://registry?x=1"}, "is not a registry host"),
        ({"host": "registry", "port": 70000}, "is not a TCP port"),
        ({"host": "registry", "login": "svc"}, "needs both login and password"),
        ({"host": "registry", "password": "pw"}, "needs both login and password"),
        ({"host": "http://registry", "extra": {"ssl": {}}}, None),  # an empty ssl is no ssl
        ({"host": "http://registry", "extra": {"ssl": {"ca": "__CA__"}}}, "says http://"),
        ({"host": "registry", "extra": {"ssl": {"verify": True}}}, "unknown keys ['verify']"),
        ({"host": "registry", "extra": {"ssl": "yes"}}, "must be an object"),
        ({"host": "registry", "extra": {"ssl": {"ca": "/nonexistent/ca.pem"}}}, "is not a file here"),
        ({"host": "registry", "extra": {"ssl": {"cert": "__CA__"}}}, "'cert' and 'key' together"),
        ({"conn_type": "http", "host": "registry"}, "has type 'http'"),
    ],
)
def test_a_connection_it_cannot_use_is_refused_naming_the_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fields: dict[str, Any], message: str | None
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    fields = json.loads(json.dumps(fields).replace("__CA__", str(ca)))
    if message is None:
        assert registry_conn(monkeypatch, **fields).url == "http://registry"
        return
    with pytest.raises(ConnectionInvalid, match="Connection 'lagsched_t_reg'") as caught:
        registry_conn(monkeypatch, **fields)
    assert message in str(caught.value)


# --- the client's answers, from a local HTTP server ------------------------------------------------


class _Registry(BaseHTTPRequestHandler):
    """Answers as the test sets (`answers`: path -> (status, body)), recording each request."""

    answers: ClassVar[dict[str, tuple[int, Any]]] = {}
    seen: ClassVar[list[tuple[str, str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization")))
        status, body = self.answers.get(self.path, (404, {"error_code": 404, "message": "HTTP 404 Not Found"}))
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_registry() -> Iterator[tuple[str, type[_Registry]]]:
    handler = type("Handler", (_Registry,), {"answers": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api", handler
    finally:
        server.shutdown()
        server.server_close()


def test_a_schema_is_asked_for_once_and_an_unknown_id_is_permanent_but_not_cached(
    fake_registry: tuple[str, type[_Registry]],
) -> None:
    url, handler = fake_registry
    handler.answers["/api/schemas/ids/3"] = (200, {"schema": '{"type": "long"}'})
    handler.answers["/api/schemas/ids/4"] = (404, {"error_code": 40403, "message": "Schema 4 not found"})
    client = RegistryClient(SchemaRegistryParams(url, "svc", "pw"))
    first, again = client.schema(3), client.schema(3)
    assert first is again
    assert (first.schema_id, first.schema_type, first.parsed()) == (3, "AVRO", {"type": "long"})
    for _ in range(2):
        with pytest.raises(UnknownSchemaId, match="has no schema with id 4") as caught:
            client.schema(4)
        assert caught.value.schema_id == 4
    paths = [path for _m, path, _a in handler.seen]
    assert paths == ["/api/schemas/ids/3", "/api/schemas/ids/4", "/api/schemas/ids/4"]
    assert {auth for _m, _p, auth in handler.seen} == {"Basic c3ZjOnB3"}  # svc:pw


@pytest.mark.parametrize(
    ("status", "body", "permanent", "says"),
    [
        (503, {"error_code": 50301, "message": "busy"}, False, "with 503 (busy)"),
        (500, b"<html>oops</html>", False, "with 500"),
        (429, {"message": "slow down"}, False, "with 429"),
        (401, {"message": "Unauthorized"}, True, "refused the credentials (401"),
        (403, {"message": "Forbidden"}, True, "refused the credentials (403"),
        (404, {"error_code": 404, "message": "HTTP 404 Not Found"}, True, "is the Connection's schema"),
        (200, b"<html>a login page</html>", False, "not JSON"),
        (200, {"no": "schema"}, False, "with not a schema"),
    ],
)
def test_what_else_the_registry_answers_is_a_connection_failure_never_an_unknown_id(
    fake_registry: tuple[str, type[_Registry]], status: int, body: Any, permanent: bool, says: str
) -> None:
    url, handler = fake_registry
    handler.answers["/api/schemas/ids/9"] = (status, body)
    client = RegistryClient(SchemaRegistryParams(url, "svc", "the-password"))
    with pytest.raises(ConnectionFailure) as caught:
        client.schema(9)
    assert caught.value.permanent is permanent
    assert says in str(caught.value)
    assert "the-password" not in str(caught.value)
    assert client.cached == 0


def test_a_registry_that_does_not_answer_is_transient() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = RegistryClient(SchemaRegistryParams(f"http://127.0.0.1:{port}"), timeout_s=2)
    with pytest.raises(ConnectionFailure, match="could not be reached") as caught:
        client.schema(1)
    assert caught.value.permanent is False
    assert f"127.0.0.1:{port}" in str(caught.value)
