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
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from formulation.solve import InfeasibleError
from model.errors import InputError, NotFoundError, PdwattError

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"


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


def _loc(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [p for p in loc if p not in ("body", "query", "path")]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": _loc(e.get("loc", ())), "reason": e.get("msg", "")} for e in exc.errors()
        ]
        first = errors[0] if errors else {"field": "body", "reason": "invalid"}
        return problem(
            422,
            "Invalid request",
            f"{first['field']}: {first['reason']}",
            "/problems/validation",
            errors=errors,
        )

    @app.exception_handler(NotFoundError)
    async def _not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return problem(
            422,
            f"Unknown {exc.field}",
            str(exc),
            "/problems/unknown-name",
            errors=[{"field": exc.field, "reason": exc.reason}],
            known=exc.known,
        )

    @app.exception_handler(InputError)
    async def _input(_: Request, exc: InputError) -> JSONResponse:
        return problem(
            422,
            "Invalid input",
            str(exc),
            "/problems/invalid-input",
            errors=[{"field": exc.field, "reason": exc.reason}],
        )

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
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers) if exc.headers else None
        return problem(exc.status_code, _title(exc.status_code), str(exc.detail), headers=headers)

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
