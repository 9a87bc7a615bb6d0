"""The lagsched app: the page, its JSON routes and the Prometheus endpoint (docs/ui.md).

Routes, relative to where Airflow mounts the app (``/lagsched`` by `lagsched_plugin`):

==========================  ===============================================================  ==========
route                       what                                                             access
==========================  ===============================================================  ==========
``GET /``                   the page (HTML; it fetches the JSON below every 10 s)            Airflow
``GET /static/<file>``      the page's JS and CSS, the navigation icon                       Airflow
``GET /api/clusters``       registry clusters with an enabled topic                          Airflow
``GET /api/status``         `ClusterStatus.as_dict` of ``?cluster=`` (default: the first)    Airflow
``GET /api/history``        chart data of ``?topic=`` in ``?cluster=``                       Airflow
``GET /metrics``            Prometheus text format, every cluster                            Airflow or
                                                                                             scrape token
==========================  ===============================================================  ==========

Routes are plain ``def``: FastAPI runs them in its thread pool, so the blocking MySQL and Redis
calls never hold the API server's event loop. A failing MySQL or Redis answers 503 with the
message of the `ConnectionFailure` (it names the Connection, never a password).
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from lagsched.core.errors import LagschedError, TopicNameError
from lagsched.ui.auth import require_airflow_view, require_metrics_access
from lagsched.ui.sources import status_sources

__all__ = ["DEFAULT_CLUSTER", "create_app"]

#: The DAGs' default cluster (the Kafka Connection id); shown first when it has topics.
DEFAULT_CLUSTER = "lagsched_kafka"
STATIC_FILES = {
    "lagsched.js": "text/javascript; charset=utf-8",
    "ticks.js": "text/javascript; charset=utf-8",
    "lagsched.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
    "icon-dark.svg": "image/svg+xml",
}
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _static(name: str) -> str:
    return resources.files("lagsched.ui").joinpath("static", name).read_text(encoding="utf-8")


def _unavailable(exc: LagschedError) -> HTTPException:
    return HTTPException(status_code=503, detail=str(exc))


def _pick_cluster(known: list[str], asked: str | None) -> str:
    from lagsched.core.names import validate_cluster_name

    if asked:
        return validate_cluster_name(asked)
    if DEFAULT_CLUSTER in known or not known:
        return DEFAULT_CLUSTER
    return known[0]


def create_app() -> FastAPI:
    """The app, every route behind an access check (see the module docstring)."""
    app = FastAPI(
        title="lagsched",
        description="Lag, scaling and assignment of lagsched's Kafka consumers.",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    airflow_user = [Depends(require_airflow_view)]

    @app.exception_handler(TopicNameError)
    def _bad_name(request: Request, exc: TopicNameError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.get("/", response_class=HTMLResponse, dependencies=airflow_user)
    def page(request: Request) -> HTMLResponse:
        # The base makes the page's relative URLs resolve under the mount point whether it was
        # opened as /lagsched or /lagsched/, and under Airflow's [api] base_url path if any.
        base = html.escape(str(request.scope.get("root_path", "")).rstrip("/") + "/", quote=True)
        body = _static("index.html").replace("{{BASE}}", base)
        return HTMLResponse(body, headers={"Cache-Control": "no-store"})

    @app.get("/static/{name}", dependencies=airflow_user)
    def static(name: str) -> Response:
        if name not in STATIC_FILES:
            raise HTTPException(status_code=404, detail=f"no static file {name!r}")
        return Response(_static(name), media_type=STATIC_FILES[name], headers={"Cache-Control": "no-cache"})

    @app.get("/api/clusters", dependencies=airflow_user)
    def api_clusters() -> dict[str, Any]:
        from lagsched.workflows.status import list_clusters

        try:
            with status_sources() as (mysql, _redis):
                known = list_clusters(mysql)
        except LagschedError as exc:
            raise _unavailable(exc) from exc
        return {"clusters": known, "default": _pick_cluster(known, None)}

    @app.get("/api/status", dependencies=airflow_user)
    def api_status(
        cluster: str | None = Query(default=None, max_length=255),
        slot_timeout_s: float = Query(default=60.0, gt=0, le=86_400),
    ) -> dict[str, Any]:
        from lagsched.workflows.status import cluster_status, list_clusters

        try:
            with status_sources() as (mysql, redis):
                known = list_clusters(mysql)
                chosen = _pick_cluster(known, cluster)
                status = cluster_status(mysql, redis, chosen, datetime.now(tz=UTC), slot_timeout_s=slot_timeout_s)
        except TopicNameError:
            raise
        except LagschedError as exc:
            raise _unavailable(exc) from exc
        return status.as_dict() | {"clusters": known}

    @app.get("/api/history", dependencies=airflow_user)
    def api_history(
        topic: str = Query(max_length=249),
        cluster: str | None = Query(default=None, max_length=255),
    ) -> dict[str, Any]:
        from lagsched.workflows.status import lag_history, list_clusters

        try:
            with status_sources() as (mysql, redis):
                chosen = _pick_cluster(list_clusters(mysql), cluster)
                return lag_history(redis, chosen, topic, mysql=mysql, now=datetime.now(tz=UTC))
        except TopicNameError:
            raise
        except LagschedError as exc:
            raise _unavailable(exc) from exc

    @app.get("/metrics", dependencies=[Depends(require_metrics_access)])
    def prometheus() -> PlainTextResponse:
        from lagsched.core.status import render_prometheus
        from lagsched.workflows.status import metrics

        try:
            with status_sources() as (mysql, redis):
                text = render_prometheus(metrics(mysql, redis, datetime.now(tz=UTC)))
        except LagschedError as exc:
            raise _unavailable(exc) from exc
        return PlainTextResponse(text, media_type=PROMETHEUS_CONTENT_TYPE)

    return app
