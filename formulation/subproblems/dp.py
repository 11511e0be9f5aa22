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
grid, computed exactly in O(K) with cumulative minima. With a limit
``|dn_P| + |dn_D| <= L`` it is the same step restricted to the L1 ball of radius L:
the ball is the L-fold sum of the unit cross and the cost is additive along monotone
paths, so applying the unit step (stay, or one instance more or less of either kind)
L times is exact, O(K L) per period with O(K) memory: no K x K matrix is ever built.
Intermediate grid cells that are not candidates carry paths through (they stay
inside the bounding box of the two end points) but are never chosen. Candidates that
share a cell (one ``(n_P, n_D)`` at several GPU settings) enter it at their least and
each leaves it at the cell's value: a change of setting costs nothing.
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
    p0_w: FloatArray  # (T, K) power at s = 0 (a read-only view of one row)
    p1_w: FloatArray  # (T, K) power at s = smax
    smax: FloatArray  # (T, K)
    limit: int | None  # change limit L where it can bind, else None
    #: (T, K) choices this grid admits, where a restriction applies (see
    #: :func:`formulation.bounds.lagrange.local_grids`); None: every allowed candidate
    ok: NDArray[np.bool_] | None = None
    #: several candidates share a cell (one configuration at several GPU settings):
    #: moving between them is free, so a cell holds the least of its candidates
    shared_cells: bool = False


def deployment_grid(data: ScheduleData, d: DeploymentData) -> DeploymentGrid:
    t_count, k_count = d.smax_rps.shape
    p_dim = int(d.n_p.max()) + 1
    d_dim = int(d.n_d.max()) + 1
    cell = (d.n_p * d_dim + d.n_d).astype(np.int64)
    # the power at zero load does not depend on the period: one row, seen as (T, K)
    # through a read-only broadcast view (8 bytes per cell fewer for the whole solve)
    p0 = np.broadcast_to(d.bp_power_w[:, 0].copy(), (t_count, k_count))
    p1 = d.full_load_power_w
    limit = data.max_changes
    if limit is not None and limit >= (p_dim - 1) + (d_dim - 1):
        limit = None  # no two candidates are further apart: the limit cannot bind
    shared = bool(np.unique(cell).size < cell.size)
    return DeploymentGrid(p_dim, d_dim, cell, p0, p1, d.smax_rps, limit, shared_cells=shared)


def transition_cost(
    data: ScheduleData, d: DeploymentData, src: int | IntArray, dst: int | IntArray
) -> FloatArray:
    """Cost of moving from candidate(s) ``src`` to ``dst`` (broadcast); inf where the
    move changes more than ``max_changes`` instances."""
    dp = np.asarray(d.n_p[dst]) - np.asarray(d.n_p[src])
    dd = np.asarray(d.n_d[dst]) - np.asarray(d.n_d[src])
    up = np.maximum(dp, 0) + np.maximum(dd, 0)
    down = np.maximum(-dp, 0) + np.maximum(-dd, 0)
    cost = (data.start_cost_usd * up + data.stop_cost_usd * down).astype(float)
    if data.max_changes is not None:
        cost = np.where(up + down > data.max_changes, np.inf, cost)
    return np.asarray(cost, dtype=float)


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


def stage_costs(
    data: ScheduleData,
    d: DeploymentData,
    g: DeploymentGrid,
    pi_w: FloatArray,
    sigma_gpu: FloatArray,
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Stage cost (T, K) and whether the minimum serves smax, at prices ``pi``/``sigma``
    (``sigma_gpu`` per period, (T,), or per period and candidate, (T, K), for a
    deployment drawing from two pools: :meth:`~formulation.data.ScheduleData.gpu_price`)."""
    cost, full = endpoint_costs(
        data,
        d,
        (data.cost_usd_per_w + pi_w)[:, None],
        sigma_gpu[:, None] if sigma_gpu.ndim == 1 else sigma_gpu,
        d.unserved_usd_per_rps[:, None],
        d.demand_rps[:, None],
        g.p0_w,
        g.p1_w,
        g.smax,
    )
    if g.ok is not None:
        np.copyto(cost, np.inf, where=~g.ok)
    if d.useful is not None:  # a setting pair its configuration's others dominate
        np.copyto(cost, np.inf, where=~d.useful)
    return cost, full


def endpoint_costs(
    data: ScheduleData,
    d: DeploymentData,
    a: FloatArray,
    sigma: FloatArray | float,
    u: FloatArray | float,
    lam: FloatArray | float,
    p0: FloatArray,
    p1: FloatArray,
    smax: FloatArray,
) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Cost of each candidate serving nothing or the most it may (its cost is concave
    in the load, so one of the two is its least), at ``a`` USD per IT watt and
    ``sigma`` per GPU, and whether serving the most is cheaper; shapes broadcast (a
    period's row or every period). Candidates the deployment may not run cost inf."""
    # the same operations as ``min(a p0 + u lam, a p1 + u (lam - smax)) + gpu term``,
    # in place: three arrays of the result's shape instead of nine
    cost = a * p0
    cost += u * lam
    c1 = np.subtract(lam, smax)
    c1 *= u
    work = a * p1
    c1 += work
    full = c1 < cost
    np.minimum(cost, c1, out=cost)
    np.multiply(sigma - a * data.idle_gpu_power_w, d.gpus, out=work)
    cost += work
    np.copyto(cost, np.inf, where=~d.allowed)
    return cost, full


def _unit_steps(gg: FloatArray, steps: int, c_up: float, c_down: float) -> FloatArray:
    """``steps`` applications of: stay, or move one cell along either axis (``c_up``
    into the higher index, ``c_down`` into the lower). Two buffers swap roles between
    steps and the shifted sums go into a third: no array is allocated per step."""
    cur = gg.copy()
    new = np.empty_like(cur)
    tmp = np.empty_like(cur)
    for _ in range(steps):
        np.copyto(new, cur)
        np.add(cur[:-1, :], c_up, out=tmp[:-1, :])
        np.minimum(new[1:, :], tmp[:-1, :], out=new[1:, :])
        np.add(cur[1:, :], c_down, out=tmp[:-1, :])
        np.minimum(new[:-1, :], tmp[:-1, :], out=new[:-1, :])
        np.add(cur[:, :-1], c_up, out=tmp[:, :-1])
        np.minimum(new[:, 1:], tmp[:, :-1], out=new[:, 1:])
        np.add(cur[:, 1:], c_down, out=tmp[:, :-1])
        np.minimum(new[:, :-1], tmp[:, :-1], out=new[:, :-1])
        if np.array_equal(new, cur):
            break
        cur, new = new, cur
    return cur


def reach(
    data: ScheduleData, d: DeploymentData, g: DeploymentGrid, prev: FloatArray, forward: bool
) -> FloatArray:
    """``min_k' prev[k'] + c(k' -> k)`` (forward) or ``min_k' c(k -> k') + prev[k']``,
    transition limits included; exact, O(K) memory."""
    c_up, c_down = data.start_cost_usd, data.stop_cost_usd
    if not forward:
        c_up, c_down = c_down, c_up
    grid = np.full(g.p_dim * g.d_dim, np.inf)
    if g.shared_cells:
        np.minimum.at(grid, g.cell, prev)
    else:
        grid[g.cell] = prev
    gg = grid.reshape(g.p_dim, g.d_dim)
    if g.limit is None:
        gg = _dt_axis(_dt_axis(gg, 0, c_up, c_down), 1, c_up, c_down)
    else:
        gg = _unit_steps(gg, g.limit, c_up, c_down)
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
        prev = reach(data, d, g, prev, True) + stage[t]
        values[t] = prev
    cfg = np.empty(t_count, dtype=np.int64)
    k = int(np.argmin(values[-1]))
    best = float(values[-1, k])
    cfg[-1] = k
    for t in range(t_count - 1, 0, -1):
        k = int(np.argmin(values[t - 1] + step_cost_to(data, d, k)))
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
        back[t] = reach(data, d, g, stage[t + 1] + back[t + 1], False)
    return back


def step_cost_to(data: ScheduleData, d: DeploymentData, k: int) -> FloatArray:
    """Cost of each candidate ``k'`` moving to ``k`` (inf beyond the limit)."""
    return transition_cost(data, d, np.arange(d.n_configs), k)


def step_cost_from(data: ScheduleData, d: DeploymentData, k: int) -> FloatArray:
    """Cost of moving from ``k`` to each candidate (inf beyond the limit)."""
    return transition_cost(data, d, k, np.arange(d.n_configs))
