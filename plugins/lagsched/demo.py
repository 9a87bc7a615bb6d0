"""`make demo`: the local stack plus Airflow, then lagsched's DAGs run the way a user would run them."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from lagsched import stack
from lagsched.adapters.airflow_api import AirflowAPI, AirflowAPIError
from lagsched.stack.config import load
from lagsched.stack.process import ServiceError

DEMO_DAGS = ["lagsched_setup"]


def _progress_printer() -> Any:
    last: dict[str, str] = {}

    def show(tis: list[dict[str, Any]]) -> None:
        for ti in tis:
            state = ti.get("state") or "scheduled"
            if last.get(ti["task_id"]) != state:
                last[ti["task_id"]] = state
                print(f"    {ti['task_id']:<24} {state}", flush=True)

    return show


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = load()
    print("==> starting Kafka, MariaDB, Redis and Airflow (first start takes ~30 s)", flush=True)
    try:
        stack.up(cfg, airflow=True)
    except ServiceError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    url = f"http://127.0.0.1:{cfg.airflow_port}"
    api = AirflowAPI.for_simple_auth(url, cfg.airflow_home)
    failed = []
    for dag_id in DEMO_DAGS:
        try:
            api.wait_for_dag(dag_id)
            run_id = api.trigger(dag_id)
            print(f"==> triggered {dag_id} (run {run_id})", flush=True)
            started = time.monotonic()
            state = api.wait_for_run(dag_id, run_id, on_progress=_progress_printer())
        except AirflowAPIError as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 1
        print(f"==> {dag_id}: {state} in {time.monotonic() - started:.0f} s", flush=True)
        if state != "success":
            failed.append(dag_id)
    password = (cfg.airflow_home / "simple_auth_manager_passwords.json.generated").name
    print(
        f"""
Airflow UI:  {url}   (user: admin, password: in {cfg.airflow_home / password})
DAGs:        {url}/dags?tags=lagsched
Logs:        {cfg.logs}/   (services)  {cfg.airflow_home / "logs"}/  (task logs)
Stop it all: make stack-down
""",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
