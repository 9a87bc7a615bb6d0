"""Shared fixtures: the real local stack, started once per session, and per-test isolation.

The environment that points Airflow at the local stack is set here, at import, because Airflow
reads it when first imported; only the metadata DB and AIRFLOW_HOME are the session's own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lagsched.stack.config import StackConfig, load
from lagsched.stack.environment import stack_environment

CFG = load()
os.environ.update(stack_environment(CFG))

# The tests' in-process Airflow (DagBag, dag.test()) gets a home and a metadata DB of its own, never
# the stack's: a scheduler running on the stack's DB would take over the runs dag.test() creates
# (and their task logs would land in the stack's). One per session, so concurrent runs do not
# share a SQLite file either; tests/dags/conftest.py migrates it. The stack's services still get
# the stack's environment (lagsched.stack applies stack_environment over os.environ).
AIRFLOW_TEST_HOME = Path(tempfile.mkdtemp(prefix="lagsched-test-airflow-"))
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_TEST_HOME)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_TEST_HOME / 'airflow.db'}"

TIERS = ("unit", "integration", "dags", "e2e")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(AIRFLOW_TEST_HOME, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier, taken from its folder (tests/<tier>/...)."""
    for item in items:
        tier = Path(str(item.path)).relative_to(Path(__file__).parent).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def stack() -> Iterator[StackConfig]:
    """The running local stack; started here if it was not already up, and then stopped at the end."""
    from lagsched import stack as local_stack
    from lagsched.stack.process import ServiceError
    from lagsched.stack.services import core_services

    was_up = all(s.healthy for s in local_stack.status(CFG)[: len(core_services(CFG))])
    try:
        local_stack.up(CFG)
    except ServiceError as exc:
        if not was_up:
            local_stack.down(CFG)  # stop what did start, so a failed run leaves nothing behind
        # A service that cannot start is a failure, never a skip.
        pytest.fail(f"the local stack could not start: {exc}", pytrace=False)
    yield CFG
    if not was_up and not os.environ.get("LAGSCHED_KEEP_STACK"):
        local_stack.down(CFG)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kafka_config(stack: StackConfig) -> dict[str, Any]:
    from lagsched.connections import kafka_config as resolve

    return resolve()


@pytest.fixture
def new_topic(kafka_config: dict[str, Any]) -> Iterator[Callable[..., str]]:
    """Factory: create a uniquely named topic; every topic made is deleted after the test."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from lagsched.loadgen import wait_until_ready

    admin = AdminClient(kafka_config)
    made: list[str] = []

    def make(partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = unique(prefix).replace("_", "-")
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=30)
        futures[name].result(timeout=30)
        made.append(name)
        # Produce only once every partition's leader answers: records acknowledged in the first moments
        # after a create went missing from the log in about 1 run in 4 (lagsched.loadgen measured it).
        wait_until_ready(kafka_config, {name: partitions})
        return name

    yield make
    if made:
        for future in admin.delete_topics(made, operation_timeout=30).values():
            future.result(timeout=30)


@pytest.fixture
def empty_mysql_db(stack: StackConfig) -> Iterator[Any]:
    """A fresh, empty database ``lagsched_t_<hex>`` (MySQLParams); dropped afterwards."""
    import dataclasses

    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    base = mysql_params()
    name = unique("lagsched_t")
    admin = connect(base)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    yield dataclasses.replace(base, database=name)
    admin.ping(reconnect=True)  # a test may have restarted MariaDB meanwhile (test_consumer_outages)
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()


@pytest.fixture
def mysql_db(empty_mysql_db: Any) -> Any:
    """A fresh database with every migration in sql/ applied."""
    from lagsched.adapters.migrations import migrate
    from lagsched.adapters.mysql import connect

    conn = connect(empty_mysql_db)
    migrate(conn)
    conn.close()
    return empty_mysql_db


@pytest.fixture
def db(mysql_db: Any) -> Iterator[Any]:
    """An open connection (UTC, READ COMMITTED) to this test's migrated database."""
    from lagsched.adapters.mysql import connect

    conn = connect(mysql_db)
    yield conn
    conn.close()


@pytest.fixture
def cluster() -> str:
    """A unique registry cluster name, so tests never see each other's topics."""
    return f"c-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def redis_client(stack: StackConfig) -> Iterator[Any]:
    """A client on Redis DB 15, flushed before and after (the demo and DAGs use DB 0).

    ``LAGSCHED_TEST_REDIS_DB`` picks another DB, so two test runs can share one Redis.
    """
    import redis

    from lagsched.connections import redis_params

    p = redis_params()
    db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    client = redis.Redis(host=p.host, port=p.port, db=db, password=p.password, decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def spark(stack: StackConfig) -> Iterator[Any]:
    import logging

    from lagsched.adapters.spark import session

    spark_session = session("lagsched-tests")
    yield spark_session
    spark_session.stop()
    # py4j logs from __del__ at interpreter exit, after pytest closed the captured streams.
    logging.getLogger("py4j").setLevel(logging.ERROR)
