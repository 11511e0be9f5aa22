"""The fleet's relaxation period by period: a lower bound, prices and a routing in
one linear program per period, with every choice written out (docs/fleet.md,
section 5).

Dropping what ties a period to the next (the transitions' costs, which are >= 0, the
limit on instance changes, and the ramp on the routing shares) can only lower the
optimum, and what is left separates by period. Each period's problem is then relaxed to
its linear program over the convex hull of each deployment's choices: a configuration
``c`` serving a load ``s`` in ``[0, smax]`` at net power ``pnet_c(s)``, concave in ``s``.
The hull of a concave curve's graph lies between the curve and its chord from ``s = 0``
to ``s = smax``; energy prices and carbon are >= 0 (the request's schema), so at a given
load a point above the chord costs more and draws more, and the chord's two ends span
every point an optimum needs. Each period's LP is

    min  sum_x cost_x x + sum_o (-u_own) o + sum_f (c_f - u_r) f
    s.t. sum_{x of (i,k)} x = 1                         (each deployment one choice)
         sum_{x of i} pnet_x x <= net cap_i[t]           (pi_i[t])
         sum_{x of i in pool g} gpus_x x <= G_g           (sigma_g[t])
         o[i,k] + sum_r f[r,(i,k)] - sum_x served_x x <= 0   (lambda[i,k,t])
         sum_j f[r,j] <= D[r,t]                          (rho[r,t])

with the fleet master's columns, rows and constant (:class:`formulation.fleet.decompose.
FleetMaster`), so the sum of the periods' values is a lower bound on the fleet's
optimum, and their duals are prices of the whole fleet's Lagrangian (at which its dual
function, with the transitions back, is at least this bound).

Each period's choices are then rounded by a MILP over the configurations its LP uses
and a few of least reduced cost (:func:`_round`): a routing integer configurations can
serve. The periods whose rounding lies furthest above their LP are then solved as
MILPs over the choices reduced-cost fixing leaves (:func:`_tighten`), which raises
their bounds towards their integer optima."""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy
import numpy as np
from numpy.typing import NDArray

from formulation.budget import Deadline
from formulation.data import ScheduleData
from formulation.fleet.compact import own_demand
from formulation.fleet.decompose import (
    Prices,
    Progress,
    fleet_constant,
    flow_costs,
    flow_list,
    slack_price,
)
from formulation.fleet.problem import FleetProblem
from formulation.milp.highs import quiet_highs

FloatArray = NDArray[np.float64]


@dataclass
class PeriodRelaxation:
    #: the sum of the periods' bounds (their LPs', or their MILPs' where solved as
    #: such) and the fleet's constant (None: the deadline came before every period was
    #: solved)
    lower_bound_usd: float | None
    #: the periods' duals as the fleet's prices (no ramp rows)
    prices: Prices
    #: (flows, T) each period's LP flows (req/s)
    flows: FloatArray
    #: each site's (K_i, T) own load in each period's LP (req/s)
    owns: list[FloatArray]
    periods: int
    columns: int
    seconds: float
    #: each period's choices rounded (:func:`_round`) where asked and in time:
    #: each site's configurations (K_i, T), own loads (K_i, T) and the flows (flows, T)
    rounded: Rounded | None = None
    #: the bound of the periods' LPs alone
    lp_bound_usd: float | None = None
    #: how many periods were solved as MILPs
    tightened: int = 0
    #: (T,) each period's bound (its LP's value, or its MILP's bound), before the
    #: constant
    period_bounds: FloatArray | None = None


@dataclass
class Rounded:
    configs: list[NDArray[np.int64]]
    owns: list[FloatArray]
    flows: FloatArray
    periods: int
    #: (T,) each period's rounded value (its MILP's objective)
    values: FloatArray


class _Layout:
    """The rows of every period's problem (module docstring) and what does not change
    between periods."""

    def __init__(
        self,
        fp: FleetProblem,
        datas: list[ScheduleData],
        own_value: list[FloatArray],
        flow_caps: FloatArray | None,
    ) -> None:
        self.fp, self.datas, self.own_value, self.flow_caps = fp, datas, own_value, flow_caps
        K = [len(d.deployments) for d in datas]
        G = [len(d.pools) for d in datas]
        self.K, self.G, self.S = K, G, len(datas)
        self.R = len(fp.regions)
        self.flows = flow_list(fp)
        S = self.S
        # row offsets: convexity, caps, pools, routing, regions
        self.conv0 = np.cumsum([0, *K])[:-1]
        self.cap0 = sum(K)
        self.inv0 = self.cap0 + S + np.cumsum([0, *G])[:-1]
        self.route0 = self.cap0 + S + sum(G) + self.conv0
        self.region0 = self.cap0 + S + sum(G) + sum(K)
        self.n_rows = self.region0 + self.R
        self.owns = [own_demand(fp, i) for i in range(S)]
        self.server = np.array(
            [
                self.route0[fp.regions[r].servers[q].site] + fp.regions[r].servers[q].deployment
                for r, q in self.flows
            ],
            dtype=np.int64,
        )
        self.flow_region = np.array([r for r, _q in self.flows], dtype=np.int64)
        self.flow_cost = flow_costs(fp)
        self.demand = np.array([reg.demand_rps for reg in fp.regions], dtype=float).reshape(
            self.R, fp.n_periods
        )
        self.big = slack_price(datas)
        self.slack_rows = np.concatenate(
            [self.cap0 + np.arange(S), *[self.inv0[i] + np.arange(G[i]) for i in range(S)]]
        ).astype(np.int64)


@dataclass
class _Problem:
    """One period's LP (or its rounding's MILP): the model, and where each site's
    choices, own loads and the flows sit among its columns."""

    lp: highspy.HighsLp
    #: per site and deployment: the first column of its block, and the configurations
    #: of its columns (the LP: each at no load, then each at its most; the MILP: each
    #: one's choice, then its share of its most)
    blocks: list[list[tuple[int, NDArray[np.int64]]]]
    own_at: list[int]
    flow_at: int
    integrality: NDArray[np.int32] | None = None


def _problem(lay: _Layout, t: int, keep: list[list[NDArray[np.int64]]] | None = None) -> _Problem:
    """Period ``t``'s LP, or (``keep``: each deployment's configurations to choose
    from) its MILP: a binary choice ``z`` per configuration and its share ``y <= z`` of
    the configuration's most, whose LP relaxation is the LP's over those choices (the
    rows ``y - z <= 0`` follow the period's rows)."""
    inf = highspy.kHighsInf
    datas, K = lay.datas, lay.K
    costs: list[FloatArray] = []
    upper: list[FloatArray] = []
    index: list[NDArray[np.int64]] = []
    value: list[FloatArray] = []
    counts: list[NDArray[np.int64]] = []
    blocks: list[list[tuple[int, NDArray[np.int64]]]] = []
    own_at: list[int] = []
    choices: list[NDArray[np.int64]] = []  # the MILP's z columns
    n_cols = 0
    n_links = 0
    for i, data in enumerate(datas):
        site_blocks = []
        for k in range(K[i]):
            d = data.deployments[k]
            ok = np.flatnonzero(d.period_allowed()[t]) if keep is None else keep[i][k]
            m = ok.size
            smax = d.smax_rps[t, ok]
            idle = data.idle_gpu_power_w * d.gpus[ok]
            p0 = d.power_w(ok, np.zeros(m)) - idle
            p1 = d.power_w(ok, smax) - idle
            one, zero = np.ones(m), np.zeros(m)
            served = np.concatenate([zero, smax])
            # the LP: x0 (no load), x1 (the most); the MILP: z (the choice), y (its
            # share of the most, drawing its power above no load)
            milp = keep is not None
            pnet = np.concatenate([p0, p1 - p0 if milp else p1])
            rows = [np.full(2 * m, lay.conv0[i] + k), np.full(2 * m, lay.cap0 + i)]
            vals = [np.concatenate([one, zero if milp else one]), pnet]
            for g, pool_gpus in data.pool_use(k):
                rows.append(np.full(2 * m, lay.inv0[i] + g))
                gp = pool_gpus[ok].astype(float)
                vals.append(np.concatenate([gp, 0 * gp if milp else gp]))
            rows.append(np.full(2 * m, lay.route0[i] + k))
            vals.append(-served)
            if milp:  # y - z <= 0
                link = lay.n_rows + n_links + np.arange(m)
                rows.append(np.concatenate([link, link]))
                vals.append(np.concatenate([-one, one]))
                choices.append(n_cols + np.arange(m))
                n_links += m
            costs.append(float(data.cost_usd_per_w[t]) * pnet)
            upper.append(np.full(2 * m, 1.0 if milp else inf))
            # column-major: each column's entries together
            index.append(np.stack(rows, axis=1).reshape(-1))
            value.append(np.stack(vals, axis=1).reshape(-1))
            counts.append(np.full(2 * m, len(rows), dtype=np.int64))
            site_blocks.append((n_cols, ok))
            n_cols += 2 * m
        blocks.append(site_blocks)
        # the own loads, paying -u_own
        own_at.append(n_cols)
        costs.append(-lay.own_value[i][:, t])
        upper.append(lay.owns[i][:, t].astype(float))
        index.append(lay.route0[i] + np.arange(K[i], dtype=np.int64))
        value.append(np.ones(K[i]))
        counts.append(np.ones(K[i], dtype=np.int64))
        n_cols += K[i]
    # the flows, into their server's routing row and their region's row
    flow_at = n_cols
    F = len(lay.flows)
    top = lay.demand[lay.flow_region, t]
    if lay.flow_caps is not None:
        top = np.minimum(top, np.maximum(lay.flow_caps[:, t], 0.0))
    costs.append(lay.flow_cost)
    upper.append(top)
    index.append(np.stack([lay.server, lay.region0 + lay.flow_region], axis=1).reshape(-1))
    value.append(np.ones(2 * F))
    counts.append(np.full(F, 2, dtype=np.int64))
    # slacks on the caps and pools at a large price keep every period feasible
    S, G = lay.S, lay.G
    costs.append(np.concatenate([np.full(S, lay.big), np.full(sum(G), lay.big * 1e3)]))
    upper.append(np.full(lay.slack_rows.size, inf))
    index.append(lay.slack_rows)
    value.append(np.full(lay.slack_rows.size, -1.0))
    counts.append(np.ones(lay.slack_rows.size, dtype=np.int64))
    cnt = np.concatenate(counts)
    idx = np.concatenate(index)
    val = np.concatenate(value)
    n_rows = lay.n_rows + n_links
    row_lower = np.full(n_rows, -inf)
    row_upper = np.zeros(n_rows)
    row_lower[: lay.cap0] = 1.0
    row_upper[: lay.cap0] = 1.0
    for i, site in enumerate(datas):
        row_upper[lay.cap0 + i] = site.net_cap_w[t]
        row_upper[lay.inv0[i] : lay.inv0[i] + G[i]] = site.pool_gpus
    row_upper[lay.region0 : lay.n_rows] = lay.demand[:, t]
    lp = highspy.HighsLp()
    lp.num_col_ = int(cnt.size)
    lp.num_row_ = int(n_rows)
    lp.col_cost_ = np.concatenate(costs)
    lp.col_lower_ = np.zeros(cnt.size)
    lp.col_upper_ = np.concatenate(upper)
    lp.row_lower_ = row_lower
    lp.row_upper_ = row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.append(np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt.sum()).astype(
        np.int32
    )
    lp.a_matrix_.index_ = idx.astype(np.int32)
    lp.a_matrix_.value_ = val
    integrality = None
    if keep is not None:
        integrality = np.zeros(cnt.size, dtype=np.int32)
        integrality[np.concatenate(choices)] = 1
    return _Problem(lp, blocks, own_at, flow_at, integrality)


def relax_by_period(
    fp: FleetProblem,
    datas: list[ScheduleData],
    own_value: list[FloatArray],
    deadline: Deadline,
    say: Progress,
    flow_caps: FloatArray | None = None,
    round_within: Deadline | None = None,
    bound_within: Deadline | None = None,
) -> PeriodRelaxation:
    """Each period's LP (module docstring), in order, until ``deadline``: the bound (if
    every period was solved), the prices and the flows; with ``round_within``, each
    period's choices then rounded (:func:`_round`) until that deadline; with
    ``bound_within`` too, the periods of largest rounding gap then solved as MILPs
    (:func:`_tighten`) until that one."""
    t0 = time.perf_counter()
    lay = _Layout(fp, datas, own_value, flow_caps)
    T, S, K, G = fp.n_periods, lay.S, lay.K, lay.G
    F = len(lay.flows)
    pis = [np.zeros(T) for _ in range(S)]
    sigmas = [np.zeros((G[i], T)) for i in range(S)]
    lams = [np.zeros((K[i], T)) for i in range(S)]
    region = np.zeros((lay.R, T))
    out_flows = np.zeros((F, T))
    out_owns = [np.zeros((K[i], T)) for i in range(S)]
    total = fleet_constant(fp, datas, own_value)
    columns = 0
    solved = 0
    kept: list[list[list[NDArray[np.int64]]]] = []
    lp_values = np.zeros(T)
    least_rc: list[list[list[tuple[NDArray[np.int64], FloatArray]]]] = []
    for t in range(T):
        if deadline.expired():
            break
        prob = _problem(lay, t)
        h = quiet_highs()
        h.passModel(prob.lp)
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            # every period is feasible (the slacks) and bounded (the choice rows);
            # HiGHS ending otherwise proves nothing here: no bound, as out of time
            status = h.modelStatusToString(h.getModelStatus())
            say(f"relaxation by period: period {t}'s LP ended {status}; no bound from it")
            break
        sol = h.getSolution()
        duals = np.asarray(sol.row_dual)
        x = np.asarray(sol.col_value)
        lp_values[t] = float(h.getInfo().objective_function_value)
        for i in range(S):
            pis[i][t] = max(-duals[lay.cap0 + i], 0.0)
            sigmas[i][:, t] = np.maximum(-duals[lay.inv0[i] : lay.inv0[i] + G[i]], 0.0)
            lams[i][:, t] = np.maximum(-duals[lay.route0[i] : lay.route0[i] + K[i]], 0.0)
            out_owns[i][:, t] = np.maximum(x[prob.own_at[i] : prob.own_at[i] + K[i]], 0.0)
        region[:, t] = np.maximum(-duals[lay.region0 :], 0.0)
        out_flows[:, t] = np.maximum(x[prob.flow_at : prob.flow_at + F], 0.0)
        if round_within is not None:
            least_rc.append(_least_reduced(prob, np.asarray(sol.col_dual)))
            kept.append(_kept(prob, x, least_rc[-1]))
        columns += int(prob.lp.num_col_)
        solved += 1
        if (t + 1) % 24 == 0 or t + 1 == T:
            say(f"relaxation by period: {t + 1} of {T} periods ({time.perf_counter() - t0:.1f} s)")
    rounded = None
    tightened = 0
    bounds = lp_values.copy()
    if round_within is not None and solved == T:
        rounded = _round(lay, kept, round_within, say)
        if rounded is not None and bound_within is not None:
            tightened = _tighten(lay, lp_values, least_rc, kept, rounded, bounds, bound_within, say)
    return PeriodRelaxation(
        lower_bound_usd=total + float(bounds.sum()) if solved == T else None,
        lp_bound_usd=total + float(lp_values.sum()) if solved == T else None,
        prices=Prices(pis, sigmas, lams, region, np.zeros(0)),
        flows=out_flows,
        owns=out_owns,
        periods=solved,
        columns=columns,
        seconds=time.perf_counter() - t0,
        rounded=rounded,
        tightened=tightened,
        period_bounds=bounds if solved == T else None,
    )


#: the configurations of least reduced cost each deployment keeps for the rounding,
#: besides those the LP uses
KEEP = 4


def _kept(
    prob: _Problem, x: FloatArray, least: list[list[tuple[NDArray[np.int64], FloatArray]]]
) -> list[list[NDArray[np.int64]]]:
    """Each deployment's configurations for its period's rounding: those the LP uses,
    and the ``KEEP`` of least reduced cost (``least``: :func:`_least_reduced`)."""
    out = []
    for site_blocks, site_least in zip(prob.blocks, least, strict=True):
        site = []
        for (first, ok), (_ok, rc) in zip(site_blocks, site_least, strict=True):
            w = x[first : first + ok.size] + x[first + ok.size : first + 2 * ok.size]
            best = np.argsort(rc, kind="stable")[:KEEP]
            site.append(np.unique(np.concatenate([ok[w > 1e-9], ok[best]])))
        out.append(site)
    return out


def _round(
    lay: _Layout, kept: list[list[list[NDArray[np.int64]]]], deadline: Deadline, say: Progress
) -> Rounded | None:
    """Each period's MILP over its kept configurations (:func:`_problem`), each given
    an even share of the time left; None where one found no solution in time."""
    t0 = time.perf_counter()
    T = len(kept)
    configs = [np.zeros((k, T), dtype=np.int64) for k in lay.K]
    owns = [np.zeros((k, T)) for k in lay.K]
    flows = np.zeros((len(lay.flows), T))
    out = Rounded(configs, owns, flows, T, np.zeros(T))
    for t in range(T):
        if deadline.expired():
            return None
        prob = _problem(lay, t, keep=kept[t])
        h = _milp(prob, deadline.fraction(1.0 / (T - t)))
        if not _take(lay, prob, h, t, out):
            return None
        if (t + 1) % 24 == 0 or t + 1 == T:
            say(f"each period rounded: {t + 1} of {T} ({time.perf_counter() - t0:.1f} s)")
    return out


def _milp(prob: _Problem, deadline: Deadline, cutoff: float | None = None) -> highspy.Highs:
    """HiGHS run on ``prob``'s MILP until ``deadline`` (at least 0.05 s; ``cutoff``: no
    solution of that value or more is sought)."""
    h = quiet_highs()
    h.passModel(prob.lp)
    assert prob.integrality is not None
    h.changeColsIntegrality(
        int(prob.integrality.size),
        np.arange(prob.integrality.size, dtype=np.int32),
        prob.integrality.astype(np.uint8),
    )
    h.setOptionValue("time_limit", max(deadline.remaining(), 0.05))
    h.setOptionValue("mip_rel_gap", 1e-4)
    if cutoff is not None:
        h.setOptionValue("objective_bound", cutoff)
    h.run()
    return h


def _take(lay: _Layout, prob: _Problem, h: highspy.Highs, t: int, out: Rounded) -> bool:
    """The MILP's solution as period ``t``'s rounded choices, own loads and flows in
    ``out`` (False: HiGHS has none)."""
    x = np.asarray(h.getSolution().col_value)
    if x.size != prob.lp.num_col_ or not h.getInfo().primal_solution_status:
        return False
    for i, site_blocks in enumerate(prob.blocks):
        for k, (first, ok) in enumerate(site_blocks):
            out.configs[i][k, t] = int(ok[int(np.argmax(x[first : first + ok.size]))])
        out.owns[i][:, t] = np.maximum(x[prob.own_at[i] : prob.own_at[i] + lay.K[i]], 0.0)
    out.flows[:, t] = np.maximum(x[prob.flow_at : prob.flow_at + len(lay.flows)], 0.0)
    out.values[t] = float(h.getInfo().objective_function_value)
    return True


def _least_reduced(
    prob: _Problem, reduced: FloatArray
) -> list[list[tuple[NDArray[np.int64], FloatArray]]]:
    """Each deployment's allowed configurations and the least reduced cost of their
    two ends at the period's LP."""
    out = []
    for site_blocks in prob.blocks:
        site = []
        for first, ok in site_blocks:
            n = ok.size
            site.append(
                (ok, np.minimum(reduced[first : first + n], reduced[first + n : first + 2 * n]))
            )
        out.append(site)
    return out


def _tighten(
    lay: _Layout,
    lp_values: FloatArray,
    least_rc: list[list[list[tuple[NDArray[np.int64], FloatArray]]]],
    kept: list[list[list[NDArray[np.int64]]]],
    rounded: Rounded,
    bounds: FloatArray,
    deadline: Deadline,
    say: Progress,
) -> int:
    """The periods in order of their rounding's gap (its value less the LP's), largest
    first, each solved as a MILP until ``deadline``, in ``bounds`` (T,): a period's
    bound is then the least of its rounded value and its MILP's proven bound, and at
    least its LP's. Reduced-cost fixing keeps the MILP small and the bound valid: a
    choice whose least reduced cost at the LP exceeds the gap is in no solution below
    the rounded value (any solution costs at least the LP's value plus the reduced
    costs of what it uses), so only the others are offered. A better solution found
    replaces the period's rounding. Returns how many periods were so solved."""
    t0 = time.perf_counter()
    gaps = rounded.values - lp_values
    order = [int(t) for t in np.argsort(-gaps, kind="stable") if gaps[t] > 0]
    done = 0
    for n, t in enumerate(order):
        if deadline.expired():
            break
        tol = 1e-9 * max(abs(rounded.values[t]), 1.0)
        keep = [
            [np.union1d(ok[rc <= gaps[t] + tol], kept[t][i][k]) for k, (ok, rc) in enumerate(site)]
            for i, site in enumerate(least_rc[t])
        ]
        prob = _problem(lay, t, keep=keep)
        h = _milp(prob, deadline.fraction(1.0 / min(len(order) - n, 8)), float(rounded.values[t]))
        proven = float(h.getInfo().mip_dual_bound)
        bounds[t] = max(lp_values[t], min(float(rounded.values[t]), proven))
        if h.getInfo().objective_function_value < rounded.values[t] - tol:
            _take(lay, prob, h, t, rounded)
        done += 1
    if done:
        say(
            f"each period's MILP: {done} of {len(order)} periods with a rounding gap, "
            f"the bound raised by {float(bounds.sum() - lp_values.sum()):,.2f} USD "
            f"({time.perf_counter() - t0:.1f} s)"
        )
    return done
