"""Primal heuristic: exact per-deployment re-optimisation given the others.

With every other deployment's configurations and served loads fixed, one deployment's
best schedule under the remaining power budget and GPUs is a shortest path again: in
period ``t`` configuration ``k`` may serve any ``s`` with ``P_k(s) - p_idle gpus_k``
within the residual budget, and the best such ``s`` is ``0`` or the largest that fits
(the cost is concave in ``s``). Sweeping the deployments until none improves is a
block-coordinate descent whose objective never increases. Budget breaches are priced
and transition-limit breaches at a large penalty, so a sweep started from an
infeasible schedule (the rounded LP solution, or the greedy baseline that ignores
transitions) moves towards feasibility; only violation-free results are kept.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from formulation.budget import Deadline
from formulation.data import ScheduleData
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.processes.interrupt import stop_requested
from formulation.subproblems.dp import DeploymentGrid, shortest_path

FloatArray = NDArray[np.float64]


def reoptimise(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    sched: Schedule,
    m: int,
    penalty_usd_per_w: float,
) -> tuple[NDArray[np.int64], FloatArray, float]:
    """Best schedule of deployment ``m`` with the others fixed (penalised breaches)."""
    d = data.deployments[m]
    T = data.n_periods
    t_idx = np.arange(T)
    idle = data.idle_gpu_power_w
    others = np.zeros(T)
    pool_used = np.zeros((len(data.pools), T))
    for j, dj in enumerate(data.deployments):
        data.add_pool_use(pool_used, j, sched.config[j])
        if j == m:
            continue
        others += dj.power_w(sched.config[j], sched.served_rps[j]) - idle * dj.gpus[sched.config[j]]
    budget = data.net_cap_w - others  # for m's net power
    p_budget = budget[:, None] + idle * d.gpus[None, :]
    s_fit = d.max_load_within(np.arange(d.n_configs)[None, :], p_budget)
    s_hi = np.minimum(d.smax_rps, np.maximum(s_fit, 0.0))
    grid = grids[m]
    p0 = grid.p0_w
    p_hi = d.power_w(np.arange(d.n_configs)[None, :], s_hi)
    cw = data.cost_usd_per_w[:, None]
    u = d.unserved_usd_per_rps[:, None]
    lam = d.demand_rps[:, None]
    net_gpu = idle * d.gpus[None, :]
    c0 = cw * (p0 - net_gpu) + u * lam
    c1 = cw * (p_hi - net_gpu) + u * (lam - s_hi)
    full = (c1 < c0) & (s_fit >= 0)
    stage = np.where(full, c1, c0)
    over = np.maximum(p0 - p_budget, 0.0)
    gpu_over = np.zeros_like(over)
    for g, gpus in data.pool_use(m):  # each pool m draws from (one per phase)
        avail = data.pool_gpus[g] - (pool_used[g] - gpus[sched.config[m]])
        gpu_over += np.maximum(gpus[None, :] - avail[:, None], 0.0)
    stage = stage + penalty_usd_per_w * (over + 1e3 * gpu_over)
    stage[:, ~d.allowed] = np.inf
    value, cfg, _ = shortest_path(data, d, grid, stage)
    served = np.where(full[t_idx, cfg], s_hi[t_idx, cfg], 0.0)
    return cfg, served, value


def coordinate_descent(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    start: Schedule,
    deadline: Deadline,
    max_sweeps: int = 20,
) -> Priced:
    """Sweep :func:`reoptimise` over the deployments until nothing improves or
    ``deadline`` passes (checked after each sweep)."""
    penalty = 1e3 * (float(np.max(data.cost_usd_per_w)) + 1.0)
    sched = Schedule(start.config.copy(), start.served_rps.copy())
    M = len(data.deployments)

    def penalised(s: Schedule) -> float:
        p = price_schedule(data, s)
        excess = np.maximum(p.site_power_w - data.power_cap_w, 0.0).sum() / data.pue
        gpu_excess = np.maximum(p.gpus_used - data.pool_gpus[:, None], 0).sum()
        limits = len(p.limit_violations)
        return p.objective_usd + penalty * (excess + 1e3 * gpu_excess + 1e3 * limits)

    current = penalised(sched)
    for _ in range(max_sweeps):
        improved = False
        for m in range(M):
            if stop_requested():
                return price_schedule(data, sched)
            cfg, served, _ = reoptimise(data, grids, sched, m, penalty)
            trial = Schedule(sched.config.copy(), sched.served_rps.copy())
            trial.config[m], trial.served_rps[m] = cfg, served
            val = penalised(trial)
            if val < current - 1e-9 * max(abs(current), 1.0):
                sched, current, improved = trial, val, True
        if not improved or deadline.expired():
            break
    return price_schedule(data, sched)
