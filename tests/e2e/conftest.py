"""The end-to-end tier: the local stack with Airflow running (`airflow standalone`: API server,
scheduler, DAG processor, triggerer), driven through its REST API and a real browser."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lagsched_dev.airflow_api import AirflowAPI
from lagsched_dev.stack.config import StackConfig


@pytest.fixture(scope="package")
def airflow(stack: StackConfig) -> Iterator[AirflowAPI]:
    """The stack's Airflow, started here if needed, logged in as the simple auth manager's admin.

    Package-scoped (this directory is a package for that alone): an Airflow this tier started stops
    after its last test, where it would otherwise idle on a tenth of a core through the rest of the
    suite. One that was up before is left running, as is any with LAGSCHED_KEEP_STACK. Under xdist
    every test that uses it is in one group (tests/conftest.py), so no other worker loses it.
    """
    from lagsched.connections import mysql_params
    from lagsched_dev import stack as local_stack
    from lagsched_dev.bench.claims import migrate_database
    from lagsched_dev.stack.process import ServiceError
    from lagsched_dev.stack.services import Airflow

    service = Airflow(stack)
    was_up = service.status().healthy
    try:
        local_stack.up(stack, airflow=True)
    except ServiceError as exc:
        # A service that cannot start is a failure, never a skip.
        pytest.fail(f"Airflow could not start: {exc}", pytrace=False)
    # The stack's schema up to date (idempotent), as the setup DAG keeps it: the lagsched page reads
    # it, and a run of this tier alone, or after a new migration, must not wait for a test that
    # triggers that DAG (test_airflow_loop).
    migrate_database(mysql_params())
    yield AirflowAPI.for_simple_auth(f"http://127.0.0.1:{stack.airflow_port}", stack.airflow_home)
    if not was_up and not os.environ.get("LAGSCHED_KEEP_STACK"):
        service.stop(with_database=False)  # the rest of the suite still uses the stack's metadata DB
