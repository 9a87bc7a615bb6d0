"""Shared fixtures: the real local stack, started once per session, and per-test isolation.

The environment that points Airflow at the local stack is set here, at import, because Airflow
reads it when first imported; only the metadata DB and AIRFLOW_HOME are the session's own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lagsched_dev.stack.config import StackConfig, load
from lagsched_dev.stack.environment import stack_environment
from scratch import scratch_database, scratch_topics

CFG = load()
os.environ.update(stack_environment(CFG))

# The tests' in-process Airflow (DagBag, dag.test()) gets a home and a metadata DB of its own, never
# the stack's: a scheduler running on the stack's DB would take over the runs dag.test() creates
# (and their task logs would land in the stack's). One per session, so concurrent runs do not
# share a SQLite file either; tests/dags/conftest.py migrates it. The stack's services still get
# the stack's environment (lagsched_dev.stack applies stack_environment over os.environ).
AIRFLOW_TEST_HOME = Path(tempfile.mkdtemp(prefix="lagsched-test-airflow-"))
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_TEST_HOME)
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_TEST_HOME / 'airflow.db'}"

# The suite's Spark drivers live for seconds, not days: C1 only and the serial GC cost a short-lived
# JVM far less CPU than the tiered compiler and G1 (tests/integration/consumer_support.TEST_JVM,
# which its slots get explicitly). This reaches the rest, started by plain spark-submit: the Airflow
# operator's slots (in dag.test() and in the stack's Airflow the e2e tier starts, which inherits
# this environment), the installed wheel's slot, and the tests' in-process Spark sessions;
# spark-submit hands SPARK_SUBMIT_OPTS to the driver's JVM.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
# The operator's slots (in dag.test() and in the stack's Airflow) keep their class-data archive with
# the stack's data, where the consumer harness keeps its slots' (one file for both), never in the
# user's cache.
os.environ.setdefault("LAGSCHED_CLASS_ARCHIVE_DIR", str(CFG.home / "spark-classes"))

TIERS = ("unit", "integration", "dags", "e2e")

#: Under pytest-xdist (`make test`) every worker is a process of its own, named "gw0", "gw1", ...
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER:
    # Each worker flushes a Redis DB of its own: 15 (or LAGSCHED_TEST_REDIS_DB) for gw0, one less for
    # each next worker. The demo and the DAGs keep DB 0.
    _base_db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    os.environ["LAGSCHED_TEST_REDIS_DB"] = str(_base_db - int(XDIST_WORKER.removeprefix("gw")))
    if int(os.environ["LAGSCHED_TEST_REDIS_DB"]) < 1:
        raise RuntimeError(f"too many pytest-xdist workers for Redis DBs {_base_db}..1: {XDIST_WORKER}")

#: Tests that share one resource run on one xdist worker (``--dist loadgroup``), keyed by the fixture
#: that starts it, the first match winning: the 3-broker rack cluster, the Spark standalone cluster,
#: the stack's own Airflow (the e2e tier), and Spark itself. A consumer slot is a Spark application
#: that takes a core while it starts: four side by side on two cores ran the load average to 18
#: and every one of them slower than alone (two lines of Spark tests were no faster than one), so
#: the slot tests (and those with an in-process Spark session, one JVM per worker) take turns on
#: one worker while the others run everything else.
#: A test file that starts Spark another way says so itself:
#: ``pytestmark = pytest.mark.xdist_group("spark")``.
SHARED_FIXTURE_GROUPS = {
    "rack_cluster": "rack-cluster",
    "spark_cluster": "spark-cluster",
    "airflow": "stack-airflow",
    "consumer": "spark",
    "spark": "spark",
}


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(AIRFLOW_TEST_HOME, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # the groups must be set before gw0 hands them over (below)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier, taken from its folder (tests/<tier>/...), and with the xdist group
    of the shared resource it uses, if any."""
    grouped: dict[str, str] = {}
    for item in items:
        tier = Path(str(item.path)).relative_to(Path(__file__).parent).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("xdist_group") is None:
            groups = [g for fixture, g in SHARED_FIXTURE_GROUPS.items() if fixture in getattr(item, "fixturenames", ())]
            if groups:
                item.add_marker(pytest.mark.xdist_group(groups[0]))
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            grouped[item.nodeid] = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    # Every worker collects the same items; the first tells the controller's scheduler the groups.
    if XDIST_WORKER == "gw0" and os.environ.get(_GROUPS_FILE):
        _write_json(Path(os.environ[_GROUPS_FILE]), grouped)


#: The file through which worker gw0 hands the tests' groups to the controller (both set up here).
#: xdist's own ``--dist loadgroup`` renames each grouped test's node id, which pytest 9 no longer
#: lets it do (a node id is a computed property there): every test ran wherever, groups ignored.
_GROUPS_FILE = "LAGSCHED_XDIST_GROUPS_FILE"


def _write_json(path: Path, value: object) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(value))
    partial.replace(path)


def pytest_configure(config: pytest.Config) -> None:
    if _is_xdist_controller(config):
        # Before the workers start: they inherit the environment.
        os.environ[_GROUPS_FILE] = str(AIRFLOW_TEST_HOME / "xdist-groups.json")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` that works under pytest 9: each group is one unit of work, every other
    test a unit of its own; the largest units go first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                # Read once all workers collected: gw0 wrote it during its collection.
                self._groups = json.loads(Path(os.environ[_GROUPS_FILE]).read_text())
            return self._groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``LAGSCHED_TEST_CPU_PROFILE=<file>``, one JSON line per test: its wall seconds and the
    machine's busy core-seconds meanwhile (setup and teardown included). On two cores the suite is
    bound by CPU, not by waiting: this says which tests to make cheaper. Meaningful in a serial run,
    where nothing else shares the machine."""
    out = os.environ.get("LAGSCHED_TEST_CPU_PROFILE")
    if not out:
        yield
        return
    from lagsched_dev.bench.cpu import machine_busy_s

    wall, busy = time.monotonic(), machine_busy_s()
    yield
    line = {
        "test": item.nodeid,
        "wall_s": round(time.monotonic() - wall, 2),
        "cpu_s": round(machine_busy_s() - busy, 2),
    }
    with open(out, "a") as fh:
        fh.write(json.dumps(line) + "\n")


_STACK_WAS_UP = pytest.StashKey[bool]()


def _is_xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _core_services_up() -> bool:
    from lagsched_dev import stack as local_stack
    from lagsched_dev.stack.services import core_services

    return all(s.healthy for s in local_stack.status(CFG)[: len(core_services(CFG))])


def pytest_sessionstart(session: pytest.Session) -> None:
    # Workers never stop the shared stack; the controller stops it at the end if it was not up before.
    if _is_xdist_controller(session.config):
        session.config.stash[_STACK_WAS_UP] = _core_services_up()


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    was_up = config.stash.get(_STACK_WAS_UP, True)
    if _is_xdist_controller(config) and not was_up and not os.environ.get("LAGSCHED_KEEP_STACK"):
        from lagsched_dev import stack as local_stack

        local_stack.down(CFG)


@pytest.fixture(scope="session")
def stack() -> Iterator[StackConfig]:
    """The running local stack; started here if it was not already up, and then stopped at the end."""
    from lagsched_dev import stack as local_stack
    from lagsched_dev.stack.process import ServiceError

    was_up = _core_services_up()
    try:
        local_stack.up(CFG)  # under xdist, one worker starts it and the others wait (one `up` at a time)
    except ServiceError as exc:
        if not was_up and not XDIST_WORKER:
            local_stack.down(CFG)  # stop what did start, so a failed run leaves nothing behind
        # A service that cannot start is a failure, never a skip.
        pytest.fail(f"the local stack could not start: {exc}", pytrace=False)
    yield CFG
    # Under xdist the other workers may still use it: the controller stops it (pytest_sessionfinish).
    if not was_up and not XDIST_WORKER and not os.environ.get("LAGSCHED_KEEP_STACK"):
        local_stack.down(CFG)


@pytest.fixture
def kafka_config(stack: StackConfig) -> dict[str, Any]:
    from lagsched.connections import kafka_config as resolve

    return resolve()


@pytest.fixture
def new_topic(kafka_config: dict[str, Any]) -> Iterator[Callable[..., str]]:
    """Factory: create a uniquely named topic; every topic made is deleted after the test."""
    with scratch_topics(kafka_config) as make:
        yield make


@pytest.fixture
def empty_mysql_db(stack: StackConfig) -> Iterator[Any]:
    """A fresh, empty database ``lagsched_t_<hex>`` (MySQLParams); dropped afterwards."""
    with scratch_database() as params:
        yield params


@pytest.fixture
def mysql_db(empty_mysql_db: Any) -> Any:
    """A fresh database with every migration in sql/ applied."""
    from lagsched_dev.bench.claims import migrate_database

    return migrate_database(empty_mysql_db)


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
    from lagsched.adapters.redis_store import redis_client
    from lagsched.connections import redis_params

    db = int(os.environ.get("LAGSCHED_TEST_REDIS_DB", "15"))
    client = redis_client(redis_params(), db=db)
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
