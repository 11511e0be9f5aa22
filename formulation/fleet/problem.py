"""The fleet problem: several site problems over one horizon and the regions whose
demand they share, validated across sites and regions (every error names the field,
``regions[0].served_by[1].site``, and the reason).

Choices where the request is silent (docs/fleet.md):

* A site deployment's ``demand_rps`` is the site's own demand, which only it serves.
* A region's demand is of one model; a deployment serving it runs that model.
* Each site is checked as a site schedule is (:func:`formulation.problem.validate`),
  its errors named under ``sites[i].``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from formulation.fleet.request import FleetRequest, parse_fleet
from formulation.problem import (
    Host,
    Method,
    ScheduleProblem,
    SolverOptions,
    problem_from_request,
)
from formulation.request import ScheduleRequest
from model.catalog import list_models
from model.errors import InputError


@dataclass(frozen=True)
class Server:
    """Deployment ``deployment`` of site ``site`` (indices) may serve a region, each
    request served there costing ``penalty_usd_per_request``."""

    site: int
    deployment: int
    penalty_usd_per_request: float = 0.0


@dataclass(frozen=True)
class Region:
    name: str
    model: str
    demand_rps: tuple[float, ...]
    unserved_penalty_usd_per_request: float
    servers: tuple[Server, ...]


@dataclass(frozen=True)
class FleetProblem:
    period_minutes: float
    site_names: tuple[str, ...]
    #: each site as a site schedule's problem (its deployments' own demand), with the
    #: fleet's solver options
    sites: tuple[ScheduleProblem, ...]
    regions: tuple[Region, ...] = ()
    max_share_change: float | None = None
    #: auto | joint | decomposition (formulation.fleet.solve)
    routing_method: str = "auto"
    solver: SolverOptions = dataclasses.field(default_factory=SolverOptions)
    host: Host = dataclasses.field(default_factory=lambda: Host())

    @property
    def n_periods(self) -> int:
        return self.sites[0].n_periods

    @property
    def period_hours(self) -> float:
        return self.period_minutes / 60.0

    @property
    def coupled(self) -> bool:
        """Whether any demand may be served at more than one place: then the sites are
        solved together, else each alone."""
        return bool(self.regions)


def fleet_from_dict(body: Any, host: Host | None = None) -> FleetProblem:
    """Parse and validate a fleet request document, then build the problem."""
    if isinstance(body, FleetProblem):
        return body if host is None else dataclasses.replace(body, host=host)
    host = host or Host()
    return fleet_from_request(parse_fleet(body, host.read_files), host)


def fleet_from_request(req: FleetRequest, host: Host | None = None) -> FleetProblem:
    """The problem of a validated fleet request, checked across sites and regions."""
    host = host or Host()
    names: dict[str, int] = {}
    for i, s in enumerate(req.sites):
        if s.name in names:
            raise InputError(f"sites[{i}].name", f"{s.name!r} names sites[{names[s.name]}] already")
        names[s.name] = i
    sites = []
    for i, s in enumerate(req.sites):
        sub = ScheduleRequest(
            period_minutes=req.period_minutes,
            site=s.site,
            deployments=s.deployments,
            grid=s.grid,
            transitions=s.transitions,
            solver=req.solver,
        )
        try:
            sites.append(problem_from_request(sub, host))
        except InputError as e:
            raise InputError(f"sites[{i}].{e.field}", e.reason) from None
    n = sites[0].n_periods
    for i, p in enumerate(sites[1:], start=1):
        if p.n_periods != n:
            raise InputError(
                f"sites[{i}].deployments[0].demand_rps",
                f"has {p.n_periods} values but sites[0]'s horizon has {n} periods",
            )
    regions = tuple(_region(j, r, names, sites, n) for j, r in enumerate(req.regions))
    seen: dict[tuple[str, str], int] = {}
    for j, r in enumerate(regions):
        key = (r.name, r.model)
        if key in seen:
            raise InputError(
                f"regions[{j}]",
                f"region {r.name!r} gives demand of {r.model!r} in regions[{seen[key]}] already",
            )
        seen[key] = j
    so = req.solver
    return FleetProblem(
        period_minutes=req.period_minutes,
        site_names=tuple(s.name for s in req.sites),
        sites=tuple(sites),
        regions=regions,
        max_share_change=req.routing.max_share_change_per_period,
        routing_method=req.routing.method,
        solver=SolverOptions(
            time_limit_s=so.time_limit_s,
            mip_gap=so.mip_gap,
            threads=so.threads,
            method=Method(so.method),
        ),
        host=host,
    )


def _region(j: int, r: Any, names: dict[str, int], sites: list[ScheduleProblem], n: int) -> Region:
    at = f"regions[{j}]"
    known = list_models()
    if r.model not in known:
        raise InputError(f"{at}.model", f"unknown model {r.model!r}; the catalog has: "
                         f"{', '.join(known)}")  # fmt: skip
    if len(r.demand_rps) != n:
        raise InputError(
            f"{at}.demand_rps", f"has {len(r.demand_rps)} values but the horizon has {n} periods"
        )
    servers = []
    taken: dict[tuple[int, int], int] = {}
    for q, s in enumerate(r.served_by):
        where = f"{at}.served_by[{q}]"
        if s.site not in names:
            raise InputError(
                f"{where}.site", f"no site named {s.site!r}; sites: {', '.join(names)}"
            )
        i = names[s.site]
        deps = [d.name for d in sites[i].deployments]
        if s.deployment not in deps:
            raise InputError(
                f"{where}.deployment",
                f"site {s.site!r} has no deployment named {s.deployment!r}; it has: "
                f"{', '.join(deps)}",
            )
        k = deps.index(s.deployment)
        model = sites[i].deployments[k].model
        if model != r.model:
            raise InputError(
                f"{where}.deployment",
                f"{s.deployment!r} at {s.site!r} serves {model!r}, not the region's {r.model!r}",
            )
        if (i, k) in taken:
            raise InputError(where, f"names the deployment of served_by[{taken[i, k]}] again")
        taken[i, k] = q
        servers.append(Server(i, k, float(s.penalty_usd_per_request)))
    return Region(
        name=r.name,
        model=r.model,
        demand_rps=tuple(float(x) for x in r.demand_rps),
        unserved_penalty_usd_per_request=float(r.unserved_penalty_usd_per_request),
        servers=tuple(servers),
    )
