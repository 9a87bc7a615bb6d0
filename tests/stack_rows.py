"""Cleaning up what a test seeded in the stack's own database (tests that run against the page of the
stack's Airflow cannot use a database of their own)."""

from __future__ import annotations

from typing import Any

#: lagsched's tables that hold a cluster's rows, children first.
CLUSTER_TABLES = (
    "scaling_overrides",
    "scaling_decisions",
    "retention_gaps",
    "topic_owners",
    "partition_ends",
    "late_records",
    "topic_partitions",
)


def delete_cluster_rows(cur: Any, cluster: str) -> None:
    """Delete every row of ``cluster`` from lagsched's tables (``cur``: a cursor; the caller commits)."""
    for table in CLUSTER_TABLES:
        cur.execute(
            f"DELETE FROM {table} WHERE topic_id IN (SELECT topic_id FROM topics WHERE cluster = %s)",
            (cluster,),
        )
    cur.execute("DELETE FROM topics WHERE cluster = %s", (cluster,))


def delete_topic_rows(cur: Any, topic_id: str) -> None:
    """Delete one topic and every row that refers to it (``cur``: a cursor; the caller commits)."""
    for table in CLUSTER_TABLES:
        cur.execute(f"DELETE FROM {table} WHERE topic_id = %s", (topic_id,))
    cur.execute("DELETE FROM topics WHERE topic_id = %s", (topic_id,))
