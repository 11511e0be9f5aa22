"""Baselines priced beside every schedule (SPEC 4).

* static peak: each deployment runs, for the whole horizon, the least-power
  configuration whose ``headroom * mu`` covers its peak demand (its largest-capacity
  configuration if none does); served loads are the exact cost-minimising ones under
  the cap in each period (:func:`formulation.evaluate.best_served`).
* greedy_ramped: :func:`greedy_ramped`, period by period within the transition limits
  (a comparator that breaks none of them).
* greedy: every period on its own, the configurations and served loads that minimise
  that period's cost under the cap and inventory, ignoring transitions. Where the
  deployments' individual optima fit the site they are the period's optimum; where
  they do not, the one-period problem is solved exactly by Lagrangian-bounded Pareto
  enumeration (:func:`formulation.subproblems.period.solve_period`) within the baseline's time
  (a period whose search outlasts it keeps the best choice found, and the report says
  how many periods are proven), or, when a GPU pool can bind, by the compact MILP over
  those periods (restricted to each deployment's capacity-power front when the full
  model cannot be built in time).

Both are priced with the same objective as the schedule (transitions included), with
their cap, inventory and transition-limit violations counted.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from formulation.budget import Deadline, TimeBudget
from formulation.data import ScheduleData, take_periods
from formulation.evaluate import Priced, Schedule, best_served, price_schedule
from formulation.milp.compact import estimated_build_s, solve_compact
from formulation.processes.executor import open_pool
from formulation.subproblems.dp import (
    DeploymentGrid,
    deployment_grid,
    endpoint_costs,
    stage_costs,
    transition_cost,
)
from formulation.subproblems.period import pool_can_bind, solve_period
from model.pareto import pareto_mask

MAX_ENUMERATED = 12


def _served_fixed(data: ScheduleData, cfg: np.ndarray) -> np.ndarray:
    """Cost-minimising served loads for fixed configurations, period by period."""
    M, T = cfg.shape
    served = np.zeros((M, T))
    for t in range(T):
        ks = cfg[:, t]
        own = np.zeros(M)
        power = 0.0
        for m, d in enumerate(data.deployments):
            k = int(ks[m])
            smax = float(d.smax_rps[t, k])
            p0 = float(d.power_w(k, 0.0)[0])
            p1 = float(d.power_w(k, smax)[0])
            cw, u = float(data.cost_usd_per_w[t]), float(d.unserved_usd_per_rps[t])
            full = cw * p1 - u * smax < cw * p0
            own[m] = smax if full else 0.0
            power += p1 if full else p0
        used = np.zeros(len(data.pools), dtype=np.int64)
        for m in range(len(data.deployments)):
            data.add_pool_use(used, m, ks[m])
        idle = data.idle_gpu_power_w * float(np.maximum(data.pool_gpus - used, 0).sum())
        if power + idle <= float(data.it_cap_w[t]) or M > MAX_ENUMERATED:
            served[:, t] = own
        else:
            served[:, t], _ = best_served(data, t, ks)
    return served


def static_peak(data: ScheduleData) -> Priced:
    cfg = np.zeros((len(data.deployments), data.n_periods), dtype=np.int64)
    for m, d in enumerate(data.deployments):
        peak = float(d.demand_rps.max())
        ok = d.allowed.copy()
        covers = ok & (d.headroom * d.capacity_rps >= peak)
        p_at_cap = np.array([d.bp_power_w[k, int(d.bp_count[k]) - 1] for k in range(d.n_configs)])
        if covers.any():
            idx = np.flatnonzero(covers)
            k = int(idx[np.lexsort((d.gpus[idx], -d.capacity_rps[idx], p_at_cap[idx]))[0]])
        else:
            idx = np.flatnonzero(ok)
            k = int(idx[np.lexsort((p_at_cap[idx], -d.capacity_rps[idx]))[0]])
        cfg[m, :] = k
    return price_schedule(data, Schedule(cfg, _served_fixed(data, cfg)))


def periods_alone(data: ScheduleData, idx: np.ndarray) -> ScheduleData:
    """The periods ``idx`` with transitions free and unlimited: independent periods."""
    return dataclasses.replace(
        take_periods(data, idx), start_cost_usd=0.0, stop_cost_usd=0.0, max_changes=None
    )


def _front_allowed(data: ScheduleData) -> list[list[list[int]]]:
    """Per deployment: off and the configurations on its capacity-power front."""

    out = []
    for d in data.deployments:
        p_cap = np.array([d.bp_power_w[k, int(d.bp_count[k]) - 1] for k in range(d.n_configs)])
        ok = d.allowed.copy()
        ok[0] = False
        front = np.zeros(d.n_configs, dtype=bool)
        idx = np.flatnonzero(ok)
        front[idx[pareto_mask(d.capacity_rps[idx], p_cap[idx])]] = True
        if d.allowed[0]:
            front[0] = True
        ks = np.flatnonzero(front).tolist()
        out.append([ks for _ in range(data.n_periods)])
    return out


def _grids(data: ScheduleData, grids: Sequence[DeploymentGrid] | None) -> list[DeploymentGrid]:
    if grids is not None:
        return list(grids)
    return [deployment_grid(data, d) for d in data.deployments]


def priced_period(
    data: ScheduleData, grids: Sequence[DeploymentGrid], t: int
) -> tuple[np.ndarray, np.ndarray]:
    """Period ``t`` alone: each deployment's cheapest configuration and load (0 or its
    maximum) at a price ``pi`` per IT watt on top of the energy price, with ``pi`` the
    least (by bisection) at which their net power fits the cap; at a high enough
    price every deployment takes its least-power choice, so the result fits the cap
    whenever any mix does. Returns ``(configurations, served loads)``, (M,) each."""
    M = len(data.deployments)
    rhs = float(data.net_cap_w[t])
    idle = data.idle_gpu_power_w

    def choose(pi: float) -> tuple[np.ndarray, np.ndarray, float]:
        ks = np.zeros(M, dtype=np.int64)
        loads = np.zeros(M)
        net = 0.0
        a = np.asarray(float(data.cost_usd_per_w[t]) + pi)
        for m, d in enumerate(data.deployments):
            g = grids[m]
            u = float(d.unserved_usd_per_rps[t])
            lam = float(d.demand_rps[t])
            cost, fulls = endpoint_costs(data, d, a, 0.0, u, lam, g.p0_w[t], g.p1_w[t], g.smax[t])
            k = int(np.argmin(cost))
            full = bool(fulls[k])
            ks[m] = k
            loads[m] = float(g.smax[t, k]) if full else 0.0
            net += float((g.p1_w[t, k] if full else g.p0_w[t, k]) - idle * d.gpus[k])
        return ks, loads, net

    ks, loads, net = choose(0.0)
    if net <= rhs:
        return ks, loads
    lo, hi = 0.0, max(float(np.max(data.cost_usd_per_w)), 1e-12)
    for _ in range(200):  # doubling until the mix fits (or nothing cheaper exists)
        ks, loads, net = choose(hi)
        if net <= rhs:
            break
        lo, hi = hi, hi * 2.0
    best = (ks, loads)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        ks, loads, net = choose(mid)
        if net <= rhs:
            hi, best = mid, (ks, loads)
        else:
            lo = mid
    return best


@dataclass
class GreedyReport:
    """How the greedy baseline solved its periods: ``periods_over_cap`` (where the
    deployments' own optima break the cap or an inventory), ``periods_proven`` (of
    those, solved to their exact optimum), ``method`` and, for the enumeration,
    ``seconds`` (its time for all those periods, on its forked processes)."""

    periods_over_cap: int = 0
    periods_proven: int = 0
    method: str | None = None
    seconds: float | None = None
    #: (T,) each period's cap multiplier from its one-period problem (USD per net IT
    #: watt, 0 where the deployments' own optima fit), when the enumeration ran: the
    #: relaxation's first multipliers (not in the statistics)
    cap_prices: np.ndarray | None = dataclasses.field(default=None, repr=False)

    def enumerated_all(self, within_s: float) -> bool:
        """Whether the enumeration found every over-cap period's exact optimum (there
        is at least one) within ``within_s`` seconds."""
        return (
            self.periods_over_cap > 0
            and self.periods_proven == self.periods_over_cap
            and self.seconds is not None
            and self.seconds <= within_s
        )

    def as_stats(self) -> dict[str, Any]:
        """The report as the solve's statistics show it (fields that are set)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        out.pop("cap_prices", None)
        return out


def greedy(
    data: ScheduleData,
    deadline: Deadline,
    grids: Sequence[DeploymentGrid] | None = None,
) -> Priced:
    """See the module docstring; ``grids``: the deployments' DP grids, if built already."""
    return greedy_with_report(data, deadline, grids)[0]


def greedy_with_report(
    data: ScheduleData,
    deadline: Deadline,
    grids: Sequence[DeploymentGrid] | None = None,
    workers: int = 1,
) -> tuple[Priced, GreedyReport]:
    """:func:`greedy` by ``deadline`` and how its periods were solved (the one-period
    enumeration on ``workers`` forked processes)."""
    limit_s = deadline.remaining()  # what a MILP's build is weighed against
    M, T = len(data.deployments), data.n_periods
    cfg = np.zeros((M, T), dtype=np.int64)
    served = np.zeros((M, T))
    zero_pi = np.zeros(T)
    all_grids = _grids(data, grids)
    for m, (d, g) in enumerate(zip(data.deployments, all_grids, strict=True)):
        cost, full = stage_costs(data, d, g, zero_pi, np.zeros(T))
        cfg[m] = np.argmin(cost, axis=1)
        served[m] = np.where(full[np.arange(T), cfg[m]], d.smax_rps[np.arange(T), cfg[m]], 0.0)
    first = price_schedule(data, Schedule(cfg, served))
    bad = np.array(
        sorted(set(first.cap_violations) | set(first.inventory_violations)), dtype=np.int64
    )
    report = GreedyReport(periods_over_cap=int(bad.size))
    if bad.size and not pool_can_bind(data, int(bad[0])):
        # exact one-period optima (formulation.subproblems.period); a period whose search outlasts
        # the time limit keeps the best choice found, counted as not proven
        report.method = "one-period optimum by Lagrangian-bounded Pareto enumeration"
        t0 = time.perf_counter()
        with open_pool(data, workers) as pool:
            sols = pool.map(solve_period, [(int(t), None, None, deadline) for t in bad])
        report.cap_prices = np.zeros(T)
        for t, sol in zip(bad, sols, strict=True):
            if sol is None:  # no mix meets the cap: shed what the least-power mix can
                cfg[:, t], served[:, t] = priced_period(data, all_grids, int(t))
                continue
            cfg[:, t], served[:, t] = sol.config, sol.served
            report.periods_proven += int(sol.proven)
            report.cap_prices[t] = sol.cap_price_usd_per_w
        report.seconds = round(time.perf_counter() - t0, 3)
        return price_schedule(data, Schedule(cfg, served)), report
    if bad.size:
        # a GPU pool can bind: each period priced on its own first (a feasible mix
        # wherever shedding can meet the cap), then, if it can be built in time, one
        # MILP over those periods (independent once transitions are ignored)
        # restricted to each deployment's capacity-power front (plus off): small,
        # but it may miss a better off-front mix, so an approximation
        for t in bad:
            cfg[:, t], served[:, t] = priced_period(data, all_grids, int(t))
        sub = periods_alone(data, bad)
        allowed: list[list[list[int]]] | None = None
        choices = sum(int(d.allowed.sum()) for d in data.deployments) * bad.size
        report.method = "compact MILP over every configuration (gap 1e-4)"
        if estimated_build_s(choices) > TimeBudget.BUILD_SHARE * limit_s:
            allowed = _front_allowed(sub)
            choices = sum(len(rows[0]) for rows in allowed) * bad.size
            report.method = "MILP over each deployment's capacity-power front"
        if estimated_build_s(choices) > TimeBudget.BUILD_SHARE * limit_s:
            report.method = "each period priced on its own (no MILP fits the time)"
        else:
            start = Schedule(cfg[:, bad], served[:, bad])
            r = solve_compact(sub, deadline, 1e-4, allowed=allowed, start=start)
            if r.schedule is not None:
                before = price_schedule(sub, start)
                after = price_schedule(sub, r.schedule)
                if after.violation_free and (
                    not before.violation_free or after.objective_usd <= before.objective_usd
                ):
                    cfg[:, bad] = r.schedule.config
                    served[:, bad] = r.schedule.served_rps
                    if allowed is None and r.status == "optimal":
                        report.periods_proven = int(bad.size)
    return price_schedule(data, Schedule(cfg, served)), report


def _fit_moves(
    data: ScheduleData,
    options: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    pick: np.ndarray,
    budget: float,
) -> np.ndarray:
    """:func:`greedy_ramped`'s moves in one period: from ``pick`` (an option index per
    deployment), while a GPU pool or the cap ``budget`` (net IT watts) is broken, the
    move of least added cost per GPU freed (while a pool is over), else per watt
    freed (filling no pool past its inventory), one at a time, until the site fits or
    no move helps. All deployments' options are scanned at once as one flat array:
    the same moves, and the same ties (the first deployment, then its first option),
    as a scan deployment by deployment."""
    sizes = np.array([o[0].size for o in options], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    owner = np.repeat(np.arange(len(options)), sizes)
    cost = np.concatenate([o[2] for o in options])
    net = np.concatenate([o[3] for o in options])
    gpus = np.concatenate([o[4] for o in options]).astype(np.int64)
    pool_of = np.asarray(data.pool_of, dtype=np.int64)
    opt_pool = pool_of[owner]
    # (G, n) each option's GPUs of each pool, where a deployment's phases draw from two
    # pools (docs/mixed-gpus.md); None: each option's GPUs are of its owner's one pool
    use = None if data.prefill_pool_of is None else _option_pool_use(data, options, start)
    pick = pick.copy()
    for _ in range(int(sizes.sum())):  # each move strictly improves
        at = start + pick
        if use is None:
            used = np.bincount(pool_of, weights=gpus[at], minlength=len(data.pools))
        else:
            used = use[:, at].sum(axis=1)
        over_pool = used.astype(np.int64) - data.pool_gpus
        over_w = sum(net[at].tolist()) - budget
        if over_pool.max() <= 0 and over_w <= 1e-9 * max(abs(budget), 1.0):
            break
        dc = cost - cost[at][owner]  # added cost
        if use is not None:  # GPUs freed in over-full pools; no pool filled past its own
            added = use - use[:, at][:, owner]
            if over_pool.max() > 0:
                gain = -(added * (over_pool > 0)[:, None]).sum(axis=0).astype(float)
                ok = gain > 0
            else:
                gain = net[at][owner] - net
                ok = (gain > 0) & (added <= -over_pool[:, None]).all(axis=0)
        elif over_pool.max() > 0:  # free GPUs of an over-full pool first
            added_gpus = gpus - gpus[at][owner]
            gain = -added_gpus.astype(float)
            ok = (gain > 0) & (over_pool[opt_pool] > 0)
        else:  # then watts, without filling a pool past its inventory
            added_gpus = gpus - gpus[at][owner]
            gain = net[at][owner] - net
            ok = (gain > 0) & (added_gpus <= -over_pool[opt_pool])
        if not ok.any():
            break
        ratio = np.where(ok, dc / np.where(ok, gain, 1.0), np.inf)
        j = int(np.argmin(ratio))
        pick[owner[j]] = j - start[owner[j]]
    return pick


def _option_pool_use(
    data: ScheduleData,
    options: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    start: np.ndarray,
) -> np.ndarray:
    """(G, n) the GPUs each of :func:`_fit_moves`' flat options takes of each pool."""
    n = int(sum(o[0].size for o in options))
    use = np.zeros((len(data.pools), n), dtype=np.int64)
    for m, o in enumerate(options):
        for g, gpus in data.pool_use(m):
            use[g, start[m] : start[m] + o[0].size] = gpus[o[0]]
    return use


def greedy_ramped(data: ScheduleData, grids: Sequence[DeploymentGrid] | None = None) -> Priced:
    """The per-period greedy that respects transition limits (a violation-free
    comparator for ``greedy``, which may break them).

    Period by period, each deployment takes the configuration, among those within the
    change limit of its previous one, that minimises its own cost for the period (the
    stage cost at zero prices, served load 0 or the most it may serve) plus the
    transition; where the site then breaks a GPU pool or the cap, moves that free
    GPUs (then watts) at the least added cost per GPU (per watt) are taken one at a
    time, still within the limits, until it fits or no move helps (the violation is
    then counted by the pricing, as for every baseline)."""
    M, T = len(data.deployments), data.n_periods
    tabs = [(g.p0_w[0], g.p1_w) for g in _grids(data, grids)]
    cfg = np.zeros((M, T), dtype=np.int64)
    served = np.zeros((M, T))
    prev = np.array([d.initial for d in data.deployments], dtype=np.int64)
    idle = data.idle_gpu_power_w
    for t in range(T):
        options = []  # per deployment: (configs, serve-full flag, cost, net IT power, gpus)
        pick = np.zeros(M, dtype=np.int64)
        for m, d in enumerate(data.deployments):
            p0, p1 = tabs[m]
            step = transition_cost(data, d, int(prev[m]), np.arange(d.n_configs))
            ks = np.flatnonzero(np.isfinite(step) & d.allowed)
            # both served levels of each reachable configuration are options
            k2 = np.concatenate([ks, ks])
            s_full = np.concatenate([np.zeros(ks.size, bool), np.ones(ks.size, bool)])
            u = d.unserved_usd_per_rps[t]
            cw = data.cost_usd_per_w[t]
            smax = d.smax_rps[t, ks]
            c = np.concatenate(
                [cw * p0[ks] + u * d.demand_rps[t], cw * p1[t, ks] + u * (d.demand_rps[t] - smax)]
            )
            c = (
                c
                - cw * idle * np.concatenate([d.gpus[ks], d.gpus[ks]])
                + np.concatenate([step[ks], step[ks]])
            )
            net = np.concatenate([p0[ks], p1[t, ks]]) - idle * np.concatenate(
                [d.gpus[ks], d.gpus[ks]]
            )
            options.append((k2, s_full, c, net, d.gpus[k2]))
            pick[m] = int(np.argmin(c))
        budget = float(data.net_cap_w[t])
        pick = _fit_moves(data, options, pick, budget)
        for m, o in enumerate(options):
            k = int(o[0][pick[m]])
            cfg[m, t] = k
            served[m, t] = data.deployments[m].smax_rps[t, k] if o[1][pick[m]] else 0.0
        prev = cfg[:, t].copy()
    return price_schedule(data, Schedule(cfg, served))
