"""POST /v1/schedule: a site schedule from a demand forecast (SPEC 4, 6.1)."""

from __future__ import annotations

import io
import time
from typing import Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from model.errors import InputError
from service import work
from service.deps import ApiKey, PoolDep, SettingsDep
from service.errors import problem_responses
from service.limits import check_schedule_limits
from service.metrics import solve_seconds, solver_outcomes_total
from service.pool import run_or_429
from service.schemas import ScheduleRequest, ScheduleResponse, dump

router = APIRouter(prefix="/v1", tags=["schedule"], dependencies=[ApiKey])


def _png(resp: dict[str, Any]) -> bytes:
    from service.charts import schedule_chart

    buf = io.BytesIO()
    schedule_chart(resp, buf)  # type: ignore[arg-type]
    return buf.getvalue()


@router.post(
    "/schedule",
    response_model=ScheduleResponse,
    responses={
        200: {"content": {"text/csv": {}, "image/png": {}}},
        **problem_responses(401, 413, 422, 429, 503),
    },
)
async def schedule(
    req: ScheduleRequest,
    settings: SettingsDep,
    pool: PoolDep,
    format: Literal["json", "csv", "png"] = Query("json", description="response format"),  # noqa: A002
) -> Any:
    """Choose (n_P, n_D) per deployment and period under the site cap; with baselines.

    A solve that reaches its time limit is not an error: 200 with status `time_limit`
    and the proven gap.
    """
    check_schedule_limits(req, settings)
    t0 = time.perf_counter()
    resp = await run_or_429(
        pool,
        settings.retry_after_s,
        work.schedule,
        dump(req),
        pool.memory_budget_mb,
        None,
        settings.kernels,
    )
    solve_seconds.observe(time.perf_counter() - t0)
    solver_outcomes_total.labels(resp["status"]).inc()
    if format == "csv":
        from formulation.results import to_csv

        return Response(to_csv(resp), media_type="text/csv")
    if format == "png":
        return Response(_png(resp), media_type="image/png")
    try:
        return JSONResponse(resp)
    except ValueError:  # an overflowed total: extreme but finite inputs
        raise InputError(
            "body", "the schedule's totals overflow (not finite); use smaller values"
        ) from None
