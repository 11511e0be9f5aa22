"""Lagrangian relaxation of the site cap and the GPU inventories, with each
deployment's exact dynamic program as the subproblem.

Deployments are coupled only by two families of constraints per period ``t``:

    sum_m pnet_m,t <= R_t        (site cap: IT power net of idle GPUs, R_t = cap_t/PUE - p_idle G)
    sum_{m in g} gpus_m,t <= G_g (inventory of pool g)

Pricing them with ``pi_t >= 0`` (USD per W) and ``sigma_g,t >= 0`` (USD per GPU)
separates the problem into one shortest path per deployment (:mod:`formulation.subproblems.dp`),
and the dual function

    L(pi, sigma) = sum_m DP_m(pi, sigma) - pi . R - sigma . G + idle-site energy

is a lower bound on every feasible schedule's cost (weak duality).

**Local restriction.** Whatever the others do, deployment ``m`` can never use more
than ``B_m,t = R_t - sum_{j != m} floor_j`` of net power, where ``floor_j`` is the
least net power deployment ``j`` can draw (its least-power allowed configuration at
zero load), nor more than ``G_g - sum_{j != m in g} min gpus_j`` GPUs. Every feasible
schedule meets these per-deployment limits, so they may be kept inside the
subproblem: the DP then forbids ``(t, k)`` whose zero-load draw exceeds ``B_m,t`` and
caps the load at the largest ``s`` with ``P_k(s) - p_idle gpus_k <= B_m,t`` (the stage
cost stays concave in ``s``, so the minimum is still at ``s = 0`` or at that cap).
The dual function of this restricted relaxation is never below the plain one, at
zero prices it is at least the sum of the deployments' uncapped optima, and with a
single deployment the restriction *is* the site constraint: the zero-price DP is
then the exact optimum.

**Multipliers: the volume algorithm** (Barahona and Anbil, Math. Program. 87, 2000), a
subgradient method from the unit-commitment literature that also builds an
approximate primal solution. Constraint rows are scaled (cap rows by the mean of
``R``, inventory rows by ``G_g``) so one step size serves both families. With ``x̄``
the running average of the DP solutions and ``v = A x̄ - b`` its residual, each
iteration tries

    pi' = max(0, pi_best + f (UB - L_best) / ||v||^2 v)          (Polyak step)

towards the incumbent's cost ``UB``, and updates ``x̄ <- a x + (1 - a) x̄`` with ``a``
minimising ``||a g + (1 - a) v||`` (``g`` the new residual) within ``[a_max/10,
a_max]``. ``pi'`` replaces ``pi_best`` only when its bound is higher; ``f`` grows by
10% after an improving step whose residual agrees with ``v`` ("green"), and shrinks
by a third after 20 steps that do not improve ("red"). The best bound seen is
reported; it is valid whatever the multipliers.

Column generation (:mod:`formulation.bounds.decomposition`) reaches the Lagrangian dual
optimum sooner on every benchmark site and is the default (``solver.method: auto``;
figures in docs/schedule.md). The volume algorithm stays as ``solver.method: volume``:
an option of the request schema that callers may name, and a second route to the
same bound that needs no master LP, against which the default is checked (both are
compared with exhaustive enumeration in tests/formulation/test_lagrange.py and
test_exact.py, and held to the same invariants in test_invariants.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from formulation.budget import Deadline
from formulation.data import ScheduleData, one_deployment, site_constant_usd
from formulation.evaluate import Schedule
from formulation.processes.executor import open_pool
from formulation.processes.workers import Pool
from formulation.subproblems.dp import DeploymentGrid, backward_values, shortest_path, stage_costs

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Allowed = list[list[list[int]]]


def net_floor_w(data: ScheduleData, grids: Sequence[DeploymentGrid]) -> FloatArray:
    """Least net IT power (``P_k(0) - p_idle gpus_k``) of each deployment, (M,)."""
    out = np.empty(len(data.deployments))
    for m, d in enumerate(data.deployments):
        ok = d.allowed
        out[m] = float(np.min((grids[m].p0_w[0] - data.idle_gpu_power_w * d.gpus)[ok]))
    return out


def local_grids(data: ScheduleData, grids: Sequence[DeploymentGrid]) -> list[DeploymentGrid]:
    """Each deployment's grid restricted to what the site cap and its GPU pool allow
    whatever the others run (see the module docstring)."""
    floors = net_floor_w(data, grids)
    # (M, G) the fewest GPUs each deployment takes of each pool
    min_gpus = np.zeros((len(data.deployments), len(data.pools)), dtype=np.int64)
    for m, d in enumerate(data.deployments):
        for pool, gpus in data.pool_use(m):
            min_gpus[m, pool] = int(np.min(gpus[d.allowed]))
    rhs = data.net_cap_w
    idle = data.idle_gpu_power_w
    out = []
    for m, d in enumerate(data.deployments):
        g = grids[m]
        budget = rhs - (floors.sum() - floors[m])  # (T,) net power m may draw
        k_all = np.arange(d.n_configs)[None, :]
        p_budget = budget[:, None] + idle * d.gpus[None, :]  # gross power m may draw
        fit = d.max_load_within(k_all, p_budget)
        ok = (fit >= 0) & d.period_allowed()
        for pool, gpus in data.pool_use(m):
            avail = int(data.pool_gpus[pool]) - int(min_gpus[:, pool].sum() - min_gpus[m, pool])
            ok &= gpus[None, :] <= avail
        s_hi = np.where(ok, np.minimum(g.smax, np.maximum(fit, 0.0)), 0.0)
        if ok.all() and np.array_equal(s_hi, g.smax):
            out.append(g)  # the site never limits this deployment on its own
            continue
        p_hi = d.power_w(k_all, s_hi)
        out.append(replace(g, p1_w=p_hi, smax=s_hi, ok=ok))
    return out


@dataclass
class Point:
    """One evaluation of the dual function."""

    value_usd: float  # L(pi, sigma): a lower bound
    pi_w: FloatArray  # (T,)
    sigma_gpu: FloatArray  # (G, T)
    schedule: Schedule  # the deployments' DP solutions at these prices
    cap_load_w: FloatArray  # (T,) sum of their net IT power
    gpu_load: FloatArray  # (G, T) their GPUs per pool


def dual_value(
    data: ScheduleData, dp_values: Sequence[float], pi: FloatArray, sigma: FloatArray
) -> float:
    """``L(pi, sigma)`` from the deployments' priced DP optima."""
    rhs = data.net_cap_w
    return (
        float(sum(dp_values))
        - float(np.dot(pi, rhs))
        - float(np.sum(sigma * data.pool_gpus[:, None]))
        + site_constant_usd(data)
    )


def solve_one(
    data: ScheduleData,
    grids: Sequence[DeploymentGrid],
    m: int,
    pi: FloatArray,
    sigma_g: FloatArray,
) -> tuple[float, IntArray, FloatArray]:
    """Deployment ``m``'s exact DP at prices ``pi`` and ``sigma_g`` (its pool's):
    ``(priced optimum, configuration per period, served load per period)``."""
    d, g = data.deployments[m], grids[m]
    stage, full = stage_costs(data, d, g, pi, sigma_g)
    value, cfg, _ = shortest_path(data, d, g, stage)
    t = np.arange(data.n_periods)
    served = np.where(full[t, cfg], g.smax[t, cfg], 0.0)
    return value, cfg, served


def deployment_part(
    shared: tuple[ScheduleData, Sequence[DeploymentGrid]], m: int
) -> tuple[ScheduleData, DeploymentGrid]:
    """What deployment ``m``'s DP needs of the oracle's state: the deployment as a site
    of its own (:func:`formulation.data.one_deployment`) and its grid."""
    data, grids = shared
    return one_deployment(data, m), grids[m]


# a task of the live oracles: one deployment's DP, on the part of the state it names
def _solve_part(
    part: tuple[ScheduleData, DeploymentGrid], pi: FloatArray, sigma_g: FloatArray
) -> tuple[float, IntArray, FloatArray]:
    data, grid = part
    return solve_one(data, [grid], 0, pi, sigma_g)


class DualOracle:
    """Evaluates ``L(pi, sigma)``: one exact DP per deployment, on the process's pool
    (:func:`formulation.processes.executor.open_pool`: ``workers`` forked processes when
    there are more than one, or a Ray cluster), each task naming its deployment's part
    of the state, so each evaluation sends only the prices and receives the paths."""

    def __init__(
        self, data: ScheduleData, grids: Sequence[DeploymentGrid], workers: int = 1
    ) -> None:
        self.data = data
        self.grids = list(grids)
        self.pool: Pool[tuple[ScheduleData, list[DeploymentGrid]]] = open_pool(
            (data, self.grids), workers if len(data.deployments) > 1 else 1
        )
        self.calls = 0
        self.seconds = 0.0

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> DualOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __call__(self, pi: FloatArray, sigma: FloatArray) -> Point:
        t0 = time.perf_counter()
        data = self.data
        M = len(data.deployments)
        parts = self.pool.map_parts(
            _solve_part, deployment_part, [(m, pi, data.gpu_price(m, sigma)) for m in range(M)]
        )
        cfg = np.stack([p[1] for p in parts])
        served = np.stack([p[2] for p in parts])
        cap_load = np.zeros(data.n_periods)
        gpu_load = np.zeros((len(data.pools), data.n_periods))
        for m, d in enumerate(data.deployments):
            gpus = d.gpus[cfg[m]]
            cap_load += d.power_w(cfg[m], served[m]) - data.idle_gpu_power_w * gpus
            data.add_pool_use(gpu_load, m, cfg[m])
        value = dual_value(data, [p[0] for p in parts], pi, sigma)
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        return Point(value, pi, sigma, Schedule(cfg, served), cap_load, gpu_load)


@dataclass
class Relaxation:
    best: Point  # the multipliers of the best bound and their DP solutions
    first: Point  # zero prices
    iterations: int
    seconds: float
    history: list[tuple[float, float]] = field(default_factory=list)  # (s, best bound)
    hints: list[Schedule] = field(default_factory=list)  # other schedules worth repairing
    # (deployment, configuration path) of the columns the final master LP uses (column
    # generation only): the configurations a near-optimal schedule tends to use
    support: list[tuple[int, NDArray[np.int64]]] = field(default_factory=list)
    # column generation stopped when its master LP fell to a bound proven otherwise
    beaten: bool = False


def cost_ceiling(data: ScheduleData, grids: Sequence[DeploymentGrid]) -> float:
    """More than any schedule can cost: every deployment at its most power-hungry
    choice (no idle credit), all demand unserved, and every instance started and
    stopped in every period. A bound above it proves that no schedule is feasible."""
    energy = data.idle_site_it_w * float(np.sum(data.cost_usd_per_w))
    other = 0.0
    for d, g in zip(data.deployments, grids, strict=True):
        energy += float(np.sum(data.cost_usd_per_w * np.max(np.maximum(g.p0_w, g.p1_w), axis=1)))
        other += float(np.sum(d.unserved_usd_per_rps * d.demand_rps))
        most = int(np.max(d.n_p + d.n_d))
        other += (data.start_cost_usd + data.stop_cost_usd) * most * data.n_periods
    return 2.0 * (abs(energy) + other) + 1.0


def row_scales(data: ScheduleData) -> tuple[float, FloatArray]:
    """Scales of the coupling rows: the cap rows' mean right-hand side (W) and each
    pool's GPUs, (G, 1)."""
    cap = max(float(np.mean(np.abs(data.net_cap_w))), 1.0)
    return cap, np.maximum(data.pool_gpus[:, None], 1).astype(float)


def residual(data: ScheduleData, p: Point) -> tuple[FloatArray, FloatArray]:
    """Scaled constraint residuals ``A x - b`` (cap rows, inventory rows)."""
    cap_scale, inv_scale = row_scales(data)
    cap = (p.cap_load_w - data.net_cap_w) / cap_scale
    inv = (p.gpu_load - data.pool_gpus[:, None]) / inv_scale
    return cap, inv


@dataclass
class VolumeState:
    """What the volume algorithm learns as it goes (step factor ``f``, steps since the
    last that improved, the averaged residual ``v``), kept for a later run from
    another start (:func:`relax`), so that run goes on where this one stopped instead
    of starting its step factor over."""

    f: float = 0.1
    reds: int = 0
    v_cap: FloatArray | None = None
    v_inv: FloatArray | None = None


def relax(
    oracle: DualOracle,
    deadline: Deadline,
    upper_usd: Callable[[], float],
    rel_gap: float,
    on_point: Callable[[Point], None] | None = None,
    max_iter: int = 10_000,
    start: Point | None = None,
    stall_iter: int = 60,
    stall_rel: float = 1e-5,
    stop: Callable[[], bool] | None = None,
    state: VolumeState | None = None,
) -> Relaxation:
    """The volume algorithm (module docstring) until ``deadline``, ``max_iter`` dual
    evaluations, or the bound within ``rel_gap`` of
    ``upper_usd()`` (the incumbent's cost, inf if none), or when ``stall_iter``
    evaluations have raised the bound by less than ``stall_rel`` of its value.
    ``on_point`` sees every evaluated point whose bound is the best so far (for
    primal heuristics); ``stop`` is checked before every evaluation. ``state``
    (optional): where an earlier run stopped, taken up and left where this one stops."""
    data = oracle.data
    t0 = time.perf_counter()
    cap_scale, inv_scale = row_scales(data)
    first = start or oracle(np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods)))
    best = first
    if on_point is not None:
        on_point(first)
    # multipliers in scaled units: pi = y_cap / cap_scale, sigma = y_inv / inv_scale
    y_cap = first.pi_w * cap_scale
    y_inv = first.sigma_gpu * inv_scale
    state = state if state is not None else VolumeState()
    if state.v_cap is None or state.v_inv is None:
        v_cap, v_inv = residual(data, first)
    else:
        v_cap, v_inv = state.v_cap, state.v_inv
    f, a_max, reds = state.f, 0.1, state.reds
    history = [(time.perf_counter() - t0, best.value_usd)]
    it = 0
    marks = [best.value_usd]  # best bound after each evaluation
    ceiling = cost_ceiling(data, oracle.grids)
    while it < max_iter and not deadline.expired() and best.value_usd <= ceiling:
        # (a bound above the ceiling proves the problem infeasible)
        if stop is not None and stop():
            break
        if len(marks) > stall_iter:
            old = marks[-stall_iter - 1]
            if best.value_usd - old <= stall_rel * max(abs(best.value_usd), 1.0):
                break
        ub = upper_usd()
        scale = max(abs(best.value_usd), 1.0)
        if np.isfinite(ub) and ub - best.value_usd <= rel_gap * max(abs(ub), 1e-9):
            break
        target = ub if np.isfinite(ub) else best.value_usd + 0.1 * scale
        target = max(target, best.value_usd + 1e-9 * scale)
        # project the direction: a zero multiplier whose constraint is slack stays zero
        d_cap = np.where((y_cap <= 0) & (v_cap < 0), 0.0, v_cap)
        d_inv = np.where((y_inv <= 0) & (v_inv < 0), 0.0, v_inv)
        norm2 = float(np.sum(d_cap**2) + np.sum(d_inv**2))
        if norm2 <= 1e-18:
            break  # the averaged solution meets every coupling constraint
        step = f * (target - best.value_usd) / norm2
        c_try = np.maximum(y_cap + step * d_cap, 0.0)
        i_try = np.maximum(y_inv + step * d_inv, 0.0)
        p = oracle(c_try / cap_scale, i_try / inv_scale)
        it += 1
        g_cap, g_inv = residual(data, p)
        # alpha minimising ||a g + (1 - a) v||, within [a_max / 10, a_max]
        dg_cap, dg_inv = g_cap - v_cap, g_inv - v_inv
        den = float(np.sum(dg_cap**2) + np.sum(dg_inv**2))
        a = a_max if den <= 0 else -float(np.sum(v_cap * dg_cap) + np.sum(v_inv * dg_inv)) / den
        a = min(max(a, a_max / 10), a_max)
        agree = float(np.sum(v_cap * g_cap) + np.sum(v_inv * g_inv))
        v_cap = a * g_cap + (1 - a) * v_cap
        v_inv = a * g_inv + (1 - a) * v_inv
        if p.value_usd > best.value_usd:
            best, y_cap, y_inv = p, c_try, i_try
            reds = 0
            if agree >= 0:
                f = min(f * 1.1, 2.0)
            history.append((time.perf_counter() - t0, best.value_usd))
            if on_point is not None:
                on_point(p)
        else:
            reds += 1
            if reds >= 20:
                f, reds = f * 0.66, 0
                if f < 1e-6:
                    break
        marks.append(best.value_usd)
    state.f, state.reds, state.v_cap, state.v_inv = f, reds, v_cap, v_inv
    return Relaxation(best, first, it, time.perf_counter() - t0, history)


def keep_choices(
    data: ScheduleData,
    grids: Sequence[DeploymentGrid],
    point: Point,
    upper_usd: float,
    bound_usd: float | None = None,
) -> tuple[Allowed, int, int]:
    """Configurations that can still be in a schedule cheaper than ``upper_usd``.

    At ``point``'s prices every schedule that runs ``k`` at ``t`` for deployment ``m``
    has a Lagrangian value of at least ``L - DP_m + through_m(t, k)`` (``through``:
    the best priced path through ``(t, k)``, forward plus backward DP values). Where
    that exceeds ``upper_usd``, no cheaper schedule uses ``(m, t, k)``: dropping it
    keeps the optimum (or proves the incumbent optimal). ``grids`` must be those
    ``point`` was evaluated on. Returns ``(allowed, kept, total)``."""
    lb = point.value_usd if bound_usd is None else bound_usd
    tol = 1e-9 * max(abs(upper_usd), 1.0)
    out: Allowed = []
    kept = total = 0
    for m, d in enumerate(data.deployments):
        g = grids[m]
        stage, _ = stage_costs(data, d, g, point.pi_w, data.gpu_price(m, point.sigma_gpu))
        best, _, fwd = shortest_path(data, d, g, stage)
        through = fwd + backward_values(data, d, g, stage)
        ok = (lb - best + through) <= upper_usd + tol
        ok &= d.period_allowed()
        out.append([np.flatnonzero(ok[t]).tolist() for t in range(data.n_periods)])
        kept += int(ok.sum())
        total += int(d.period_allowed().sum())
    return out, kept, total


def corridor(
    data: ScheduleData,
    paths: Sequence[IntArray],
    radius: int,
    periods: range,
    keep: Allowed | None = None,
    grids: Sequence[DeploymentGrid] | None = None,
    focus: set[int] | None = None,
) -> Allowed:
    """Per deployment and period in ``periods``, the configurations within ``radius``
    instance changes (L1 in ``(n_P, n_D)``) of the deployment's configuration on any of
    ``paths`` ((M, T) arrays), intersected with ``keep`` and the grids' admitted
    choices; the paths' own configurations always stay in. Outside ``focus`` (when
    given) only the first path's configuration stays: a time window."""
    out: Allowed = []
    for m, d in enumerate(data.deployments):
        rows = []
        for t in periods:
            if focus is not None and t not in focus:
                rows.append([int(paths[0][m, t])])
                continue
            centres = {int(p[m, t]) for p in paths}
            near = np.zeros(d.n_configs, dtype=bool)
            for k in centres:
                near |= (np.abs(d.n_p - d.n_p[k]) + np.abs(d.n_d - d.n_d[k])) <= radius
            near &= d.allowed
            admitted = None if grids is None else grids[m].ok
            if admitted is not None:
                near &= admitted[t]
            if keep is not None:
                mask = np.zeros(d.n_configs, dtype=bool)
                mask[keep[m][t]] = True
                near &= mask
            for k in centres:
                near[k] = d.allowed[k]
            rows.append(np.flatnonzero(near).tolist())
        out.append(rows)
    return out


def uncoupled_schedule(data: ScheduleData, grids: Sequence[DeploymentGrid]) -> Schedule:
    """Each deployment's exact optimum on ``grids`` at zero prices."""
    T, G = data.n_periods, len(data.pools)
    with DualOracle(data, grids) as oracle:
        return oracle(np.zeros(T), np.zeros((G, T))).schedule


def uncoupled_bound(data: ScheduleData, grids: Sequence[DeploymentGrid]) -> float:
    """Sum over deployments of each one's exact optimum on ``grids`` at zero prices,
    plus the idle site's energy: ``L(0, 0)``. On unrestricted grids, the floor that no
    reported bound may fall below."""
    T, G = data.n_periods, len(data.pools)
    with DualOracle(data, grids) as oracle:
        return oracle(np.zeros(T), np.zeros((G, T))).value_usd
