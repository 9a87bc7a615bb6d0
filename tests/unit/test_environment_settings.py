"""The settings read from the environment besides Connections, each in one place (`lagsched.environment`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lagsched.environment import DEFAULT_REGION, SparkSetupError, aws_region, lake_jars


def test_the_lake_jars_must_all_exist(tmp_path: Path) -> None:
    jar = tmp_path / "iceberg.jar"
    jar.write_bytes(b"")
    assert lake_jars({"LAGSCHED_SPARK_JARS": f"{jar},"}) == [str(jar)]
    for raw in ("", f"{jar},{tmp_path / 'gone.jar'}"):
        with pytest.raises(SparkSetupError, match=r"run `make deps`.*or set LAGSCHED_SPARK_JARS"):
            lake_jars({"LAGSCHED_SPARK_JARS": raw})


def test_the_region_has_one_default() -> None:
    assert aws_region({}) == aws_region({"AWS_REGION": ""}) == DEFAULT_REGION == "us-east-1"
    assert aws_region({"AWS_REGION": "eu-west-1"}) == "eu-west-1"


def test_no_other_module_reads_them() -> None:
    root = Path(__file__).parents[2] / "plugins" / "lagsched"
    readers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if any(f'"{name}"' in p.read_text() for name in ("LAGSCHED_SPARK_JARS", "AWS_REGION"))
    )
    assert readers == ["environment.py"], readers
