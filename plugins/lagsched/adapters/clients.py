"""Open the MySQL and Redis clients of lagsched's Connections together, and close them together.

Every composition root (the DAGs' task bodies, the CLI, the lagsched page) needs both; this is the
one place that opens them in order, closes them in reverse, and names the Connection of whichever
failed (`lagsched.adapters.failures.naming_connections`).

Example::

    with mysql_and_redis() as (mysql, redis):
        summary = evaluate_cluster(cluster, settings, mysql=mysql, redis=redis, ...)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lagsched.connections import MySQLParams, RedisParams, mysql_params, redis_params

if TYPE_CHECKING:
    import pymysql
    import pymysql.cursors
    import redis

    from lagsched.adapters.failures import Target

__all__ = ["mysql_and_redis"]


@contextmanager
def mysql_and_redis(
    mysql_p: MySQLParams | None = None, redis_p: RedisParams | None = None, *, also_naming: Iterable[Target] = ()
) -> Iterator[tuple[pymysql.connections.Connection[pymysql.cursors.Cursor], redis.Redis]]:
    """``(mysql, redis)`` from the given parameters (default: the ``lagsched_*`` Connections).

    Any error of either client, inside the block too, comes out as a ``ConnectionFailure`` naming
    its Connection and where it points, never a password; ``also_naming`` adds the targets of other
    clients the block uses (a Kafka admin: `lagsched.adapters.failures.KafkaConnection.target`).
    """
    from lagsched.adapters.failures import mysql_target, naming_connections, redis_target
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.redis_store import redis_client

    mysql_p = mysql_params() if mysql_p is None else mysql_p
    redis_p = redis_params() if redis_p is None else redis_p
    with naming_connections(*also_naming, mysql_target(mysql_p), redis_target(redis_p)):
        mysql = connect(mysql_p)
        try:
            redis = redis_client(redis_p)
            try:
                yield mysql, redis
            finally:
                redis.close()
        finally:
            mysql.close()
