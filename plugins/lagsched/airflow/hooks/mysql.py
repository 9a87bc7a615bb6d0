"""A MySQL/MariaDB hook on PyMySQL, so a ``mysql`` Connection gets Airflow's Test button."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from lagsched.connections import MYSQL_CONN_ID, MySQLParams

__all__ = ["MySQLHook"]


class MySQLHook(BaseHook):
    """The lagsched_mysql Connection (host, port, login, password, schema = the database).

    `get_conn` returns lagsched's session (UTC, READ COMMITTED, autocommit off);
    `test_connection` logs in and reports the server's version and whether it supports
    ``SKIP LOCKED``, or what failed and where to fix it.
    """

    conn_name_attr = "mysql_conn_id"
    default_conn_name = MYSQL_CONN_ID
    conn_type = "mysql"
    hook_name = "MySQL (lagsched, PyMySQL)"

    def __init__(self, mysql_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mysql_conn_id = mysql_conn_id

    def get_params(self) -> MySQLParams:
        """The Connection's settings, resolved now through Airflow's secrets backends (never cached)."""
        from lagsched.connections import mysql_params

        return mysql_params(self.mysql_conn_id)

    def get_conn(self) -> Any:
        """An open PyMySQL connection (`lagsched.adapters.mysql.connect`)."""
        from lagsched.adapters.mysql import connect

        return connect(self.get_params())

    def test_connection(self) -> tuple[bool, str]:
        """(ok, message) for Airflow's Test button: the server's answer, or what failed."""
        from lagsched.adapters.health import check_mysql
        from lagsched.connections import where_mysql
        from lagsched.core.errors import LagschedError

        try:
            params = self.get_params()
            found = check_mysql(params)
        except LagschedError as exc:  # every failure names the Connection's fields, never the password
            # The Test button tests a form under a random id: the id would only confuse; the rest says it all.
            return False, str(exc).removeprefix(f"Connection {self.mysql_conn_id!r} ")
        ok = bool(found["skip_locked"])
        skip = "supports" if ok else "does NOT support (lagsched needs it: MySQL >= 8.0.1 or MariaDB >= 10.6)"
        return ok, f"Connected to {where_mysql(params)}: server {found['version']}, {skip} SKIP LOCKED"
