"""The workflows: topic sync, lag monitor, scaling (and the consumer to come).

Each wires adapters to the pure core and holds no SQL and no client construction of its own: the
repositories in `lagsched.adapters` own the tables, `lagsched.airflow.tasks` builds the clients.
"""
