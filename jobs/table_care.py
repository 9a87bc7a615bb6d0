"""lagsched's table care: compact, expire, clean one cluster's Iceberg table (docs/table-care.md).

    spark-submit --master local[2] --jars "$LAGSCHED_SPARK_JARS" lagsched/jobs/table_care.py --cluster lagsched_kafka

Run by the ``lagsched_table_care`` DAG, or by hand. The MySQL Connection (the catalog's database)
comes from the environment (``AIRFLOW_CONN_LAGSCHED_MYSQL``); the table's settings from the same
options as the consumer's (``--warehouse`` ...; the DAG passes the cluster's ``sink``); what to do
from ``--settings`` (the Variable ``lagsched_table_care``'s JSON; default: the defaults).

Prints one JSON line (what each step did) last on stdout. Exit 0 on success, 1 on failure (the last
line on stderr says what).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from datetime import UTC, datetime

log = logging.getLogger("lagsched.table_care")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="table_care.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--cluster", required=True, help="registry cluster whose table to care for")
    p.add_argument("--settings", help="the lagsched_table_care Variable's JSON (default: the defaults)")
    p.add_argument("--now", help="ISO time to act as of (default: now); tests and benchmarks close partitions with it")
    from lagsched.core.lake import add_job_arguments

    add_job_arguments(p)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = parse_args(argv)
    try:
        summary = _run(args)
    except Exception as exc:
        log.error("table care failed: %s: %s", type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        print(f"lagsched table care: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary), flush=True)
    return 0


def _run(args: argparse.Namespace) -> dict[str, object]:
    from lagsched.adapters import sink, spark
    from lagsched.adapters.mysql import connect
    from lagsched.adapters.table_care import care_for_table, cluster_tables
    from lagsched.connections import mysql_params
    from lagsched.core.lake import from_job_arguments
    from lagsched.core.names import validate_cluster_name
    from lagsched.core.table_care import parse_table_care

    cluster = validate_cluster_name(args.cluster)
    settings = parse_table_care(args.settings)
    now = datetime.fromisoformat(args.now) if args.now else datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    lake = from_job_arguments(cluster, args, os.environ)
    mysql = mysql_params()
    conf = sink.catalog_conf(
        lake, jdbc_url=sink.jdbc_url(mysql.host, mysql.port, mysql.database), user=mysql.user, password=mysql.password
    )
    log.info("table care of %s in %s as of %s: %s", lake.identifier, lake.warehouse, now.isoformat(), settings)
    conn = connect(mysql)  # the catalog's tables first: care tasks of several clusters start at once
    try:
        sink.ensure_catalog_tables(conn)
    finally:
        conn.close()
    session = spark.session(f"lagsched-table-care-{cluster}", master=None, conf=conf)
    try:
        shared = care_for_table(session, lake, settings, now)
        # The typed and dead-letter tables of the cluster's routes (docs/routing.md), one after another.
        others = [
            care_for_table(session, table, settings, now, shape=shape)
            for table, shape in cluster_tables(session, lake, cluster)
        ]
        return {"cluster": cluster, "settings": settings.as_dict(), **shared, "tables": others}
    finally:
        session.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
