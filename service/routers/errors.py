"""RFC 9457 problem details for every error the service returns.

``model/`` and ``formulation/`` raise typed errors; this maps each to an
``application/problem+json`` response naming the field or constraint at fault.
Nothing a client sends produces a stack trace or a bare 500.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DataError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from formulation.infeasible import InfeasibleError
from formulation.request import field_path
from model.errors import InputError, NotFoundError, PdwattError

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"

# The body of every error response, for the OpenAPI document (self-contained: no $ref).
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "description": "each field at fault and why",
            "items": {
                "type": "object",
                "required": ["field", "reason"],
                "properties": {"field": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
        "known": {"type": "array", "items": {"type": "string"}, "description": "known names"},
        "conflicts": {
            "type": "array",
            "items": {"type": "object"},
            "description": "infeasible: the periods and constraints responsible",
        },
    },
}
_PROBLEM_DOCS = {
    401: "missing or wrong X-API-Key (only when the server has an API key)",
    404: "no such resource",
    409: "the idempotency key was used for another request",
    413: "request body larger than the server accepts",
    422: "invalid request, unknown name, or infeasible problem",
    429: "every solver worker is busy; retry after Retry-After seconds",
    503: "a solver worker died, memory ran out, or the database is unavailable; "
    "retry after Retry-After seconds",
}
#: Retry-After (seconds) of the 503s raised outside a route (database, memory)
RETRY_AFTER_S = 5


def problem_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, as RFC 9457 problem details."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        out[code] = {
            "description": _PROBLEM_DOCS[code],
            "content": {PROBLEM: {"schema": PROBLEM_SCHEMA}},
        }
        if code in (429, 503):
            out[code]["headers"] = {
                "Retry-After": {"description": "seconds", "schema": {"type": "integer"}}
            }
    return out


def problem(
    status: int,
    title: str,
    detail: str,
    type_: str = "about:blank",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {"type": type_, "title": title, "status": status, "detail": detail}
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


class Problem(Exception):
    """A problem a use case answers as it is: raised anywhere below a route, answered
    by :func:`install`'s handler with these fields (``extra``: ``errors`` naming the
    field at fault, and any other member)."""

    def __init__(
        self, status: int, title: str, detail: str, type_: str = "about:blank", **extra: Any
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type_
        self.extra = extra


def _field_error(e: Any) -> dict[str, str]:
    if e.get("type") == "json_invalid":  # loc is ("body", character offset), not a field
        err = (e.get("ctx") or {}).get("error")
        return {"field": "body", "reason": f"not valid JSON: {err}" if err else "not valid JSON"}
    # a validator's own reason, without the "Value error, " pydantic puts before it
    reason = str(e.get("msg", "")).removeprefix("Value error, ")
    return {"field": field_path(e.get("loc", ())), "reason": reason}


def unavailable(detail: str) -> JSONResponse:
    """503 problem with Retry-After."""
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    return problem(503, "Service Unavailable", detail, headers=headers)


def _leaf_routes(routes: Any) -> Any:
    for route in routes:
        inner = getattr(route, "original_router", None)  # an included router
        if inner is not None:
            yield from _leaf_routes(inner.routes)
        else:
            yield route


def allowed_methods(app: FastAPI, path: str) -> set[str]:
    """Every method some route serves at ``path``, OPTIONS included."""
    methods = {"OPTIONS"}
    for route in _leaf_routes(app.router.routes):
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(path):
            methods |= set(getattr(route, "methods", None) or ())
    return methods


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_field_error(e) for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "reason": "invalid"}
        return problem(
            422,
            "Invalid request",
            f"{first['field']}: {first['reason']}",
            "/problems/validation",
            errors=errors,
        )

    @app.exception_handler(Problem)
    async def _problem(_: Request, exc: Problem) -> JSONResponse:
        return problem(exc.status, exc.title, exc.detail, exc.type, **exc.extra)

    @app.exception_handler(InputError)
    async def _input(_: Request, exc: InputError) -> JSONResponse:
        errors = [{"field": exc.field, "reason": exc.reason}]
        extra: dict[str, Any]
        if isinstance(exc, NotFoundError):  # a name not in the catalog: the known ones
            title, kind, extra = f"Unknown {exc.field}", "unknown-name", {"known": exc.known}
        else:
            title, kind, extra = "Invalid input", "invalid-input", {}
        return problem(422, title, str(exc), f"/problems/{kind}", errors=errors, **extra)

    @app.exception_handler(InfeasibleError)
    async def _infeasible(_: Request, exc: InfeasibleError) -> JSONResponse:
        return problem(
            422,
            "Infeasible schedule problem",
            str(exc),
            "/problems/infeasible",
            conflicts=exc.conflicts,
        )

    @app.exception_handler(PdwattError)
    async def _pdwatt(_: Request, exc: PdwattError) -> JSONResponse:
        return problem(422, "Cannot answer", str(exc), "/problems/unprocessable")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:
            # the framework names only the first route whose path matched; a path
            # served by several routes (GET and POST /v1/sites) allows all of them
            allow = ", ".join(sorted(allowed_methods(request.app, request.url.path)))
            if request.method == "OPTIONS":
                return Response(status_code=204, headers={"Allow": allow})
            detail = f"{request.method} is not allowed here; allowed: {allow}"
            return problem(405, _title(405), detail, headers={"Allow": allow})
        if exc.status_code == 400:  # the framework could not parse the body (e.g. not UTF-8)
            reason = str(exc.detail)
            return problem(
                422,
                "Invalid request",
                f"body: {reason}",
                "/problems/validation",
                errors=[{"field": "body", "reason": reason}],
            )
        headers = dict(exc.headers) if exc.headers else None
        return problem(exc.status_code, _title(exc.status_code), str(exc.detail), headers=headers)

    @app.exception_handler(DataError)
    async def _unstorable(_: Request, exc: DataError) -> JSONResponse:
        # a value the database refuses (the request's fields that could be are checked
        # first, naming the field): the request's fault, not an outage to retry
        log.error("database refused a value: %s", str(exc.orig).splitlines()[0])
        return problem(
            422,
            "Invalid request",
            "a value of this request cannot be stored by the database",
            "/problems/validation",
            errors=[{"field": "body", "reason": "a value the database cannot store"}],
        )

    @app.exception_handler(SQLAlchemyError)
    async def _database(_: Request, exc: SQLAlchemyError) -> JSONResponse:
        log.error("database error: %s", exc.__class__.__name__)
        return unavailable("the database is unavailable; retry later")

    @app.exception_handler(MemoryError)
    async def _memory(_: Request, exc: MemoryError) -> JSONResponse:
        log.error("out of memory answering a request")
        return unavailable(
            "the server ran out of memory for this request; retry later or send a smaller one"
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return problem(500, "Internal error", "an unexpected error occurred; it has been logged")


def _title(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
