"""Iceberg tables in an ``s3a://`` warehouse on the stack's real S3 API server (S3Proxy).

Spark writes through Hadoop's S3A (hadoop-aws with the AWS SDK v2 from .local/jars/spark-lake) and
Iceberg's JDBC catalog in MariaDB; pyiceberg then reads the same table through the same catalog
tables and its own S3 client. Credentials reach both only through the environment
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, set by the stack), never through a Spark conf.

Spark runs in a child process (``local[1]``), as a job would: its JVM takes the environment it is
started with, so a wrong secret key can be tried in another child without touching the first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lagsched.adapters.s3a import pyiceberg_s3_properties
from lagsched_dev.stack.config import StackConfig

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ROWS = [(i, f"row-{i}") for i in range(1, 6)]

#: The Spark side, run with ``python -c``; parameters (the JDBC password among them) come on stdin.
SPARK_PROGRAM = r"""
import json, sys
from pyspark.sql import SparkSession

from lagsched.adapters.s3a import s3a_spark_conf

p = json.load(sys.stdin)
c = p["catalog"]
conf = {
    "spark.jars": p["jars"],
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    f"spark.sql.catalog.{c}": "org.apache.iceberg.spark.SparkCatalog",
    f"spark.sql.catalog.{c}.type": "jdbc",
    f"spark.sql.catalog.{c}.uri": p["jdbc_url"],
    f"spark.sql.catalog.{c}.jdbc.user": p["user"],
    f"spark.sql.catalog.{c}.jdbc.password": p["password"],
    f"spark.sql.catalog.{c}.jdbc.schema-version": "V1",
    f"spark.sql.catalog.{c}.warehouse": p["warehouse"],
    **s3a_spark_conf(p["endpoint"]),
}
builder = SparkSession.builder.master("local[1]").appName("test-s3-lake")
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
t = f"{c}.{p['namespace']}.{p['table']}"
spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {c}.{p['namespace']}")
spark.sql(f"CREATE TABLE {t} (id BIGINT, name STRING) USING iceberg")
spark.createDataFrame([tuple(r) for r in p["rows"]], "id BIGINT, name STRING").writeTo(t).append()
rows = [[r.id, r.name] for r in spark.table(t).orderBy("id").collect()]
files = [r.file_path for r in spark.sql(f"SELECT file_path FROM {t}.files").collect()]
print("RESULT " + json.dumps({"rows": rows, "files": files}), flush=True)
spark.stop()
"""


@dataclass(frozen=True)
class Lake:
    """One test's catalog (a name of its own in the lagsched database) and warehouse prefix."""

    catalog: str
    namespace: str
    table: str
    warehouse: str
    endpoint: str
    mysql: Any

    @property
    def sqlalchemy_uri(self) -> str:
        m = self.mysql
        return f"mysql+pymysql://{quote(m.user, safe='')}:{quote(m.password, safe='')}@{m.host}:{m.port}/{m.database}"


@pytest.fixture(scope="module")
def s3_endpoint(stack: StackConfig) -> str:
    """The stack's S3Proxy, which must be up and answering: a test here fails, never skips, without it."""
    from lagsched_dev.stack.services import S3Proxy

    proxy = S3Proxy(stack)
    status = proxy.status()
    if not status.healthy:
        pytest.fail(f"S3Proxy is not up at {proxy.endpoint} (running={status.running}); `lagsched-dev stack up`")
    assert os.environ["LAGSCHED_S3_ENDPOINT"] == proxy.endpoint
    return proxy.endpoint


@pytest.fixture(scope="module")
def lake(stack: StackConfig, s3_endpoint: str) -> Iterator[Lake]:
    from lagsched.adapters.mysql import connect
    from lagsched.connections import mysql_params

    catalog = f"s3t_{uuid.uuid4().hex[:10]}"
    prefix = f"tests/{catalog}"
    lake = Lake(catalog, "ns", "events", f"s3a://lagsched/{prefix}", s3_endpoint, mysql_params())
    yield lake
    # The catalog's rows (this catalog's only) and the objects under its prefix (the backend's folders).
    conn = connect(lake.mysql)
    with conn.cursor() as cur:
        for table in ("iceberg_tables", "iceberg_namespace_properties"):
            cur.execute(f"SHOW TABLES LIKE '{table}'")
            if cur.fetchone():
                cur.execute(f"DELETE FROM {table} WHERE catalog_name = %s", (catalog,))
    conn.commit()
    conn.close()
    shutil.rmtree(stack.home / "s3" / "lagsched" / prefix, ignore_errors=True)


def run_spark(
    lake: Lake, env: Mapping[str, str], *, table: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """SPARK_PROGRAM in a child with ``env``: creates ``table`` (the lake's by default), appends ROWS and
    reads them back."""
    from lagsched.adapters.sink import jdbc_url

    m = lake.mysql
    params = {
        "catalog": lake.catalog,
        "namespace": lake.namespace,
        "table": table or lake.table,
        "warehouse": lake.warehouse,
        "endpoint": lake.endpoint,
        "jars": os.environ["LAGSCHED_SPARK_JARS"],
        "jdbc_url": jdbc_url(m.host, m.port, m.database),
        "user": m.user,
        "password": m.password,
        "rows": ROWS,
    }
    return subprocess.run(
        [sys.executable, "-c", SPARK_PROGRAM],
        input=json.dumps(params),
        env=dict(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def spark_result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"Spark failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def open_catalog(lake: Lake, **overrides: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    properties = {
        "uri": lake.sqlalchemy_uri,
        "warehouse": lake.warehouse,
        "init_catalog_tables": "false",
        **pyiceberg_s3_properties(lake.endpoint),
        **overrides,
    }
    return SqlCatalog(lake.catalog, **properties)


@pytest.fixture(scope="module")
def written(lake: Lake) -> dict[str, Any]:
    """Spark (local[1], S3A, the JDBC catalog) creates the table, appends ROWS and reads them back."""
    return spark_result(run_spark(lake, os.environ))


def test_spark_writes_an_iceberg_table_through_s3a_into_s3proxy(
    stack: StackConfig, lake: Lake, written: dict[str, Any]
) -> None:
    assert written["rows"] == [list(r) for r in ROWS]
    assert written["files"] and all(f.startswith(lake.warehouse + "/") for f in written["files"])
    # The objects went through the S3 API into S3Proxy's filesystem backend (the bucket is a folder).
    backend = stack.home / "s3" / "lagsched" / lake.warehouse.removeprefix("s3a://lagsched/")
    stored = sorted(p.name for p in backend.rglob("*.parquet"))
    assert stored == sorted(f.rsplit("/", 1)[1] for f in written["files"])
    assert any(backend.rglob("*.metadata.json"))


def test_pyiceberg_reads_the_same_table_through_the_same_catalog(lake: Lake, written: dict[str, Any]) -> None:
    table = open_catalog(lake).load_table(f"{lake.namespace}.{lake.table}")
    assert table.metadata_location.startswith(lake.warehouse + "/")
    arrow = table.scan().to_arrow().sort_by("id")
    assert list(zip(arrow.column("id").to_pylist(), arrow.column("name").to_pylist(), strict=True)) == ROWS


def test_a_wrong_secret_key_is_refused_with_a_clear_error(lake: Lake, written: dict[str, Any]) -> None:
    wrong = "not-the-secret-" + uuid.uuid4().hex
    # Creating a table: the catalog (MariaDB) answers, S3Proxy refuses the first object's signature.
    # (A create, not a read: Iceberg retries a failed metadata read for about a minute.)
    proc = run_spark(lake, {**os.environ, "AWS_SECRET_ACCESS_KEY": wrong}, table="denied")
    assert proc.returncode != 0 and "RESULT " not in proc.stdout
    # S3A reports S3Proxy's own refusal (HTTP 403, SignatureDoesNotMatch), not a timeout or a mystery.
    assert "java.nio.file.AccessDeniedException: s3a://lagsched/" in proc.stderr, proc.stderr[-4000:]
    assert "Status Code: 403" in proc.stderr and "SignatureDoesNotMatch" in proc.stderr, proc.stderr[-4000:]

    # pyiceberg with the wrong key: the same refusal through its own S3 client.
    with pytest.raises(OSError, match=r"(?i)ACCESS_DENIED|AccessDenied|SignatureDoesNotMatch|403"):
        open_catalog(lake, **{"s3.secret-access-key": wrong}).load_table(f"{lake.namespace}.{lake.table}")
