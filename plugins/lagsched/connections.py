"""Resolve lagsched's Airflow Connection ids into typed client settings.

Credentials come only from Airflow Connections: defined in the UI/metadata DB, or as
``AIRFLOW_CONN_<ID>`` environment variables (JSON or URI form, Airflow's own formats). Outside a
running Airflow (CLI, benchmarks, Spark jobs) the environment form is read directly so those tools do
not need the metadata DB.

A Connection that is missing raises `ConnectionNotFound`; one that is defined but unusable
(malformed JSON or URI, a required field missing, a port that is not a number) raises
`ConnectionInvalid`. Both name the Connection and are permanent: a retry cannot fix them.
`where_mysql`, `where_redis` and `where_kafka` describe where a Connection points, without its
secrets, for the error messages of the clients built from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from lagsched.core.errors import ConnectionInvalid, ConnectionNotFound

__all__ = [
    "KAFKA_CONN_ID",
    "MYSQL_CONN_ID",
    "REDIS_CONN_ID",
    "ConnectionInfo",
    "ConnectionInvalid",
    "ConnectionNotFound",
    "MySQLParams",
    "RedisParams",
    "get_connection",
    "kafka_config",
    "mysql_params",
    "redis_params",
    "where_kafka",
    "where_mysql",
    "where_redis",
]

KAFKA_CONN_ID = "lagsched_kafka"
MYSQL_CONN_ID = "lagsched_mysql"
REDIS_CONN_ID = "lagsched_redis"

#: Kafka client settings that say where and as whom a client connects; anything else in the extra
#: (and every ``*.password``, ``*.key``, ``*.secret``, ``sasl.oauthbearer.*`` setting) stays out of
#: messages.
_KAFKA_DESCRIBED = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username")


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
    """Where and as whom to connect to MySQL; `conn_id` is the Connection they came from."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    conn_id: str = MYSQL_CONN_ID


@dataclass(frozen=True, slots=True)
class RedisParams:
    """Where to connect to Redis; `conn_id` is the Connection they came from."""

    host: str
    port: int
    db: int = 0
    password: str | None = field(default=None, repr=False)
    conn_id: str = REDIS_CONN_ID


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def _port(conn_id: str, value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 0 < port < 65536:
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: port {value!r} is not a TCP port (1 to 65535); fix it in Admin > Connections",
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
                f"Connection {conn_id!r}: its extra is not valid JSON ({exc.msg} at {exc.pos}); "
                "fix it in Admin > Connections",
                conn_id=conn_id,
            ) from None
    if not isinstance(value, dict):
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: its extra must be a JSON object, got {type(value).__name__}; "
            "fix it in Admin > Connections",
            conn_id=conn_id,
        )
    return dict(value)


def _from_env(conn_id: str) -> ConnectionInfo | None:
    name = _env_name(conn_id)
    raw = os.environ.get(name)
    if raw is None:
        return None
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConnectionInvalid(f"{name} is not valid JSON: {exc.msg} at {exc.pos}", conn_id=conn_id) from None
        if not isinstance(data, dict):  # pragma: no cover - a leading "{" parses to an object or fails
            raise ConnectionInvalid(f"{name} must be a JSON object", conn_id=conn_id)
        return ConnectionInfo(
            conn_id=conn_id,
            conn_type=str(data.get("conn_type", "")),
            host=data.get("host"),
            port=_port(conn_id, data.get("port")),
            login=data.get("login"),
            password=data.get("password"),
            schema=data.get("schema"),
            extra=_extra(conn_id, data.get("extra")),
        )
    parts = urlsplit(raw)
    try:
        port = parts.port  # urllib raises ValueError on a port that is not a number in range
    except ValueError:
        raise ConnectionInvalid(f"{name}: the URI's port is not a TCP port (1 to 65535)", conn_id=conn_id) from None
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=parts.scheme.replace("-", "_"),
        host=unquote(parts.hostname) if parts.hostname else None,
        port=port,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        schema=unquote(parts.path.lstrip("/")) or None,
        extra=dict(parse_qsl(parts.query)),
    )


def get_connection(conn_id: str) -> ConnectionInfo:
    """The Connection ``conn_id`` from the environment, else from Airflow.

    Raises:
        ConnectionNotFound: neither defines it.
        ConnectionInvalid: it is defined but malformed.
    """
    info = _from_env(conn_id)
    if info is not None:
        return info
    try:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
    except ImportError:  # pragma: no cover - lagsched always installs Airflow
        raise ConnectionNotFound(f"Connection {conn_id!r} is not set ({_env_name(conn_id)})", conn_id=conn_id) from None
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException as exc:
        # Only "not defined" is turned into ours: anything else (the API server not answering)
        # propagates as it is, so the task retries it.
        raise ConnectionNotFound(
            f"Connection {conn_id!r} is not defined: add it in Airflow (Admin > Connections) "
            f"or set {_env_name(conn_id)}; see README",
            conn_id=conn_id,
        ) from exc
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=conn.conn_type or "",
        host=conn.host,
        port=_port(conn_id, conn.port),
        login=conn.login,
        password=conn.password,
        schema=conn.schema,
        # extra_dejson logs and drops an extra that is not JSON; read the raw text to say so.
        extra=_extra(conn_id, conn.extra),
    )


def kafka_config(conn_id: str = KAFKA_CONN_ID) -> dict[str, Any]:
    """confluent-kafka client settings: the Connection's extra, as the Kafka provider reads it."""
    info = get_connection(conn_id)
    config = dict(info.extra)
    if not config.get("bootstrap.servers"):
        raise ConnectionInvalid(
            f"Connection {conn_id!r} needs 'bootstrap.servers' in its extra JSON "
            '(e.g. {"bootstrap.servers": "broker1:9092"}); fix it in Admin > Connections',
            conn_id=conn_id,
        )
    return config


def mysql_params(conn_id: str = MYSQL_CONN_ID) -> MySQLParams:
    """Host, port (default 3306), login, password and schema (the database) of a MySQL Connection."""
    info = get_connection(conn_id)
    host, login, schema = info.host or "", info.login or "", info.schema or ""
    missing = [name for name, value in (("host", host), ("login", login), ("schema", schema)) if not value]
    if missing:
        raise ConnectionInvalid(
            f"Connection {conn_id!r} needs host, login and schema (the database); missing: {', '.join(missing)}; "
            "fix it in Admin > Connections",
            conn_id=conn_id,
        )
    return MySQLParams(host, info.port or 3306, login, info.password or "", schema, conn_id)


def redis_params(conn_id: str = REDIS_CONN_ID) -> RedisParams:
    """Host (default 127.0.0.1), port (default 6379), password and extra ``db`` of a Redis Connection."""
    info = get_connection(conn_id)
    db = info.extra.get("db")
    if db is None or db == "":
        db = 0  # unset: Redis's default database
    try:
        number = int(db)
    except (TypeError, ValueError):
        number = -1
    if isinstance(db, bool) or number < 0 or str(number) != str(db).strip():
        raise ConnectionInvalid(
            f"Connection {conn_id!r}: extra 'db' must be a database number (0, 1, ...), got {db!r}; "
            "fix it in Admin > Connections",
            conn_id=conn_id,
        )
    return RedisParams(info.host or "127.0.0.1", info.port or 6379, number, info.password, conn_id)


def where_mysql(params: MySQLParams) -> str:
    """``host:port, user U, database D``: where a MySQL Connection points, with no secret."""
    return f"{params.host}:{params.port}, user {params.user}, database {params.database}"


def where_redis(params: RedisParams) -> str:
    """``host:port, db N`` and whether a password is set (never the password)."""
    auth = ", with a password" if params.password else ""
    return f"{params.host}:{params.port}, db {params.db}{auth}"


def where_kafka(config: Mapping[str, Any]) -> str:
    """``bootstrap.servers=..., security.protocol=...``: where and as whom, never a secret."""
    return ", ".join(f"{key}={config[key]}" for key in _KAFKA_DESCRIBED if config.get(key) not in (None, ""))
