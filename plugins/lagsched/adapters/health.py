"""Health probes of the real services, used by the setup DAG and `lagsched-dev stack status`.

Each probe raises `ConnectionFailure` naming the Connection it checked, where it points (never a
password), what failed and where to fix it; `ConnectionFailure.permanent` says whether a retry
can help (`lagsched.adapters.failures` has the table).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lagsched.adapters.failures import KafkaConnection, mysql_target, naming_connections, redis_target
from lagsched.adapters.redis_store import redis_client
from lagsched.connections import KAFKA_CONN_ID, MySQLParams, RedisParams, SchemaRegistryParams, where_redis
from lagsched.core.errors import ConnectionFailure

__all__ = ["check_kafka", "check_mysql", "check_redis", "check_schema_registry", "redis_ignores_password"]

log = logging.getLogger(__name__)


def check_kafka(config: Mapping[str, Any], timeout_s: float = 10.0, *, conn_id: str = KAFKA_CONN_ID) -> dict[str, Any]:
    """Broker count and topic count, through the Admin API.

    confluent-kafka connects lazily, so a broker that cannot be reached shows only here, as a
    metadata request that times out after `timeout_s`; the message then carries what librdkafka
    reported (an unresolvable host, a refused connection, a failed SASL or SSL handshake).
    """
    from confluent_kafka.admin import AdminClient

    kafka = KafkaConnection(config, conn_id)
    admin = kafka.client(AdminClient)
    with naming_connections(kafka.target):
        meta = admin.list_topics(timeout=timeout_s)
    topics = [t for t in meta.topics if not t.startswith("__")]
    return {"brokers": len(meta.brokers), "topics": len(topics), "cluster_id": meta.cluster_id}


def check_mysql(params: MySQLParams) -> dict[str, Any]:
    """Server version and whether it supports ``SKIP LOCKED``."""
    from lagsched.adapters.mysql import connect
    from lagsched.core.claims import parse_server_version, supports_skip_locked

    conn = connect(params)
    try:
        with naming_connections(mysql_target(params)), conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
    finally:
        conn.close()
    version = str(row[0]) if row else "unknown"
    skip_locked = supports_skip_locked(parse_server_version(version)) if row else False
    return {"version": version, "database": params.database, "skip_locked": skip_locked}


def redis_ignores_password(params: RedisParams, *, timeout_s: float = 10.0) -> bool:
    """Whether the Connection sets a password that the server does not need and so ignores.

    redis-py 8 authenticates with ``HELLO 3 AUTH default <password>``, which a server without a
    password (``requirepass`` unset, the default user ``nopass``) accepts whatever the password:
    the client connects, and nothing says the password meant nothing. (Plain ``AUTH <password>``
    would be refused, but redis-py does not send it.) So ask directly: a client without the
    password that gets a ``PONG`` proves the server has none.
    """
    if not params.password:
        return False
    import redis

    bare = redis_client(params, timeout_s=timeout_s, decode_responses=False, authenticate=False)
    try:
        with naming_connections(redis_target(params)):
            try:
                bare.ping()
            except redis.exceptions.AuthenticationError:
                return False  # NOAUTH: the server wants a password, so the Connection's is used
    finally:
        bare.close()
    return True


def check_redis(params: RedisParams, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """Server version; fails on a wrong password, and on a password the server ignores.

    A password set on the Connection that the server does not need fails this check (permanent)
    rather than passing with a warning. This check is where a user proves that the Connection
    describes the server it reaches; a password the server ignores means it does not: either this
    is not the Redis that was meant (a password-protected production Redis, reached instead on an
    open one), or the server's authentication was switched off. Both need a person: remove the
    password from the Connection, or set ``requirepass`` on the server. The scheduled tasks only
    warn (`lagsched.airflow.tasks`): their data path works, and failing every run over a credential that
    grants nothing would turn a configuration smell into an outage.
    """
    client = redis_client(params, timeout_s=timeout_s, decode_responses=False)
    try:
        with naming_connections(redis_target(params)):
            client.ping()
            info = client.info("server")
    finally:
        client.close()
    if redis_ignores_password(params, timeout_s=timeout_s):
        raise ConnectionFailure(
            f"Connection {params.conn_id!r} ({where_redis(params)}): the Connection sets a password but the "
            "server has none (requirepass is not set), so the password is ignored and anyone can connect; "
            "is this the Redis you meant? Remove the password from the Connection in Admin > Connections, "
            "or set requirepass on the server",
            conn_id=params.conn_id,
            permanent=True,
        )
    return {"version": info.get("redis_version"), "db": params.db}


def check_schema_registry(params: SchemaRegistryParams, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """The registry's global compatibility level and how many subjects it holds."""
    from lagsched.adapters.schema_registry import RegistryClient

    return RegistryClient(params, timeout_s=timeout_s).check()
