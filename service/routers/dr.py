"""POST /v1/demand-response and POST /v1/flexibility: what a DR event costs the site,
and the site's flexibility curve (served demand vs. site power cap)."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from service import work_dr
from service.deps import ApiKey, PoolDep, SettingsDep
from service.errors import problem_responses
from service.limits import check_demand_response_limits, check_flexibility_limits
from service.pool import SolvePool, run_or_429
from service.schemas import dump
from service.schemas_dr import (
    DemandResponseRequest,
    DemandResponseResponse,
    FlexibilityRequest,
    FlexibilityResponse,
)
from service.settings import Settings

router = APIRouter(
    prefix="/v1",
    tags=["demand response"],
    dependencies=[ApiKey],
    responses=problem_responses(401, 413, 422, 429, 503),
)


async def _run(pool: SolvePool, settings: Settings, fn: Callable[..., Any], body: Any) -> Any:
    return await run_or_429(
        pool, settings.retry_after_s, fn, body, pool.memory_budget_mb, settings.kernels
    )


def _png(draw: Callable[[Any, Any], None], result: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    draw(result, buf)
    return buf.getvalue()


FormatQuery = Annotated[Literal["json", "png"], Query(description="response format")]


@router.post(
    "/demand-response",
    response_model=DemandResponseResponse,
    responses={200: {"content": {"image/png": {}}}},
)
async def demand_response(
    req: DemandResponseRequest,
    settings: SettingsDep,
    pool: PoolDep,
    format: FormatQuery = "json",  # noqa: A002
) -> Any:
    """Demand-response what-if: the baseline schedule, the response to a cap over a
    window, the power shed per period, the demand lost per deployment, the cost of
    responding and the recovery after the event.

    Two schedule solves (baseline and response), each within `solver.time_limit_s`.
    An event the site cannot meet is a 422 problem whose `conflicts` give the deepest
    feasible cap per period.
    """
    check_demand_response_limits(req, settings)
    result = await _run(pool, settings, work_dr.demand_response, dump(req))
    if format == "png":
        from service.charts_dr import dr_chart

        return Response(await run_in_threadpool(_png, dr_chart, result), media_type="image/png")
    return JSONResponse(result)


@router.post(
    "/flexibility",
    response_model=FlexibilityResponse,
    responses={200: {"content": {"image/png": {}}}},
)
async def flexibility(
    req: FlexibilityRequest,
    settings: SettingsDep,
    pool: PoolDep,
    format: FormatQuery = "json",  # noqa: A002
) -> Any:
    """Site flexibility curve of one period (or of every period when `period` is null):
    the configurations and served demand that are best at each site power cap, from the
    least site draw up to the unconstrained draw. One period on its own: transitions
    are ignored, as an energy-management system bids the curve."""
    check_flexibility_limits(req, settings)
    result = await _run(pool, settings, work_dr.flexibility, dump(req))
    if format == "png":
        from service.charts_dr import flex_chart

        return Response(await run_in_threadpool(_png, flex_chart, result), media_type="image/png")
    return JSONResponse(result)
