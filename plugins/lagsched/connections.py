"""Resolve lagsched's Airflow Connection ids into typed client settings, the way Airflow does.

Every lookup goes through Airflow (`airflow.sdk.BaseHook.get_connection`), so it follows Airflow's
own order: the configured secrets backend (Vault, AWS Secrets Manager, ...), then
``AIRFLOW_CONN_<ID>`` environment variables (URI form, ``__extra__`` included, or JSON form), then
the metadata database (through the API server inside a task). Outside a running Airflow (the CLI,
the Spark job, benchmarks) Airflow's chain is the secrets backend and the environment, so the
environment form works with no metadata database.

The three Connections (docs/connections.md):

================  ==============================  ===============================================
id                type                            read as
================  ==============================  ===============================================
lagsched_kafka    ``kafka`` (apache-kafka         the extra is the confluent-kafka client config,
                  provider)                       as-is, through the provider's hook
lagsched_mysql    ``mysql`` (our hook,            host, port (3306), login, password, schema
                  `lagsched.airflow.hooks.mysql`)         (the database)
lagsched_redis    ``redis`` (redis provider) or   host (127.0.0.1), port (6379), password,
                  ``lagsched_redis`` (our hook,   extra ``db`` (0)
                  with a Test button)
lagsched_schema_  ``lagsched_schema_registry``    host (a name, or a URL with ``https://``), port,
registry          (our hook, with a Test button)  schema (the API's path: ``apis/ccompat/v7`` for
                                                  Apicurio, empty for Confluent's), login and
                                                  password (basic auth), extra ``ssl``
================  ==============================  ===============================================

Errors, each naming the Connection:

- `ConnectionNotFound`: no backend defines it (permanent: someone has to add it).
- `ConnectionInvalid`: defined but unusable as written (malformed JSON or URI, a required field
  missing, a port that is not a number); permanent.
- `ConnectionLookupFailed`: a place that could hold it failed to answer (the metadata database,
  the API server, a secrets backend); retryable, and the message says what failed. Airflow itself
  reports such an outage as "isn't defined"; here it never reads as a missing Connection.

`where_mysql`, `where_redis`, `where_kafka` and `where_schema_registry` describe where a Connection points, without its
secrets, for the error messages of the clients built from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lagsched.core.errors import ConnectionFailure, ConnectionInvalid, ConnectionNotFound

__all__ = [
    "KAFKA_CONN_ID",
    "MYSQL_CONN_ID",
    "REDIS_CONN_ID",
    "SCHEMA_REGISTRY_CONN_ID",
    "ConnectionInfo",
    "ConnectionInvalid",
    "ConnectionLookupFailed",
    "ConnectionNotFound",
    "MySQLParams",
    "RedisParams",
    "SchemaRegistryParams",
    "child_environment",
    "get_connection",
    "kafka_config",
    "mysql_params",
    "redis_params",
    "schema_registry_params",
    "where_kafka",
    "where_mysql",
    "where_redis",
    "where_schema_registry",
]

KAFKA_CONN_ID = "lagsched_kafka"
MYSQL_CONN_ID = "lagsched_mysql"
REDIS_CONN_ID = "lagsched_redis"
SCHEMA_REGISTRY_CONN_ID = "lagsched_schema_registry"

#: Connection types each service accepts; an empty type (a JSON form without ``conn_type``) is
#: accepted too, as Airflow does.
KAFKA_CONN_TYPES = ("kafka",)
MYSQL_CONN_TYPES = ("mysql",)
REDIS_CONN_TYPES = ("redis", "lagsched_redis")
SCHEMA_REGISTRY_CONN_TYPES = ("lagsched_schema_registry",)

#: Kafka client settings that say where and as whom a client connects; anything else in the extra
#: (and every ``*.password``, ``*.key``, ``*.secret``, ``sasl.oauthbearer.*`` setting) stays out of
#: messages.
_KAFKA_DESCRIBED = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username")

#: How a failing backend is named in messages.
_BACKEND_NAMES = {
    "MetastoreBackend": "Airflow's metadata database",
    "ExecutionAPISecretsBackend": "the Airflow API server",
    "EnvironmentVariablesBackend": "the environment",
}

#: Longest part of a backend's own error message that goes into ours.
_DETAIL_CHARS = 300


class ConnectionLookupFailed(ConnectionFailure):
    """Airflow could not say whether the Connection exists: the metadata database, the API server or
    a secrets backend failed to answer. Retryable (``permanent`` is False); the message names the
    Connection and what failed.
    """

    def __init__(self, message: str, *, conn_id: str) -> None:
        super().__init__(message, conn_id=conn_id, permanent=False)


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """The parts of an Airflow Connection that lagsched uses."""

    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MySQLParams:
    """Where and as whom to connect to MySQL; `conn_id` is the Connection they came from.

    Attributes:
        tls: the Connection's extra ``ssl`` (the MySQL provider's form: ``ca``, ``cert``, ``key``
            file paths, ``check_hostname``), as sorted pairs; empty: no TLS.
    """

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    conn_id: str = MYSQL_CONN_ID
    tls: tuple[tuple[str, str | bool], ...] = ()

    @property
    def uses_tls(self) -> bool:
        return bool(self.tls)


@dataclass(frozen=True, slots=True)
class RedisParams:
    """Where to connect to Redis; `conn_id` is the Connection they came from.

    Attributes:
        username: the ACL user (the Connection's login); None: Redis's ``default`` user.
        tls: redis-py's TLS arguments from the Connection's extra, as the Redis provider's hook
            reads them (``ssl``, ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
            ``ssl_cert_reqs``, ``ssl_check_hostname``), as sorted pairs; empty: plain TCP.
    """

    host: str
    port: int
    db: int = 0
    password: str | None = field(default=None, repr=False)
    conn_id: str = REDIS_CONN_ID
    username: str | None = None
    tls: tuple[tuple[str, Any], ...] = ()

    @property
    def uses_tls(self) -> bool:
        return bool(dict(self.tls).get("ssl"))

    @property
    def tls_kwargs(self) -> dict[str, Any]:
        """The keyword arguments ``redis.Redis`` takes for TLS (none when ``ssl`` is off)."""
        return dict(self.tls) if self.uses_tls else {}


@dataclass(frozen=True, slots=True)
class SchemaRegistryParams:
    """Where and as whom to reach a Confluent-compatible schema registry; `conn_id` is the
    Connection they came from.

    Attributes:
        url: the API's base URL (``http(s)://host[:port][/path]``, no trailing slash): what a
            Confluent client's ``url`` is set to.
        username, password: HTTP basic auth (both or neither); None: no authentication.
        tls: the Connection's extra ``ssl`` (``ca``, ``cert``, ``key`` file paths), as sorted
            pairs; with an ``https://`` URL and no ``ca`` the system's trust store checks the server.
    """

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    conn_id: str = SCHEMA_REGISTRY_CONN_ID
    tls: tuple[tuple[str, str], ...] = ()

    @property
    def uses_tls(self) -> bool:
        return self.url.startswith("https://")

    def confluent_config(self) -> dict[str, str]:
        """The settings of confluent-kafka's ``SchemaRegistryClient`` (producers, tools)."""
        config = {"url": self.url}
        if self.username is not None:
            config["basic.auth.user.info"] = f"{self.username}:{self.password or ''}"
        names = {"ca": "ssl.ca.location", "cert": "ssl.certificate.location", "key": "ssl.key.location"}
        config.update({names[key]: path for key, path in self.tls})
        return config


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def _fix(conn_id: str) -> str:
    return f"fix it in Admin > Connections (or {_env_name(conn_id)})"


def _port(conn_id: str, value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 0 < port < 65536:
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: port {value!r} is not a TCP port (1 to 65535); {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return port


def _extra(conn_id: str, value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConnectionInvalid(
                f"Connection {conn_id!r}: its extra is not valid JSON ({exc.msg} at {exc.pos}); {_fix(conn_id)}",
                conn_id=conn_id,
            ) from None
    if not isinstance(value, dict):
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: its extra must be a JSON object, got {type(value).__name__}; {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return dict(value)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."


def _environment_problem(conn_id: str, exc: BaseException) -> ConnectionInvalid:
    """Why Airflow could not read ``AIRFLOW_CONN_<ID>``: its JSON, its port, or its URI."""
    name = _env_name(conn_id)
    raw = os.environ.get(name, "").strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as bad:
            return ConnectionInvalid(f"{name} is not valid JSON: {bad.msg} at {bad.pos}", conn_id=conn_id)
        if isinstance(data, dict):
            _port(conn_id, data.get("port"))  # raises ours, naming the bad port
        return ConnectionInvalid(
            f"{name} is not a Connection in Airflow's JSON form ({_short(exc)}); "
            'e.g. {"conn_type": "mysql", "host": "db", "login": "u", "password": "p", "schema": "lagsched"}',
            conn_id=conn_id,
        )
    return ConnectionInvalid(
        f"{name} is not a valid Connection URI ({_short(exc)}); e.g. mysql://user:password@host:3306/database",
        conn_id=conn_id,
    )


def _ask_api_server(conn_id: str) -> tuple[bool, str | None]:
    """Ask the API server for the Connection as a task does, seeing the error Airflow hides.

    Returns (found, problem): Airflow's Execution API backend answers None both for "not defined"
    and for an API server that did not answer; this tells them apart.
    """
    from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import ErrorResponse, GetConnection

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        return False, None
    try:
        answer = comms.send(GetConnection(conn_id=conn_id))
    except AirflowRuntimeError as exc:
        error = exc.error
    except Exception as exc:  # noqa: BLE001 - the channel to the supervisor failed: that is the answer
        return False, f"asking the Airflow API server failed: {_short(exc)}"
    else:
        if not isinstance(answer, ErrorResponse):
            return True, None
        error = answer
    if error.error == ErrorType.CONNECTION_NOT_FOUND:
        return False, None
    detail = str(error.detail)[:_DETAIL_CHARS] if error.detail else ""
    return False, f"the Airflow API server answered {error.error.value} {detail}".rstrip()


def _diagnose(conn_id: str) -> tuple[bool, list[str]]:
    """After Airflow said "isn't defined": ask each backend again, keeping the errors Airflow drops.

    Returns (found now, problems). Raises `ConnectionInvalid` when the environment variable is there
    but malformed (Airflow skips it as if it were absent).
    """
    from airflow.sdk.exceptions import AirflowSecretsBackendAccessDenied
    from airflow.sdk.execution_time.secrets.execution_api import ExecutionAPISecretsBackend
    from airflow.sdk.execution_time.supervisor import ensure_secrets_backend_loaded

    problems: list[str] = []
    for backend in ensure_secrets_backend_loaded():
        kind = type(backend).__name__
        if isinstance(backend, ExecutionAPISecretsBackend):
            found, problem = _ask_api_server(conn_id)
        else:
            try:
                found, problem = backend.get_connection(conn_id=conn_id) is not None, None
            except AirflowSecretsBackendAccessDenied:
                raise
            except Exception as exc:  # noqa: BLE001 - any backend error is what Airflow hid; report it
                if kind == "EnvironmentVariablesBackend":
                    raise _environment_problem(conn_id, exc) from None
                where = _BACKEND_NAMES.get(kind, f"the secrets backend {kind}")
                found, problem = False, f"{where} failed: {_short(exc)}"
        if found:
            return True, problems
        if problem:
            problems.append(problem)
    return False, problems


def _airflow_connection(conn_id: str) -> Any:
    """The Connection from Airflow's chain of backends, with an outage told apart from "not defined"."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        pass  # Airflow says this also when a backend failed: find out which it was.
    found, problems = _diagnose(conn_id)
    if found:  # a backend that failed a moment ago answered now
        try:
            return BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            problems.append("it was found on a second look, then not on a third")
    if problems:
        raise ConnectionLookupFailed(
            f"Connection {conn_id!r} could not be looked up: {'; '.join(problems)}; a retry may help once that is back",
            conn_id=conn_id,
        )
    raise ConnectionNotFound(
        f"Connection {conn_id!r} is not defined: add it in Airflow (Admin > Connections), "
        f"in the secrets backend, or set {_env_name(conn_id)}; see docs/connections.md",
        conn_id=conn_id,
    )


def get_connection(conn_id: str) -> ConnectionInfo:
    """The Connection ``conn_id``, looked up as Airflow does (secrets backend, environment, metastore).

    Raises:
        ConnectionNotFound: no backend defines it.
        ConnectionInvalid: it is defined but malformed.
        ConnectionLookupFailed: a backend failed to answer (retryable).
    """
    conn = _airflow_connection(conn_id)
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=conn.conn_type or "",
        host=conn.host or None,
        port=_port(conn_id, conn.port),
        login=conn.login or None,
        password=conn.password or None,
        schema=conn.schema or None,
        # extra_dejson logs and drops an extra that is not JSON; read the raw text to say so.
        extra=_extra(conn_id, conn.extra),
    )


def _of_type(info: ConnectionInfo, allowed: tuple[str, ...]) -> ConnectionInfo:
    if info.conn_type and info.conn_type not in allowed:
        raise ConnectionInvalid(
            f"Connection {info.conn_id!r} has type {info.conn_type!r}; lagsched reads it as "
            f"{' or '.join(repr(t) for t in allowed)}; {_fix(info.conn_id)}",
            conn_id=info.conn_id,
        )
    return info


def kafka_config(conn_id: str = KAFKA_CONN_ID) -> dict[str, Any]:
    """confluent-kafka client settings: the Connection's extra, built by the Kafka provider's hook.

    The provider's hook resolves allow-listed callbacks (``[apache_kafka] callback_allowlist``) and
    the managed OAuth token callbacks (Amazon MSK IAM, Google Managed Kafka); every other setting,
    SASL and SSL included, goes to the client as written.
    """
    info = _of_type(get_connection(conn_id), KAFKA_CONN_TYPES)
    if not info.extra.get("bootstrap.servers"):
        raise ConnectionInvalid(
            f"Connection {conn_id!r} needs 'bootstrap.servers' in its extra JSON "
            f'(e.g. {{"bootstrap.servers": "broker1:9092"}}); {_fix(conn_id)}',
            conn_id=conn_id,
        )
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        config: dict[str, Any] = KafkaBaseHook(kafka_config_id=conn_id)._build_config()  # type: ignore[no-untyped-call]
    except AirflowNotFoundException:
        # The hook looks the Connection up again: gone since the line above, or a backend failed.
        _airflow_connection(conn_id)  # raises what it is, if it still is
        raise ConnectionLookupFailed(
            f"Connection {conn_id!r} could not be looked up: it came and went between two lookups; a retry may help",
            conn_id=conn_id,
        ) from None
    except ValueError as exc:  # a callback the allowlist refuses
        raise ConnectionInvalid(f"Connection {conn_id!r}: {exc}; {_fix(conn_id)}", conn_id=conn_id) from None
    return config


def mysql_params(conn_id: str = MYSQL_CONN_ID) -> MySQLParams:
    """Host, port (default 3306), login, password and schema (the database) of a MySQL Connection."""
    info = _of_type(get_connection(conn_id), MYSQL_CONN_TYPES)
    host, login, schema = info.host or "", info.login or "", info.schema or ""
    missing = [name for name, value in (("host", host), ("login", login), ("schema", schema)) if not value]
    if missing:
        raise ConnectionInvalid(
            f"Connection {conn_id!r} needs host, login and schema (the database); missing: {', '.join(missing)}; "
            f"{_fix(conn_id)}",
            conn_id=conn_id,
        )
    return MySQLParams(
        host, info.port or 3306, login, info.password or "", schema, conn_id, tls=_mysql_tls(conn_id, info.extra)
    )


def schema_registry_params(conn_id: str = SCHEMA_REGISTRY_CONN_ID) -> SchemaRegistryParams:
    """The schema registry's URL, basic auth and TLS from its Connection.

    host is a name (``registry.internal``) or a URL (``https://registry.internal``; ``http://`` or
    ``https://`` only); port is optional (the scheme's default); schema is the API's path under the
    host (Apicurio: ``apis/ccompat/v7``; Confluent's registry: empty). Without a scheme, the URL is
    ``https://`` when the extra has ``ssl``, else ``http://``.
    """
    info = _of_type(get_connection(conn_id), SCHEMA_REGISTRY_CONN_TYPES)
    return _registry_params(info)


def _registry_params(info: ConnectionInfo) -> SchemaRegistryParams:
    from urllib.parse import urlsplit

    conn_id = info.conn_id
    host = (info.host or "").strip()
    if not host:
        raise ConnectionInvalid(
            f"Connection {conn_id!r} needs a host (e.g. registry.internal or https://registry.internal); "
            f"{_fix(conn_id)}",
            conn_id=conn_id,
        )
    tls = _registry_tls(conn_id, info.extra)
    scheme, _, rest = host.partition("://") if "://" in host else ("https" if tls else "http", "", host)
    parts = urlsplit(f"{scheme.lower()}://{rest}")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment or parts.username:
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: host {host!r} is not a registry host (a name, or http:// or https:// and a "
            "name; the path goes in schema, credentials in login and password); "
            f"{_fix(conn_id)}",
            conn_id=conn_id,
        )
    if tls and parts.scheme == "http":
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra 'ssl' is set but host {host!r} says http://; use https:// "
            f"(or drop 'ssl'); {_fix(conn_id)}",
            conn_id=conn_id,
        )
    try:
        port = info.port or parts.port
    except ValueError:
        port = -1
    if port is not None:
        port = _port(conn_id, port)
    path = "/".join(p for p in (parts.path.strip("/"), (info.schema or "").strip("/")) if p)
    url = f"{parts.scheme}://{parts.hostname}{'' if port is None else f':{port}'}{'/' + path if path else ''}"
    if (info.login is None) != (info.password is None):
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: basic auth needs both login and password (one of them is empty); {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return SchemaRegistryParams(url, info.login, info.password, conn_id, tls)


#: The keys of a schema registry Connection's extra ``ssl``.
REGISTRY_TLS_KEYS = {
    "ca": "the path of the CA bundle that signed the registry's certificate",
    "cert": "the path of a client certificate",
    "key": "the path of the client certificate's key",
}


def _ssl_object(conn_id: str, extra: Mapping[str, Any], keys: Mapping[str, str], example: str) -> Mapping[str, Any]:
    """The Connection's extra ``ssl`` (an object, or a JSON string holding one) with none but `keys`;
    empty when unset."""
    raw = extra.get("ssl")
    if raw in (None, "", {}):
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    if not isinstance(raw, Mapping) or not raw:
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra 'ssl' must be an object with {sorted(keys)}, "
            f'e.g. {{"ca": "{example}"}}; {_fix(conn_id)}',
            conn_id=conn_id,
        )
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra 'ssl' has unknown keys {unknown}; allowed: {sorted(keys)}; {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return raw


def _registry_tls(conn_id: str, extra: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    raw = _ssl_object(conn_id, extra, REGISTRY_TLS_KEYS, "/etc/ssl/registry-ca.pem")
    if not raw:
        return ()
    if ("cert" in raw) != ("key" in raw):
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra 'ssl' needs 'cert' and 'key' together (a client certificate and its key); "
            f"{_fix(conn_id)}",
            conn_id=conn_id,
        )
    return tuple(
        sorted((key, _tls_file(conn_id, f"ssl.{key}", value, REGISTRY_TLS_KEYS[key])) for key, value in raw.items())
    )


#: The keys of a MySQL Connection's extra ``ssl`` (as the MySQL provider reads it).
MYSQL_TLS_KEYS = {
    "ca": "the path of the CA bundle that signed the server's certificate",
    "cert": "the path of a client certificate",
    "key": "the path of the client certificate's key",
    "check_hostname": "true or false (check the server's name against its certificate)",
}


def _mysql_tls(conn_id: str, extra: Mapping[str, Any]) -> tuple[tuple[str, str | bool], ...]:
    """The Connection's extra ``ssl`` (an object or a JSON string), checked naming the Connection."""
    raw = _ssl_object(conn_id, extra, MYSQL_TLS_KEYS, "/etc/ssl/mysql-ca.pem")
    if not raw:
        return ()
    out: dict[str, str | bool] = {}
    for key, value in raw.items():
        if key == "check_hostname":
            out[key] = _tls_flag(conn_id, f"ssl.{key}", value)
        else:
            out[key] = _tls_file(conn_id, f"ssl.{key}", value, MYSQL_TLS_KEYS[key])
    if "ca" not in out:
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra 'ssl' needs 'ca' (the server's certificate is checked against it; "
            f"an unchecked TLS connection protects nothing from a server in the middle); {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return tuple(sorted(out.items()))


def redis_params(conn_id: str = REDIS_CONN_ID) -> RedisParams:
    """Host (default 127.0.0.1), port (default 6379), password and extra ``db`` of a Redis Connection.

    Read as the Redis provider's hook reads it: a password of ``none`` or ``false`` means none.
    """
    info = _of_type(get_connection(conn_id), REDIS_CONN_TYPES)
    db = info.extra.get("db")
    if db is None or db == "":
        db = 0  # unset: Redis's default database
    try:
        number = int(db)
    except (TypeError, ValueError):
        number = -1
    if isinstance(db, bool) or number < 0 or str(number) != str(db).strip():
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra 'db' must be a database number (0, 1, ...), got {db!r}; {_fix(conn_id)}",
            conn_id=conn_id,
        )
    password = None if str(info.password).lower() in ("none", "false", "") else info.password
    return RedisParams(
        info.host or "127.0.0.1",
        info.port or 6379,
        number,
        password,
        conn_id,
        username=info.login or None,
        tls=_redis_tls(conn_id, info.extra),
    )


#: The TLS extras of a Redis Connection (the Redis provider's names), with what each must be.
REDIS_TLS_EXTRAS = {
    "ssl": "true or false",
    "ssl_ca_certs": "the path of a CA bundle file",
    "ssl_certfile": "the path of a client certificate file",
    "ssl_keyfile": "the path of the client key file",
    "ssl_cert_reqs": "none, optional or required",
    "ssl_check_hostname": "true or false",
}


def _tls_flag(conn_id: str, label: str, value: Any) -> bool:
    """A TLS switch of a Connection's extra (``true``/``false``/``1``/``0``), or an error naming it."""
    flag = str(value).strip().lower()
    if flag not in ("true", "false", "1", "0"):
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra {label} must be true or false, got {value!r}; {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return flag in ("true", "1")


def _tls_file(conn_id: str, label: str, value: Any, what: str) -> str:
    """A certificate or key path of a Connection's extra that exists here, or an error naming it."""
    if not os.path.isfile(str(value)):
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra {label} must be {what}; {str(value)!r} is not a file here; {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return str(value)


def _redis_tls(conn_id: str, extra: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The TLS extras of a Redis Connection, checked: a typo or a missing file fails here, naming
    the Connection, rather than as a handshake error (or silently as plain TCP) later."""
    out: dict[str, Any] = {}
    for key, what in REDIS_TLS_EXTRAS.items():
        if key not in extra or extra[key] in (None, ""):
            continue
        value = extra[key]
        if key in ("ssl", "ssl_check_hostname"):
            out[key] = _tls_flag(conn_id, repr(key), value)
        elif key == "ssl_cert_reqs":
            if str(value).strip().lower() not in ("none", "optional", "required"):
                raise ConnectionInvalid(
                    f"Connection {conn_id!r}: extra {key!r} must be {what}, got {value!r}; {_fix(conn_id)}",
                    conn_id=conn_id,
                )
            out[key] = str(value).strip().lower()
        else:
            out[key] = _tls_file(conn_id, repr(key), value, what)
    others = sorted(set(out) - {"ssl"})
    if others and not out.get("ssl", False):
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: TLS extras {others} without 'ssl': true would be ignored; {_fix(conn_id)}",
            conn_id=conn_id,
        )
    return tuple(sorted(out.items()))


def child_environment(conn_ids: Iterable[str]) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` variables (Airflow's JSON form) for a child process without Airflow.

    Call it inside the task that starts the child (the consume DAG's Spark jobs): each Connection is
    resolved here through Airflow's secrets backends and metastore, and the child reads it back from
    its environment with `get_connection`. Every value is registered with Airflow's secrets masker,
    so it shows as ``***`` in task logs and rendered fields; never log it, never push it to XCom.

    Raises:
        ConnectionNotFound, ConnectionInvalid, ConnectionLookupFailed: as `get_connection`.
    """
    env: dict[str, str] = {}
    for conn_id in conn_ids:
        info = get_connection(conn_id)
        form: dict[str, Any] = {"conn_type": info.conn_type}
        for key in ("host", "port", "login", "password", "schema"):
            value = getattr(info, key)
            if value is not None:
                form[key] = value
        if info.extra:
            form["extra"] = info.extra
        env[_env_name(conn_id)] = encoded = json.dumps(form)
        _mask(encoded)
    return env


def _mask(secret: str) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - lagsched always installs Airflow
        return
    mask_secret(secret)


def where_mysql(params: MySQLParams) -> str:
    """``host:port, user U, database D`` (and TLS): where a MySQL Connection points, with no secret."""
    tls = ", TLS" if params.uses_tls else ""
    return f"{params.host}:{params.port}, user {params.user}, database {params.database}{tls}"


def where_redis(params: RedisParams) -> str:
    """``host:port, db N``, the user, TLS and whether a password is set (never the password)."""
    user = f", user {params.username}" if params.username else ""
    auth = ", with a password" if params.password else ""
    tls = ", TLS" if params.uses_tls else ""
    return f"{params.host}:{params.port}, db {params.db}{user}{auth}{tls}"


def where_schema_registry(params: SchemaRegistryParams) -> str:
    """The registry's URL, the user and TLS client certificate if any (never the password)."""
    user = f", user {params.username}" if params.username else ""
    cert = ", a client certificate" if dict(params.tls).get("cert") else ""
    return f"{params.url}{user}{cert}"


def where_kafka(config: Mapping[str, Any]) -> str:
    """``bootstrap.servers=..., security.protocol=...``: where and as whom, never a secret."""
    return ", ".join(f"{key}={config[key]}" for key in _KAFKA_DESCRIBED if config.get(key) not in (None, ""))
