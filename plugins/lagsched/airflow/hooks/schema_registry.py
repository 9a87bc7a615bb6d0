"""A hook for the schema registry Connection (conn type ``lagsched_schema_registry``), with a Test button."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from lagsched.connections import SCHEMA_REGISTRY_CONN_ID, SchemaRegistryParams

__all__ = ["SchemaRegistryHook"]


class SchemaRegistryHook(BaseHook):
    """The lagsched_schema_registry Connection: a Confluent-compatible registry (host or URL, port,
    schema = the API's path, login and password for basic auth, extra ``ssl``).

    `get_conn` returns lagsched's `RegistryClient`; `test_connection` asks the registry for its
    compatibility level and subjects, or says what failed and where to fix it.
    """

    conn_name_attr = "schema_registry_conn_id"
    default_conn_name = SCHEMA_REGISTRY_CONN_ID
    conn_type = "lagsched_schema_registry"
    hook_name = "Schema registry (lagsched)"

    def __init__(self, schema_registry_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.schema_registry_conn_id = schema_registry_conn_id

    def get_params(self) -> SchemaRegistryParams:
        """The Connection's settings, resolved now through Airflow's secrets backends (never cached)."""
        from lagsched.connections import schema_registry_params

        return schema_registry_params(self.schema_registry_conn_id)

    def get_conn(self) -> Any:
        """A `lagsched.adapters.schema_registry.RegistryClient` for the Connection."""
        from lagsched.adapters.schema_registry import RegistryClient

        return RegistryClient(self.get_params())

    def test_connection(self) -> tuple[bool, str]:
        """(ok, message) for Airflow's Test button: the registry's answer, or what failed."""
        from lagsched.adapters.health import check_schema_registry
        from lagsched.connections import where_schema_registry
        from lagsched.core.errors import LagschedError

        try:
            params = self.get_params()
            found = check_schema_registry(params)
        except LagschedError as exc:  # every failure names where it points, never the password
            # The Test button tests a form under a random id: the id would only confuse; the rest says it all.
            return False, str(exc).removeprefix(f"Connection {self.schema_registry_conn_id!r} ")
        return True, (
            f"Connected to {where_schema_registry(params)}: {found['subjects']} subject(s), "
            f"compatibility {found['compatibility']}"
        )
