"""``ensure_table`` when another slot creates the namespace or table at the same moment.

The race itself is timing (three slots starting at once on a fresh catalog: the integration test
``test_concurrent_slots_commit_to_one_table_each_batch_once`` hit it in CI); here the session is a
stand-in that fails a create the way a lost race does, so each outcome is checked every time.
"""

from __future__ import annotations

from typing import Any

import pytest

from lagsched.adapters.sink import ensure_table
from lagsched.core.lake import LakeTable


class _Result:
    def collect(self) -> list[Any]:
        return []


class RacingSession:
    """Runs statements; a CREATE of a kind in ``lose`` fails, and ``exists`` says what a look finds."""

    def __init__(self, *, lose: set[str], exists: set[str]) -> None:
        self.lose, self.exists, self.statements = lose, exists, []

    def sql(self, statement: str) -> _Result:
        self.statements.append(statement)
        kind = "NAMESPACE" if "NAMESPACE" in statement else "TABLE"
        if statement.startswith("CREATE") and kind in self.lose:
            # What MariaDB's driver raised through Iceberg in CI: no "already exists" in sight.
            raise RuntimeError("java.sql.SQLIntegrityConstraintViolationException: Duplicate entry 'lake-kafka-exists'")
        if statement.startswith("DESCRIBE") and kind not in self.exists:
            raise RuntimeError(f"{kind} not found")
        return _Result()


LAKE = LakeTable(warehouse="file:///tmp/w", namespace="kafka", table="t")


def test_no_race_creates_both_and_looks_at_nothing() -> None:
    spark = RacingSession(lose=set(), exists=set())
    ensure_table(spark, LAKE)  # type: ignore[arg-type]
    assert [s.split(" ")[0:2] for s in spark.statements] == [["CREATE", "NAMESPACE"], ["CREATE", "TABLE"]]


@pytest.mark.parametrize("lost", ["NAMESPACE", "TABLE"])
def test_a_lost_race_is_fine_when_the_winner_made_it(lost: str) -> None:
    spark = RacingSession(lose={lost}, exists={"NAMESPACE", "TABLE"})
    ensure_table(spark, LAKE)  # type: ignore[arg-type]
    assert any(s.startswith(f"DESCRIBE {lost}") for s in spark.statements)
    assert spark.statements[-1].startswith(("CREATE TABLE", "DESCRIBE TABLE"))


@pytest.mark.parametrize("lost", ["NAMESPACE", "TABLE"])
def test_a_failed_create_with_nothing_made_raises_the_create_error(lost: str) -> None:
    spark = RacingSession(lose={lost}, exists={"NAMESPACE"} if lost == "TABLE" else set())
    with pytest.raises(RuntimeError, match="Duplicate entry"):
        ensure_table(spark, LAKE)  # type: ignore[arg-type]
