"""POST /v1/capacity and POST /v1/front: the analytical core (same JSON as the CLI)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from service import work
from service.deps import ApiKey, SettingsDep
from service.errors import problem_responses
from service.limits import check_front, check_performance
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


@router.post("/front", response_model=FrontResponse)
async def front(req: FrontRequest, settings: SettingsDep) -> dict[str, Any]:
    """Every configuration with n_P + n_D <= max_gpus and the capacity-power Pareto front."""
    pairs = len(req.prefill_settings or [""]) * len(req.decode_settings or [""])
    check_front(req.max_gpus, pairs, settings)
    check_performance(req.performance, settings)
    return await run_in_threadpool(work.front, req, settings.kernels)
