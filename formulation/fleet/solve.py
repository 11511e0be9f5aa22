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
    FleetModel,
    build_fleet_model,
    flow_values,
    own_demand,
    routable,
    site_data,
)
from formulation.fleet.decompose import (
    flow_list,
    priced_data,
    relax_fleet,
    route_within,
    tangent_power,
)
from formulation.fleet.periods import relax_by_period
from formulation.fleet.problem import FleetProblem
from formulation.infeasible import InfeasibleError
from formulation.milp.compact import (
    count_choices,
    estimated_build_s,
    extract,
    set_start,
    solve_pyomo,
)
from formulation.solve import Monitor, Outcome, solve
from model.errors import InputError

FloatArray = NDArray[np.float64]
Progress = Callable[[str], None]

#: the share of a joint solve's time its start takes (:func:`_home_start`): the LP
#: relaxation's routing first, then each site planned alone for it
LP_SHARE = 0.3
START_SHARE = 0.3
#: the method of a fleet's solve, as its response names it
EACH_SITE = "each site alone"
JOINT = "compact MILP over the fleet"
DECOMPOSED = "price-directed decomposition over the fleet"
#: with ``routing.method`` auto, the most choices a fleet's joint MILP is taken for:
#: at 60 s the decomposition proved two and three sites of two 16-GPU deployments over
#: 96 periods (about 46,000 and 70,000 choices) within 7.9% and 11.8%, the joint
#: MILP within 13.7-17.7% and 33.2%; the three-site demo (8,712 choices) is proven
#: within 0.06% either way
JOINT_MOST_CHOICES = 20_000
#: the shares of the time left that the steps of a decomposed solve take
#: (:func:`_decomposed`): the relaxation by period and its rounding, then its periods
#: solved as MILPs; the sites for the rounded routing; the relaxation by column
#: generation; the sites at its prices
PERIOD_SHARE = 0.2
BOUND_SHARE = 0.2
PLAN_SHARE = 0.5
RELAX_SHARE = 0.3
PRICED_SHARE = 0.5


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
    solve_time_s: float
    method: str

    @property
    def mip_gap(self) -> float:
        """The proven gap, relative to the objective."""
        return _gap(self.objective_usd, self.lower_bound_usd)


def solve_fleet(
    fp: FleetProblem,
    progress: Progress | None = None,
    monitor: Monitor | None = None,
    flow_caps: FloatArray | None = None,
) -> FleetOutcome:
    """The fleet's plan within ``solver.time_limit_s`` (``monitor``: a job's progress and
    stop request, as a site schedule's; the joint MILP's HiGHS process stops with the
    run's stop request too). ``flow_caps`` (flows, T): the most each flow may carry
    (:func:`formulation.fleet.compact.build_fleet_model`)."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    if not fp.coupled:
        return _each_site(fp, say, monitor, t0)
    return _joint(fp, say, t0, flow_caps)


def _each_site(fp: FleetProblem, say: Progress, monitor: Monitor | None, t0: float) -> FleetOutcome:
    n = len(fp.sites)
    share = fp.solver.time_limit_s / n
    outs = []
    for i, p in enumerate(fp.sites):
        if n > 1:
            say(f"site {fp.site_names[i]} ({i + 1} of {n}): its own schedule")
            p = dataclasses.replace(p, solver=dataclasses.replace(p.solver, time_limit_s=share))
        try:
            outs.append(solve(p, progress=say, monitor=monitor))
        except InfeasibleError as e:
            raise _at_site(fp, i, e) from e
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
        solve_time_s=time.perf_counter() - t0,
        method=EACH_SITE,
    )


def _joint(
    fp: FleetProblem, say: Progress, t0: float, flow_caps: FloatArray | None
) -> FleetOutcome:
    deadline = Deadline.after(fp.solver.time_limit_s)
    say("tables: each site's deployments at the most demand they may be sent")
    datas = [
        site_data(fp, i, own_demand(fp, i) + routable(fp, i), penalties=False)
        for i in range(len(fp.sites))
    ]
    if fp.routing_method == "decomposition":
        return _decomposed(fp, datas, deadline, say, t0, flow_caps)
    choices = sum(count_choices(data) for data in datas)
    need = estimated_build_s(choices)
    if fp.routing_method == "auto" and choices > JOINT_MOST_CHOICES:
        say(
            f"the fleet's MILP would have {choices:,} choices, more than "
            f"{JOINT_MOST_CHOICES:,}: the fleet is decomposed by prices"
        )
        return _decomposed(fp, datas, deadline, say, t0, flow_caps)
    if need > TimeBudget.BUILD_SHARE * deadline.remaining():
        if fp.routing_method == "joint":
            raise InputError(
                "routing.method",
                f"the fleet's MILP over {choices:,} choices needs about {need:,.0f} s to "
                f"build, more than {TimeBudget.BUILD_SHARE:.0%} of the time left: raise "
                "solver.time_limit_s, or take method auto or decomposition",
            )
        say(
            f"the fleet's MILP over {choices:,} choices would take about {need:,.0f} s to "
            "build: the fleet is decomposed by prices"
        )
        return _decomposed(fp, datas, deadline, say, t0, flow_caps)
    fm = build_fleet_model(fp, datas, flow_caps)
    lp_bound = _home_start(fp, fm, deadline, flow_caps, say)
    _complete_start(fp, fm, deadline)
    say(f"MILP over the fleet: {len(datas)} sites, {choices:,} choices")
    r = solve_pyomo(fm.model, deadline, fp.solver.mip_gap, fp.solver.threads, warm=True)
    if r.termination == "infeasible":
        raise _infeasible(fp, datas, deadline)
    # without a schedule from HiGHS, the start is the plan (checked below)
    flows = flow_values(fm, fp)
    sites = []
    elapsed = time.perf_counter() - t0
    status = "optimal" if r.termination == "optimal" else "time_limit"
    for i in range(len(datas)):
        block = getattr(fm.model, f"site{i}")
        sched = extract(block)
        sent = sent_to(fp, i, flows)
        report = site_data(fp, i, own_demand(fp, i) + sent, penalties=True)
        served = np.minimum(sched.served_rps, _smax(report, sched.config))
        priced = price_schedule(report, Schedule(sched.config, served))
        if r.objective is None and not (
            priced.violation_free
            and np.allclose(sched.served_rps, _own_values(fm, i) + sent, rtol=1e-7, atol=1e-6)
        ):
            raise InfeasibleError(
                "no fleet schedule found within the time limit",
                [{"constraint": "time", "reason": "raise solver.time_limit_s"}],
            )
        sites.append(Outcome(status, report, priced, float("nan"), float("nan"), elapsed, {}, {}))
    objective = sum(o.priced.objective_usd for o in sites) + region_cost(fp, flows)
    # the best of HiGHS's bound and the LP relaxation's (and the idle sites')
    bounds = [b for b in (r.bound, lp_bound) if b is not None]
    return _finish(fp, datas, sites, flows, objective, bounds, t0, JOINT, status)


def _decomposed(
    fp: FleetProblem,
    datas: list[Any],
    deadline: Deadline,
    say: Progress,
    t0: float,
    flow_caps: FloatArray | None,
) -> FleetOutcome:
    """Price-directed routing (docs/fleet.md, sections 3 and 5), in these steps, each
    taking its share of the time left:

    1. the relaxation by period (:mod:`formulation.fleet.periods`, ``PERIOD_SHARE``): a
       bound, prices, and each period's choices rounded to a routing; then the periods
       of largest rounding gap solved as MILPs (``BOUND_SHARE``), which raise the
       bound and may better the rounding;
    2. each site planned alone for the rounded routing (``PLAN_SHARE``), or, where the
       periods were not all rounded in time, for its own demand and each region's at
       home;
    3. the fleet's relaxation by column generation from the periods' prices
       (:func:`formulation.fleet.decompose.relax_fleet`, ``RELAX_SHARE``), which keeps
       the transitions; where it raised the bound or converged, each site planned
       alone at its best prices (``PRICED_SHARE``), a bound at any prices;
    4. the regions' demand routed within what each plan can serve
       (:func:`formulation.fleet.decompose.route_within`), and each site planned again
       for the best such routing (the relaxation's, where it converged).

    The cheapest plan within every cap is kept; the bound is the best of the steps'."""
    T = fp.n_periods
    sec = 3600.0 * fp.period_hours
    own_value = [
        sec * np.array([[d.unserved_penalty_usd_per_request] * T for d in p.deployments])
        for p in fp.sites
    ]
    candidates: list[tuple[list[Outcome], float, FloatArray]] = []
    plans: list[tuple[list[NDArray[np.int64]], list[FloatArray]]] = []

    def plan_for(flows: FloatArray, share: float, why: str) -> None:
        """Each site planned alone for ``flows`` (within the ramp), as a candidate and a
        plan to route within."""
        configs, owns, started = _plan_sites(fp, flows, share, say, datas, why)
        if fp.max_share_change is not None:  # a site that serves less moves the shares
            started = _within_ramp(fp, started)
        candidates.append(_priced_plan(fp, configs, owns, started, t0))
        plans.append((configs, [owns[i] + sent_to(fp, i, started) for i in range(len(datas))]))
        say(f"the sites planned {why}: {candidates[-1][1]:,.2f} USD")

    # 1. the relaxation by period, its choices rounded, its periods of largest
    # rounding gap solved as MILPs
    step = deadline.fraction(PERIOD_SHARE)
    per = relax_by_period(
        fp,
        datas,
        own_value,
        step,
        say,
        flow_caps,
        round_within=step,
        bound_within=deadline.fraction(PERIOD_SHARE + BOUND_SHARE),
    )
    bound = -np.inf
    if per.lower_bound_usd is not None:
        bound = per.lower_bound_usd
        say(
            f"relaxation by period: bound {bound:,.2f} USD ({per.columns:,} columns, "
            f"{per.tightened} periods as MILPs, {per.seconds:.1f} s)"
        )
    # 2. the sites planned for the rounded routing; without one (out of time), for
    # each region's demand at home
    share = PLAN_SHARE * deadline.remaining() / len(datas)
    if per.rounded is not None:
        plan_for(per.rounded.flows, share, "for the periods' rounded routing")
    else:
        plan_for(_home_flows(fp, flow_caps), share, "for each region's demand at home")
    # 3. column generation from the periods' prices, with the transitions, the plans'
    # schedules as its first columns (from zero prices, seeding the master with the
    # home plans' left the eight-site fleet's bound at 62 USD against 2,396 without;
    # from the periods' prices the bound is the same either way, 8,390.25 USD, and
    # the master's LP at round 10 is 10,617.53 USD with them against 17,565.29)
    rel = relax_fleet(
        fp,
        datas,
        own_value,
        deadline.fraction(RELAX_SHARE),
        say,
        flow_caps,
        start=per.prices if per.lower_bound_usd is not None else None,
        schedules=[list(zip(c, x, strict=True)) for c, x in plans],
    )
    say(
        f"relaxation over the fleet: bound {rel.lower_bound_usd:,.2f} USD after "
        f"{rel.rounds} rounds ({rel.columns:,} columns, {rel.seconds:.1f} s"
        f"{', converged' if rel.converged else ''})"
    )
    # raised beyond the gap asked for (by 22 USD of 94,200 on eight sites of 16
    # deployments, where the pass below then proved nothing more in 38 s)
    raised = rel.lower_bound_usd > bound + fp.solver.mip_gap * abs(bound)
    bound = max(bound, rel.lower_bound_usd)
    if rel.prices is not None and (rel.converged or raised):
        # a bound at any prices (weak duality, docs/fleet.md section 5): each site's own
        # relaxation then prices its cap and pools, which the fleet's did not settle;
        # skipped where the relaxation raised nothing over the periods' bound (its
        # prices are theirs, or no better)
        share = PRICED_SHARE * deadline.remaining() / len(datas)
        priced_configs, priced_loads, sites_bound = sites_at_prices(
            fp, datas, rel.prices.lams, share, say
        )
        if np.isfinite(sites_bound):
            bound = max(bound, sites_bound + rel.outside_usd)
            say(f"the sites at the relaxation's prices prove {bound:,.2f} USD")
        if rel.converged:
            plans.append((priced_configs, priced_loads))
    # 4. the regions' demand routed within what each plan can serve, each site's draw
    # within its cap (its tangent around the plan's loads); then the sites planned
    # again for the best such routing, or the relaxation's where it converged
    routed = []
    for configs, loads in plans:
        capacity = [_smax(data, c) for data, c in zip(datas, configs, strict=True)]
        power = [tangent_power(d, c, x) for d, c, x in zip(datas, configs, loads, strict=True)]
        owns, flows = route_within(fp, capacity, own_value, flow_caps, power)
        routed.append(_priced_plan(fp, configs, owns, flows, t0))
        say(f"routed within the sites' plans: {routed[-1][1]:,.2f} USD")
    candidates += routed
    if rel.converged:
        plan_for(rel.flows, deadline.remaining() / len(datas), "for the relaxation's routing")
    elif not deadline.expired():
        best = min(routed, key=lambda c: c[1])[2]
        plan_for(best, deadline.remaining() / len(datas), "for the routing within the plans")
    # a plan whose routing would overdraw a site is not one (the tangent rows prevent
    # it; the check stays)
    feasible = [c for c in candidates if all(o.priced.violation_free for o in c[0])]
    sites, objective, flows = min(feasible, key=lambda c: c[1])
    return _finish(fp, datas, sites, flows, objective, [bound], t0, DECOMPOSED, None)


def _finish(
    fp: FleetProblem,
    datas: list[Any],
    sites: list[Outcome],
    flows: FloatArray,
    objective: float,
    bounds: list[float],
    t0: float,
    method: str,
    status: str | None,
) -> FleetOutcome:
    """The fleet's outcome: its bound the best of ``bounds`` and the idle sites' cost
    (every other term of the cost is >= 0), at most the objective; ``status`` as given,
    else optimal when the gap is within ``solver.mip_gap`` (and each site's with it)."""
    floor = sum(site_constant_usd(data) for data in datas)
    bound = min(max([floor, *bounds]), objective)
    if status is None:
        status = "optimal" if _gap(objective, bound) <= fp.solver.mip_gap else "time_limit"
        for o in sites:
            o.status = status
    return FleetOutcome(
        status=status,
        problem=fp,
        sites=sites,
        flows=flows,
        objective_usd=objective,
        lower_bound_usd=bound,
        solve_time_s=time.perf_counter() - t0,
        method=method,
    )


def sites_at_prices(
    fp: FleetProblem, datas: list[Any], lams: list[FloatArray], share: float, say: Progress
) -> tuple[list[NDArray[np.int64]], list[FloatArray], float]:
    """Each site planned alone by its pipeline, in ``share`` seconds, with every
    request it may be sent valued at the prices ``lams`` (K_i, T) per req/s through a
    period (:func:`formulation.fleet.decompose.priced_data`): each site's
    configurations, what it serves there (K_i, T), and the sum of the sites' proven
    bounds."""
    configs, served, total = [], [], 0.0
    for i, p in enumerate(fp.sites):
        alone = dataclasses.replace(
            p, solver=dataclasses.replace(p.solver, time_limit_s=max(share, 0.05))
        )
        say(f"site {fp.site_names[i]} alone at the relaxation's prices")
        try:
            o = solve(alone, tables=priced_data(datas[i], lams[i]))
        except InfeasibleError as e:
            raise _at_site(fp, i, e) from e
        sched = o.priced.schedule
        configs.append(sched.config)
        served.append(np.minimum(sched.served_rps, _smax(datas[i], sched.config)))
        total += o.lower_bound_usd
    return configs, served, total


def _priced_plan(
    fp: FleetProblem,
    configs: list[NDArray[np.int64]],
    owns: list[FloatArray],
    flows: FloatArray,
    t0: float,
) -> tuple[list[Outcome], float, FloatArray]:
    """The fleet's plan of these configurations, own loads and flows: each site's
    schedule priced for its own demand and what the flows send it (serving both), and
    the fleet's cost."""
    elapsed = time.perf_counter() - t0
    sites = []
    for i, config in enumerate(configs):
        sent = sent_to(fp, i, flows)
        report = site_data(fp, i, own_demand(fp, i) + sent, penalties=True)
        load = np.minimum(owns[i] + sent, _smax(report, config))
        priced = price_schedule(report, Schedule(config, load))
        sites.append(Outcome("time_limit", report, priced, float("nan"), float("nan"),
                             elapsed, {}, {}))  # fmt: skip
    objective = sum(o.priced.objective_usd for o in sites) + region_cost(fp, flows)
    return sites, objective, flows


def _home_start(
    fp: FleetProblem,
    fm: FleetModel,
    deadline: Deadline,
    flow_caps: FloatArray | None,
    say: Progress,
) -> float | None:
    """The joint MILP's start, loaded into its variables (returns the LP relaxation's
    value, a lower bound, when it was solved): the routing of its LP relaxation
    (:func:`_lp_flows`; else each region's demand at its server of least penalty, within
    ``flow_caps``), then each site planned alone by its own pipeline
    (:func:`formulation.solve.solve`) for the demand that routing sends it, in
    ``START_SHARE`` of the time left, and the flows lowered within the ramp. Without a
    start, HiGHS found no schedule but serving nothing in 30 s on the three-site demo
    (8,712 choices)."""
    T = fp.n_periods
    flows, lp_bound = _lp_flows(fp, fm, deadline)
    if flows is None:
        flows = _home_flows(fp, flow_caps)
    share = START_SHARE * deadline.remaining() / len(fp.sites)
    m = fm.model
    configs, owns, started = _plan_sites(fp, flows, share, say, fm.datas)
    for i, own in enumerate(owns):
        for (k, t), v in np.ndenumerate(own):
            m.own[i, k, t].set_value(float(v))
    if fp.max_share_change is not None:
        started = _within_ramp(fp, started)
    for (f, t), v in m.flow.items():
        v.set_value(float(started[f, t]))
    # each site serves what it is sent (its own demand first, then the flows)
    for i, config in enumerate(configs):
        load = np.array(
            [[float(m.own[i, k, t].value) for t in range(T)] for k in range(config.shape[0])]
        ) + sent_to(fp, i, started)
        set_start(getattr(m, f"site{i}"), Schedule(config, load))
    return lp_bound


def _home_flows(fp: FleetProblem, flow_caps: FloatArray | None) -> FloatArray:
    """(flows, T) each region's demand at its server of least penalty (the first of
    several), within ``flow_caps``."""
    fl = flow_list(fp)
    flows = np.zeros((len(fl), fp.n_periods))
    best: dict[int, tuple[float, int]] = {}
    for f, (r, q) in enumerate(fl):
        pen = fp.regions[r].servers[q].penalty_usd_per_request
        if r not in best or pen < best[r][0]:
            best[r] = (pen, f)
    for r, (_pen, f) in best.items():
        flows[f] = np.asarray(fp.regions[r].demand_rps)
        if flow_caps is not None:
            flows[f] = np.minimum(flows[f], flow_caps[f])
    return flows


def _plan_sites(
    fp: FleetProblem,
    flows: FloatArray,
    share: float,
    say: Progress,
    datas: list[Any],
    why: str = "for the relaxation's routing",
) -> tuple[list[NDArray[np.int64]], list[FloatArray], FloatArray]:
    """Each site planned alone by its own pipeline (:func:`formulation.solve.solve`, in
    ``share`` seconds) for its own demand and what ``flows`` send it, its unserved
    requests valued at the most any of them is worth; then what it serves split into
    its own demand first and the flows in order. Returns each site's configurations
    (K_i, T), own load (K_i, T) and the flows as served (flows, T). ``datas``: the
    sites' data at the most demand they may be sent (for the loads each choice can
    take)."""
    fl = flow_list(fp)
    started = np.zeros_like(flows)
    configs: list[NDArray[np.int64]] = []
    owns: list[FloatArray] = []
    for i, p in enumerate(fp.sites):
        sent = sent_to(fp, i, flows)
        deps = []
        for k, d in enumerate(p.deployments):
            pens = [d.unserved_penalty_usd_per_request] + [
                fp.regions[r].unserved_penalty_usd_per_request
                for f, (r, q) in enumerate(fl)
                if fp.regions[r].servers[q].site == i
                and fp.regions[r].servers[q].deployment == k
                and flows[f].any()
            ]
            demand = tuple(float(x) for x in np.asarray(d.demand_rps) + sent[k])
            deps.append(
                dataclasses.replace(
                    d, demand_rps=demand, unserved_penalty_usd_per_request=max(pens)
                )
            )
        alone = dataclasses.replace(
            p,
            deployments=tuple(deps),
            solver=dataclasses.replace(p.solver, time_limit_s=max(share, 0.05)),
        )
        say(f"site {fp.site_names[i]} alone, {why}")
        try:
            o = solve(alone)
        except InfeasibleError as e:
            raise _at_site(fp, i, e) from e
        say(
            f"site {fp.site_names[i]}: {o.priced.objective_usd:,.2f} USD for what it is "
            f"sent, proven within {100 * o.mip_gap:.2f}%"
        )
        sched = o.priced.schedule
        served = np.minimum(sched.served_rps, _smax(datas[i], sched.config))
        configs.append(sched.config)
        own = own_demand(fp, i)
        took = np.minimum(own, served)
        owns.append(took)
        rest = served - took
        for f, (r, q) in enumerate(fl):
            s = fp.regions[r].servers[q]
            if s.site == i:
                give = np.minimum(rest[s.deployment], flows[f])
                started[f] = give
                rest[s.deployment] -= give
    return configs, owns, started


def _complete_start(fp: FleetProblem, fm: FleetModel, deadline: Deadline) -> None:
    """The start's loads and flows made the best for its configurations: the joint MILP
    with every integer variable fixed at the start's value is an LP, solved and loaded
    as the start (a start whose continuous part is only feasible, HiGHS kept as it was
    for 60 s on the three-site demo: 2,849.62 USD, against 2,606.82 with them
    optimal)."""
    import pyomo.environ as pyo

    fixed = [
        v
        for v in fm.model.component_data_objects(pyo.Var)
        if v.is_integer() and not v.fixed and v.value is not None
    ]
    for v in fixed:
        v.fix(round(float(v.value)))
    try:
        solve_pyomo(fm.model, deadline.fraction(LP_SHARE), 1e-9, fp.solver.threads, warm=True)
    finally:
        for v in fixed:
            v.unfix()


def _lp_flows(
    fp: FleetProblem, fm: FleetModel, deadline: Deadline
) -> tuple[FloatArray | None, float | None]:
    """The flows of the joint MILP's LP relaxation (a copy of the model with its integer
    variables relaxed) and its value when optimal (a lower bound), or None when HiGHS
    gives none in the time left."""
    import pyomo.environ as pyo

    lp = pyo.TransformationFactory("core.relax_integer_vars").create_using(fm.model)
    r = solve_pyomo(lp, deadline.fraction(LP_SHARE), 1e-9, fp.solver.threads)
    if r.objective is None:
        return None, None
    out = np.zeros((len(fm.flows), fp.n_periods))
    for (f, t), v in lp.flow.items():
        out[f, t] = max(float(v.value or 0.0), 0.0)
    return out, r.objective if r.termination == "optimal" else None


def _within_ramp(fp: FleetProblem, flows: FloatArray) -> FloatArray:
    """``flows`` lowered until each one's share of its region's demand changes by at
    most the ramp between any two periods: per flow, the largest share below the given
    one that moves at most ``ramp`` per period (``min_u share_u + ramp |t - u|``), taken
    over every period (where a demand is 0 the share is 0). Lower flows keep a start
    feasible when each site's served load is lowered with them."""
    ramp = float(fp.max_share_change or 0.0)
    out = flows.copy()
    idx = np.arange(fp.n_periods)
    for f, (r, _q) in enumerate(flow_list(fp)):
        demand = np.asarray(fp.regions[r].demand_rps)
        share = np.where(demand > 0, flows[f] / np.where(demand > 0, demand, 1.0), 0.0)
        share = np.min(share[None, :] + ramp * np.abs(idx[:, None] - idx[None, :]), axis=1)
        out[f] = np.minimum(flows[f], share * demand)
    return out


def _own_values(fm: FleetModel, i: int) -> FloatArray:
    """(K_i, T) site ``i``'s own demand served, as the model's variables hold it."""
    m = fm.model
    n_dep, T = len(fm.datas[i].deployments), fm.datas[i].n_periods
    return np.array([[float(m.own[i, k, t].value or 0.0) for t in range(T)] for k in range(n_dep)])


def sent_to(fp: FleetProblem, i: int, flows: FloatArray) -> FloatArray:
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


def _at_site(fp: FleetProblem, i: int, e: InfeasibleError) -> InfeasibleError:
    """Site ``i``'s infeasibility as the fleet's: its message and conflicts under the
    site's name."""
    conflicts = [{"site": fp.site_names[i], **c} for c in e.conflicts]
    return InfeasibleError(f"sites[{i}] ({fp.site_names[i]}): {e}", conflicts)


def _infeasible(fp: FleetProblem, datas: list[Any], deadline: Deadline) -> InfeasibleError:
    """A fleet is infeasible only where a site is (any demand may go unserved): the
    first site whose LP relaxation names periods at fault, under its name."""
    for i, data in enumerate(datas):
        err = diagnose_infeasible(data, "infeasible", deadline)
        if any(c.get("constraint") != "integrality" for c in err.conflicts):
            return _at_site(fp, i, err)
    return InfeasibleError(
        "HiGHS proved the fleet infeasible",
        [{"constraint": "integrality", "reason": "no site's relaxation names a period"}],
    )
