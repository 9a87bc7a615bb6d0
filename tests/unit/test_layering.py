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
