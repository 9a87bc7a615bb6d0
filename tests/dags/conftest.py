"""The DAG tier's Airflow metadata DB: the session's own (set in tests/conftest.py), migrated once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lagsched_dev.stack.config import load


@pytest.fixture(scope="session", autouse=True)
def airflow_metadata_db() -> str:
    """``airflow db migrate`` on the session's SQLite file (about 6 s); returns its URL.

    In a subprocess with the session's environment, as `lagsched-dev stack` migrates the stack's DB.
    """
    url = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    if str(load().airflow_home) in url or str(load().airflow_home) == os.environ["AIRFLOW_HOME"]:
        pytest.fail(f"the DAG tests must not use the stack's Airflow home or DB ({url})", pytrace=False)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=dict(os.environ), capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}", pytrace=False)
    return url
