"""Which tables a cluster's table care takes (`adapters.table_care.cluster_tables`), with Spark's answers
stood in for: pure selection logic over SHOW NAMESPACES / TABLES / TBLPROPERTIES."""

from __future__ import annotations

from typing import Any

import pytest

from lagsched.adapters.table_care import cluster_tables
from lagsched.core.lake import LakeTable


class FakeSpark:
    """Answers the three SHOW statements; TBLPROPERTIES of ``broken`` fails as a missing metadata file does."""

    def __init__(self, tables: dict[str, dict[str, str]], broken: set[str]) -> None:
        self.tables, self.broken = tables, broken

    def sql(self, query: str) -> Any:
        rows: list[Any]
        if query.startswith("SHOW NAMESPACES"):
            rows = [("kafka",)]
        elif query.startswith("SHOW TABLES"):
            rows = [{"tableName": t.split(".")[-1]} for t in self.tables]
        else:
            identifier = query.rsplit(maxsplit=1)[-1]
            if identifier in self.broken:
                raise RuntimeError("NotFoundException: Failed to open input stream for file: .../00003.metadata.json")
            rows = list(self.tables[identifier].items())
        return type("Result", (), {"collect": lambda _self: rows})()


def test_a_table_that_cannot_be_read_is_skipped_and_the_clusters_tables_are_still_cared_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lake = LakeTable.of("prod", {}, default_warehouse="file:///w")
    spark = FakeSpark(
        {
            "lagsched.kafka.orders": {"lagsched.cluster": "prod"},
            "lagsched.kafka.gone": {},
            "lagsched.kafka.theirs": {"lagsched.cluster": "other"},
        },
        broken={"lagsched.kafka.gone"},
    )
    found = [t.identifier for t, _shape in cluster_tables(spark, lake, "prod")]
    assert found == ["lagsched.kafka.prod_dead_letters", "lagsched.kafka.orders"]
    assert "lagsched.kafka.gone cannot be read" in caplog.text
