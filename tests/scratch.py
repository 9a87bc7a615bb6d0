"""Throw-away resources on the local stack: a database and Kafka topics, removed when done.

The function fixtures of tests/conftest.py (``empty_mysql_db``, ``mysql_db``, ``new_topic``) and the
session fixtures that need the same for themselves (tests/integration/conftest.py's class archive)
are built on these, so there is one way to make and remove each; the database is the benchmarks'
(`lagsched_dev.bench.claims.create_database`, ``migrate_database``, ``drop_database``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@contextmanager
def scratch_database() -> Iterator[Any]:
    """A fresh, empty database ``lagsched_t_<hex>`` (MySQLParams); dropped afterwards."""
    from lagsched.connections import mysql_params
    from lagsched_dev.bench.claims import create_database, drop_database

    params = create_database(mysql_params(), prefix="lagsched_t", migrated=False)
    try:
        yield params
    finally:
        drop_database(params)  # on a connection of its own: a test may have restarted MariaDB meanwhile


@contextmanager
def scratch_topics(kafka_config: dict[str, Any]) -> Iterator[Callable[..., str]]:
    """A factory of uniquely named topics; every topic it made is deleted afterwards."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from lagsched_dev.loadgen import wait_until_ready

    admin = AdminClient(kafka_config)
    made: list[str] = []

    def make(partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = unique(prefix).replace("_", "-")
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=30)
        futures[name].result(timeout=30)
        made.append(name)
        # Produce only once every partition's leader answers: records acknowledged in the first moments
        # after a create went missing from the log in about 1 run in 4 (lagsched_dev.loadgen measured it).
        wait_until_ready(kafka_config, {name: partitions})
        return name

    try:
        yield make
    finally:
        if made:
            for future in admin.delete_topics(made, operation_timeout=30).values():
                future.result(timeout=30)
