"""The core stays pure: no client library of Kafka, MySQL, Redis, Spark or Airflow is imported there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).parents[2] / "plugins" / "lagsched" / "core"
FORBIDDEN = {"confluent_kafka", "pymysql", "redis", "pyspark", "airflow", "lagsched.adapters", "lagsched_dev"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: p.name)
def test_core_module_imports_no_client(path: Path) -> None:
    bad = {m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)}
    assert not bad, f"{path.name} imports {sorted(bad)}; pass an adapter in instead"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text("import os\nfrom redis import Redis\nfrom . import sibling\n")
    assert imported_modules(sample) == {"os", "redis"}


#: Reading a clock: ``datetime.now()``, ``date.today()``, ``time.time()``, ``time.monotonic()``...
CLOCK_READS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "time_ns", "monotonic_ns"}


def clock_reads(path: Path) -> list[str]:
    """``owner.attr()`` calls in the file that read a clock (docstrings' examples aside)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCK_READS:
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if name in {"datetime", "date", "time"}:
                found.append(f"{name}.{node.func.attr}() at line {node.lineno}")
    return found


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: p.name)
def test_core_module_reads_no_clock(path: Path) -> None:
    # The time is a parameter (``now``) that the entry points read once (docs/architecture.md, "Time").
    assert clock_reads(path) == [], f"{path.name} reads a clock; take ``now`` as a parameter instead"


def test_the_check_sees_a_clock_read(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text(
        "import time, datetime as dt\nfrom datetime import datetime\n"
        "a = datetime.now()\nb = time.monotonic()\nc = dt.datetime.now()\nd = now()\ne = x.time()\n"
    )
    assert clock_reads(sample) == ["datetime.now() at line 3", "time.monotonic() at line 4", "datetime.now() at line 5"]


WORKFLOWS = CORE.parent / "workflows"
ADAPTERS = CORE.parent / "adapters"
SQL_WORDS = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "REPLACE ", " FROM ", "FOR UPDATE")
#: The repositories: the one module per group of tables that holds their SQL.
TABLE_HOMES = {
    "topics": "topics.py",
    "topic_partitions": "topics.py",
    "scaling_decisions": "decisions.py",
    "topic_owners": "ownership.py",
    "cluster_assignment_state": "ownership.py",
    "retention_gaps": "gaps.py",
    "scaling_overrides": "overrides.py",
    "partition_ends": "watermarks.py",
    "late_records": "late_records.py",
}
#: Read models: modules that join several tables for a view (the lagsched page, `lagsched status`)
#: and never write (tests/unit/test_status_model.py checks that status_queries.py only reads).
READ_MODELS = {"status_queries.py"}


def string_constants(path: Path) -> list[str]:
    """Every string literal of the module except docstrings (prose may well say "UPDATE topics")."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.py")), ids=lambda p: p.name)
def test_workflows_hold_no_sql_and_no_database_client(path: Path) -> None:
    assert not {m for m in imported_modules(path) if m == "pymysql" or m.startswith("pymysql.")}
    sql = [s for s in string_constants(path) if any(w in s.upper() for w in SQL_WORDS)]
    assert not sql, f"{path.name} holds SQL {sql[:2]}: it belongs in a repository module of lagsched.adapters"


@pytest.mark.parametrize("table", sorted(TABLE_HOMES))
def test_each_table_is_written_and_read_in_one_module(table: str) -> None:
    pattern = (f"FROM {table} ", f"UPDATE {table} ", f"INTO {table} ", f"JOIN {table} ")
    users = set()
    for path in sorted(CORE.parent.rglob("*.py")):
        if "bench" in path.parts or "stack" in path.parts:
            continue  # benchmarks and the stack set up scratch databases of their own
        if any(p in s + " " for s in string_constants(path) for p in pattern):
            users.add(path.name)
    # The claims repository owns the claim columns of topic_partitions (and moves max_timestamp_ms
    # with the offset); the watermarks module reads the registry to compute watermarks, the late
    # records' module to name their clusters and topics.
    allowed = (
        {TABLE_HOMES[table]}
        | ({"claims.py"} if table == "topic_partitions" else set())
        | ({"watermarks.py"} if table in {"topics", "topic_partitions"} else set())
        | ({"late_records.py"} if table == "topics" else set())
        | READ_MODELS
    )
    assert users <= allowed, f"{table} is queried in {sorted(users - allowed)}; only {sorted(allowed)} should"


def test_the_watermarks_only_read_the_registry() -> None:
    path = CORE.parent / "adapters" / "watermarks.py"
    writes = [s for s in string_constants(path) for w in ("UPDATE ", "INTO ", "DELETE ") if w in s.upper()]
    assert writes and all("partition_ends" in s for s in writes), writes


def test_the_redis_adapter_does_not_load_kafka() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, lagsched.adapters.lag_store, lagsched.adapters.redis_store;"
        "print(sorted(m for m in sys.modules if m.startswith('confluent_kafka')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout


PACKAGE = CORE.parent
#: The developer's tooling (the local stack, the demo, load generator, benchmarks, simulator):
#: it imports the runtime, never the reverse, so a deployment needs none of it.
TOOLING = PACKAGE.parent / "lagsched_dev"
REPO = PACKAGE.parents[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lagsched_imports(path: Path, modules: set[str]) -> set[str]:
    """The lagsched modules `path` imports, anywhere in it (inside functions and TYPE_CHECKING too):
    ``from lagsched.a import b`` counts as lagsched.a.b when that is a module, else as lagsched.a."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            found.update(subs or {node.module})
    return found - {module_name(path)}


def import_graph(*packages: Path) -> dict[str, set[str]]:
    paths = sorted(p for package in packages or (PACKAGE, TOOLING) for p in package.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): lagsched_imports(p, modules) for p in paths}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_circle() -> None:
    graph = import_graph()
    # A package's __init__.py importing its own modules is the package's face, not a circle.
    faces = {name: {t for t in targets if t.rsplit(".", 1)[0] != name} for name, targets in graph.items()}
    assert circles(faces) == [], "modules that import each other (directly or round a longer loop)"


def test_the_circle_check_finds_a_loop() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


RUNTIME_FILES = sorted([*PACKAGE.rglob("*.py"), *(REPO / "dags").glob("*.py")])


@pytest.mark.parametrize("path", RUNTIME_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_runtime_never_imports_the_tooling(path: Path) -> None:
    # imported_modules walks the whole tree: imports inside functions count too.
    tooling = {m for m in imported_modules(path) if m == "lagsched_dev" or m.startswith("lagsched_dev.")}
    assert not tooling, f"{path.relative_to(REPO)} imports {sorted(tooling)}: a deployment installs no tooling"
