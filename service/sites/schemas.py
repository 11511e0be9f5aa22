"""Schemas of the sites API (``/v1/sites``): a registration is a schedule request with
a name and a clock; the bodies of plan, event and forecast posts; replica targets."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from formulation.request import Rate, ScheduleRequest, Strict, examples
from service.requests.schemas import DateTimeText, StorableText
from service.sites.openadr import OadrEvent
from service.sites.plans import Current

_EXAMPLE: dict[str, Any] = {
    "name": "dc-east",
    "plan_start": "2026-07-01T12:00:00Z",
    "period_minutes": 60,
    "site": {"gpu_inventory": {"h200": 8}, "pue": 1.2, "idle_gpu_power_w": 120},
    "deployments": [
        {
            "name": "chat",
            "model": "qwen3-32b",
            "gpu": "h200",
            "workload": "fixed:2048:256",
            "demand_rps": [1.0, 3.0, 5.0, 2.0],
            "max_gpus": 4,
            "initial": {"n_p": 1, "n_d": 1},
        }
    ],
    "grid": {"power_cap_w": 20000, "price_usd_per_mwh": [50, 60, 80, 40]},
    "transitions": {"max_instance_changes_per_period": 2},
    "solver": {"time_limit_s": 10},
}


class SiteRequest(ScheduleRequest):
    """A schedule request (SPEC 6.1) kept as a site, with its name and clock."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=examples(_EXAMPLE))
    name: StorableText = Field(min_length=1, max_length=128)
    plan_start: DateTimeText = Field(
        description="wall-clock start of period 0: an ISO 8601 date-time string with offset"
    )
    replan_each_period: bool = Field(
        False,
        strict=True,
        description="re-plan, as a job, each time the site's clock enters a new period, "
        "from the configuration its latest plan runs (see service/sites/replan.py)",
    )


class PlanBody(Strict):
    current: Current | None = None


class EventBody(Strict):
    event: OadrEvent
    current: Current | None = None


class RetractBody(Strict):
    current: Current | None = None


class ForecastBody(Strict):
    demand_rps: dict[str, Annotated[list[Rate], Field(min_length=1)]] = Field(
        min_length=1, description="new demand per deployment, from `from_period` on"
    )
    from_period: int | None = Field(
        None, ge=0, description="first period replaced (default: current.period, else 0)"
    )
    current: Current | None = None


class Target(BaseModel):
    deployment: str
    period: int
    start: str
    end: str
    num_prefill: int
    num_decode: int
    replicas: dict[str, int]
    gpus: int
    #: only for a deployment that lists GPU settings (service.sites.targets)
    prefill_setting: str | None = Field(None, description="as the plan's period names it")
    decode_setting: str | None = Field(None, description="as the plan's period names it")
    gpu_settings: dict[str, dict[str, float]] | None = Field(
        None,
        description="per role: gpu_power_limit_w (a power limit) or sm_clock_mhz (a clock "
        "locked below the full clock); empty at the full clock (the GPU's defaults)",
    )
    dynamo: dict[str, Any] | None = Field(
        None,
        description="per role, the podTemplate annotation dynamo.nvidia.com/gpu-power-limit "
        "(watts per GPU; the GPU's default limit for a role without one)",
    )


class PeriodLimit(BaseModel):
    period: int
    start: str
    end: str
    power_cap_w: float
    idle_gpus: int
    total_gpu_power_limit_w: float = Field(
        description="power_cap_w / PUE - idle_gpu_power_w x idle_gpus: the GPU watts the "
        "plan's instances were held to"
    )
    dynamo: dict[str, Any] = Field(
        description="as Dynamo's Planner configuration reads it: enable_power_awareness, "
        "total_gpu_power_limit (whole watts)"
    )


class Targets(BaseModel):
    model_config = ConfigDict(extra="allow")
    site_id: str
    plan_id: int
    stale: bool
    period_minutes: float
    targets: list[Target]
    periods: list[PeriodLimit]
