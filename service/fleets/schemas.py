"""The fleets API's requests: a registration (the member sites by id, and the fleet
request's regions, routing and solver: :mod:`formulation.fleet.request`, the single
source of their fields) and a member's OpenADR event."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator

from formulation.fleet.request import MAX_REGIONS, MAX_SITES, RegionIn, RoutingIn
from formulation.request import SolverIn, Strict, solver_default_schema
from service.requests.schemas import StorableText
from service.sites.openadr import OadrEvent

SiteRef = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]

_EXAMPLE: dict[str, Any] = {
    "name": "three-grids",
    "sites": ["<id of site virginia>", "<id of site texas>"],
    "regions": [
        {
            "name": "east",
            "model": "qwen3-32b",
            "demand_rps": [2.0, 3.0, 4.0, 2.0],
            "served_by": [
                {"site": "virginia", "deployment": "chat"},
                {"site": "texas", "deployment": "chat", "penalty_usd_per_request": 0.001},
            ],
        }
    ],
    "routing": {"max_share_change_per_period": 0.5},
    "solver": {"time_limit_s": 30},
}


class FleetRegistration(Strict):
    """A fleet over registered sites (``sites``: their ids, each once). A region's
    ``served_by`` names a member by its site's registered name; the members share
    their clock (``plan_start``, ``period_minutes``) and horizon. The fleet's ``solver``
    is used, not the members' own."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_EXAMPLE]})

    name: StorableText = Field(min_length=1, max_length=128)
    sites: list[SiteRef] = Field(min_length=1, max_length=MAX_SITES)
    regions: list[RegionIn] = Field(default_factory=list, max_length=MAX_REGIONS)
    routing: RoutingIn = RoutingIn()
    solver: SolverIn = Field(SolverIn(), json_schema_extra=solver_default_schema)

    @field_validator("sites")
    @classmethod
    def _once(cls, v: list[str]) -> list[str]:
        seen = set()
        for sid in v:
            if sid in seen:
                raise ValueError(f"site {sid!r} is listed twice")
            seen.add(sid)
        return v


class FleetEventBody(Strict):
    """What ``POST /v1/fleets/{id}/sites/{site}/events`` takes: the member's event."""

    event: OadrEvent
