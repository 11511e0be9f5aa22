"""Exact one-period site optimum without transitions, by Pareto enumeration.

With transitions ignored, a period is a multiple-choice knapsack: every deployment
picks a configuration and a served load, the sum of net IT powers (deployment power
minus the idle power of the GPUs it uses) must fit the period's budget, and the cost
is ``sum_m cw P_m - p_idle cw gpus_m + u_m (demand_m - s_m)``.

Two facts make it small. (1) With configurations fixed, an optimal load vector has at
most one deployment strictly between 0 and its maximum (the vertex argument of
:func:`formulation.evaluate.best_served`). (2) Among "endpoint" options (a config
serving 0 or its maximum) only those not dominated in (net power, cost) matter, and
sums of options can be pruned the same way. So the optimum is the better of

* the best sum of endpoint options within the budget (merge the deployments' Pareto
  sets one by one, pruning dominated and over-budget partial sums), and
* for each deployment ``f`` and configuration ``k``: the others at a Pareto sum of
  endpoint options, ``f`` running ``k`` and serving the most that fits.

Exact whenever no GPU pool can bind in the period (the caller checks; otherwise the
period is left to the MILP). Used for lower bounds: summed over periods with the
transitions relaxed it bounds the whole schedule from below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from formulation.data import ScheduleData
from formulation.heuristics import max_load_within

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass
class Options:
    pnet: FloatArray  # net IT power of each option
    cost: FloatArray
    pick: IntArray  # (n, M) option index per deployment (-1: not yet chosen)


def _pareto(pnet: FloatArray, cost: FloatArray) -> IntArray:
    """Indices of points not dominated in (pnet, cost), both minimised."""
    order = np.lexsort((cost, pnet))
    c = cost[order]
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], c[:-1]]))
    keep = c < best_before - 1e-12 * np.maximum(np.abs(c), 1.0)
    return order[keep].astype(np.int64)


def endpoint_options(
    data: ScheduleData, m: int, t: int
) -> tuple[FloatArray, FloatArray, IntArray, FloatArray]:
    """Per allowed configuration: (pnet, cost, config, served) at s = 0 and s = smax."""
    d = data.deployments[m]
    ks = np.flatnonzero(d.allowed)
    idle = data.idle_gpu_power_w
    cw = float(data.cost_usd_per_w[t])
    u = float(d.unserved_usd_per_rps[t])
    lam = float(d.demand_rps[t])
    smax = d.smax_rps[t, ks]
    p0 = d.bp_power_w[ks, 0]
    p1 = np.array(
        [
            np.interp(smax[i], d.bp_load_rps[k, : d.bp_count[k]], d.bp_power_w[k, : d.bp_count[k]])
            for i, k in enumerate(ks)
        ]
    )
    g = d.gpus[ks] * idle
    pnet = np.concatenate([p0 - g, p1 - g])
    cost = cw * pnet + u * (lam - np.concatenate([np.zeros_like(smax), smax]))
    cfg = np.concatenate([ks, ks]).astype(np.int64)
    served = np.concatenate([np.zeros_like(smax), smax])
    return pnet, cost, cfg, served


def _merge(a: Options, pnet: FloatArray, cost: FloatArray, m: int, limit: float) -> Options:
    tot_p = (a.pnet[:, None] + pnet[None, :]).ravel()
    tot_c = (a.cost[:, None] + cost[None, :]).ravel()
    ok = np.flatnonzero(tot_p <= limit)
    keep = ok[_pareto(tot_p[ok], tot_c[ok])]
    ia, ib = np.divmod(keep, pnet.shape[0])
    pick = a.pick[ia].copy()
    pick[:, m] = ib
    return Options(tot_p[keep], tot_c[keep], pick)


@dataclass
class PeriodSolution:
    cost_usd: float  # period cost without the site's idle constant
    config: IntArray  # (M,)
    served: FloatArray  # (M,)


def pool_can_bind(data: ScheduleData, t: int) -> bool:
    for g in range(len(data.pools)):
        most = sum(
            int(d.gpus[d.allowed].max())
            for m, d in enumerate(data.deployments)
            if data.pool_of[m] == g
        )
        if most > data.pool_gpus[g]:
            return True
    return False


def solve_period(data: ScheduleData, t: int) -> PeriodSolution | None:
    """Exact optimum of period ``t`` alone (transitions ignored); None if infeasible.

    Raises ValueError if a GPU pool can bind in the period (not handled here)."""
    if pool_can_bind(data, t):
        raise ValueError("a GPU pool can bind: use the MILP for this period")
    M = len(data.deployments)
    budget = float(data.it_cap_w[t]) - data.idle_site_it_w
    opts = [endpoint_options(data, m, t) for m in range(M)]
    pruned = []
    for pnet, cost, cfg, served in opts:
        keep = _pareto(pnet, cost)
        pruned.append((pnet[keep], cost[keep], cfg[keep], served[keep]))
    min_p = np.array([p[0].min() for p in pruned])
    empty = Options(np.zeros(1), np.zeros(1), -np.ones((1, M), dtype=np.int64))

    def combine(members: list[int], reserve: float) -> Options:
        cur = empty
        rest = float(sum(min_p[j] for j in members))
        for j in members:
            rest -= min_p[j]
            cur = _merge(cur, pruned[j][0], pruned[j][1], j, budget - reserve - rest)
            if cur.pnet.size == 0:
                break
        return cur

    best_cost = np.inf
    best_cfg = np.zeros(M, dtype=np.int64)
    best_srv = np.zeros(M)
    allm = combine(list(range(M)), 0.0)
    if allm.pnet.size:
        i = int(np.argmin(allm.cost))
        best_cost = float(allm.cost[i])
        for j in range(M):
            best_cfg[j] = pruned[j][2][allm.pick[i, j]]
            best_srv[j] = pruned[j][3][allm.pick[i, j]]
    idle = data.idle_gpu_power_w
    cw = float(data.cost_usd_per_w[t])
    for f in range(M):
        d = data.deployments[f]
        others = [j for j in range(M) if j != f]
        ks = np.flatnonzero(d.allowed & (d.smax_rps[t] > 0))
        if ks.size == 0:
            continue
        # the filler's least net power is its least p0 among these configs
        f_min = float((d.bp_power_w[ks, 0] - idle * d.gpus[ks]).min())
        rest = combine(others, f_min) if others else empty
        if rest.pnet.size == 0:
            continue
        # budget for the filler's power, per (rest point, config)
        room = budget - rest.pnet[:, None] + idle * d.gpus[ks][None, :]
        full_room = np.full((room.shape[0], d.n_configs), -np.inf)
        full_room[:, ks] = room
        s_fit = max_load_within(d, full_room)[:, ks]
        s = np.minimum(s_fit, d.smax_rps[t, ks][None, :])
        feas = s_fit >= 0
        p = np.empty_like(s)
        for i, k in enumerate(ks):
            c = int(d.bp_count[k])
            p[:, i] = np.interp(np.maximum(s[:, i], 0.0), d.bp_load_rps[k, :c], d.bp_power_w[k, :c])
        u = float(d.unserved_usd_per_rps[t])
        cost = (
            rest.cost[:, None]
            + cw * (p - idle * d.gpus[ks][None, :])
            + u * (float(d.demand_rps[t]) - s)
        )
        cost = np.where(feas, cost, np.inf)
        i, j = np.unravel_index(int(np.argmin(cost)), cost.shape)
        if cost[i, j] < best_cost - 1e-12:
            best_cost = float(cost[i, j])
            for o in others:
                best_cfg[o] = pruned[o][2][rest.pick[i, o]]
                best_srv[o] = pruned[o][3][rest.pick[i, o]]
            best_cfg[f] = ks[j]
            best_srv[f] = float(s[i, j])
    if not np.isfinite(best_cost):
        return None
    return PeriodSolution(best_cost, best_cfg, best_srv)
