"""MySQL/MariaDB connections for lagsched: UTC sessions, READ COMMITTED, autocommit off."""

from __future__ import annotations

import contextlib
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pymysql
import pymysql.cursors

from lagsched.adapters.failures import mysql_target, naming_connections
from lagsched.adapters.transactions import roll_back, transaction
from lagsched.connections import MySQLParams


def connect(
    params: MySQLParams, *, database: str | None = None
) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
    """A connection whose session runs in UTC and READ COMMITTED.

    READ COMMITTED so a claimer inside a transaction sees other claimers' commits (under MariaDB's
    default REPEATABLE READ it would not), which the claim protocol relies on.

    Raises:
        ConnectionFailure: the server refused the login or database (permanent), or could not be
            reached (transient); the message names the Connection (``params.conn_id``), host,
            port, user and database, never the password.
    """
    if database is not None:
        params = dataclasses.replace(params, database=database)
    with naming_connections(mysql_target(params)):
        conn = pymysql.connect(
            host=params.host,
            port=params.port,
            user=params.user,
            password=params.password,
            database=params.database,
            autocommit=False,
            charset="utf8mb4",
            connect_timeout=10,
            init_command="SET time_zone = '+00:00'",
            # The Connection's extra "ssl" (ca, cert, key, check_hostname): PyMySQL's own names.
            ssl=dict(params.tls) or None,
        )
        try:
            _set_isolation(conn)
        except BaseException:
            # A half-set-up session is no use to the caller: do not leak it, and let a failing
            # close (the socket is likely gone) not hide the error that matters.
            with contextlib.suppress(Exception):
                conn.close()
            raise
    return conn


def _set_isolation(conn: pymysql.connections.Connection[pymysql.cursors.Cursor]) -> None:
    with transaction(conn) as cur:
        # Portable spelling: MariaDB calls the variable tx_isolation, MySQL 8 transaction_isolation.
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")


def reconnect(conn: pymysql.connections.Connection[pymysql.cursors.Cursor]) -> None:
    """Reconnect ``conn`` if its link is gone (a server restart), with the session `connect` sets up.

    PyMySQL's own reconnect (``ping(reconnect=True)``) re-runs the ``init_command`` (UTC) but
    not the isolation level, and the claim protocol needs READ COMMITTED: set it again. Raises
    the client's error while the server is still unreachable.
    """
    with contextlib.suppress(pymysql.MySQLError):
        roll_back(conn)  # a transaction cut by the outage is gone with its session anyway
    conn.ping(reconnect=True)
    _set_isolation(conn)


def aware_utc(at: datetime) -> datetime:
    """``at`` in UTC. The one refusal of a naive datetime: its zone would be a guess, and every time
    the tables hold is compared with the sessions' UTC.

    Raises:
        ValueError: a naive datetime.
    """
    if at.tzinfo is None:
        raise ValueError(f"{at!r} is naive; pass timezone-aware datetimes")
    return at.astimezone(UTC)


def to_db(at: datetime | float) -> datetime:
    """A time as the sessions store it: naive UTC wall time (pymysql sends a datetime without its
    zone, and every session runs in UTC). ``at`` is timezone-aware, or seconds since the epoch.

    Raises:
        ValueError: a naive datetime (`aware_utc`).
    """
    if isinstance(at, datetime):
        return aware_utc(at).replace(tzinfo=None)
    return datetime.fromtimestamp(at, tz=UTC).replace(tzinfo=None)


def from_db(value: Any) -> datetime:
    """A ``TIMESTAMP`` read back (naive UTC in a UTC session) as a timezone-aware datetime."""
    if not isinstance(value, datetime):
        raise TypeError(f"expected a TIMESTAMP from the database, got {value!r}")
    return value.replace(tzinfo=UTC)


def epoch_from_db(value: Any) -> float:
    """A ``TIMESTAMP`` read back as seconds since the epoch (`from_db`)."""
    return from_db(value).timestamp()
