"""lagsched installed the way an Airflow user installs it: a wheel in a fresh virtualenv, nothing else.

For Python 3.11 and the newest other version this machine has among those Airflow 3.3 and
pyspark 4.0 both support (3.12, 3.13; ``LAGSCHED_TEST_PYTHONS`` names interpreters instead), the
test builds the wheel, installs it with its locked dependencies into a new virtualenv, and from a
working directory outside the repository,
with a DAGs folder holding the repository's ``dags/`` files and no ``PYTHONPATH``, checks that nothing of
the tooling came with it (no ``lagsched_dev``, no ``lagsched-dev``, none of the tooling's
dependencies), then:

1. runs the setup DAG (``airflow dags test lagsched_setup``) against a fresh database: every
   migration comes from the wheel;
2. registers a topic with the topic sync DAG, and runs the consume DAG for a short budget: its one
   slot is the wheel's ``lagsched/jobs/consume.py`` under that virtualenv's spark-submit;
3. checks that every record reached the cluster's Iceberg table once and its offsets were stored.

The first install of a Python downloads its wheels (minutes); later runs install from uv's cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from lagsched.airflow.dags import DAG_MODULES

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from consumer_support import assert_exactly_once, latest_offsets

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = ("3.11", "3.12", "3.13")
RECORDS = 500
#: Distributions only the tooling, the demo, the benchmarks or the lake reader (an extra) use.
TOOLING_ONLY = {"matplotlib", "psycopg2-binary", "asyncpg", "pyiceberg", "pytest", "ruff", "mypy", "playwright"}

# Starts a Spark application: with the other Spark tests, one at a time (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("spark")


def _version_of(python: str) -> str | None:
    """``"3.12"`` for an interpreter that runs, None for one that does not (a pyenv shim of a
    version not selected exits non-zero)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_pythons() -> dict[str, str]:
    """version -> interpreter: 3.11 (the lock file's) and the newest other supported version found
    (on PATH, or installed by pyenv). Each costs a virtualenv and a Spark slot; name others with
    ``LAGSCHED_TEST_PYTHONS`` (comma-separated interpreters)."""
    if os.environ.get("LAGSCHED_TEST_PYTHONS"):
        found = {}
        for python in filter(None, os.environ["LAGSCHED_TEST_PYTHONS"].split(",")):
            version = _version_of(python)
            assert version is not None, f"LAGSCHED_TEST_PYTHONS names {python}, which does not run"
            found[version] = python
        return found
    found = {}
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in SUPPORTED:
        candidates = [shutil.which(f"python{version}"), *sorted(pyenv.glob(f"{version}.*/bin/python{version}"))]
        python = next((str(c) for c in candidates if c and _version_of(str(c)) == version), None)
        if python:
            found[version] = python
    newest = max((v for v in found if v != "3.11"), default=None, key=lambda v: tuple(map(int, v.split("."))))
    return {v: p for v, p in found.items() if v in {"3.11", newest}}


PYTHONS = find_pythons()


def test_the_machine_has_the_python_of_the_lock_file() -> None:
    # The suite's own Python; a second one is tested where the machine has it (the note says which).
    assert "3.11" in PYTHONS, f"no Python 3.11 found; found {sorted(PYTHONS)}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel .` builds from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("lagsched-*.whl")
    return built


#: The virtualenvs being installed, by version: the first `venv` starts every version's install at
#: once, so the later versions install while the first one's tests run (which matters on a cold
#: cache, when an install downloads for minutes; from the cache one takes a second).
_INSTALLS: dict[str, Future[Path]] = {}


@pytest.fixture(scope="module", params=sorted(PYTHONS))
def venv(request: pytest.FixtureRequest, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new virtualenv of that Python holding the wheel and its locked dependencies, nothing else."""
    if not _INSTALLS:
        pool = ThreadPoolExecutor(max_workers=len(PYTHONS), thread_name_prefix="wheel-install")
        for version in sorted(PYTHONS):
            root = tmp_path_factory.mktemp(f"venv{version}")
            _INSTALLS[version] = pool.submit(_install, version, wheel, root)
        pool.shutdown(wait=False)
    yield _INSTALLS[request.param].result(timeout=1800)


def _install(version: str, wheel: Path, root: Path) -> Path:
    python = PYTHONS[version]
    # Nothing of this checkout on the path: the installer would take its lagsched.egg-info (plugins/,
    # on the suite's PYTHONPATH) for an installed lagsched and skip the wheel.
    clean = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    # uv, one of the two installers Airflow supports (pip is the other): from its cache it links the
    # 166 packages in under a second, where pip unpacks them again (about 40 core-s per Python).
    uv = str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "venv", "-q", "--python", python, str(root)], check=True, timeout=120, env=clean)
    print(f"\n[wheel] installing {wheel.name} into a fresh Python {version} virtualenv", flush=True)
    install = [uv, "pip", "install", "-q", "--python", str(root / "bin" / "python"),
               "-c", str(REPO / "requirements.lock"), str(wheel)]  # fmt: skip
    # From the cache alone when it holds every package; a cold cache (a Python's first run) downloads.
    done = subprocess.run([*install, "--offline"], capture_output=True, text=True, timeout=300, check=False, env=clean)
    if done.returncode != 0:
        done = subprocess.run(install, capture_output=True, text=True, timeout=1800, check=False, env=clean)
    assert done.returncode == 0, f"uv pip install of the wheel failed on Python {version}:\n{done.stderr[-4000:]}"
    site = subprocess.run(
        [str(root / "bin" / "python"), "-c", "import lagsched, sys; print(lagsched.__file__)"],
        capture_output=True, text=True, check=True, env=clean, cwd=root,
    )  # fmt: skip
    assert site.stdout.startswith(str(root)), f"lagsched is imported from {site.stdout.strip()}, not the virtualenv"
    return root


@pytest.fixture
def deployment(
    venv: Path,
    stack: Any,
    empty_mysql_db: Any,
    redis_client: Any,
    tmp_path: Path,
) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """``airflow ...`` of the fresh virtualenv, as a deployment runs it: its own AIRFLOW_HOME, a
    DAGs folder holding only the repository's one-line DAG files, Connections from the environment."""
    from lagsched_dev.stack.environment import connection_environment, spark_jars

    dags = tmp_path / "dags"
    dags.mkdir()
    for f in sorted((REPO / "dags").glob("*.py")):
        shutil.copy(f, dags / f.name)
    conns = {k: json.loads(v) for k, v in connection_environment(stack).items()}
    conns["AIRFLOW_CONN_LAGSCHED_MYSQL"]["schema"] = empty_mysql_db.database
    conns["AIRFLOW_CONN_LAGSCHED_REDIS"]["extra"] = {"db": redis_client.connection_pool.connection_kwargs["db"]}
    home = tmp_path / "airflow"
    (home / "plugins").mkdir(parents=True)
    env = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "PYSPARK_PYTHON": str(venv / "bin" / "python"),
        "PYSPARK_DRIVER_PYTHON": str(venv / "bin" / "python"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", ""),  # the suite's JVM flags (tests/conftest.py)
        "LAGSCHED_SPARK_JARS": ",".join(str(p) for p in spark_jars(stack)),
        # No class-data archive: recording one (some 15 s as the JVM exits, 190 MB) is the operator
        # test's (tests/dags/test_consume_operator.py); this test is about what the wheel installs.
        "LAGSCHED_CLASS_ARCHIVE_DIR": "",
        **{k: json.dumps(v) for k, v in conns.items()},
    }
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    cwd = tmp_path / "cwd"  # outside the repository: nothing may come from the checkout
    cwd.mkdir()

    def airflow(
        *args: str,
        extra_env: dict[str, str] | None = None,
        timeout: float = 600,
        program: str = "airflow",
        check: bool = True,
    ) -> Any:
        """``airflow *args`` (or another ``program`` of the virtualenv); ``check``: it must exit 0."""
        done = subprocess.run(
            [str(venv / "bin" / program), *args],
            env={**env, **(extra_env or {})},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert not check or done.returncode == 0, (
            f"{program} {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        )
        return done

    airflow("db", "migrate", timeout=600)
    yield airflow


def test_the_wheel_carries_what_a_deployment_needs_and_nothing_of_the_tooling(wheel: Path) -> None:
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    # The Spark applications are the repository's jobs/ files, byte for byte (one copy).
    for job in ("consume.py", "table_care.py", "log4j2.properties"):
        assert zipfile.ZipFile(wheel).read(f"lagsched/jobs/{job}") == (REPO / "jobs" / job).read_bytes(), job
    needed = {
        "lagsched/jobs/__init__.py",
        "lagsched/monitoring/alerts.yml",  # the alert rules (docs/alerts.md)
        "lagsched/monitoring/dashboard.json",  # the Grafana dashboard (docs/prometheus.md)
        *(f"lagsched/airflow/dags/{m}.py" for m in DAG_MODULES.values()),
    }
    assert needed <= names, sorted(needed - names)
    migrations = sorted(p.name for p in (REPO / "sql").glob("V*.sql"))
    assert migrations and all(f"lagsched/sql/{m}" in names for m in migrations)
    # The runtime only: no file of the tooling, no command of it, none of its dependencies.
    tooling = sorted(n for n in names if n.split("/")[0] not in {"lagsched"} and ".dist-info/" not in n)
    assert tooling == [], tooling
    (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "lagsched_dev" not in zipfile.ZipFile(wheel).read(entry_points).decode()
    (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:")]  # fmt: skip
    runtime = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requires if "extra ==" not in r}
    assert not runtime & TOOLING_ONLY, sorted(runtime & TOOLING_ONLY)
    # Each dags/ file creates its DAG the plain Airflow way: it imports the @dag function and calls it.
    for dag_id, module in DAG_MODULES.items():
        text = (REPO / "dags" / f"{dag_id}.py").read_text()
        assert f"from lagsched.airflow.dags.{module} import {dag_id}\n" in text, dag_id
        assert text.rstrip().endswith(f"\n{dag_id}()"), dag_id
    assert {f.stem for f in (REPO / "dags").glob("*.py")} == set(DAG_MODULES)


def test_the_installed_wheel_brings_no_tooling(venv: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    probe = (
        "import importlib.metadata as m, importlib.util as u, json; "
        "print(json.dumps({'dists': sorted(d.metadata['Name'].lower() for d in m.distributions()), "
        "'lagsched_dev': u.find_spec('lagsched_dev') is not None}))"
    )
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                          check=True, env=clean, cwd=venv)  # fmt: skip
    found = json.loads(done.stdout)
    assert found["lagsched_dev"] is False
    assert not (venv / "bin" / "lagsched-dev").exists()
    assert (venv / "bin" / "lagsched").exists()
    assert not set(found["dists"]) & TOOLING_ONLY, sorted(set(found["dists"]) & TOOLING_ONLY)
    assert "lagsched" in found["dists"] and "apache-airflow" in found["dists"]


def test_setup_and_one_consume_slot_from_the_installed_wheel(
    deployment: Callable[..., Any],
    empty_mysql_db: Any,
    new_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    tmp_path: Path,
) -> None:
    from lagsched.adapters.mysql import connect

    # 1. The setup DAG checks the warehouse (here the deployment's LAGSCHED_WAREHOUSE, for the default
    # cluster) and applies every migration (from the wheel) to the fresh database.
    deployment("dags", "test", "lagsched_setup", extra_env={"LAGSCHED_WAREHOUSE": (tmp_path / "default").as_uri()})
    conn = connect(empty_mysql_db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM schema_migrations")
            (applied,) = cur.fetchone()
        conn.commit()
        assert applied == len(list((REPO / "sql").glob("V*.sql")))

        # 2. A topic of this cluster only, registered by the topic sync DAG, consumed by one slot.
        topic = new_topic(2)
        producer = Producer(kafka_config)
        for i in range(RECORDS):
            producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        cluster = f"wheel_{uuid.uuid4().hex[:8]}"
        warehouse = tmp_path / "warehouse"
        clusters = {cluster: {"topics": [topic], "sink": {"warehouse": f"file://{warehouse}"}}}
        variables = {"AIRFLOW_VAR_LAGSCHED_CLUSTERS": json.dumps(clusters)}
        deployment("dags", "test", "lagsched_topic_sync", "-c", json.dumps({"cluster": cluster}), extra_env=variables)
        with conn.cursor() as cur:
            cur.execute("SELECT linker_workers, enabled FROM topics WHERE cluster = %s AND name = %s", (cluster, topic))
            registered = cur.fetchall()
        conn.commit()
        assert len(registered) == 1 and registered[0][1], registered

        run = deployment(
            "dags",
            "test",
            "lagsched_consume",
            "-c",
            json.dumps({"cluster": cluster, "budget_s": 25}),
            extra_env=variables,
            timeout=900,
        )
        with conn.cursor() as cur:
            cur.execute(
                "SELECT SUM(committed_offset), COUNT(claimed_by) FROM topic_partitions p JOIN topics t"
                " ON t.topic_id = p.topic_id WHERE t.cluster = %s",
                (cluster,),
            )
            committed, still_claimed = cur.fetchone()
        conn.commit()
    finally:
        conn.close()
    assert int(committed or 0) == RECORDS, f"offsets stored: {committed}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert still_claimed == 0  # the slot released its rows at its budget

    # 3. Every record is in the cluster's Iceberg table once (read with pyiceberg, the same catalog).
    from lagsched.adapters.lake_reader import read_rows
    from lagsched.core.lake import LakeTable

    lake = LakeTable.of(cluster, {"warehouse": f"file://{warehouse}"}, default_warehouse=f"file://{warehouse}")
    assert_exactly_once(read_rows(lake, empty_mysql_db), topic, latest_offsets(kafka_config, topic, 2))

    # 4. A deployment that names no warehouse anywhere (this one sets neither LAGSCHED_WAREHOUSE nor
    # LAGSCHED_HOME, and the cluster's sink has none): the setup DAG and the wheel's slot job refuse,
    # naming what to set, where they once made a table under the slot's working directory, which the
    # operator deletes after the run.
    bare = f"{cluster}_bare"
    nowhere = {"AIRFLOW_VAR_LAGSCHED_CLUSTERS": json.dumps({bare: {"topics": [topic]}})}
    setup = deployment("dags", "test", "lagsched_setup", extra_env=nowhere, check=False)
    assert f"cluster {bare}: no warehouse for the lake's tables" in setup.stdout + setup.stderr, setup.stdout[-3000:]
    job = deployment("-m", "lagsched.jobs.consume", "--slot", "s", "--cluster", bare, program="python", check=False)
    assert job.returncode == 1, job.stderr[-3000:]
    last = job.stderr.strip().splitlines()[-1]
    assert last.startswith("lagsched consume: FAILED: ConfigError: no warehouse for the lake's tables"), last
