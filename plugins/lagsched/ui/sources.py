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
    from lagsched.adapters.failures import mysql_target, naming_connections, redis_target
    from lagsched.adapters.lag_store import redis_client
    from lagsched.adapters.mysql import connect
    from lagsched.connections import MYSQL_CONN_ID, REDIS_CONN_ID, mysql_params, redis_params

    mysql_p = mysql_params(mysql_conn_id or MYSQL_CONN_ID)
    redis_p = redis_params(redis_conn_id or REDIS_CONN_ID)
    with naming_connections(mysql_target(mysql_p), redis_target(redis_p)):
        mysql = connect(mysql_p)
        try:
            redis = redis_client(redis_p)
            try:
                yield mysql, redis
            finally:
                redis.close()
        finally:
            mysql.close()
