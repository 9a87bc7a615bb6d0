"""lagsched as an Airflow provider: the Connection types it adds and the hooks that serve them.

Airflow finds it through the ``apache_airflow_provider`` entry point of the installed ``lagsched``
distribution (pyproject.toml), as it finds any provider; the API server, scheduler and workers read
entry points at start, so they need a restart after lagsched is (re)installed.

- ``mysql``: `lagsched.airflow.hooks.mysql.MySQLHook` (PyMySQL). Providers are registered in the order of
  their package names, and the first to claim a type keeps it: with the MySQL provider installed,
  its hook serves ``mysql`` instead (and Airflow logs that lagsched's was not registered); lagsched
  reads a ``mysql`` Connection the same way either way.
- ``lagsched_redis``: `lagsched.airflow.hooks.redis.RedisHook`, the Redis provider's hook with a Test
  button. ``redis`` belongs to the Redis provider, whose hook has no ``test_connection``.
- ``lagsched_schema_registry``: `lagsched.airflow.hooks.schema_registry.SchemaRegistryHook`, a
  Confluent-compatible schema registry (Confluent's, Apicurio, Karapace, Redpanda's), with a Test button.
"""

from __future__ import annotations

from typing import Any

from lagsched import __version__

__all__ = ["get_provider_info"]


def get_provider_info() -> dict[str, Any]:
    """The provider description Airflow's ProvidersManager reads (its provider_info schema)."""
    return {
        "package-name": "lagsched",
        "name": "lagsched",
        "description": (
            "A lag-aware scheduler for Kafka consumers: Connection types for its MySQL, Redis and schema registry."
        ),
        "versions": [__version__],
        "connection-types": [
            {
                "connection-type": "mysql",
                "hook-class-name": "lagsched.airflow.hooks.mysql.MySQLHook",
                "hook-name": "MySQL (lagsched, PyMySQL)",
                "ui-field-behaviour": {
                    "hidden-fields": ["extra"],
                    "relabeling": {"schema": "Database"},
                    "placeholders": {"host": "db.example.com", "port": "3306", "schema": "lagsched"},
                },
            },
            {
                "connection-type": "lagsched_redis",
                "hook-class-name": "lagsched.airflow.hooks.redis.RedisHook",
                "hook-name": "Redis (lagsched)",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "extra"],
                    "relabeling": {},
                    "placeholders": {"host": "127.0.0.1", "port": "6379"},
                },
                "conn-fields": {
                    "db": {"label": "DB", "schema": {"type": ["integer", "null"], "default": 0}},
                },
            },
            {
                "connection-type": "lagsched_schema_registry",
                "hook-class-name": "lagsched.airflow.hooks.schema_registry.SchemaRegistryHook",
                "hook-name": "Schema registry (lagsched)",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {"schema": "API path", "login": "Username (basic auth)"},
                    "placeholders": {
                        "host": "registry.example.com or https://registry.example.com",
                        "port": "8081",
                        "schema": "apis/ccompat/v7 for Apicurio; empty for Confluent's registry",
                        "extra": '{"ssl": {"ca": "/etc/ssl/registry-ca.pem"}}',
                    },
                },
            },
        ],
    }
