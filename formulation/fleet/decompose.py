"""Price-directed routing: the fleet's relaxation by column generation over every
site's deployments at once (docs/fleet.md, sections 3 and 5).

The master LP holds each deployment's columns (whole-horizon schedules, as a site's
column generation does: :class:`formulation.bounds.decomposition.Column`), each site's
cap and inventory rows, and, as continuous variables, each deployment's own load
``o[i,k,t]`` and the regions' flows ``f[r,j,t]`` (a flow enters when its reduced cost
is negative), with the routing rows

    o[i,k,t] + sum_r f[r,(i,k),t] - sum_c served_c[t] w_c <= 0              (lambda >= 0)
    sum_j f[r,j,t] <= D[r,t],   0 <= o <= own,   the ramp on the shares.

Its prices price the next columns: deployment ``(i,k)``'s DP is a site's DP
(:class:`formulation.bounds.lagrange.DualOracle`) over the site's data with its demand
at the most it may be sent (``Dmax``) and a value ``lambda[i,k,t]`` on each request it
leaves unserved. Relaxing every row with its price (``pi, sigma, lambda``, the region
rows' ``rho >= 0`` and the ramp rows' ``mu``), for any such prices

    L = sum_i (L_i(pi_i, sigma_i; lambda_i) - sum_{k,t} lambda Dmax)
        + sum_{i,k,t} min(u_own, lambda) own
        + sum_{f,t} D min(0, reduced cost of f) - sum_{r,t} rho D - ramp sum |mu| + sum u_r D

is a lower bound on the fleet's optimum (weak duality; ``L_i`` is the site's dual
function), so the best one seen is the fleet's proven bound; at the LP's optimum it is
the LP's value. Its prices also value each site's requests when the site is planned
by its own pipeline (:func:`priced_data`), and :func:`route_within` routes the demand
within what plans can serve (:mod:`formulation.fleet.solve`)."""

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
#: the weight of the best bound's prices in the smoothed prices
SMOOTHING = 0.5


def fleet_constant(
    fp: FleetProblem, datas: list[ScheduleData], own_value: list[FloatArray]
) -> float:
    """The constant of the fleet's master LP: every site idle, every site's own demand
    and every region's demand unserved at their values (the columns, own loads and
    flows then pay what they save as negative costs)."""
    sec = 3600.0 * fp.period_hours
    out = sum(site_constant_usd(d) for d in datas)
    for i in range(len(datas)):
        out += float(np.sum(own_value[i] * own_demand(fp, i)))
    for reg in fp.regions:
        out += sec * reg.unserved_penalty_usd_per_request * float(np.sum(reg.demand_rps))
    return out


def flow_list(fp: FleetProblem) -> list[tuple[int, int]]:
    """(region, server index within the region) of each flow, regions in order."""
    return [(r, q) for r, reg in enumerate(fp.regions) for q in range(len(reg.servers))]


def flow_costs(fp: FleetProblem) -> FloatArray:
    """(flows,) each flow's cost per req/s through a period against leaving it unserved:
    its server's penalty less its region's value on an unserved request."""
    sec = 3600.0 * fp.period_hours
    return np.array(
        [
            sec
            * (
                fp.regions[r].servers[q].penalty_usd_per_request
                - fp.regions[r].unserved_penalty_usd_per_request
            )
            for r, q in flow_list(fp)
        ],
        dtype=float,
    )


def slack_price(datas: list[ScheduleData]) -> float:
    """The price per W of a cap's slack that keeps a fleet's LP feasible (a pool's is
    1e3 times it): far above any energy price."""
    return 1e3 * (max(float(np.max(d.cost_usd_per_w)) for d in datas) + 1.0)


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
    #: the prices of the best bound, and the part of the Lagrangian there that is not
    #: the sites' (:meth:`FleetPricing.outside`): with each site's own proven bound at
    #: these prices in place of its dual function, still a bound
    prices: Prices | None = None
    outside_usd: float = float("nan")
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
        big = slack_price(datas)
        for i in range(len(datas)):
            for t in range(T):
                self._col(big, 0.0, inf, [self.cap[i] + t], [-1.0])
            for r in range(G[i] * T):
                self._col(big * 1e3, 0.0, inf, [self.inv[i] + r], [-1.0])
        # own loads: o in [0, own], paying -u_own (the constant adds u_own own back)
        self.constant = fleet_constant(fp, datas, own_value)
        self.own_col: list[int] = []
        for i in range(len(datas)):
            own = own_demand(fp, i)
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
        # row and the ramp rows of its share; a flow enters the LP when it prices out
        # (:meth:`price_flows`), from the servers of least penalty
        F = len(self.flows)
        self.flow_cost = flow_costs(fp)
        self.flow_ub = np.zeros((F, T))
        self.flow_col = np.full((F, T), -1, dtype=np.int64)
        self.ramp_limit = float(fp.max_share_change or 0.0)
        self.ramp_keys: list[tuple[int, int]] = []  # (flow, t): its share from t - 1 to t
        self.ramp_row: dict[tuple[int, int], int] = {}
        least: dict[int, float] = {}
        for f, (r, q) in enumerate(self.flows):
            reg = regions[r]
            pen = reg.servers[q].penalty_usd_per_request
            least[r] = min(least.get(r, pen), pen)
            self.flow_ub[f] = np.asarray(reg.demand_rps, dtype=float)
            if flow_caps is not None:
                self.flow_ub[f] = np.minimum(self.flow_ub[f], np.maximum(flow_caps[f], 0.0))
        self.add_flows(
            [
                (f, t)
                for f, (r, q) in enumerate(self.flows)
                if regions[r].servers[q].penalty_usd_per_request == least[r]
                for t in range(T)
            ]
        )
        self.keys: set[tuple[int, int, bytes, bytes]] = set()
        self.columns: list[tuple[int, Column]] = []

    def _ramp_coefficients(self, f: int, t: int) -> list[tuple[tuple[int, int], float]]:
        """The ramp rows flow ``f`` at period ``t`` is in (keyed by flow and later
        period) and its coefficient in each: its share at ``t`` against ``t - 1`` and
        ``t + 1``, where both demands are positive."""
        if self.fp.max_share_change is None:
            return []
        d = self.fp.regions[self.flows[f][0]].demand_rps
        out = []
        if t >= 1 and d[t] > 0 and d[t - 1] > 0:
            out.append(((f, t), 1.0 / d[t]))
        if t + 1 < self.T and d[t] > 0 and d[t + 1] > 0:
            out.append(((f, t + 1), -1.0 / d[t]))
        return out

    def add_flows(self, pairs: list[tuple[int, int]]) -> None:
        """Add the flows ``(f, t)`` (those in the LP already are skipped), with the ramp
        rows they are the first to enter."""
        T = self.T
        for f, t in pairs:
            if self.flow_col[f, t] >= 0:
                continue
            r, q = self.flows[f]
            s = self.fp.regions[r].servers[q]
            idx = [self.route[s.site] + s.deployment * T + t, self.region + r * T + t]
            val = [1.0, 1.0]
            for key, a in self._ramp_coefficients(f, t):
                row = self.ramp_row.get(key)
                if row is None:
                    row = int(self.h.getNumRow())
                    self.h.addRow(
                        -self.ramp_limit,
                        self.ramp_limit,
                        0,
                        np.array([], dtype=np.int32),
                        np.array([]),
                    )
                    self.ramp_row[key] = row
                    self.ramp_keys.append(key)
                    # the other flow of the row, if in the LP already
                    g, u = key
                    other = u - 1 if u == t else u
                    if self.flow_col[g, other] >= 0:
                        d = self.fp.regions[r].demand_rps
                        b = -1.0 / d[other] if other == u - 1 else 1.0 / d[other]
                        self.h.changeCoeff(row, int(self.flow_col[g, other]), b)
                idx.append(row)
                val.append(a)
            self.flow_col[f, t] = self._col(
                float(self.flow_cost[f]), 0.0, float(self.flow_ub[f, t]), idx, val
            )

    def flow_reduced_costs(self, y: Prices) -> FloatArray:
        """(flows, T) every flow's reduced cost at the prices ``y``, in the LP or not."""
        T = self.T
        out = np.repeat(self.flow_cost[:, None], T, axis=1)
        for f, (r, q) in enumerate(self.flows):
            s = self.fp.regions[r].servers[q]
            out[f] += y.lams[s.site][s.deployment] + y.region[r]
        for n, (f, t) in enumerate(self.ramp_keys[: y.ramp.shape[0]]):
            d = self.fp.regions[self.flows[f][0]].demand_rps
            out[f, t] -= y.ramp[n] / d[t]
            out[f, t - 1] += y.ramp[n] / d[t - 1]
        return out

    def price_flows(self, y: Prices, most: int = 5_000) -> int:
        """Add the flows not in the LP whose reduced cost at ``y`` is negative, the
        ``most`` most negative; how many."""
        red = self.flow_reduced_costs(y)
        scale = max(float(np.max(np.abs(self.flow_cost))) if self.flow_cost.size else 0.0, 1.0)
        cand = (self.flow_col < 0) & (red < -1e-9 * scale) & (self.flow_ub > 0)
        f, t = np.nonzero(cand)
        if f.size > most:
            keep = np.argsort(red[f, t], kind="stable")[:most]
            f, t = f[keep], t[keep]
        self.add_flows(list(zip(f.tolist(), t.tolist(), strict=True)))
        return int(f.size)

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
        ramp = np.array([duals[self.ramp_row[key]] for key in self.ramp_keys])
        flows = np.zeros(self.flow_col.shape)
        present = self.flow_col >= 0
        flows[present] = np.maximum(x[self.flow_col[present]], 0.0)
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

    def towards(self, other: Prices, alpha: float) -> Prices:
        """``alpha * self + (1 - alpha) * other``, every price."""

        def mix(a: FloatArray, b: FloatArray) -> FloatArray:
            return alpha * a + (1.0 - alpha) * b

        return Prices(
            [mix(a, b) for a, b in zip(self.pis, other.pis, strict=True)],
            [mix(a, b) for a, b in zip(self.sigmas, other.sigmas, strict=True)],
            [mix(a, b) for a, b in zip(self.lams, other.lams, strict=True)],
            mix(self.region, other.region),
            mix(*_padded(self.ramp, other.ramp)),
        )


def _padded(a: FloatArray, b: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``a`` and ``b`` at the length of the longer, zeros after their ends (the ramp
    rows the LP has gained since)."""
    n = max(a.shape[0], b.shape[0])
    return np.pad(a, (0, n - a.shape[0])), np.pad(b, (0, n - b.shape[0]))


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
            with DualOracle(priced_data(data, y.lams[i]), self.grids[i]) as oracle:
                p = oracle(y.pis[i], y.sigmas[i])
            points.append(p)
            value += p.value_usd
        return value + self.outside(y), points

    def outside(self, y: Prices) -> float:
        """The Lagrangian's terms other than the sites' dual functions: the sites'
        requests valued at ``lambda`` given back, the own loads and the flows."""
        value = 0.0
        for i, lam in enumerate(y.lams):
            value -= float(np.sum(lam * self.dmax[i]))
            value += float(np.sum(np.minimum(self.own_value[i], lam) * self.own[i]))
        return value + self._flows(y)

    def _flows(self, y: Prices) -> float:
        """The flows' part: each flow in [0, its bound] at its reduced cost (its
        penalty less its region's value, plus the prices of the rows it is in), and the
        rows' constants (a region's value on all its demand, less its row's price times
        the demand and the ramp rows' prices times the ramp)."""
        m = self.master
        fp = self.fp
        sec = 3600.0 * fp.period_hours
        total = 0.0
        reduced = m.flow_reduced_costs(y)
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
    start: Prices | None = None,
    schedules: list[list[tuple[NDArray[np.int64], FloatArray]]] | None = None,
) -> FleetRelaxation:
    """Column generation over the fleet (module docstring) until the master LP meets
    the best bound or ``deadline``: the proven bound and the master's flows.
    ``start``: prices to price first (the relaxation by period's,
    :mod:`formulation.fleet.periods`), the smoothing's first centre when their bound
    is the best; ``schedules``: plans (each site's configurations and loads, (K_i, T)
    each) whose deployments' schedules start the master as columns."""
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
    best, centre = -np.inf, None
    R = len(fp.regions)
    firsts = [
        Prices(zero_pi, zero_sigma, lams, np.zeros((R, T)), np.zeros(len(master.ramp_keys)))
        for lams in ([np.zeros_like(w) for w in worth], worth)
    ]
    if start is not None:
        firsts.append(start)
    for y0 in firsts:
        value, points = pricing(y0)
        if value > best:
            best, centre = value, y0
        _add_columns(master, datas, points)
    for plan in schedules or []:  # each site's (configurations, loads) of a plan
        for i, (config, load) in enumerate(plan):
            for k in range(config.shape[0]):
                master.add(i, make_column(datas[i], k, config[k], load[k]))
    history: list[tuple[float, float, float]] = []
    lp = np.inf
    flows = np.zeros((len(master.flows), T))
    rounds = 0
    converged = False
    while rounds < max_rounds and not deadline.expired():
        lp, y, flows = master.solve()
        rounds += 1
        if (lp - best) / max(abs(lp), 1.0) <= REL_TOL:
            converged = True
            break
        # Wentges smoothing, as a site's column generation (formulation.bounds.
        # decomposition): priced between the best bound's prices and the LP's; where
        # that finds no new column, at the LP's
        added = master.price_flows(y)  # flows that price out at the LP's prices
        for at in (centre.towards(y, SMOOTHING), y) if centre is not None else (y,):
            value, points = pricing(at)
            if value > best:
                best, centre = value, at
            if _add_columns(master, datas, points):
                added += 1
                break
        history.append((time.perf_counter() - t0, lp, best))
        if rounds == 1 or rounds % 10 == 0:
            say(
                f"relaxation over the fleet: round {rounds}, LP {lp:,.2f} USD, bound "
                f"{best:,.2f} USD, {len(master.columns):,} columns, "
                f"{int(np.sum(master.flow_col >= 0)):,} flows"
            )
        if not added:  # nothing prices out at the LP's prices: the LP is the bound
            converged = True
            break
    if not np.isfinite(lp):  # no round ran: the LP over the first columns
        lp, _y, flows = master.solve()
    return FleetRelaxation(
        prices=centre,
        outside_usd=pricing.outside(centre) if centre is not None else float("nan"),
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


@dataclass
class SitePower:
    """A site's draw against its cap as a linear row per period, for fixed
    configurations: ``sum_k slope[k, t] load[k, t] <= room[t]``. Each deployment's power
    is concave in its load, so its tangent at any load lies above it: a routing that
    keeps the row keeps the cap (:func:`tangent_power`)."""

    slope: FloatArray  # (K, T) W per req/s
    room: FloatArray  # (T,) W


def tangent_power(data: ScheduleData, config: NDArray[np.int64], load: FloatArray) -> SitePower:
    """The site's cap row around the loads ``load`` (K, T) of the configurations
    ``config`` (K, T): each deployment's power replaced by its tangent there (the slope
    of the segment the load opens, or of the last one at capacity), so the row holds at
    ``load`` exactly when the cap does."""
    K, T = config.shape
    slope = np.zeros((K, T))
    fixed = np.zeros(T)
    for k, d in enumerate(data.deployments):
        c = config[k]
        s0 = load[k]
        p0 = d.power_w(c, s0)
        top = d.smax_rps[np.arange(T), c]
        h = np.maximum(1e-6 * np.maximum(top, 1.0), 1e-9)
        up = s0 + h <= top
        ahead = (d.power_w(c, s0 + h) - p0) / h
        behind = (p0 - d.power_w(c, np.maximum(s0 - h, 0.0))) / h
        slope[k] = np.where(up, ahead, behind)
        fixed += p0 - slope[k] * s0 - data.idle_gpu_power_w * d.gpus[c]
    return SitePower(slope, data.net_cap_w - fixed)


def route_within(
    fp: FleetProblem,
    capacity: list[FloatArray],
    own_value: list[FloatArray],
    flow_caps: FloatArray | None = None,
    power: list[SitePower] | None = None,
) -> tuple[list[FloatArray], FloatArray]:
    """The best routing for deployments that serve at most ``capacity`` (each site's
    (K_i, T) req/s): the LP of each deployment's own load and the regions' flows, with
    the regions' demand rows and the ramp, and each site's cap row (``power``, its
    tangent form around a plan's loads), at the values of unserved requests and the
    flows' penalties (the power a lighter load saves is not counted: the plan is priced
    after). Returns each site's own load (K_i, T) and the flows (flows, T)."""
    T = fp.n_periods
    inf = highspy.kHighsInf
    h = quiet_highs()
    flows = flow_list(fp)
    K = [c.shape[0] for c in capacity]
    route0 = np.cumsum([0, *[k * T for k in K]])  # each site's first routing row
    n_route = int(route0[-1])
    region0 = n_route
    R = len(fp.regions)
    ramp = fp.max_share_change
    steps = []
    if ramp is not None:
        for f, (r, _q) in enumerate(flows):
            d = fp.regions[r].demand_rps
            steps += [(f, t) for t in range(1, T) if d[t] > 0 and d[t - 1] > 0]
    ramp0 = region0 + R * T
    step_row = {key: ramp0 + n for n, key in enumerate(steps)}
    lower = np.concatenate(
        [np.full(n_route + R * T, -inf), np.full(len(steps), -float(ramp or 0.0))]
    )
    upper = np.concatenate(
        [
            np.concatenate([c.reshape(-1) for c in capacity]) if K else np.zeros(0),
            np.array([r.demand_rps for r in fp.regions], dtype=float).reshape(-1),
            np.full(len(steps), float(ramp or 0.0)),
        ]
    )
    cap0 = ramp0 + len(steps)
    if power is not None:
        lower = np.concatenate([lower, np.full(len(power) * T, -inf)])
        upper = np.concatenate([upper, *[np.maximum(p.room, 0.0) for p in power]])
    none = np.array([], dtype=np.int32)
    h.addRows(len(lower), lower, upper, 0, np.array([0]), none, np.array([]))
    costs: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []

    def col(c: float, top: float, idx: list[int], val: list[float]) -> None:
        costs.append(c)
        lo.append(0.0)
        hi.append(top)
        starts.append(len(index))
        index.extend(idx)
        value.extend(val)

    for i, cap in enumerate(capacity):
        own = own_demand(fp, i)
        for k in range(K[i]):
            for t in range(T):
                top = max(min(float(own[k, t]), float(cap[k, t])), 0.0)
                idx, val = [int(route0[i]) + k * T + t], [1.0]
                if power is not None:
                    idx.append(cap0 + i * T + t)
                    val.append(float(power[i].slope[k, t]))
                col(-float(own_value[i][k, t]), top, idx, val)
    for f, ((r, q), c) in enumerate(zip(flows, flow_costs(fp), strict=True)):
        reg = fp.regions[r]
        s = reg.servers[q]
        d = reg.demand_rps
        for t in range(T):
            top = float(d[t])
            if flow_caps is not None:
                top = min(top, max(float(flow_caps[f, t]), 0.0))
            idx = [int(route0[s.site]) + s.deployment * T + t, region0 + r * T + t]
            val = [1.0, 1.0]
            if (f, t) in step_row:
                idx.append(step_row[(f, t)])
                val.append(1.0 / d[t])
            if (f, t + 1) in step_row:
                idx.append(step_row[(f, t + 1)])
                val.append(-1.0 / d[t])
            if power is not None:
                idx.append(cap0 + s.site * T + t)
                val.append(float(power[s.site].slope[s.deployment, t]))
            col(c, top, idx, val)
    h.addCols(
        len(costs),
        np.array(costs),
        np.array(lo),
        np.array(hi),
        len(index),
        np.array(starts, dtype=np.int32),
        np.array(index, dtype=np.int32),
        np.array(value),
    )
    h.run()
    x = np.maximum(np.asarray(h.getSolution().col_value), 0.0)
    owns = []
    at = 0
    for i in range(len(capacity)):
        owns.append(x[at : at + K[i] * T].reshape(K[i], T))
        at += K[i] * T
    return owns, x[at:].reshape(len(flows), T)
