"""The end-to-end tier: the local stack with Airflow running (`airflow standalone`: API server,
scheduler, DAG processor, triggerer), driven through its REST API and a real browser."""

from __future__ import annotations

import pytest

from lagsched_dev.airflow_api import AirflowAPI
from lagsched_dev.stack.config import StackConfig


@pytest.fixture(scope="session")
def airflow(stack: StackConfig) -> AirflowAPI:
    """The stack's Airflow, started here if needed, logged in as the simple auth manager's admin.

    Stopped with the rest of the stack at the end of the session (unless LAGSCHED_KEEP_STACK).
    """
    from lagsched_dev import stack as local_stack
    from lagsched_dev.stack.process import ServiceError

    try:
        local_stack.up(stack, airflow=True)
    except ServiceError as exc:
        # A service that cannot start is a failure, never a skip.
        pytest.fail(f"Airflow could not start: {exc}", pytrace=False)
    return AirflowAPI.for_simple_auth(f"http://127.0.0.1:{stack.airflow_port}", stack.airflow_home)
