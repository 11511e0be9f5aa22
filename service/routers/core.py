"""POST /v1/capacity and POST /v1/front: the analytical core (same JSON as the CLI).

One configuration's capacity is a few array operations and answers in the API
process; a front evaluates every configuration up to ``max_gpus`` (hundreds of MB and
seconds at the largest), so it runs in the solver pool, as solves do: 429 with
Retry-After when every worker is busy, never an unbounded number at once in the API
process."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from service import work
from service.deps import ApiKey, PoolDep, SettingsDep
from service.errors import problem_responses
from service.limits import check_front, check_performance
from service.pool import run_or_429
from service.schemas import (
    CapacityRequest,
    CapacityResponse,
    FrontRequest,
    FrontResponse,
)

router = APIRouter(
    prefix="/v1",
    tags=["core"],
    dependencies=[ApiKey],
    responses=problem_responses(401, 413, 422),
)



@router.post("/capacity", response_model=CapacityResponse)
async def capacity(req: CapacityRequest, settings: SettingsDep) -> dict[str, Any]:
    """Capacity (req/s) and power (W) of one (n_P, n_D) configuration (SPEC 2)."""
    check_performance(req.performance, settings)
    return await run_in_threadpool(work.capacity, req, settings.kernels)


@router.post("/front", response_model=FrontResponse, responses=problem_responses(429, 503))
async def front(req: FrontRequest, settings: SettingsDep, pool: PoolDep) -> dict[str, Any]:
    """Every configuration with n_P + n_D <= max_gpus and the capacity-power Pareto front."""
    pairs = len(req.prefill_settings or [""]) * len(req.decode_settings or [""])
    check_front(req.max_gpus, pairs, settings)
    check_performance(req.performance, settings)
    front_doc: dict[str, Any] = await run_or_429(
        pool, settings.retry_after_s, work.front, req, settings.kernels
    )
    return front_doc
