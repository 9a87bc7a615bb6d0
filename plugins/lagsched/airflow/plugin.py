"""Airflow plugin: the lagsched page in Airflow's UI (docs/ui.md).

Registered through the ``airflow.plugins`` entry point of the installed ``lagsched`` distribution
(pyproject.toml), so ``pip install`` of the wheel is all a deployment does; Airflow reads entry
points when a process starts. It mounts `lagsched.ui.app` at ``/lagsched`` in the API server and
adds a "lagsched" entry to the navigation that shows the page inside Airflow (an iframe at
``/plugin/lagsched``). Every route of the app checks Airflow's own login and permissions.

Every Airflow process loads the plugins (task runners too, for macros and listeners), so the app
is built on its first request, not at import: a task never pays for importing FastAPI and the API
server's security modules.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/lagsched"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyLagschedApp:
    """An ASGI app that builds `lagsched.ui.app.create_app` on its first request and delegates to it."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            from lagsched.ui.app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)


class LagschedPlugin(AirflowPlugin):
    """Mounts the lagsched app and its navigation entry."""

    name = "lagsched"
    fastapi_apps = [  # noqa: RUF012 - Airflow reads these class attributes
        {"app": LazyLagschedApp(), "url_prefix": URL_PREFIX, "name": "lagsched"},
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "lagsched",
            # Relative, so the page renders inside Airflow's UI (same origin: the login cookie applies).
            "href": f"{URL_PREFIX}/",
            "url_route": "lagsched",
            "destination": "nav",
            "nav_top_level": True,
            # Same origin, so the browser sends the login cookie the icon route checks.
            "icon": f"{URL_PREFIX}/static/icon.svg",
            "icon_dark_mode": f"{URL_PREFIX}/static/icon-dark.svg",
        },
    ]
