"""The fleet's schedule document (:func:`fleet_response`) and its shape
(:class:`FleetScheduleResponse`, the response model the HTTP API publishes and checks
every answer against)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from formulation.results import response

if TYPE_CHECKING:  # the solve loads Pyomo and HiGHS: the API's schemas need only this name
    from formulation.fleet.solve import FleetOutcome

#: the fields of a site's schedule document that belong to the fleet's solve when the
#: sites are solved together (formulation.fleet.solve.JOINT)
FLEET_FIELDS = ("status", "mip_gap", "lower_bound_usd", "solve_time_s", "baselines", "solver")


class ShareOut(BaseModel):
    site: str
    deployment: str
    served_rps: list[float]
    share: list[float] = Field(description="served_rps over the region's demand, per period")


class RegionOut(BaseModel):
    name: str
    model: str
    demand_rps: list[float]
    unserved_rps: list[float]
    shares: list[ShareOut]


class FleetSiteOut(BaseModel):
    """A site's schedule document (that of ``POST /v1/schedule``) under its name; with
    the sites solved together, without the fields of the fleet's solve."""

    model_config = ConfigDict(extra="allow")
    name: str


class FleetScheduleResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["optimal", "time_limit", "stopped"]
    method: str = Field(
        description="each site alone (no demand shared) or the compact MILP over the fleet"
    )
    objective_usd: float
    lower_bound_usd: float
    mip_gap: float
    solve_time_s: float
    routing_cost_usd: float = Field(
        description="the regions' unserved value and the penalties of the requests routed"
    )
    sites: list[FleetSiteOut]
    regions: list[RegionOut]


def fleet_response(o: FleetOutcome) -> dict[str, Any]:
    """The fleet's schedule document: the fleet's status, objective and bound, each
    site's schedule (a site schedule's document; its own status and bound when each site
    was solved alone) and, per region, the share each server takes per period."""
    from formulation.fleet.solve import JOINT, region_cost

    fp = o.problem
    sites = []
    for name, out in zip(fp.site_names, o.sites, strict=True):
        doc = response(out)
        if o.method == JOINT:
            doc = {k: v for k, v in doc.items() if k not in FLEET_FIELDS}
        sites.append({"name": name, **doc})
    regions = []
    f = 0
    for reg in fp.regions:
        demand = np.asarray(reg.demand_rps)
        safe = np.where(demand > 0, demand, 1.0)
        served = np.zeros(fp.n_periods)
        shares = []
        for s in reg.servers:
            flow = o.flows[f]
            served += flow
            shares.append(
                {
                    "site": fp.site_names[s.site],
                    "deployment": fp.sites[s.site].deployments[s.deployment].name,
                    "served_rps": flow.tolist(),
                    "share": np.where(demand > 0, flow / safe, 0.0).tolist(),
                }
            )
            f += 1
        regions.append(
            {
                "name": reg.name,
                "model": reg.model,
                "demand_rps": demand.tolist(),
                "unserved_rps": np.maximum(demand - served, 0.0).tolist(),
                "shares": shares,
            }
        )
    return {
        "status": o.status,
        "method": o.method,
        "objective_usd": float(o.objective_usd),
        "lower_bound_usd": float(o.lower_bound_usd),
        "mip_gap": float(o.mip_gap),
        "solve_time_s": float(o.solve_time_s),
        "routing_cost_usd": region_cost(fp, o.flows) if fp.regions else 0.0,
        "sites": sites,
        "regions": regions,
    }
