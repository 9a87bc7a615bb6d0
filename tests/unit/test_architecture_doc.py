"""docs/architecture.md against the code: the modules it names exist, each table and Redis key is in
the module it is given to, and every table the migrations leave is listed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
DOC = (REPO / "docs" / "architecture.md").read_text()
PATH = re.compile(r"`((?:plugins|dags|jobs|sql|docs|tests)/[^`\s]*)`")


def section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n#", start + len(title))
    return DOC[start : end if end != -1 else None]


def rows(title: str) -> list[tuple[str, list[str]]]:
    """(the row's first backticked name, the paths in its last column) of a section's table."""
    found = []
    for line in section(title).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith(("`", "channel `")):
            name = re.search(r"`([^`]+)`", cells[0])
            assert name is not None
            found.append((name.group(1), PATH.findall(cells[-1])))
    return found


@pytest.mark.parametrize("path", sorted(set(PATH.findall(DOC))))
def test_every_path_named_exists(path: str) -> None:
    assert list(REPO.glob(path.rstrip("/"))), f"docs/architecture.md names {path}, which is not in the repository"


TABLES = rows("### MySQL tables")
KEYS = rows("### Redis keys and channels")


@pytest.mark.parametrize(("table", "modules"), TABLES, ids=[t for t, _ in TABLES])
def test_each_table_is_in_the_module_given_to_it(table: str, modules: list[str]) -> None:
    assert modules, f"{table}: no module given"
    for module in modules:
        assert re.search(rf"\b{table}\b", (REPO / module).read_text()), f"{table} is not in {module}"


def test_every_table_the_migrations_leave_is_listed() -> None:
    created: set[str] = set()
    for migration in sorted((REPO / "sql").glob("V*.sql")):
        text = migration.read_text()
        created |= set(re.findall(r"CREATE TABLE IF NOT EXISTS `?(\w+)", text))
        created -= set(re.findall(r"DROP TABLE IF EXISTS `?(\w+)", text))
    assert created, "no table found in sql/"
    assert created <= {t for t, _ in TABLES}, f"not in docs/architecture.md: {sorted(created - {t for t, _ in TABLES})}"


@pytest.mark.parametrize(("key", "modules"), KEYS, ids=[k for k, _ in KEYS])
def test_each_redis_key_is_in_the_module_given_to_it(key: str, modules: list[str]) -> None:
    # The fixed parts of the pattern: "lagsched:<cluster>:latest:<topic>" -> ":latest:".
    literal = [part for part in re.split(r"<[^>]+>", key.removeprefix("lagsched")) if re.search(r"[a-z]", part)]
    assert literal, key
    (module,) = modules
    source = (REPO / module).read_text()
    for part in literal:
        assert part in source, f"{part!r} of {key} is not in {module}"


def test_the_assets_are_the_codes() -> None:
    assets = (REPO / "plugins" / "lagsched" / "airflow" / "assets.py").read_text()
    named = set(re.findall(r"`(lagsched://[^`]+)`", DOC))
    assert len(named) == 3
    for uri in named:
        assert f'"{uri}"' in assets, uri


FLOWS = ["## One record, from Kafka to the table", "## One decision, from a lag sample to a slot"]


@pytest.mark.parametrize("title", FLOWS)
def test_a_flow_never_goes_back_to_a_module(title: str) -> None:
    steps = re.split(r"\n(?=\d+\. )", section(title))[1:]
    assert len(steps) >= 4, title
    seen: dict[str, int] = {}
    for number, step in enumerate(steps, 1):
        for path in set(PATH.findall(step)):
            assert path not in seen, f"{title}: step {number} goes back to {path}, first read at step {seen[path]}"
            seen[path] = number
    # The flow reaches the module that does the work at its end.
    assert any(p.startswith("plugins/lagsched/") for p in seen)


def test_the_wall_clock_is_read_only_where_the_time_section_says() -> None:
    # "Time": the entry points and the few default clocks it names read the wall clock; nothing else.
    allowed = {p for p in PATH.findall(section("### Time")) if p.endswith(".py") or p.endswith("/")}
    read = re.compile(r"\btime\.time\(\)|\bdatetime\.now\(|\bdatetime\.utcnow\(")
    readers = {
        str(p.relative_to(REPO))
        for top in ("plugins/lagsched", "jobs")
        for p in (REPO / top).rglob("*.py")
        if read.search(p.read_text())
    }
    outside = sorted(r for r in readers if not any(r == a or (a.endswith("/") and r.startswith(a)) for a in allowed))
    assert outside == [], f"these read the wall clock; docs/architecture.md's Time section does not say so: {outside}"
    assert readers, "the search found no reader at all: is it still looking at the code?"
