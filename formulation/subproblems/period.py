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
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.budget import Deadline
from formulation.data import ScheduleData

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class _Step:
    """One merge of :func:`_merge`: point ``i`` of its result is point ``back[i]`` of the
    previous step's result plus option ``option[i]`` of deployment ``member``."""

    member: int
    back: NDArray[np.int32]
    option: NDArray[np.int32]
    prev: _Step | None


@dataclass(frozen=True)
class Options:
    """Partial sums of the deployments' options: ``pnet`` and ``cost`` per point, and
    how each point was formed (``step``; None: the empty sum, one point). A point's
    options are read back through the steps (:meth:`picks`), so a sum over ``M``
    deployments keeps two 4-byte indices per point and merge, not ``M`` 8-byte picks."""

    pnet: FloatArray  # net IT power of each option
    cost: FloatArray
    step: _Step | None = None

    def subset(self, keep: NDArray[np.bool_] | IntArray) -> Options:
        s = self.step
        step = None if s is None else _Step(s.member, s.back[keep], s.option[keep], s.prev)
        return Options(self.pnet[keep], self.cost[keep], step)

    def picks(self, i: int, n_members: int) -> IntArray:
        """(M,) the option index of each deployment in point ``i`` (-1: not in the sum)."""
        out = -np.ones(n_members, dtype=np.int64)
        s = self.step
        while s is not None:
            out[s.member] = s.option[i]
            i = int(s.back[i])
            s = s.prev
        return out


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


def choice_cost(
    data: ScheduleData,
    t: int,
    m: int,
    k: Any,
    load: Any,
    power_w: Any,
    offset: FloatArray | None = None,
) -> Any:
    """Deployment ``m``'s share of period ``t``'s cost running configuration(s) ``k`` at
    load(s) ``load`` drawing ``power_w``: its net power (idle GPUs' power credited)
    priced, and its unserved demand; ``offset[k]`` added. Vectorised over ``k``,
    ``load`` and ``power_w`` (the one place of this formula in the one-period search)."""
    d = data.deployments[m]
    cost = float(data.cost_usd_per_w[t]) * (power_w - data.idle_gpu_power_w * d.gpus[k])
    cost = cost + float(d.unserved_usd_per_rps[t]) * (float(d.demand_rps[t]) - load)
    return cost if offset is None else cost + offset[k]


def reachable_choices(
    data: ScheduleData, m: int, t: int, offset: FloatArray | None = None
) -> NDArray[np.bool_]:
    """(K,) deployment ``m``'s choices in period ``t``: those a solver needs, less any
    whose ``offset[k]`` is infinite."""
    ok = data.deployments[m].period_allowed()[t]
    return ok if offset is None else ok & np.isfinite(offset)


def endpoint_options(
    data: ScheduleData, m: int, t: int, offset: FloatArray | None = None
) -> tuple[FloatArray, FloatArray, IntArray, FloatArray]:
    """Per allowed configuration: (pnet, cost, config, served) at s = 0 and s = smax;
    ``offset[k]`` (optional) is added to the cost of running configuration ``k``."""
    d = data.deployments[m]
    ks = np.flatnonzero(reachable_choices(data, m, t, offset))
    cfg = np.concatenate([ks, ks]).astype(np.int64)
    served = np.concatenate([np.zeros(ks.size), d.smax_rps[t, ks]])
    power = np.concatenate([d.bp_power_w[ks, 0], d.full_load_power_w[t, ks]])
    pnet = power - data.idle_gpu_power_w * d.gpus[cfg]
    return pnet, choice_cost(data, t, m, cfg, served, power, offset), cfg, served


#: (partial sum, option) pairs one block of :func:`_merge` forms at once (about 16 MB per
#: array): a merge's memory is its blocks' and its Pareto front's, not all its pairs'
MERGE_BLOCK = 2_000_000


def _merge(
    a: Options,
    pnet: FloatArray,
    cost: FloatArray,
    m: int,
    limit: float,
    deadline: Deadline | None = None,
) -> Options:
    """The Pareto sums of ``a``'s points and deployment ``m``'s options (``pnet``,
    ``cost``) within ``limit``, formed ``MERGE_BLOCK`` pairs at a time: each block's
    Pareto points join the front so far, which is pruned again once it outgrows a block
    (the Pareto set of a union is that of its parts' Pareto sets). Raises
    :class:`_OutOfTime` past ``deadline``."""
    nb = pnet.shape[0]
    rows = max(1, MERGE_BLOCK // max(nb, 1))
    parts_p: list[FloatArray] = []
    parts_c: list[FloatArray] = []
    parts_i: list[IntArray] = []  # flat pair index: row * nb + option
    held = 0
    for r0 in range(0, a.pnet.shape[0], rows):
        tot_p = (a.pnet[r0 : r0 + rows, None] + pnet[None, :]).ravel()
        ok = np.flatnonzero(tot_p <= limit)
        tot_p = tot_p[ok]
        tot_c = (a.cost[r0 : r0 + rows, None] + cost[None, :]).ravel()[ok]
        keep = _pareto(tot_p, tot_c)
        parts_p.append(tot_p[keep])
        parts_c.append(tot_c[keep])
        parts_i.append(ok[keep] + r0 * nb)
        held += keep.size
        if held > MERGE_BLOCK and len(parts_p) > 1:
            parts_p, parts_c, parts_i = _pruned(parts_p, parts_c, parts_i)
            held = parts_p[0].size
        if deadline is not None and deadline.expired():
            raise _OutOfTime
    if not parts_p:
        parts_p, parts_c, parts_i = [np.zeros(0)], [np.zeros(0)], [np.zeros(0, dtype=np.int64)]
    (tot_p,), (tot_c,), (idx,) = _pruned(parts_p, parts_c, parts_i)
    ia, ib = np.divmod(idx, nb)
    return Options(tot_p, tot_c, _Step(m, ia.astype(np.int32), ib.astype(np.int32), a.step))


def _pruned(
    ps: list[FloatArray], cs: list[FloatArray], idx: list[IntArray]
) -> tuple[list[FloatArray], list[FloatArray], list[IntArray]]:
    """The Pareto points of the union of the parts (one part, sorted by power)."""
    p, c, i = np.concatenate(ps), np.concatenate(cs), np.concatenate(idx)
    keep = _pareto(p, c)
    return [p[keep]], [c[keep]], [i[keep]]


def cap_price(
    options: list[tuple[FloatArray, FloatArray]], budget: float, bisections: int = 60
) -> tuple[float, IntArray | None, IntArray | None]:
    """The cap's Lagrange multiplier over endpoint options, and a choice that fits.

    ``options[m] = (pnet, cost)`` of deployment ``m``. The dual function
    ``L(pi) = sum_m min_o (cost_o + pi pnet_o) - pi budget`` is concave in ``pi``, and
    its slope at ``pi`` is the power of the options it picks less the budget, which
    falls as ``pi`` rises; bisection on the slope's sign finds the maximiser ``pi``
    (0 when the cheapest options fit). Returns ``(pi, fit, over)``: ``fit[m]`` indexes
    the option each deployment picks at a price just high enough for the picks to fit
    the budget (a feasible choice; None when even the least-power options do not
    fit), ``over`` the picks at a price just too low, which break the budget (None
    when the cheapest options fit)."""

    # the options as (M, most options) arrays, padded with options no price picks
    width = max(p.size for p, _ in options)
    P = np.zeros((len(options), width))
    C = np.full((len(options), width), np.inf)
    for m, (p, c) in enumerate(options):
        P[m, : p.size], C[m, : c.size] = p, c
    rows = np.arange(len(options))

    def pick(pi: float) -> tuple[IntArray, float]:
        idx = np.argmin(C + pi * P, axis=1).astype(np.int64)
        return idx, float(P[rows, idx].sum())

    def dual(pi: float) -> float:
        return float(np.min(C + pi * P, axis=1).sum()) - pi * budget

    if float(sum(p.min() for p, _ in options)) > budget:
        return 0.0, None, None
    idx, power = pick(0.0)
    if power <= budget:
        return 0.0, idx, None
    lo, hi = 0.0, 1.0
    for _ in range(200):  # the least-power options fit, so a high enough price does
        idx, power = pick(hi)
        if power <= budget:
            break
        lo, hi = hi, 4.0 * hi
    else:
        return 0.0, None, None
    fit, over = idx, pick(lo)[0]
    for _ in range(bisections):
        mid = 0.5 * (lo + hi)
        idx, power = pick(mid)
        if power <= budget:
            hi, fit = mid, idx
        else:
            lo, over = mid, idx
    return (lo if dual(lo) >= dual(hi) else hi), fit, over


def _spend(options: list[tuple[FloatArray, FloatArray]], budget: float, pick: IntArray) -> IntArray:
    """Improve a choice that fits: while the budget left lets some deployment switch
    to a cheaper option, make the switch that saves the most."""
    pick = pick.copy()
    left = budget - float(sum(p[i] for (p, _), i in zip(options, pick, strict=True)))
    for _ in range(4 * len(options)):
        best_gain, best = 0.0, None
        for m, (p, c) in enumerate(options):
            ok = p <= p[pick[m]] + left
            j = int(np.argmin(np.where(ok, c, np.inf)))
            gain = float(c[pick[m]] - c[j])
            if gain > best_gain:
                best_gain, best = gain, (m, j)
        if best is None:
            break
        m, j = best
        left -= float(options[m][0][j] - options[m][0][pick[m]])
        pick[m] = j
    return pick


def dual_rounding(
    data: ScheduleData,
    t: int,
    options: list[tuple[FloatArray, FloatArray, IntArray, FloatArray]],
    budget: float,
    fit: IntArray,
    over: IntArray | None,
    offsets: list[FloatArray] | None = None,
) -> tuple[float, IntArray, FloatArray]:
    """A feasible choice near the dual optimum of :func:`cap_price` (its ``fit`` and
    ``over`` picks over ``options[m] = (pnet, cost, config, served)``): the best of

    * ``fit`` with the budget left spent on cheaper options;
    * the same after taking the ``over`` picks one deployment at a time while they fit
      (as the LP relaxation does up to its one fractional deployment);
    * each of those with one deployment running its ``over`` pick at the load the
      budget left allows (the fractional deployment as a partial load);
    * ``over`` with one deployment's load cut until the picks fit.

    Returns ``(cost, configurations, served loads)``."""
    M = len(options)
    idle = data.idle_gpu_power_w
    pnets = [o[0] for o in options]
    pc = [(o[0], o[1]) for o in options]

    def of(pick: IntArray) -> tuple[float, IntArray, FloatArray]:
        cfg = np.array([options[m][2][pick[m]] for m in range(M)], dtype=np.int64)
        srv = np.array([options[m][3][pick[m]] for m in range(M)])
        return float(sum(options[m][1][pick[m]] for m in range(M))), cfg, srv

    def swap(
        base: tuple[float, IntArray, FloatArray], f: int, k: int, load: float
    ) -> tuple[float, IntArray, FloatArray]:
        """``base`` with deployment ``f`` running ``k`` at ``load`` (only its cost changes)."""
        cost, cfg, srv = base
        off = None if offsets is None else offsets[f]
        cost += deployment_cost(data, t, f, k, load, off)
        cost -= deployment_cost(data, t, f, int(cfg[f]), float(srv[f]), off)
        cfg, srv = cfg.copy(), srv.copy()
        cfg[f], srv[f] = k, load
        return cost, cfg, srv

    def power(pick: IntArray) -> float:
        return float(sum(pnets[m][pick[m]] for m in range(M)))

    def partial(
        base: tuple[float, IntArray, FloatArray], f: int, k: int, room: float
    ) -> tuple[float, IntArray, FloatArray] | None:
        d = data.deployments[f]
        load = min(d.max_load_at(k, room + idle * float(d.gpus[k])), float(d.smax_rps[t, k]))
        if load < 0:
            return None
        return swap(base, f, k, load)

    moved = [] if over is None else [int(f) for f in np.flatnonzero(over != fit)]
    stepped = fit.copy()
    left = budget - power(stepped)
    for f in moved:
        assert over is not None
        step = float(pnets[f][over[f]] - pnets[f][stepped[f]])
        if step <= left:
            stepped[f], left = over[f], left - step
    found = []
    for start in (fit, stepped):
        pick = _spend(pc, budget, start)
        base = of(pick)
        found.append(base)
        left = budget - power(pick)
        for f in moved:
            assert over is not None
            if over[f] != pick[f]:
                room = left + float(pnets[f][pick[f]])
                trial = partial(base, f, int(options[f][2][over[f]]), room)
                if trial is not None:
                    found.append(trial)
    if over is not None:
        excess = power(over) - budget
        base = of(over)
        for f in range(M):
            room = float(pnets[f][over[f]]) - excess
            trial = partial(base, f, int(base[1][f]), room)
            if trial is not None and trial[2][f] <= base[2][f]:
                found.append(trial)
    _, cfg, srv = min(found, key=lambda x: x[0])
    return decisions_cost(data, t, cfg, srv, offsets), cfg, srv  # priced afresh, exactly


@dataclass
class PeriodSolution:
    cost_usd: float  # period cost without the site's idle constant
    config: IntArray  # (M,)
    served: FloatArray  # (M,)
    # False when a deadline ended the search first: the best choice found, not proven
    proven: bool = True
    #: the cap's Lagrange multiplier over the endpoint options (USD per net IT watt;
    #: :func:`cap_price`): the period's price of power where the cap binds
    cap_price_usd_per_w: float = 0.0


class _OutOfTime(Exception):
    pass


#: the prices, as multiples of the cap's multiplier, whose duals bound partial sums in
#: :func:`solve_period`; ``AT_PI`` indexes the multiplier itself
PRICE_FACTORS = np.array([0.0, 0.5, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0])
AT_PI = int(np.flatnonzero(PRICE_FACTORS == 1.0)[0])

#: most (partial sum, option) pairs one merge may form (about 1 GB of arrays); a search
#: that would need more ends like one past its deadline, with its best choice unproven
MAX_PAIRS = 30_000_000


def pool_can_bind(data: ScheduleData, t: int, offsets: list[FloatArray] | None = None) -> bool:
    """Whether the deployments of some GPU pool may use more GPUs than it has in period
    ``t``, each at its largest allowed configuration (one with an infinite
    ``offsets[m][k]`` left out: no choice runs it)."""

    most = np.zeros(len(data.pools), dtype=np.int64)
    for m, d in enumerate(data.deployments):
        ok = d.allowed if offsets is None else d.allowed & np.isfinite(offsets[m])
        for g, gpus in data.pool_use(m):  # each phase's pool
            most[g] += int(gpus[ok].max()) if ok.any() else 0
    return bool((most > data.pool_gpus).any())


def deployment_cost(
    data: ScheduleData,
    t: int,
    m: int,
    k: int,
    load: float,
    offset: FloatArray | None = None,
) -> float:
    """Deployment ``m``'s share of period ``t``'s cost running configuration ``k`` at
    ``load``: its net power (idle GPUs' power credited) priced, and its unserved demand;
    ``offset[k]`` added."""
    power = data.deployments[m].power_at(k, load)
    return float(choice_cost(data, t, m, k, load, power, offset))


def decisions_cost(
    data: ScheduleData,
    t: int,
    cfg: IntArray,
    served: FloatArray,
    offsets: list[FloatArray] | None = None,
) -> float:
    """Period cost of given decisions (without the site's idle constant), offsets added."""
    return sum(
        deployment_cost(
            data, t, m, int(cfg[m]), float(served[m]), None if offsets is None else offsets[m]
        )
        for m in range(len(data.deployments))
    )


def solve_period(
    data: ScheduleData,
    t: int,
    offsets: list[FloatArray] | None = None,
    hint: PeriodSolution | None = None,
    deadline: Deadline | None = None,
) -> PeriodSolution | None:
    """Exact optimum of period ``t`` alone (transitions ignored); None if infeasible.

    ``offsets[m][k]`` (optional) is added to the cost of deployment ``m`` running
    configuration ``k`` (Lagrange multipliers, or transition costs from a fixed previous
    state; inf leaves ``k`` out). ``hint`` (optional) is a feasible
    solution of the period (e.g. the previous one under other offsets): its cost bounds
    the optimum, so partial sums that cannot beat it are pruned early. ``deadline``
    (optional): past it, or (with a deadline) when one merge
    would form more than ``MAX_PAIRS`` pairs, the search stops and the best choice found
    so far comes back with ``proven`` False; without one the search is exact, whatever
    it takes. Raises ValueError if a GPU pool can
    bind in the period (not handled here)."""
    if pool_can_bind(data, t, offsets):
        raise ValueError("a GPU pool can bind: use the MILP for this period")
    M = len(data.deployments)
    budget = float(data.net_cap_w[t])
    opts = [endpoint_options(data, m, t, None if offsets is None else offsets[m]) for m in range(M)]
    pruned = []
    for pnet, cost, cfg, served in opts:
        keep = _pareto(pnet, cost)
        pruned.append((pnet[keep], cost[keep], cfg[keep], served[keep]))
    min_p = np.array([p[0].min() for p in pruned])
    empty = Options(np.zeros(1), np.zeros(1))

    pi, fit, over = cap_price([(p[0], p[1]) for p in pruned], budget)
    # min over each deployment's options of cost + p_i pnet at prices p_i around the
    # cap's multiplier pi (0 and pi among them), (M, prices): a deployment's cost plus
    # p_i times its power is concave in its served load, so the least over endpoint
    # options bounds its interior (filler) states too. The members still to come cost
    # at least max_i [sum_j min_o (cost_o + p_i pnet_o) - p_i (budget left)], tighter
    # than one price for partial sums that leave more or less budget than the LP does
    prices = pi * PRICE_FACTORS

    def price_mins(opts_: list[Any]) -> FloatArray:
        return np.array(
            [
                np.min(o[1][:, None] + prices[None, :] * o[0][:, None], axis=0)
                if o[0].size
                else np.full(prices.size, np.inf)
                for o in opts_
            ]
        )

    lag_p = price_mins(pruned)  # over the options the enumeration keeps
    lag_full = lag_p.copy()  # over every endpoint option (fillers' lower bounds)
    min_c = lag_full[:, 0]  # least cost (price 0)
    lag_c = lag_full[:, AT_PI]  # at the multiplier itself
    tol = 1e-9 * max(abs(float(min_c.sum())), 1.0)

    def combine(
        members: list[int], reserve: float, cost_cap: float, outside: FloatArray | None = None
    ) -> Options:
        """Pareto sums of the members' endpoint options within the budget. A partial
        sum is dropped when even the cheapest completion cannot beat ``cost_cap``: at
        every price ``p_i >= 0`` the members still to come (and ``outside``, a
        caller-owned share's ``min (cost + p_i pnet)`` per price) cost at least
        ``sum min (cost + p_i pnet) - p_i (budget - pnet so far)`` together, for the
        budget left bounds their power (weak duality)."""
        cur = empty
        rest = float(sum(min_p[j] for j in members))
        rest_l = lag_p[members].sum(axis=0) + (0.0 if outside is None else outside)
        for j in members:
            rest -= min_p[j]
            rest_l = rest_l - lag_p[j]
            if deadline is not None and cur.pnet.size * pruned[j][0].size > MAX_PAIRS:
                raise _OutOfTime  # the merge's arrays would outgrow its memory
            cur = _merge(cur, pruned[j][0], pruned[j][1], j, budget - reserve - rest, deadline)
            if deadline is not None and deadline.expired():
                raise _OutOfTime
            if np.isfinite(cost_cap) and cur.pnet.size:
                left = budget - cur.pnet
                low = cur.cost + np.max(rest_l[None, :] - prices[None, :] * left[:, None], axis=1)
                keep = low <= cost_cap + tol
                cur = cur.subset(keep)
            if cur.pnet.size == 0:
                break
        return cur

    best_cost = np.inf
    best_cfg = np.zeros(M, dtype=np.int64)
    best_srv = np.zeros(M)
    if fit is not None:
        found = dual_rounding(data, t, pruned, budget, fit, over, offsets)
        best_cost, best_cfg, best_srv = found
    if hint is not None:
        hint_cost = decisions_cost(data, t, hint.config, hint.served, offsets)
        if hint_cost < best_cost:
            best_cost, best_cfg, best_srv = hint_cost, hint.config.copy(), hint.served.copy()
    # Lagrangian reduced costs: a schedule using option o of deployment m costs at least
    # L(pi) + (cost_o + pi pnet_o - lag_c[m]), so options (and filler configurations)
    # whose reduced cost exceeds the incumbent's gap to L(pi) cannot beat it
    dual_value = float(lag_c.sum()) - pi * budget

    def tighten(best: float) -> float:
        nonlocal min_p, lag_p
        gap = best - dual_value + tol
        for m in range(M):
            keep = pruned[m][1] + pi * pruned[m][0] - lag_c[m] <= gap
            pruned[m] = tuple(x[keep] for x in pruned[m])  # type: ignore[assignment]
        min_p = np.array([p[0].min() if p[0].size else np.inf for p in pruned])
        lag_p = price_mins(pruned)
        return gap

    proven = True
    try:
        if deadline is not None and deadline.expired() and np.isfinite(best_cost):
            raise _OutOfTime  # the dual rounding's choice, unproven
        tighten(best_cost)
        allm = combine(list(range(M)), 0.0, best_cost)
        if allm.pnet.size and float(allm.cost.min()) < best_cost - 1e-12:
            i = int(np.argmin(allm.cost))
            best_cost = float(allm.cost[i])
            picks = allm.picks(i, M)
            for j in range(M):
                best_cfg[j] = pruned[j][2][picks[j]]
                best_srv[j] = pruned[j][3][picks[j]]
        gap = tighten(best_cost)
        idle = data.idle_gpu_power_w
        for f in range(M):
            d = data.deployments[f]
            others = [j for j in range(M) if j != f]
            off = None if offsets is None else offsets[f]
            ks = np.flatnonzero(reachable_choices(data, f, t, off) & (d.smax_rps[t] > 0))
            # a filler's cost plus pi times its power is concave in its load: at least its
            # configuration's least endpoint value
            pnet_f, cost_f, cfg_f, _ = opts[f]
            low = np.full(d.n_configs, np.inf)
            np.minimum.at(low, cfg_f, cost_f + pi * pnet_f)
            ks = ks[low[ks] - lag_c[f] <= gap]
            if ks.size == 0:
                continue
            # the filler's least net power is its least p0 among these configs
            f_min = float((d.bp_power_w[ks, 0] - idle * d.gpus[ks]).min())
            # the filler costs at least its least endpoint cost (concavity, as above)
            rest = combine(others, f_min, best_cost, lag_full[f]) if others else empty
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
            cost = rest.cost[ri] + choice_cost(data, t, f, kk, s, d.power_w(kk, s), off)
            q = int(np.argmin(cost))
            if cost[q] < best_cost - 1e-12:
                best_cost = float(cost[q])
                picks = rest.picks(int(ri[q]), M)
                for o in others:
                    best_cfg[o] = pruned[o][2][picks[o]]
                    best_srv[o] = pruned[o][3][picks[o]]
                best_cfg[f] = kk[q]
                best_srv[f] = float(s[q])
    except _OutOfTime:
        proven = False
    if not np.isfinite(best_cost):
        return None
    return PeriodSolution(best_cost, best_cfg, best_srv, proven, float(pi))
