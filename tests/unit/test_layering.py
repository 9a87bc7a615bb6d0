"""The core stays pure: no client library of Kafka, MySQL, Redis, Spark or Airflow is imported there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).parents[2] / "plugins" / "lagsched" / "core"
FORBIDDEN = {"confluent_kafka", "pymysql", "redis", "pyspark", "airflow", "lagsched.adapters", "lagsched.stack"}


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
    # The claims repository owns the claim columns of topic_partitions.
    allowed = {TABLE_HOMES[table]} | ({"claims.py"} if table == "topic_partitions" else set()) | READ_MODELS
    assert users <= allowed, f"{table} is queried in {sorted(users - allowed)}; only {sorted(allowed)} should"


def test_the_redis_adapter_does_not_load_kafka() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, lagsched.adapters.lag_store;"
        "print(sorted(m for m in sys.modules if m.startswith('confluent_kafka')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
