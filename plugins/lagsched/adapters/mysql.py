"""MySQL/MariaDB connections for lagsched: UTC sessions, READ COMMITTED, autocommit off."""

from __future__ import annotations

import pymysql
import pymysql.cursors

from lagsched.connections import MySQLParams


def connect(
    params: MySQLParams, *, database: str | None = None
) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
    """A connection whose session runs in UTC and READ COMMITTED.

    READ COMMITTED so a claimer inside a transaction sees other claimers' commits (under MariaDB's
    default REPEATABLE READ it would not), which the claim protocol relies on.
    """
    conn = pymysql.connect(
        host=params.host,
        port=params.port,
        user=params.user,
        password=params.password,
        database=database if database is not None else params.database,
        autocommit=False,
        charset="utf8mb4",
        connect_timeout=10,
        init_command="SET time_zone = '+00:00'",
    )
    with conn.cursor() as cur:
        # Portable spelling: MariaDB calls the variable tx_isolation, MySQL 8 transaction_isolation.
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    conn.commit()
    return conn
