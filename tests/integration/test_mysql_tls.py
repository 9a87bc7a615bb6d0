"""A MySQL Connection with TLS reaches a MariaDB that requires it (issue 17 item 5, MySQL part).

A second MariaDB (Debian's, started by the stack's own service class in a folder of its own) runs
with a certificate made for the test and ``require_secure_transport``; the lagsched user is
``REQUIRE SSL``. Every path lagsched uses to reach the database must then speak TLS and check
the server's certificate: PyMySQL (registry, claims, migrations), Spark's JDBC catalog (the
Iceberg table's catalog, through MariaDB's JDBC driver) and pyiceberg (SQLAlchemy + PyMySQL).
Before, a Connection's ``ssl`` extra was ignored: MariaDB's JDBC driver (Spark's catalog) used its
default, no TLS, which such a server refuses, and PyMySQL spoke TLS without checking the server's
certificate (its "preferred" mode).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lagsched.adapters.failures import mysql_target, naming_connections
from lagsched.adapters.lake_reader import open_catalog
from lagsched.adapters.migrations import migrate
from lagsched.adapters.mysql import connect
from lagsched.adapters.sink import catalog_conf, ensure_catalog_tables, ensure_table, jdbc_url
from lagsched.connections import mysql_params, where_mysql
from lagsched.core.errors import ConnectionFailure, ConnectionInvalid
from lagsched.core.lake import LakeTable
from lagsched_dev.stack.config import StackConfig
from secure_services import certificates, tls_mariadb

CONN_ID = "secure_mysql"


@pytest.fixture(scope="module")
def tls_mysql(stack: StackConfig) -> Iterator[dict[str, Any]]:
    """The TLS MariaDB's Connection (Airflow's JSON form); the server stops at the end."""
    with tls_mariadb(stack) as conn:
        yield conn


def use(monkeypatch: pytest.MonkeyPatch, conn: dict[str, Any]) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))


def test_pymysql_spark_and_pyiceberg_all_speak_tls(
    tls_mysql: dict[str, Any], monkeypatch: pytest.MonkeyPatch, spark: Any, tmp_path: Path
) -> None:
    use(monkeypatch, tls_mysql)
    params = mysql_params(CONN_ID)
    assert params.uses_tls and "TLS" in where_mysql(params) and params.password not in where_mysql(params)
    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            row = cur.fetchone()
        assert row is not None and row[1].startswith("TLS"), row
        assert migrate(conn)  # the registry's schema, over TLS
        ensure_catalog_tables(conn)
    finally:
        conn.close()

    # Spark's JDBC catalog (MariaDB's JDBC driver, checking the server against the CA).
    lake = LakeTable.of("tls_cluster", {"warehouse": f"file://{tmp_path}"}, default_warehouse=f"file://{tmp_path}")
    url = jdbc_url(params.host, params.port, params.database, tls=params.tls)
    assert "sslMode=verify-ca" in url
    conf = catalog_conf(lake, jdbc_url=url, user=params.user, password=params.password)
    for key, value in conf.items():
        if key.startswith(f"spark.sql.catalog.{lake.catalog}"):
            spark.conf.set(key, value)
    ensure_table(spark, lake)
    # Any other engine: pyiceberg through SQLAlchemy and PyMySQL, over TLS too.
    table = open_catalog(lake, params).load_table(f"{lake.namespace}.{lake.table}")
    assert "offset" in {f.name for f in table.schema().fields}


def test_a_server_certificate_not_signed_by_the_ca_is_refused(
    tls_mysql: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The CA is checked, not just TLS spoken: PyMySQL alone would encrypt without checking
    (its "preferred" mode), which a server in the middle could answer."""
    other_ca = certificates(tmp_path)[0]  # a CA of its own, which never signed the server's certificate
    use(monkeypatch, {**tls_mysql, "extra": {"ssl": {"ca": str(other_ca)}}})
    params = mysql_params(CONN_ID)
    with pytest.raises(ConnectionFailure) as refused:
        connect(params)
    assert CONN_ID in str(refused.value) and "certificate" in str(refused.value).lower()
    assert tls_mysql["password"] not in str(refused.value)


def test_a_wrong_password_over_tls_fails_at_once_naming_the_connection(
    tls_mysql: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    use(monkeypatch, {**tls_mysql, "password": "not-the-password"})
    with pytest.raises(ConnectionFailure) as denied, naming_connections(mysql_target(mysql_params(CONN_ID))):
        connect(mysql_params(CONN_ID))
    assert denied.value.permanent and CONN_ID in str(denied.value)
    assert "not-the-password" not in str(denied.value)


@pytest.mark.parametrize(
    ("ssl", "named"),
    [
        ("not json", "extra 'ssl' must be an object"),
        ({"ca": "/no/such/ca.pem"}, "'/no/such/ca.pem' is not a file"),
        ({"cert": "/etc/hostname", "key": "/etc/hostname"}, "needs 'ca'"),
        ({"ca": "/etc/hostname", "verify": True}, "unknown keys ['verify']"),
        ({"ca": "/etc/hostname", "check_hostname": "maybe"}, "check_hostname must be true or false"),
    ],
)
def test_malformed_ssl_extras_fail_naming_the_connection(ssl: Any, named: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "mysql", "host": "db", "login": "u", "password": "p", "schema": "s", "extra": {"ssl": ssl}}
    use(monkeypatch, conn)
    with pytest.raises(ConnectionInvalid) as bad:
        mysql_params(CONN_ID)
    assert named in str(bad.value) and CONN_ID in str(bad.value)


def test_the_ssl_extra_may_be_a_json_string_as_the_mysql_provider_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    ca = os.path.realpath("/etc/hostname")
    conn = {"conn_type": "mysql", "host": "db", "login": "u", "password": "p", "schema": "s",
            "extra": {"ssl": json.dumps({"ca": ca, "check_hostname": True})}}  # fmt: skip
    use(monkeypatch, conn)
    params = mysql_params(CONN_ID)
    assert dict(params.tls) == {"ca": ca, "check_hostname": True}
    assert "sslMode=verify-full" in jdbc_url("db", 3306, "s", tls=params.tls)
