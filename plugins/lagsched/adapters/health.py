"""Health probes of the real services, used by the setup DAG and `lagsched stack status`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lagsched.connections import MySQLParams, RedisParams


def check_kafka(config: Mapping[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """Broker count and topic count, through the Admin API."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(dict(config)).list_topics(timeout=timeout_s)
    topics = [t for t in meta.topics if not t.startswith("__")]
    return {"brokers": len(meta.brokers), "topics": len(topics), "cluster_id": meta.cluster_id}


def check_mysql(params: MySQLParams) -> dict[str, Any]:
    """Server version and whether it supports ``SKIP LOCKED``."""
    from lagsched.adapters.mysql import connect
    from lagsched.core.claims import parse_server_version, supports_skip_locked

    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
    finally:
        conn.close()
    version = str(row[0]) if row else "unknown"
    skip_locked = supports_skip_locked(parse_server_version(version)) if row else False
    return {"version": version, "database": params.database, "skip_locked": skip_locked}


def check_redis(params: RedisParams) -> dict[str, Any]:
    import redis

    client = redis.Redis(host=params.host, port=params.port, db=params.db, password=params.password)
    try:
        client.ping()
        info = client.info("server")
    finally:
        client.close()
    return {"version": info.get("redis_version"), "db": params.db}
