"""The synchronous routes of the use cases, one per row with a route
(:mod:`service.usecases.table`): ``POST /v1/capacity``, ``POST /v1/front``, ``POST
/v1/schedule``, ``POST /v1/demand-response``, ``POST /v1/flexibility``.

Each checks its request as a job of its kind is checked, runs the use case in the solver
pool (429 when every worker is busy, 503 when the worker died; a configuration's
capacity, milliseconds of work, in a thread of this process) and answers JSON, or a CSV
table or a PNG chart where the use case has one (``?format=``).
"""

from __future__ import annotations

import inspect
import io
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from model.errors import InputError
from service.routers.busy import run_or_429
from service.routers.deps import ApiKey, PoolDep, SettingsDep
from service.routers.errors import problem_responses
from service.runtime.pool import SolvePool
from service.runtime.settings import Settings
from service.usecases.rows import Context, Route, UseCase
from service.usecases.table import USE_CASES, observed, run

router = APIRouter(prefix="/v1", dependencies=[ApiKey])


def _png(uc: UseCase, result: dict[str, Any]) -> bytes:
    assert uc.chart is not None
    buf = io.BytesIO()
    uc.chart(result, buf)
    return buf.getvalue()


async def _answer(
    uc: UseCase, req: BaseModel, settings: Settings, pool: SolvePool, fmt: str
) -> Any:
    route: Route | None = uc.route
    assert route is not None
    checked = await run_in_threadpool(uc.check, req, settings, "")
    t0 = time.perf_counter()
    ctx = Context(pool.memory_budget_mb, settings.kernels)
    if route.runs_in == "thread":
        result = await run_in_threadpool(run, uc.kind, checked, ctx)
    else:
        result = await run_or_429(pool, settings.retry_after_s, run, uc.kind, checked, ctx)
    observed(uc, t0, result)
    if fmt == "csv" and uc.csv is not None:
        return Response(uc.csv(result), media_type="text/csv")
    if fmt == "png":
        return Response(await run_in_threadpool(_png, uc, result), media_type="image/png")
    try:
        return JSONResponse(result)
    except ValueError:  # an overflowed total: extreme but finite inputs
        raise InputError(
            "body", "the schedule's totals overflow (not finite); use smaller values"
        ) from None


def _add_route(uc: UseCase) -> None:
    """``POST /v1{path}`` taking the use case's request, and ``?format=`` when it
    answers more than JSON."""
    route = uc.route
    assert route is not None

    async def endpoint(
        req: Any,
        settings: SettingsDep,
        pool: PoolDep,
        format: str = "json",  # noqa: A002
    ) -> Any:
        return await _answer(uc, req, settings, pool, format)

    params = inspect.signature(endpoint).parameters
    signature = [
        params["req"].replace(annotation=uc.request),
        params["settings"].replace(annotation=SettingsDep),
        params["pool"].replace(annotation=PoolDep),
    ]
    if len(uc.formats) > 1:
        fmt: Any = Literal[uc.formats]  # the use case's formats
        signature.append(
            params["format"].replace(
                annotation=Annotated[fmt, Query(description="response format")], default="json"
            )
        )
    endpoint.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    media: dict[str, Any] = {"text/csv": {}} if uc.csv else {}
    if uc.chart:
        media["image/png"] = {}
    busy = (429, 503) if route.runs_in == "pool" else ()
    router.add_api_route(
        route.path,
        endpoint,
        methods=["POST"],
        name=route.name,
        tags=[route.tag],
        description=route.doc,
        response_model=route.response,
        responses={
            **({200: {"content": media}} if media else {}),
            **problem_responses(401, 413, 422, *busy),
        },
    )


for _uc in USE_CASES.values():
    if _uc.route is not None:
        _add_route(_uc)
