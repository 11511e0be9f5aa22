"""A fleet's schedule: ``(n_P, n_D)`` per deployment, site and period, and the share of
each region's demand each site serves (docs/fleet.md).

Sites that share no demand are independent: each is solved alone by the site schedule's
pipeline (:func:`formulation.solve.solve`), with an even share of the time limit, and
the fleet's bound is the sum of theirs; a fleet of one site is exactly that site's
schedule. Sites that share demand are solved together as one compact MILP
(:mod:`formulation.fleet.compact`) at this version."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.budget import Deadline, TimeBudget
from formulation.data import site_constant_usd
from formulation.diagnosis import diagnose_infeasible
from formulation.evaluate import Schedule, price_schedule
from formulation.fleet.compact import (
    build_fleet_model,
    flow_values,
    own_demand,
    routable,
    site_data,
)
from formulation.fleet.problem import FleetProblem
from formulation.infeasible import InfeasibleError
from formulation.milp.compact import estimated_build_s, extract, solve_pyomo
from formulation.solve import Monitor, Outcome, solve
from model.errors import InputError

FloatArray = NDArray[np.float64]
Progress = Callable[[str], None]

#: the method of a fleet's solve, as its response names it
EACH_SITE = "each site alone"
JOINT = "compact MILP over the fleet"


@dataclass
class FleetOutcome:
    status: str  # optimal | time_limit | stopped
    problem: FleetProblem
    sites: list[Outcome]
    #: (flows, T) req/s of each region's demand sent to each of its servers, in the
    #: order of ``regions[r].servers`` (empty without regions)
    flows: FloatArray
    objective_usd: float
    lower_bound_usd: float
    mip_gap: float
    solve_time_s: float
    method: str


def solve_fleet(
    fp: FleetProblem, progress: Progress | None = None, monitor: Monitor | None = None
) -> FleetOutcome:
    """The fleet's plan within ``solver.time_limit_s`` (``monitor``: a job's progress and
    stop request, as a site schedule's; the joint MILP's HiGHS process stops with the
    run's stop request too)."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    if not fp.coupled:
        return _each_site(fp, say, monitor, t0)
    return _joint(fp, say, t0)


def _each_site(fp: FleetProblem, say: Progress, monitor: Monitor | None, t0: float) -> FleetOutcome:
    n = len(fp.sites)
    share = fp.solver.time_limit_s / n
    outs = []
    for i, p in enumerate(fp.sites):
        if n > 1:
            say(f"site {fp.site_names[i]} ({i + 1} of {n}): its own schedule")
            p = dataclasses.replace(p, solver=dataclasses.replace(p.solver, time_limit_s=share))
        outs.append(solve(p, progress=say, monitor=monitor))
    objective = sum(o.priced.objective_usd for o in outs)
    bound = sum(o.lower_bound_usd for o in outs)
    statuses = {o.status for o in outs}
    status = "optimal" if statuses == {"optimal"} else "time_limit"
    if "stopped" in statuses:
        status = "stopped"
    return FleetOutcome(
        status=status,
        problem=fp,
        sites=outs,
        flows=np.zeros((0, fp.n_periods)),
        objective_usd=objective,
        lower_bound_usd=bound,
        mip_gap=_gap(objective, bound),
        solve_time_s=time.perf_counter() - t0,
        method=EACH_SITE,
    )


def _joint(fp: FleetProblem, say: Progress, t0: float) -> FleetOutcome:
    deadline = Deadline.after(fp.solver.time_limit_s)
    say("tables: each site's deployments at the most demand they may be sent")
    datas = [
        site_data(fp, i, own_demand(fp, i) + routable(fp, i), penalties=False)
        for i in range(len(fp.sites))
    ]
    choices = sum(int(d.period_allowed().sum()) for data in datas for d in data.deployments)
    need = estimated_build_s(choices)
    if need > TimeBudget.BUILD_SHARE * deadline.remaining():
        raise InputError(
            "solver.time_limit_s",
            f"the fleet's MILP over {choices:,} choices needs about {need:,.0f} s to build, "
            f"more than {TimeBudget.BUILD_SHARE:.0%} of the time left; sites that share "
            "demand are solved as one MILP at this version: raise the limit, or plan fewer "
            "sites together",
        )
    say(f"MILP over the fleet: {len(datas)} sites, {choices:,} choices")
    fm = build_fleet_model(fp, datas)
    r = solve_pyomo(fm.model, deadline, fp.solver.mip_gap, fp.solver.threads)
    if r.termination == "infeasible":
        raise _infeasible(fp, datas, deadline)
    if r.objective is None:
        raise InfeasibleError(
            "no fleet schedule found within the time limit",
            [{"constraint": "time", "reason": "raise solver.time_limit_s"}],
        )
    flows = flow_values(fm, fp)
    sites = []
    elapsed = time.perf_counter() - t0
    status = "optimal" if r.termination == "optimal" else "time_limit"
    for i in range(len(datas)):
        block = getattr(fm.model, f"site{i}")
        sched = extract(block)
        sent = _sent(fp, i, flows)
        report = site_data(fp, i, own_demand(fp, i) + sent, penalties=True)
        served = np.minimum(sched.served_rps, _smax(report, sched.config))
        priced = price_schedule(report, Schedule(sched.config, served))
        sites.append(Outcome(status, report, priced, float("nan"), float("nan"), elapsed, {}, {}))
    objective = sum(o.priced.objective_usd for o in sites) + region_cost(fp, flows)
    # without a bound from HiGHS, the sites idle: every other term of the cost is >= 0
    floor = sum(site_constant_usd(data) for data in datas)
    bound = min(max(r.bound if r.bound is not None else floor, floor), objective)
    return FleetOutcome(
        status=status,
        problem=fp,
        sites=sites,
        flows=flows,
        objective_usd=objective,
        lower_bound_usd=bound,
        mip_gap=_gap(objective, bound),
        solve_time_s=time.perf_counter() - t0,
        method=JOINT,
    )


def _sent(fp: FleetProblem, i: int, flows: FloatArray) -> FloatArray:
    """(K_i, T) what the regions send each deployment of site ``i``."""
    out = np.zeros((len(fp.sites[i].deployments), fp.n_periods))
    f = 0
    for reg in fp.regions:
        for s in reg.servers:
            if s.site == i:
                out[s.deployment] += flows[f]
            f += 1
    return out


def _smax(data: Any, config: NDArray[np.int64]) -> FloatArray:
    T = config.shape[1]
    return np.array([d.smax_rps[np.arange(T), config[m]] for m, d in enumerate(data.deployments)])


def region_cost(fp: FleetProblem, flows: FloatArray) -> float:
    """The regions' unserved value and the flows' penalties (USD)."""
    sec = 3600.0 * fp.period_hours
    total, f = 0.0, 0
    for reg in fp.regions:
        demand = np.asarray(reg.demand_rps)
        sent = np.zeros(fp.n_periods)
        for s in reg.servers:
            total += sec * s.penalty_usd_per_request * float(flows[f].sum())
            sent += flows[f]
            f += 1
        total += (
            sec * reg.unserved_penalty_usd_per_request * float(np.maximum(demand - sent, 0.0).sum())
        )
    return total


def _gap(objective: float, bound: float) -> float:
    if not np.isfinite(bound):
        return float("inf")
    return max(0.0, (objective - bound) / max(abs(objective), 1e-9))


def _infeasible(fp: FleetProblem, datas: list[Any], deadline: Deadline) -> InfeasibleError:
    """A fleet is infeasible only where a site is (any demand may go unserved): the
    first site whose LP relaxation names periods at fault, under its name."""
    for i, data in enumerate(datas):
        err = diagnose_infeasible(data, "infeasible", deadline)
        if any(c.get("constraint") != "integrality" for c in err.conflicts):
            conflicts = [{"site": fp.site_names[i], **c} for c in err.conflicts]
            return InfeasibleError(f"sites[{i}] ({fp.site_names[i]}): {err}", conflicts)
    return InfeasibleError(
        "HiGHS proved the fleet infeasible",
        [{"constraint": "integrality", "reason": "no site's relaxation names a period"}],
    )
