"""Dependencies shared by the routers (``Annotated`` aliases)."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError

from service.runtime.pool import SolvePool
from service.runtime.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_pool(request: Request) -> SolvePool:
    pool: SolvePool = request.app.state.pool
    return pool


SettingsDep = Annotated[Settings, Depends(get_settings)]
PoolDep = Annotated[SolvePool, Depends(get_pool)]


def require_api_key(
    settings: SettingsDep, x_api_key: Annotated[str | None, Header()] = None
) -> None:
    """When PDWATT_API_KEY is set, every POST needs the header ``X-API-Key``."""
    if settings.api_key is None:
        return
    # the header's bytes as sent (ASGI decodes them as latin-1), against the UTF-8 key
    given = None if x_api_key is None else x_api_key.encode("latin-1", "replace")
    if given is None or not hmac.compare_digest(given, settings.api_key.encode("utf-8")):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong X-API-Key header",
            headers={"WWW-Authenticate": "ApiKey"},
        )


ApiKey = Depends(require_api_key)


def _query_names(route: Any) -> frozenset[str]:
    """The query parameters a route takes, its own and its dependencies', found once per
    route (they are fixed when it is declared) and kept on it (routes are not
    hashable)."""
    kept = getattr(route, "query_names", None)
    if isinstance(kept, frozenset):
        return kept
    known: set[str] = set()
    todo = [getattr(route, "dependant", None)]
    while todo:
        d = todo.pop()
        if d is not None:
            known.update(p.alias for p in d.query_params)
            todo.extend(d.dependencies)
    route.query_names = frozenset(known)
    return route.query_names


def known_query(request: Request) -> None:
    """A ``/v1`` route's query names only its own parameters: an unknown one (a typo such
    as ``?replan_=job``) is refused naming it, not ignored."""
    route = request.scope.get("route")
    if route is None or not request.url.path.startswith("/v1/"):
        return
    known = _query_names(route)
    for key in request.query_params:
        if key not in known:
            accepted = ", ".join(sorted(known)) or "none"
            raise RequestValidationError(
                [{"type": "extra_forbidden", "loc": ("query", key),
                  "msg": f"unknown query parameter; this route takes: {accepted}",
                  "input": request.query_params[key]}]
            )  # fmt: skip
