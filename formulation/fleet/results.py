"""The fleet's schedule document (:func:`fleet_response`) and its shape
(:class:`FleetScheduleResponse`, the response model the HTTP API publishes and checks
every answer against)."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from formulation.results import response, to_csv

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
        description="each site alone (no demand shared), the compact MILP over the fleet, "
        "or the price-directed decomposition over the fleet (routing.method)"
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


def fleet_csv(resp: dict[str, Any]) -> str:
    """The fleet's plan as one table: a site schedule's rows (:func:`formulation.results.to_csv`,
    one per period and deployment, the deployment's demand being its own and what the
    regions send it) behind the site's name, and a column ``region_<name>_rps`` per region:
    the rate of that region's demand the row's deployment serves (empty where the region
    does not send it requests). A region's unserved rate is its demand less the sum of its
    column; the JSON document states both."""
    regions = resp["regions"]
    sent: dict[tuple[str, str], list[list[float] | None]] = {}
    for j, reg in enumerate(regions):
        for sh in reg["shares"]:
            cols = sent.setdefault((sh["site"], sh["deployment"]), [None] * len(regions))
            prior = cols[j]
            cols[j] = (
                list(sh["served_rps"])
                if prior is None
                else [a + b for a, b in zip(prior, sh["served_rps"], strict=True)]
            )
    names = [f"region_{reg['name']}_rps" for reg in regions]
    fields = ["site"]
    out: list[dict[str, str]] = []
    for site in resp["sites"]:
        reader = csv.DictReader(io.StringIO(to_csv(site)))
        fields += [f for f in reader.fieldnames or () if f not in fields]
        for row in reader:
            cols = sent.get((site["name"], row["deployment"]), [None] * len(regions))
            t = int(row["period"])
            regional = {
                n: "" if c is None else f"{c[t]:.6f}" for n, c in zip(names, cols, strict=True)
            }
            out.append({"site": site["name"], **row, **regional})
    buf = io.StringIO()
    # a column one site's table has and another's has not (the settings) is left empty
    w = csv.DictWriter(buf, fieldnames=[*fields, *names], restval="", lineterminator="\r\n")
    w.writeheader()
    w.writerows(out)
    return buf.getvalue()
