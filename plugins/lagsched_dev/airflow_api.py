"""A small client of Airflow 3's REST API (v2), for the demo and end-to-end tests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

FINISHED = {"success", "failed"}
# Where Airflow's simple auth manager writes the passwords it generates, under AIRFLOW_HOME.
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"


class AirflowAPIError(RuntimeError):
    """The API answered with an error, or a run did not finish in time."""


class AirflowAPI:
    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._username = username
        self._password = password
        self._token: str | None = None

    @classmethod
    def for_simple_auth(cls, base_url: str, airflow_home: Path, username: str = "admin") -> AirflowAPI:
        """Log in with the password the simple auth manager generated for ``username``."""
        path = airflow_home / PASSWORDS_FILE
        passwords = json.loads(path.read_text())
        return cls(base_url, username, passwords[username])

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self._login()}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method, headers=headers)  # noqa: S310
        # A busy API server (a loaded machine) can drop a connection; a read is safe to repeat.
        attempts = 3 if method == "GET" else 1
        for attempt in range(1, attempts + 1):
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - URL is the configured API
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:500]
                raise AirflowAPIError(f"{method} {path} -> HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if attempt == attempts:
                    raise
                time.sleep(2 * attempt)
        return json.loads(raw) if raw else None

    def _login(self) -> str:
        if self._token is None:
            answer = self._request(
                "POST", "/auth/token", {"username": self._username, "password": self._password}, auth=False
            )
            self._token = str(answer["access_token"])
        return self._token

    def get_dag(self, dag_id: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self._request("GET", f"/api/v2/dags/{dag_id}")
        except AirflowAPIError as exc:
            if "HTTP 404" in str(exc):
                return None
            raise
        return result

    def wait_for_dag(self, dag_id: str, timeout_s: float = 120.0, sleep: Callable[[float], None] = time.sleep) -> None:
        """Wait until the DAG processor has parsed ``dag_id``."""
        deadline = time.monotonic() + timeout_s
        while self.get_dag(dag_id) is None:
            if time.monotonic() > deadline:
                raise AirflowAPIError(
                    f"DAG {dag_id!r} did not appear within {timeout_s:.0f} s; check its import errors"
                )
            sleep(2)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        run = self._request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def wait_for_run(
        self,
        dag_id: str,
        run_id: str,
        timeout_s: float = 600.0,
        on_progress: Callable[[list[dict[str, Any]]], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> str:
        """Poll the run until it finishes; returns its final state."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            if on_progress is not None:
                on_progress(self.task_instances(dag_id, run_id))
            if run["state"] in FINISHED:
                return str(run["state"])
            if time.monotonic() > deadline:
                raise AirflowAPIError(f"run {run_id} of {dag_id} still {run['state']} after {timeout_s:.0f} s")
            sleep(3)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        answer = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return list(answer["task_instances"])

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        """A task's XCom value (its return value by default); ``map_index`` for one mapped instance."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        if map_index >= 0:
            path += f"?map_index={map_index}"
        return self._request("GET", path)["value"]

    # -- DAGs and runs --------------------------------------------------------------------------

    def dag_params(self, dag_id: str) -> dict[str, Any]:
        """The DAG's params with their default values (what a scheduled run gets)."""
        details = self._request("GET", f"/api/v2/dags/{dag_id}/details")
        return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in (details.get("params") or {}).items()}

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """Pause or unpause a DAG (a paused DAG starts no run, scheduled or triggered)."""
        self._request("PATCH", f"/api/v2/dags/{dag_id}?update_mask=is_paused", {"is_paused": paused})

    def dag_runs(self, dag_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The DAG's runs, newest first."""
        answer = self._request("GET", f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit={int(limit)}")
        return list(answer["dag_runs"])

    def mark_run(self, dag_id: str, run_id: str, state: str) -> None:
        """Set a run's state (``failed`` or ``success`` stops it: its running tasks are killed)."""
        self._request("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", {"state": state})

    def asset_events(self, uri: str) -> list[dict[str, Any]]:
        """Every event of the asset with ``uri``, oldest first (none when the asset does not exist)."""
        from urllib.parse import quote

        assets = self._request("GET", f"/api/v2/assets?uri_pattern={quote(uri, safe='')}&limit=100")["assets"]
        ids = [a["id"] for a in assets if a["uri"] == uri]
        if not ids:
            return []
        events: list[dict[str, Any]] = []
        while True:
            page = self._request(
                "GET", f"/api/v2/assets/events?asset_id={ids[0]}&order_by=timestamp&limit=100&offset={len(events)}"
            )["asset_events"]
            events += page
            if len(page) < 100:
                return events

    # -- Variables and pools --------------------------------------------------------------------

    def get_variable(self, key: str) -> str | None:
        """A Variable's stored value (text), or None when it is not set."""
        try:
            answer = self._request("GET", f"/api/v2/variables/{key}")
        except AirflowAPIError as exc:
            if "HTTP 404" in str(exc):
                return None
            raise
        return str(answer["value"])

    def set_variable(self, key: str, value: str, description: str | None = None) -> None:
        """Create or replace a Variable (the value is stored as given: JSON text stays text)."""
        body: dict[str, Any] = {"key": key, "value": value}
        if description is not None:
            body["description"] = description
        if self.get_variable(key) is None:
            self._request("POST", "/api/v2/variables", body)
        else:
            self._request("PATCH", f"/api/v2/variables/{key}", body)

    def delete_variable(self, key: str) -> None:
        """Delete a Variable; nothing happens when it is not set."""
        try:
            self._request("DELETE", f"/api/v2/variables/{key}")
        except AirflowAPIError as exc:
            if "HTTP 404" not in str(exc):
                raise

    def get_pool(self, name: str) -> dict[str, Any] | None:
        try:
            answer: dict[str, Any] = self._request("GET", f"/api/v2/pools/{name}")
        except AirflowAPIError as exc:
            if "HTTP 404" in str(exc):
                return None
            raise
        return answer

    def ensure_pool(self, name: str, slots: int, description: str = "") -> bool:
        """Create the pool unless it exists (an existing pool's size is the operator's: kept). True if created."""
        if self.get_pool(name) is not None:
            return False
        self._request("POST", "/api/v2/pools", {"name": name, "slots": slots, "description": description})
        return True
