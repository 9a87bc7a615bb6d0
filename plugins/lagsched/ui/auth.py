"""Access checks of the lagsched app: Airflow's own, and a scrape token for the metrics endpoint.

Airflow mounts a plugin's FastAPI app as it is, with no authentication of its own, so every route
here declares one of these dependencies:

* `require_airflow_view`: the caller is an Airflow user (the UI's ``_token`` cookie, or an
  ``Authorization: Bearer <JWT>`` from ``POST /auth/token``) whom the auth manager lets see plugin
  views (``AccessView.PLUGINS``). No login: 401; an invalid token or no permission: 403.
* `require_metrics_access`: the same, or ``Authorization: Bearer <token>`` equal to the
  ``LAGSCHED_METRICS_TOKEN`` environment variable of the API server (for a Prometheus server that has
  no Airflow user). Unset, only Airflow users get in.
"""

from __future__ import annotations

import hmac
import os
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import bearer_scheme, get_user, requires_access_view
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials

__all__ = ["METRICS_TOKEN_ENV", "require_airflow_view", "require_metrics_access"]

METRICS_TOKEN_ENV = "LAGSCHED_METRICS_TOKEN"  # noqa: S105 - the variable's name, not a secret

#: Airflow's view check for plugin pages: the same rule as the UI's "Plugins" page.
require_airflow_view: Any = requires_access_view(AccessView.PLUGINS)


def _is_metrics_token(credentials: HTTPAuthorizationCredentials | None) -> bool:
    expected = os.environ.get(METRICS_TOKEN_ENV, "")
    if not expected or credentials is None or credentials.scheme.lower() != "bearer":
        return False
    # Constant time, so the comparison does not reveal how much of a guess was right.
    return hmac.compare_digest(credentials.credentials.encode(), expected.encode())


async def require_metrics_access(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> None:
    """Let in the scrape token, else whoever `require_airflow_view` lets in."""
    if _is_metrics_token(credentials):
        return
    from airflow.api_fastapi.app import get_auth_manager

    user = await get_user(request, None, credentials)
    if not get_auth_manager().is_authorized_view(access_view=AccessView.PLUGINS, user=user):
        raise HTTPException(status_code=status.HTTP_403_FORBIDDEN, detail="Forbidden")
