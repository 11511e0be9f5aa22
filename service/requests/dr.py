"""Request and response schemas of POST /v1/demand-response, POST /v1/flexibility and
POST /v1/fleet/demand-response.

The authoritative checks of the event (window inside the horizon, exactly one cap
form) are those of :func:`formulation.whatif.dr.parse_event`, shared with ``pdwatt dr``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from formulation.demo import demo_request
from formulation.fleet.demo import DEMO_FLEET_EVENT, fleet_demo_request
from formulation.fleet.request import FleetRequest
from formulation.fleet.results import FleetScheduleResponse
from formulation.request import Name, examples
from formulation.whatif.dr import DEMO_EVENT
from service.requests.schemas import NonNeg, ScheduleRequest, ScheduleResponse, Strict


def _demo_small() -> dict[str, Any]:
    body = demo_request()
    body["solver"]["time_limit_s"] = 10
    return body


class DemandResponseEvent(Strict):
    """A cap over a window: the window in periods (end exclusive) or in minutes (every
    period overlapping it), and exactly one of ``cap_w``, ``reduction_w``,
    ``reduction_pct``."""

    name: str | None = Field(None, max_length=200)
    start_period: int | None = Field(None, ge=0, description="first period of the window")
    end_period: int | None = Field(None, ge=1, description="one past the last period")
    start_minute: float | None = Field(None, ge=0, allow_inf_nan=False)
    end_minute: float | None = Field(None, gt=0, allow_inf_nan=False)
    cap_w: NonNeg | None = Field(None, description="new absolute site cap (W, after PUE)")
    reduction_w: NonNeg | None = Field(
        None, description="W below the baseline schedule's site power in each window period"
    )
    reduction_pct: float | None = Field(
        None, ge=0, le=100, allow_inf_nan=False, description="percent of the request's cap"
    )


class DemandResponseRequest(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=examples({"request": _demo_small(), "event": DEMO_EVENT}),
    )
    request: ScheduleRequest
    event: DemandResponseEvent


class DemandLost(BaseModel):
    requests: float
    value_usd: float


class Preparation(BaseModel):
    first_changed_period: int | None
    periods: int
    instance_starts: int
    instance_stops: int


class Recovery(BaseModel):
    periods_after_event: int
    rejoined: bool
    rejoin_period: int | None
    periods: int | None
    instance_starts: int
    instance_stops: int


class EventOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str | None
    start_period: int
    end_period: int
    start_minute: float
    end_minute: float
    kind: str
    value: float
    request_cap_w: list[float]
    cap_w: list[float]


class DemandResponseResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    event: EventOut
    baseline: ScheduleResponse
    response: ScheduleResponse
    power_shed_w: list[float]
    max_shed_w: float
    window_energy_shed_kwh: float
    energy_shed_kwh: float
    demand_lost: dict[str, DemandLost]
    cost_delta_usd: float
    cost_delta_breakdown: dict[str, float]
    preparation: Preparation
    recovery: Recovery


class FlexibilityRequest(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=examples({"request": _demo_small(), "period": 72, "points": 25}),
    )
    request: ScheduleRequest
    period: int | None = Field(None, ge=0, description="one period, or every period when null")
    points: int = Field(25, ge=2, le=200, description="caps per period, end points included")


class Configuration(BaseModel):
    n_p: int
    n_d: int


class FlexPoint(BaseModel):
    model_config = ConfigDict(extra="allow")
    cap_w: float
    site_power_w: float
    served_rps: dict[str, float]
    total_served_rps: float
    served_value_usd_per_h: float
    energy_cost_usd_per_h: float
    unserved_value_usd_per_h: float
    period_cost_usd: float
    configurations: dict[str, Configuration]


class FlexPeriod(BaseModel):
    model_config = ConfigDict(extra="allow")
    period: int
    start_minute: float
    min_site_power_w: float
    unconstrained_power_w: float
    request_cap_w: float
    method: str
    points: list[FlexPoint]
    unevaluated_caps_w: list[float] | SkipJsonSchema[None] = Field(
        None, description="caps not evaluated before the time limit (only when some were not)"
    )


class FlexibilityResponse(BaseModel):
    deployments: list[str]
    period_minutes: float
    transitions: str
    status: Literal["complete", "time_limit"] = Field(
        description="time_limit: the request's solver.time_limit_s ran out before every cap "
        "was evaluated (see unevaluated_periods and each period's unevaluated_caps_w)"
    )
    solve_time_s: float = Field(description="the curve's time, within solver.time_limit_s")
    periods: list[FlexPeriod]
    unevaluated_periods: list[int] | SkipJsonSchema[None] = Field(
        None, description="periods not evaluated before the time limit (only when some were not)"
    )


# ---------------------------------------------------------------- several sites

#: the OpenAPI descriptions of the fleet's routes (service.usecases.table)
FLEET_SCHEDULE_DOC = (
    "Several sites over one horizon: (n_P, n_D) per deployment, site and period, and the\n"
    "share of each region's demand each site serves (docs/fleet.md). Sites that share no\n"
    "demand are solved each alone, sites that share demand as one MILP."
)
FLEET_DR_DOC = (
    "A demand-response event at one site of a fleet: the baseline plan, the local\n"
    "response (the event site's cap cut, no region's demand moved) and the re-routed one\n"
    "(the regions' demand free to move between the sites), what each costs and what\n"
    "re-routing saves (docs/fleet.md). Three solves within one `solver.time_limit_s`."
)


class FleetDemandResponseEvent(DemandResponseEvent):
    """A site schedule's event at one site of the fleet (``site``, its name)."""

    site: Name


class FleetDemandResponseRequest(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=examples({"request": fleet_demo_request(), "event": DEMO_FLEET_EVENT}),
    )
    request: FleetRequest
    event: FleetDemandResponseEvent


class FleetEventOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    site: str
    start_period: int
    end_period: int
    kind: str
    value: float
    request_cap_w: list[float]
    cap_w: list[float]


class FleetDemandResponseResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    event: FleetEventOut
    baseline: FleetScheduleResponse
    local: FleetScheduleResponse = Field(
        description="the event site's cap cut, no region's demand moved to another site"
    )
    rerouted: FleetScheduleResponse = Field(
        description="the same cut, the regions' demand free to move between the sites"
    )
    local_cost_usd: float
    rerouted_cost_usd: float
    saving_usd: float = Field(description="local_cost_usd less rerouted_cost_usd")
    saving_at_least_usd: float = Field(
        description="what the bounds prove of the saving: the local response's lower bound "
        "less the re-routed cost (0 when they prove none)"
    )
    moved_requests: float = Field(
        description="requests of the event site's regions served at other sites in the "
        "window, above the baseline's"
    )
