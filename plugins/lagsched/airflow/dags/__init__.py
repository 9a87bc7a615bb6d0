"""lagsched's DAGs, for a DAGs folder of one-line files (docs/install.md).

Each name of this package builds its DAG when it is imported, so a DAG file is one line::

    from lagsched.airflow.dags import lagsched_consume

Airflow finds the DAG in that file's module and files it under that file; a DAGs folder lists the
lagsched DAGs it wants, one file each (``lagsched-dev`` copies none of them: the repository's
``dags/`` holds them all). Each import builds a new DAG, and importing the package builds none.

The DAGs are defined in the modules of this package (``lagsched.airflow.dags.consume`` ...), one per
DAG, each a ``@dag`` function named after its ``dag_id``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: dag_id -> the module of this package that defines it (as a @dag function of the same name).
DAG_MODULES = {
    "lagsched_setup": "setup",
    "lagsched_topic_sync": "topic_sync",
    "lagsched_lag_monitor": "lag_monitor",
    "lagsched_scaling_evaluator": "scaling_evaluator",
    "lagsched_consume": "consume",
    "lagsched_override": "override",
    "lagsched_maintenance": "maintenance",
    "lagsched_table_care": "table_care",
}

__all__ = [
    "lagsched_consume",
    "lagsched_lag_monitor",
    "lagsched_maintenance",
    "lagsched_override",
    "lagsched_scaling_evaluator",
    "lagsched_setup",
    "lagsched_table_care",
    "lagsched_topic_sync",
]


def __getattr__(name: str) -> Any:
    """``from lagsched.airflow.dags import <dag_id>``: a new DAG, built in the importing module."""
    module = DAG_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no DAG {name!r}; its DAGs: {', '.join(sorted(DAG_MODULES))}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)()


def __dir__() -> list[str]:
    return sorted([*globals(), *DAG_MODULES])
