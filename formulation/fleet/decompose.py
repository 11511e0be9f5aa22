"""Price-directed routing: the fleet's relaxation by column generation over every
site's deployments at once (docs/fleet.md, section 5).

The master LP holds each deployment's columns (whole-horizon schedules, as a site's
column generation does: :class:`formulation.bounds.decomposition.Column`), each site's
cap and inventory rows, and, as continuous variables, each deployment's own load
``o[i,k,t]`` and the regions' flows ``f[r,j,t]``, with the routing rows

    o[i,k,t] + sum_r f[r,(i,k),t] - sum_c served_c[t] w_c <= 0              (lambda >= 0)
    sum_j f[r,j,t] <= D[r,t],   0 <= o <= own,   the ramp on the shares.

Its duals price the next columns: deployment ``(i,k)``'s DP is a site's DP
(:class:`formulation.bounds.lagrange.DualOracle`) over the site's data with its demand
at the most it may be sent (``Dmax``) and a value ``lambda[i,k,t]`` on each request it
leaves unserved. For any ``lambda, pi, sigma >= 0`` the Lagrangian

    L = sum_i (L_i(pi_i, sigma_i; lambda_i) - sum_{k,t} lambda Dmax)
        + sum_{i,k,t} min(u_own, lambda) own
        + sum_{r,t} min over the flows of (u_r (D - sum_j f) + sum_j (c_j + lambda_j) f)

is a lower bound on the fleet's optimum (weak duality; ``L_i`` is the site's dual
function, the region's term taken without the ramp, which only lowers it), so the best
one seen is the fleet's proven bound. The master's flows are the routing the plan
starts from (:mod:`formulation.fleet.solve`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import highspy
import numpy as np
from numpy.typing import NDArray

from formulation.bounds.decomposition import Column, make_column
from formulation.bounds.lagrange import DualOracle, Point
from formulation.budget import Deadline
from formulation.data import ScheduleData, site_constant_usd
from formulation.fleet.compact import own_demand
from formulation.fleet.problem import FleetProblem
from formulation.milp.highs import quiet_highs
from formulation.subproblems.dp import DeploymentGrid, deployment_grid

FloatArray = NDArray[np.float64]
Progress = Callable[[str], None]

#: the relative distance between the master LP and the best bound at which the
#: relaxation is taken as converged
REL_TOL = 1e-6


def flow_list(fp: FleetProblem) -> list[tuple[int, int]]:
    """(region, server index within the region) of each flow, regions in order."""
    return [(r, q) for r, reg in enumerate(fp.regions) for q in range(len(reg.servers))]


@dataclass
class FleetRelaxation:
    lower_bound_usd: float
    lp_value_usd: float
    #: (flows, T) the last master LP's flows (req/s)
    flows: FloatArray
    rounds: int
    columns: int
    seconds: float
    converged: bool
    history: list[tuple[float, float, float]] = field(default_factory=list)  # (s, LP, bound)


class FleetMaster:
    """The restricted master LP of the fleet in a live HiGHS model (module docstring).
    ``datas``: each site's data at the most demand it may be sent, no value on unserved
    requests (:func:`formulation.fleet.compact.site_data`), whose columns cost their
    energy and transitions only; ``own_value``: each site's (K_i, T) value of a req/s
    of its own demand unserved through a period."""

    def __init__(
        self,
        fp: FleetProblem,
        datas: list[ScheduleData],
        own_value: list[FloatArray],
        flow_caps: FloatArray | None = None,
    ) -> None:
        self.fp, self.datas = fp, datas
        T = fp.n_periods
        self.T = T
        sec = 3600.0 * fp.period_hours
        inf = highspy.kHighsInf
        self.h = quiet_highs()
        self.h.setOptionValue("presolve", "off")
        K = [len(d.deployments) for d in datas]
        G = [len(d.pools) for d in datas]
        self.K = K
        lower: list[float] = []
        upper: list[float] = []

        def rows(lo: FloatArray | float, hi: FloatArray | float, n: int) -> int:
            start = len(lower)
            lower.extend(np.broadcast_to(np.asarray(lo, dtype=float), (n,)).tolist())
            upper.extend(np.broadcast_to(np.asarray(hi, dtype=float), (n,)).tolist())
            return start

        self.conv = [rows(1.0, 1.0, K[i]) for i in range(len(datas))]
        self.cap = [rows(-inf, d.net_cap_w, T) for d in datas]
        self.inv = [rows(-inf, np.repeat(d.pool_gpus, T), G[i] * T) for i, d in enumerate(datas)]
        self.route = [rows(-inf, 0.0, K[i] * T) for i in range(len(datas))]
        regions = fp.regions
        demand = np.array([r.demand_rps for r in regions], dtype=float).reshape(-1)
        self.region = rows(-inf, demand, len(regions) * T)
        self.flows = flow_list(fp)
        steps: list[tuple[int, int]] = []
        if fp.max_share_change is not None:
            for f, (r, _q) in enumerate(self.flows):
                d = regions[r].demand_rps
                steps += [(f, t) for t in range(1, T) if d[t] > 0 and d[t - 1] > 0]
        ramp = float(fp.max_share_change or 0.0)
        self.ramp = rows(-ramp, ramp, len(steps))
        self.h.addRows(
            len(lower),
            np.array(lower),
            np.array(upper),
            0,
            np.array([0]),
            np.array([], dtype=np.int32),
            np.array([]),
        )
        # slack columns with a large price keep the LP feasible (as a site's master)
        big = 1e3 * (max(float(np.max(d.cost_usd_per_w)) for d in datas) + 1.0)
        for i in range(len(datas)):
            for t in range(T):
                self._col(big, 0.0, inf, [self.cap[i] + t], [-1.0])
            for r in range(G[i] * T):
                self._col(big * 1e3, 0.0, inf, [self.inv[i] + r], [-1.0])
        # own loads: o in [0, own], paying -u_own (the constant adds u_own own back)
        self.constant = sum(site_constant_usd(d) for d in datas)
        self.own_col: list[int] = []
        for i in range(len(datas)):
            own = own_demand(fp, i)
            self.constant += float(np.sum(own_value[i] * own))
            for k in range(K[i]):
                for t in range(T):
                    self.own_col.append(
                        self._col(
                            -float(own_value[i][k, t]),
                            0.0,
                            float(own[k, t]),
                            [self.route[i] + k * T + t],
                            [1.0],
                        )  # fmt: skip
                    )
        # flows: (c_j - u_r) per req/s-period, in the server's routing row, the region's
        # row and the ramp rows of its share
        ramp_rows: dict[tuple[int, int], list[tuple[int, float]]] = {}
        terms: list[tuple[int, int, int, float]] = []  # (ramp row, flow, period, coefficient)
        for n, (f, t) in enumerate(steps):
            d = regions[self.flows[f][0]].demand_rps
            ramp_rows.setdefault((f, t), []).append((self.ramp + n, 1.0 / d[t]))
            ramp_rows.setdefault((f, t - 1), []).append((self.ramp + n, -1.0 / d[t - 1]))
            terms += [(n, f, t, 1.0 / d[t]), (n, f, t - 1, -1.0 / d[t - 1])]
        self.n_ramp = len(steps)
        self.ramp_terms = np.array(terms, dtype=float).reshape(-1, 4)
        self.flow_ub = np.zeros((len(self.flows), T))
        self.flow_col = np.zeros((len(self.flows), T), dtype=np.int64)
        for reg in regions:
            self.constant += (
                sec * reg.unserved_penalty_usd_per_request * float(np.sum(reg.demand_rps))
            )
        for f, (r, q) in enumerate(self.flows):
            reg = regions[r]
            s = reg.servers[q]
            cost = sec * (s.penalty_usd_per_request - reg.unserved_penalty_usd_per_request)
            for t in range(T):
                most = float(reg.demand_rps[t])
                if flow_caps is not None:
                    most = min(most, max(float(flow_caps[f, t]), 0.0))
                self.flow_ub[f, t] = most
                idx = [self.route[s.site] + s.deployment * T + t, self.region + r * T + t]
                val = [1.0, 1.0]
                for row, v in ramp_rows.get((f, t), []):
                    idx.append(row)
                    val.append(v)
                self.flow_col[f, t] = self._col(cost, 0.0, most, idx, val)
        self.keys: set[tuple[int, int, bytes, bytes]] = set()
        self.columns: list[tuple[int, Column]] = []

    def _col(self, cost: float, lo: float, hi: float, idx: list[int], val: list[float]) -> int:
        n = int(self.h.getNumCol())
        self.h.addCol(cost, lo, hi, len(idx), np.array(idx, dtype=np.int32), np.array(val))
        return n

    def add(self, i: int, col: Column) -> bool:
        """Add site ``i``'s column (False if the master has it already)."""
        key = (i, col.deployment, col.config.tobytes(), np.round(col.served_rps, 9).tobytes())
        if key in self.keys:
            return False
        self.keys.add(key)
        T, data, k = self.T, self.datas[i], col.deployment
        idx = [self.conv[i] + k]
        val = [1.0]
        nz = np.flatnonzero(col.pnet_w)
        idx += (self.cap[i] + nz).tolist()
        val += col.pnet_w[nz].tolist()
        for g, pool_gpus in data.pool_use(k):
            gpus = pool_gpus[col.config]
            gz = np.flatnonzero(gpus)
            idx += (self.inv[i] + g * T + gz).tolist()
            val += gpus[gz].astype(float).tolist()
        sz = np.flatnonzero(col.served_rps)
        idx += (self.route[i] + k * T + sz).tolist()
        val += (-col.served_rps[sz]).tolist()
        self._col(col.cost_usd, 0.0, highspy.kHighsInf, idx, val)
        self.columns.append((i, col))
        return True

    def solve(self) -> tuple[float, Prices, FloatArray]:
        """The LP's value (the constant included), its prices and its flows (flows, T)."""
        self.h.run()
        sol = self.h.getSolution()
        duals = np.asarray(sol.row_dual)
        x = np.asarray(sol.col_value)
        T = self.T
        pis, sigmas, lams = [], [], []
        for i, d in enumerate(self.datas):
            pis.append(np.maximum(-duals[self.cap[i] : self.cap[i] + T], 0.0))
            G = len(d.pools)
            inv = duals[self.inv[i] : self.inv[i] + G * T]
            sigmas.append(np.maximum(-inv, 0.0).reshape(G, T))
            K = self.K[i]
            route = duals[self.route[i] : self.route[i] + K * T]
            lams.append(np.maximum(-route, 0.0).reshape(K, T))
        R = len(self.fp.regions)
        region = np.maximum(-duals[self.region : self.region + R * T], 0.0).reshape(R, T)
        ramp = duals[self.ramp : self.ramp + self.n_ramp].copy()
        flows = np.maximum(x[self.flow_col], 0.0) if self.flows else np.zeros((0, T))
        value = float(self.h.getInfo().objective_function_value) + self.constant
        return value, Prices(pis, sigmas, lams, region, ramp), flows


@dataclass
class Prices:
    """The multipliers of the master's rows: each site's cap (T,) and inventory (G_i, T)
    and its deployments' routing rows (K_i, T), all >= 0; the regions' demand rows
    (R, T), >= 0; the ramp rows (either sign, as HiGHS gives a two-sided row's dual)."""

    pis: list[FloatArray]
    sigmas: list[FloatArray]
    lams: list[FloatArray]
    region: FloatArray
    ramp: FloatArray


def priced_data(data: ScheduleData, lam: FloatArray) -> ScheduleData:
    """``data`` (a site at the most demand it may be sent) with each deployment's
    unserved requests valued at ``lam`` (K, T) per req/s through the period."""
    deps = tuple(
        dataclasses.replace(d, unserved_usd_per_rps=np.asarray(lam[k], dtype=float))
        for k, d in enumerate(data.deployments)
    )
    return dataclasses.replace(data, deployments=deps)


class FleetPricing:
    """The sites' DPs at the master's duals, and the fleet's Lagrangian there."""

    def __init__(
        self,
        fp: FleetProblem,
        datas: list[ScheduleData],
        own_value: list[FloatArray],
        master: FleetMaster,
    ) -> None:
        self.fp, self.datas, self.own_value, self.master = fp, datas, own_value, master
        self.grids: list[list[DeploymentGrid]] = [
            [deployment_grid(d, dep) for dep in d.deployments] for d in datas
        ]
        self.own = [own_demand(fp, i) for i in range(len(datas))]
        self.dmax = [np.stack([dep.demand_rps for dep in d.deployments]) for d in datas]

    def __call__(self, y: Prices) -> tuple[float, list[Point]]:
        """The Lagrangian's value at the prices (a lower bound) and each site's DP
        solutions there."""
        value = 0.0
        points = []
        for i, data in enumerate(self.datas):
            lam = y.lams[i]
            with DualOracle(priced_data(data, lam), self.grids[i]) as oracle:
                p = oracle(y.pis[i], y.sigmas[i])
            points.append(p)
            value += p.value_usd - float(np.sum(lam * self.dmax[i]))
            value += float(np.sum(np.minimum(self.own_value[i], lam) * self.own[i]))
        return value + self._flows(y), points

    def _flows(self, y: Prices) -> float:
        """The flows' part: each flow in [0, its bound] at its reduced cost (its
        penalty less its region's value, plus the prices of the rows it is in), and the
        rows' constants (a region's value on all its demand, less its row's price times
        the demand and the ramp rows' prices times the ramp)."""
        m = self.master
        fp = self.fp
        sec = 3600.0 * fp.period_hours
        total = 0.0
        reduced = np.zeros_like(m.flow_ub)
        for f, (r, q) in enumerate(m.flows):
            reg = fp.regions[r]
            s = reg.servers[q]
            reduced[f] = (
                sec * (s.penalty_usd_per_request - reg.unserved_penalty_usd_per_request)
                + y.lams[s.site][s.deployment]
                + y.region[r]
            )
        if m.n_ramp:
            rows, fl, per, a = m.ramp_terms.T
            np.add.at(reduced, (fl.astype(int), per.astype(int)), -y.ramp[rows.astype(int)] * a)
        total += float(np.sum(m.flow_ub * np.minimum(reduced, 0.0)))
        for r, reg in enumerate(fp.regions):
            demand = np.asarray(reg.demand_rps)
            total += sec * reg.unserved_penalty_usd_per_request * float(demand.sum())
            total -= float(np.dot(y.region[r], demand))
        ramp = float(fp.max_share_change or 0.0)
        return total - ramp * float(np.sum(np.abs(y.ramp)))


def relax_fleet(
    fp: FleetProblem,
    datas: list[ScheduleData],
    own_value: list[FloatArray],
    deadline: Deadline,
    say: Progress,
    flow_caps: FloatArray | None = None,
    max_rounds: int = 1000,
) -> FleetRelaxation:
    """Column generation over the fleet (module docstring) until the master LP meets
    the best bound or ``deadline``: the proven bound and the master's flows."""
    t0 = time.perf_counter()
    master = FleetMaster(fp, datas, own_value, flow_caps)
    pricing = FleetPricing(fp, datas, own_value, master)
    T = fp.n_periods
    zero_pi = [np.zeros(T) for _ in datas]
    zero_sigma = [np.zeros((len(d.pools), T)) for d in datas]
    # first columns: every deployment serving nothing and serving all it may (its
    # requests at no value, then at the most any of them is worth)
    sec = 3600.0 * fp.period_hours
    worth = [np.array(v, copy=True) for v in own_value]
    for reg in fp.regions:
        for s in reg.servers:
            most = worth[s.site][s.deployment]
            np.maximum(most, sec * reg.unserved_penalty_usd_per_request, out=most)
    best = -np.inf
    R = len(fp.regions)
    for lams in ([np.zeros_like(w) for w in worth], worth):
        y0 = Prices(zero_pi, zero_sigma, lams, np.zeros((R, T)), np.zeros(master.n_ramp))
        value, points = pricing(y0)
        best = max(best, value)
        _add_columns(master, datas, points)
    history: list[tuple[float, float, float]] = []
    lp = np.inf
    flows = np.zeros((len(master.flows), T))
    rounds = 0
    converged = False
    while rounds < max_rounds and not deadline.expired():
        lp, y, flows = master.solve()
        rounds += 1
        value, points = pricing(y)
        best = max(best, value)
        history.append((time.perf_counter() - t0, lp, best))
        added = _add_columns(master, datas, points)
        gap = (lp - best) / max(abs(lp), 1.0)
        if rounds == 1 or rounds % 5 == 0:
            say(
                f"relaxation over the fleet: round {rounds}, LP {lp:,.2f} USD, bound "
                f"{best:,.2f} USD, {len(master.columns):,} columns"
            )
        if gap <= REL_TOL or not added:
            converged = True
            break
    if not np.isfinite(lp):  # no round ran: the LP over the first columns
        lp, _y, flows = master.solve()
    return FleetRelaxation(
        lower_bound_usd=float(min(best, lp)),
        lp_value_usd=float(lp),
        flows=flows,
        rounds=rounds,
        columns=len(master.columns),
        seconds=time.perf_counter() - t0,
        converged=converged,
        history=history,
    )


def _add_columns(master: FleetMaster, datas: list[ScheduleData], points: list[Point]) -> int:
    """The DP solutions as columns (costed without any value on unserved requests);
    how many were new."""
    n = 0
    for i, (data, p) in enumerate(zip(datas, points, strict=True)):
        for k in range(len(data.deployments)):
            col = make_column(data, k, p.schedule.config[k], p.schedule.served_rps[k])
            n += master.add(i, col)
    return n
