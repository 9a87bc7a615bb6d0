"""The task several lagsched DAGs begin with: `clusters`, the clusters a run covers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import task

__all__ = ["clusters"]


@task(execution_timeout=timedelta(seconds=20))
def clusters() -> list[dict[str, Any]]:
    """The clusters this run covers: the Variable ``lagsched_clusters`` (absent: the cluster
    ``lagsched_kafka``, every topic), or only the one the ``cluster`` param names. A malformed
    Variable or an unknown cluster fails the run at once, naming what is wrong."""
    from airflow.sdk import Variable, get_current_context

    from lagsched.airflow.tasks import fail_fast, run_resolve_clusters

    with fail_fast():
        return run_resolve_clusters(
            Variable.get("lagsched_clusters", default=None), str(get_current_context()["params"]["cluster"])
        )
