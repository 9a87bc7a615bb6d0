"""Resolve lagsched's Airflow Connection ids into typed client settings.

Credentials come only from Airflow Connections: defined in the UI/metadata DB, or as
``AIRFLOW_CONN_<ID>`` environment variables (JSON or URI form, Airflow's own formats). Outside a
running Airflow (CLI, benchmarks, Spark jobs) the environment form is read directly so those tools do
not need the metadata DB.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

KAFKA_CONN_ID = "lagsched_kafka"
MYSQL_CONN_ID = "lagsched_mysql"
REDIS_CONN_ID = "lagsched_redis"


class ConnectionNotFound(LookupError):
    """No Connection with this id is defined in Airflow or the environment."""


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
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str


@dataclass(frozen=True, slots=True)
class RedisParams:
    host: str
    port: int
    db: int = 0
    password: str | None = field(default=None, repr=False)


def _from_env(conn_id: str) -> ConnectionInfo | None:
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"AIRFLOW_CONN_{conn_id.upper()} is not valid JSON: {exc.msg} at {exc.pos}") from None
        extra = data.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra else {}
        return ConnectionInfo(
            conn_id=conn_id,
            conn_type=str(data.get("conn_type", "")),
            host=data.get("host"),
            port=int(data["port"]) if data.get("port") is not None else None,
            login=data.get("login"),
            password=data.get("password"),
            schema=data.get("schema"),
            extra=dict(extra),
        )
    parts = urlsplit(raw)
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=parts.scheme.replace("-", "_"),
        host=unquote(parts.hostname) if parts.hostname else None,
        port=parts.port,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        schema=unquote(parts.path.lstrip("/")) or None,
        extra=dict(parse_qsl(parts.query)),
    )


def get_connection(conn_id: str) -> ConnectionInfo:
    """The Connection ``conn_id`` from the environment, else from Airflow."""
    info = _from_env(conn_id)
    if info is not None:
        return info
    try:
        from airflow.sdk import BaseHook
    except ImportError:  # pragma: no cover - lagsched always installs Airflow
        raise ConnectionNotFound(f"Connection {conn_id!r} is not set (AIRFLOW_CONN_{conn_id.upper()})") from None
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise ConnectionNotFound(
            f"Connection {conn_id!r} is not defined: add it in Airflow (Admin > Connections) "
            f"or set AIRFLOW_CONN_{conn_id.upper()}; see README"
        ) from exc
    return ConnectionInfo(
        conn_id=conn_id,
        conn_type=conn.conn_type or "",
        host=conn.host,
        port=conn.port,
        login=conn.login,
        password=conn.password,
        schema=conn.schema,
        extra=dict(conn.extra_dejson),
    )


def kafka_config(conn_id: str = KAFKA_CONN_ID) -> dict[str, Any]:
    """confluent-kafka client settings: the Connection's extra, as the Kafka provider reads it."""
    info = get_connection(conn_id)
    config = dict(info.extra)
    if "bootstrap.servers" not in config:
        raise ValueError(f"Connection {conn_id!r} needs 'bootstrap.servers' in its extra JSON")
    return config


def mysql_params(conn_id: str = MYSQL_CONN_ID) -> MySQLParams:
    info = get_connection(conn_id)
    if not info.host or not info.login or not info.schema:
        raise ValueError(f"Connection {conn_id!r} needs host, login and schema (the database)")
    return MySQLParams(info.host, info.port or 3306, info.login, info.password or "", info.schema)


def redis_params(conn_id: str = REDIS_CONN_ID) -> RedisParams:
    info = get_connection(conn_id)
    return RedisParams(info.host or "127.0.0.1", info.port or 6379, int(info.extra.get("db", 0)), info.password)
