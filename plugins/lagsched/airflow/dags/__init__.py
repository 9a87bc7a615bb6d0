"""lagsched's DAGs, one module per DAG, each a ``@dag`` function named after its ``dag_id``.

A DAGs folder holds one short file per DAG it wants, which creates it the way any Airflow DAG file
does (the repository's ``dags/`` holds them all; docs/install.md)::

    from lagsched.airflow.dags.consume import lagsched_consume

    lagsched_consume()

The definitions come with the installed package, so upgrading lagsched upgrades the DAGs; importing
this package creates no DAG.
"""

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
    "lagsched_replay": "replay",
    "lagsched_hours": "hours",
    "lagsched_restatements": "restatements",
}
