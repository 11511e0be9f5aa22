"""The fleet request: several sites, each a site schedule's site, grid, deployments and
transitions, and the demand of origin regions routed among them (docs/fleet.md). One
pydantic schema, the single source of its field names, defaults and limits, built from
the site schedule's own parts (:mod:`formulation.request`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from formulation.request import (
    MIN_PERIOD_MINUTES,
    DeploymentIn,
    GridIn,
    Name,
    Rate,
    SiteIn,
    SolverIn,
    Strict,
    TransitionsIn,
    Usd,
    parse_model,
    solver_default_schema,
)

#: the most sites and regions one fleet request may hold
MAX_SITES = 64
MAX_REGIONS = 256


class FleetSiteIn(Strict):
    """One site: as a site schedule's request, less the horizon and the solver, which the
    fleet gives once. Each deployment's ``demand_rps`` is the site's own demand, which
    only it serves (zeros where all of a deployment's demand comes from regions)."""

    name: Name
    site: SiteIn
    deployments: list[DeploymentIn] = Field(min_length=1)
    grid: GridIn
    transitions: TransitionsIn = TransitionsIn()


class ServerIn(Strict):
    """A deployment that may serve a region's demand, and what a request served there
    costs over one served nearby (latency, transit)."""

    site: Name
    deployment: Name
    penalty_usd_per_request: Usd = Field(
        0.0, description="the cost of a request of this region served at this site"
    )


class RegionIn(Strict):
    """The demand of one model from one origin region, and where it may be served."""

    name: Name
    model: Name
    demand_rps: list[Rate] = Field(min_length=1)
    unserved_penalty_usd_per_request: Usd = 0.01
    served_by: list[ServerIn] = Field(min_length=1)


class RoutingIn(Strict):
    max_share_change_per_period: float | None = Field(
        None,
        ge=0,
        le=1,
        description="the most a region's share served by one deployment may change from "
        "one period to the next (routers and caches do not move at once); default: no "
        "limit",
    )
    method: Literal["auto", "joint", "decomposition"] = Field(
        "auto",
        description="how sites that share demand are solved: joint, one MILP over the "
        "fleet (small fleets); decomposition, the fleet's relaxation prices each "
        "deployment's requests and each site is planned by its own pipeline; auto, the "
        "joint MILP where it can be built in the time, else the decomposition",
    )


class FleetRequest(Strict):
    model_config = ConfigDict(extra="forbid")
    period_minutes: float = Field(ge=MIN_PERIOD_MINUTES, le=1440)
    sites: list[FleetSiteIn] = Field(min_length=1, max_length=MAX_SITES)
    regions: list[RegionIn] = Field(default_factory=list, max_length=MAX_REGIONS)
    routing: RoutingIn = RoutingIn()
    solver: SolverIn = Field(SolverIn(), json_schema_extra=solver_default_schema)


def parse_fleet(body: Any, read_files: bool = False) -> FleetRequest:
    """``body`` validated as a fleet request; :class:`~model.errors.InputError` naming
    the field at fault."""
    return parse_model(FleetRequest, body, read_files)


def is_fleet(body: Any) -> bool:
    """Whether a request document is a fleet's (it lists ``sites``) rather than one
    site's."""
    return isinstance(body, dict) and "sites" in body
