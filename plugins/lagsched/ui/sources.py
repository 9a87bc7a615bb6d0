"""Open the status read model's clients from lagsched's Connections (the page, the metrics, the CLI).

Kept free of FastAPI so ``lagsched status`` can use it without the web stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["status_sources"]


@contextmanager
def status_sources(mysql_conn_id: str | None = None, redis_conn_id: str | None = None) -> Iterator[tuple[Any, Any]]:
    """``(mysql, redis)`` clients for `lagsched.workflows.status`, closed afterwards.

    Errors of either client, inside the block too, come out as a ``ConnectionFailure`` naming
    its Connection and where it points (never a password).
    """
    from lagsched.adapters.clients import mysql_and_redis
    from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID, mysql_params, redis_params

    with mysql_and_redis(
        mysql_params(mysql_conn_id or MYSQL_CONN_ID), redis_params(redis_conn_id or REDIS_CONN_ID)
    ) as clients:
        yield clients
