"""The workflows: topic sync, lag monitor, scaling, the consume plan and the slot (slot, batch), overrides,
maintenance, status.

Each wires adapters to the pure core and holds no SQL and no client construction of its own: the
repositories in `lagsched.adapters` own the tables, `lagsched.airflow.tasks` builds the clients.
"""
