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

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass
class Options:
    pnet: FloatArray  # net IT power of each option
    cost: FloatArray
    pick: IntArray  # (n, M) option index per deployment (-1: not yet chosen)


def _pareto(pnet: FloatArray, cost: FloatArray) -> IntArray:
    """Indices of points not dominated in (pnet, cost), both minimised.

    Sorted by power only (a quicksort, much faster than a two-key sort on the large
    sums this sees); among equal powers a dominated point may survive, which costs a
    little work later but never drops a point that matters."""
    order = np.argsort(pnet)
    c = cost[order]
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], c[:-1]]))
    keep = c < best_before - 1e-12 * np.maximum(np.abs(c), 1.0)
    return order[keep].astype(np.int64)


def endpoint_options(
    data: ScheduleData, m: int, t: int, offset: FloatArray | None = None
) -> tuple[FloatArray, FloatArray, IntArray, FloatArray]:
    """Per allowed configuration: (pnet, cost, config, served) at s = 0 and s = smax;
    ``offset[k]`` (optional) is added to the cost of running configuration ``k``."""
    d = data.deployments[m]
    ks = np.flatnonzero(d.allowed)
    idle = data.idle_gpu_power_w
    cw = float(data.cost_usd_per_w[t])
    u = float(d.unserved_usd_per_rps[t])
    lam = float(d.demand_rps[t])
    smax = d.smax_rps[t, ks]
    p0 = d.bp_power_w[ks, 0]
    p1 = d.full_load_power_w[t, ks]
    g = d.gpus[ks] * idle
    pnet = np.concatenate([p0 - g, p1 - g])
    cost = cw * pnet + u * (lam - np.concatenate([np.zeros_like(smax), smax]))
    cfg = np.concatenate([ks, ks]).astype(np.int64)
    served = np.concatenate([np.zeros_like(smax), smax])
    if offset is not None:
        cost = cost + offset[cfg]
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


#: Sizes beyond which one-period enumeration is too slow to run per period (its work
#: grows with deployments x candidates x Pareto partial sums); beyond them the exact
#: window of formulation.solve runs over Lagrangian-pruned choices instead.
MAX_ENUM_DEPLOYMENTS = 6
MAX_ENUM_CANDIDATES = 300
#: or, for fewer but larger deployments (still at most MAX_ENUM_DEPLOYMENTS): at most
#: this many candidates in all, and MAX_ENUM_LARGE per deployment (2 deployments of
#: 32 GPUs: proven within 0.1% in 13 s this way, against 4.4% after 60 s without;
#: 4 of 32 gain nothing)
MAX_ENUM_TOTAL = 1200
MAX_ENUM_LARGE = 600


def enumeration_applies(data: ScheduleData) -> bool:
    """One-period enumeration is exact here and fast enough to use per period."""
    sizes = [d.n_configs for d in data.deployments]
    if len(sizes) > MAX_ENUM_DEPLOYMENTS:
        return False
    small = max(sizes) <= MAX_ENUM_CANDIDATES
    few = sum(sizes) <= MAX_ENUM_TOTAL and max(sizes) <= MAX_ENUM_LARGE
    return (small or few) and not any(pool_can_bind(data, t) for t in range(data.n_periods))


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


def decisions_cost(
    data: ScheduleData,
    t: int,
    cfg: IntArray,
    served: FloatArray,
    offsets: list[FloatArray] | None = None,
) -> float:
    """Period cost of given decisions (without the site's idle constant), offsets added."""
    idle = data.idle_gpu_power_w
    cw = float(data.cost_usd_per_w[t])
    total = 0.0
    for m, d in enumerate(data.deployments):
        k = int(cfg[m])
        p = float(d.power_w(k, float(served[m]))[0])
        total += cw * (p - idle * float(d.gpus[k]))
        total += float(d.unserved_usd_per_rps[t]) * (float(d.demand_rps[t]) - float(served[m]))
        if offsets is not None:
            total += float(offsets[m][k])
    return total


def solve_period(
    data: ScheduleData,
    t: int,
    offsets: list[FloatArray] | None = None,
    hint: PeriodSolution | None = None,
) -> PeriodSolution | None:
    """Exact optimum of period ``t`` alone (transitions ignored); None if infeasible.

    ``offsets[m][k]`` (optional) is added to the cost of deployment ``m`` running
    configuration ``k`` (Lagrange multipliers). ``hint`` (optional) is a feasible
    solution of the period (e.g. the previous one under other offsets): its cost bounds
    the optimum, so partial sums that cannot beat it are pruned early. Raises ValueError
    if a GPU pool can bind in the period (not handled here)."""
    if pool_can_bind(data, t):
        raise ValueError("a GPU pool can bind: use the MILP for this period")
    M = len(data.deployments)
    budget = float(data.net_cap_w[t])
    opts = [endpoint_options(data, m, t, None if offsets is None else offsets[m]) for m in range(M)]
    pruned = []
    for pnet, cost, cfg, served in opts:
        keep = _pareto(pnet, cost)
        pruned.append((pnet[keep], cost[keep], cfg[keep], served[keep]))
    min_p = np.array([p[0].min() for p in pruned])
    empty = Options(np.zeros(1), np.zeros(1), -np.ones((1, M), dtype=np.int64))

    # least cost of each deployment over all its options: its cost is concave in the
    # served load, so the least over endpoint options bounds its interior ones too
    min_c = np.array([p[1].min() for p in pruned])

    def combine(members: list[int], reserve: float, cost_cap: float = np.inf) -> Options:
        """Pareto sums of the members' endpoint options within the budget; partial sums
        whose cost plus the least cost of the members still to come (and ``cost_cap``'s
        caller's own least) exceeds ``cost_cap`` cannot lead to a better optimum."""
        cur = empty
        rest = float(sum(min_p[j] for j in members))
        rest_c = float(sum(min_c[j] for j in members))
        for j in members:
            rest -= min_p[j]
            rest_c -= min_c[j]
            cur = _merge(cur, pruned[j][0], pruned[j][1], j, budget - reserve - rest)
            if np.isfinite(cost_cap) and cur.pnet.size:
                keep = cur.cost + rest_c <= cost_cap + 1e-9 * max(abs(cost_cap), 1.0)
                cur = Options(cur.pnet[keep], cur.cost[keep], cur.pick[keep])
            if cur.pnet.size == 0:
                break
        return cur

    best_cost = np.inf
    best_cfg = np.zeros(M, dtype=np.int64)
    best_srv = np.zeros(M)
    if hint is not None:
        best_cost = decisions_cost(data, t, hint.config, hint.served, offsets)
        best_cfg = hint.config.copy()
        best_srv = hint.served.copy()
    allm = combine(list(range(M)), 0.0, best_cost)
    if allm.pnet.size and float(allm.cost.min()) < best_cost - 1e-12:
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
        # the filler costs at least its least endpoint cost (concavity, as above)
        rest = combine(others, f_min, best_cost - min_c[f]) if others else empty
        if rest.pnet.size == 0:
            continue
        # budget for the filler's power, per (rest point, config); the filler is strictly
        # inside its range only where P_k(0) <= room < P_k(smax) (elsewhere an endpoint
        # option, already enumerated, is as good), so only those pairs are evaluated
        smax_k = d.smax_rps[t, ks]
        p0_k = d.bp_power_w[ks, 0]
        p1_k = d.full_load_power_w[t, ks]
        room = budget - rest.pnet[:, None] + idle * d.gpus[ks][None, :]
        ri, ci = np.nonzero((room >= p0_k[None, :]) & (room < p1_k[None, :]))
        if ri.size == 0:
            continue
        kk = ks[ci]
        s = np.minimum(d.max_load_within(kk, room[ri, ci]), smax_k[ci])
        p = d.power_w(kk, s)
        u = float(d.unserved_usd_per_rps[t])
        cost = rest.cost[ri] + cw * (p - idle * d.gpus[kk]) + u * (float(d.demand_rps[t]) - s)
        if offsets is not None:
            cost = cost + offsets[f][kk]
        q = int(np.argmin(cost))
        if cost[q] < best_cost - 1e-12:
            best_cost = float(cost[q])
            for o in others:
                best_cfg[o] = pruned[o][2][rest.pick[ri[q], o]]
                best_srv[o] = pruned[o][3][rest.pick[ri[q], o]]
            best_cfg[f] = kk[q]
            best_srv[f] = float(s[q])
    if not np.isfinite(best_cost):
        return None
    return PeriodSolution(best_cost, best_cfg, best_srv)
