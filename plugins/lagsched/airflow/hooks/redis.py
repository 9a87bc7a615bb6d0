"""The Redis provider's hook with a ``test_connection``, as conn type ``lagsched_redis``."""

from __future__ import annotations

from typing import Any

from airflow.providers.redis.hooks.redis import RedisHook as ProviderRedisHook

from lagsched.connections import REDIS_CONN_ID, RedisParams

__all__ = ["RedisHook"]


class RedisHook(ProviderRedisHook):
    """The provider's `RedisHook` (same fields: host, port, password, extra ``db``, SSL) plus a Test button.

    The Redis provider registers conn type ``redis`` first and its hook has no
    ``test_connection``, so this one is its own type; lagsched reads both the same way.
    """

    conn_type = "lagsched_redis"
    hook_name = "Redis (lagsched)"
    default_conn_name = REDIS_CONN_ID

    def __init__(self, redis_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(redis_conn_id=redis_conn_id, **kwargs)

    def get_params(self) -> RedisParams:
        """The Connection's settings (either conn type), resolved now through Airflow's secrets backends."""
        from lagsched.connections import redis_params

        return redis_params(self.redis_conn_id)

    def test_connection(self) -> tuple[bool, str]:
        """(ok, message) for Airflow's Test button: PING and the server's version, or what failed."""
        from lagsched.adapters.health import check_redis
        from lagsched.connections import where_redis
        from lagsched.core.errors import LagschedError

        try:
            params = self.get_params()
            found = check_redis(params)
        except LagschedError as exc:  # names the Connection and where it points, never the password
            # The Test button tests a form under a random id: the id would only confuse; the rest says it all.
            return False, str(exc).removeprefix(f"Connection {self.redis_conn_id!r} ")
        return True, f"Connected to {where_redis(params)}: Redis {found.get('version', 'unknown')}"
