"""Exact dynamic program for one deployment's schedule under given prices.

A deployment alone is a shortest path over (period, configuration): the stage cost of
running configuration ``k`` in period ``t`` plus the cost of the transition from the
previous configuration. With per-watt and per-GPU prices (the Lagrange multipliers of
the site cap and the GPU inventory, zero when solving one deployment alone) the stage
cost is

    min over s in [0, smax] of  (cw_t + pi_t) P_k(s) + sigma_t gpus_k
                                - (cw_t + pi_t) p_idle gpus_k + u_t (demand_t - s)

which is concave in ``s`` (``P_k`` is concave, the price non-negative), so its
minimum is at ``s = 0`` or ``s = smax``: two evaluations per configuration.

Transitions cost ``c_up`` per instance started and ``c_down`` per instance stopped,
separately in ``n_P`` and ``n_D``. Without a change limit the min-plus step
``min_k' V(k') + c(k', k)`` is a separable distance transform on the ``(n_P, n_D)``
grid, computed exactly in O(K) with cumulative minima; with a limit
(``|dn_P| + |dn_D| <= L``) it is a dense K x K minimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from formulation.data import DeploymentData, ScheduleData

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class DeploymentGrid:
    """Per-deployment arrays reused by every DP call."""

    p_dim: int
    d_dim: int
    cell: IntArray  # (K,) flat grid index of each candidate
    p0_w: FloatArray  # (T, K) power at s = 0
    p1_w: FloatArray  # (T, K) power at s = smax
    smax: FloatArray  # (T, K)
    trans: FloatArray | None  # (K, K) cost k' -> k (inf beyond the limit), or None


def deployment_grid(data: ScheduleData, d: DeploymentData) -> DeploymentGrid:
    t_count, k_count = d.smax_rps.shape
    p_dim = int(d.n_p.max()) + 1
    d_dim = int(d.n_d.max()) + 1
    cell = (d.n_p * d_dim + d.n_d).astype(np.int64)
    p0 = np.broadcast_to(
        np.array([d.bp_power_w[k, 0] for k in range(k_count)]), (t_count, k_count)
    ).copy()
    p1 = d.power_w(np.arange(k_count)[None, :], d.smax_rps)
    trans = None
    if data.max_changes is not None:
        trans = transition_matrix(data, d)
    return DeploymentGrid(p_dim, d_dim, cell, p0, p1, d.smax_rps, trans)


def transition_matrix(data: ScheduleData, d: DeploymentData) -> FloatArray:
    """Cost of moving from candidate ``k'`` (rows) to ``k`` (columns); inf if over limit."""
    dp = d.n_p[None, :] - d.n_p[:, None]
    dd = d.n_d[None, :] - d.n_d[:, None]
    up = np.maximum(dp, 0) + np.maximum(dd, 0)
    down = np.maximum(-dp, 0) + np.maximum(-dd, 0)
    cost = data.start_cost_usd * up + data.stop_cost_usd * down
    if data.max_changes is not None:
        cost = np.where(up + down > data.max_changes, np.inf, cost)
    return cost.astype(float)


def _dt_axis(v: FloatArray, axis: int, c_up: float, c_down: float) -> FloatArray:
    """``out[i] = min_j v[j] + c_up (i - j)^+ + c_down (j - i)^+`` along ``axis``."""
    n = v.shape[axis]
    shape = [1] * v.ndim
    shape[axis] = n
    idx = np.arange(n, dtype=float).reshape(shape)
    fwd = np.minimum.accumulate(v - c_up * idx, axis=axis) + c_up * idx
    rev = (
        np.flip(np.minimum.accumulate(np.flip(v + c_down * idx, axis=axis), axis=axis), axis=axis)
        - c_down * idx
    )
    return np.minimum(fwd, rev)


@dataclass
class DpResult:
    value: float  # optimal priced cost (constant u * demand included)
    config: IntArray  # (T,)
    full: NDArray[np.bool_]  # (T,) serves smax (True) or 0 (False)


def stage_costs(
    data: ScheduleData,
    d: DeploymentData,
    g: DeploymentGrid,
    pi_w: FloatArray,
    sigma_gpu: FloatArray,
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Stage cost (T, K) and whether the minimum serves smax, at prices ``pi``/``sigma``."""
    a = (data.cost_usd_per_w + pi_w)[:, None]
    u = d.unserved_usd_per_rps[:, None]
    c0 = a * g.p0_w + u * d.demand_rps[:, None]
    c1 = a * g.p1_w + u * (d.demand_rps[:, None] - g.smax)
    full = c1 < c0
    gpu_term = (sigma_gpu[:, None] - a * data.idle_gpu_power_w) * d.gpus[None, :]
    cost = np.minimum(c0, c1) + gpu_term
    cost[:, ~d.allowed] = np.inf
    return cost, full


def _reach(
    data: ScheduleData, d: DeploymentData, g: DeploymentGrid, prev: FloatArray, forward: bool
) -> FloatArray:
    """``min_k' prev[k'] + c(k' -> k)`` (forward) or ``min_k' c(k -> k') + prev[k']``."""
    c_up, c_down = data.start_cost_usd, data.stop_cost_usd
    if g.trans is not None:
        if forward:
            return np.min(prev[:, None] + g.trans, axis=0)
        return np.min(g.trans + prev[None, :], axis=1)
    if not forward:
        c_up, c_down = c_down, c_up
    grid = np.full(g.p_dim * g.d_dim, np.inf)
    grid[g.cell] = prev
    gg = grid.reshape(g.p_dim, g.d_dim)
    gg = _dt_axis(_dt_axis(gg, 0, c_up, c_down), 1, c_up, c_down)
    return gg.reshape(-1)[g.cell]


def shortest_path(
    data: ScheduleData, d: DeploymentData, g: DeploymentGrid, stage: FloatArray
) -> tuple[float, IntArray, FloatArray]:
    """Least total ``stage[t, k]`` plus transitions from the initial state.

    Returns ``(value, config per period, forward values)`` where ``forward[t, k]`` is the
    least cost of periods ``0..t`` ending in ``k``. ``value`` is inf when no path exists.
    """
    t_count, k_count = stage.shape
    values = np.empty((t_count, k_count))
    prev = np.full(k_count, np.inf)
    prev[d.initial] = 0.0
    for t in range(t_count):
        prev = _reach(data, d, g, prev, True) + stage[t]
        values[t] = prev
    cfg = np.empty(t_count, dtype=np.int64)
    k = int(np.argmin(values[-1]))
    best = float(values[-1, k])
    cfg[-1] = k
    for t in range(t_count - 1, 0, -1):
        k = int(np.argmin(values[t - 1] + _step_cost(data, d, g, k)))
        cfg[t - 1] = k
    return best, cfg, values


def backward_values(
    data: ScheduleData, d: DeploymentData, g: DeploymentGrid, stage: FloatArray
) -> FloatArray:
    """``back[t, k]``: least cost of periods ``t+1..T-1`` given configuration ``k`` at
    ``t`` (transitions included). ``forward + back`` is the best path through ``(t, k)``."""
    t_count, k_count = stage.shape
    back = np.zeros((t_count, k_count))
    for t in range(t_count - 2, -1, -1):
        back[t] = _reach(data, d, g, stage[t + 1] + back[t + 1], False)
    return back


def solve_dp(
    data: ScheduleData,
    d: DeploymentData,
    g: DeploymentGrid,
    pi_w: FloatArray,
    sigma_gpu: FloatArray,
) -> DpResult:
    """Least-cost schedule of deployment ``d`` alone at prices ``pi`` (per IT watt and
    period) and ``sigma`` (per GPU and period); exact."""
    stage, full = stage_costs(data, d, g, pi_w, sigma_gpu)
    best, cfg, _ = shortest_path(data, d, g, stage)
    return DpResult(best, cfg, full[np.arange(stage.shape[0]), cfg])


def _step_cost(data: ScheduleData, d: DeploymentData, g: DeploymentGrid, k: int) -> FloatArray:
    """Cost of each candidate ``k'`` moving to ``k``."""
    if g.trans is not None:
        return g.trans[:, k]
    dp = d.n_p[k] - d.n_p
    dd = d.n_d[k] - d.n_d
    up = np.maximum(dp, 0) + np.maximum(dd, 0)
    down = np.maximum(-dp, 0) + np.maximum(-dd, 0)
    return (data.start_cost_usd * up + data.stop_cost_usd * down).astype(float)


def step_cost_from(data: ScheduleData, d: DeploymentData, g: DeploymentGrid, k: int) -> FloatArray:
    """Cost of moving from ``k`` to each candidate."""
    if g.trans is not None:
        return g.trans[k, :]
    dp = d.n_p - d.n_p[k]
    dd = d.n_d - d.n_d[k]
    up = np.maximum(dp, 0) + np.maximum(dd, 0)
    down = np.maximum(-dp, 0) + np.maximum(-dd, 0)
    return (data.start_cost_usd * up + data.stop_cost_usd * down).astype(float)
