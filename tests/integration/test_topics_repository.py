"""The topics repository on the real MariaDB: a failed read reports its own error."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from lagsched.adapters.mysql import connect
from lagsched.adapters.topics import load_partitions, load_topics


def kill(victim: Any, params: Any) -> None:
    """End `victim`'s session from another connection, as a server restart or a network cut would."""
    admin = connect(params)
    with admin.cursor() as cur:
        cur.execute("KILL CONNECTION %s", (victim.thread_id(),))
    admin.close()


@pytest.mark.parametrize("read", [lambda c: load_topics(c, "c1"), lambda c: load_partitions(c, ["t1"])])
def test_a_read_on_a_broken_connection_raises_its_own_error(mysql_db: Any, read: Any) -> None:
    conn = connect(mysql_db)
    kill(conn, mysql_db)
    # Before, `finally: conn.commit()` ran on the dead connection and its InterfaceError replaced
    # the read's own error, which is the one that says what happened.
    with pytest.raises(pymysql.err.OperationalError) as err:
        read(conn)
    assert err.value.args[0] in {2006, 2013, 4031}, err.value
