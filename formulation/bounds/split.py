"""Lagrangian decomposition (variable splitting) bound for a coupled window.

Inside the window ``[a, b)`` each deployment's configuration is duplicated: a
*period copy* ``y[m,t]`` that must fit the site cap and inventory with the other
deployments (the one-period knapsack, solved exactly by :mod:`formulation.subproblems.period`)
and a *deployment copy* ``x[m,t]`` that must follow the transition rules (a shortest
path, as in :mod:`formulation.subproblems.dp`, with the exact DP costs before and after the
window as entry and exit costs). Relaxing ``x = y`` with multipliers ``mu[m,t,k]``
gives, for any ``mu``,

    L(mu) = sum_t min_y [period cost_t(y) - sum_m mu[m,t,y_m]]
          + sum_m min_x [entry + transitions + sum_t mu[m,t,x_t] + exit] + site constant

a lower bound on the full problem (caps outside the window are relaxed too, which
only lowers it). ``L(0)`` is the bound of :func:`formulation.primal.window.solve_guided`;
subgradient steps on ``mu`` (Polyak steps towards the incumbent) raise it by pricing
the transition limits into the period problems. Both copies keep their integrality,
so this bound is at least the better of the knapsack and the path relaxations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from formulation.budget import HINTS_AFTER, Deadline
from formulation.data import ScheduleData
from formulation.processes.interrupt import stop_requested
from formulation.processes.workers import Pool
from formulation.subproblems.dp import DeploymentGrid, reach, step_cost_to, transition_cost
from formulation.subproblems.period import PeriodSolution, solve_period

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def path_with_boundary(
    data: ScheduleData,
    m: int,
    g: DeploymentGrid,
    entry: FloatArray | None,
    stage: FloatArray,
    exit_: FloatArray | None,
) -> tuple[float, IntArray]:
    """Least ``entry[k0] + sum stage[t, k_t] + transitions + exit[k_last]``; with no
    ``entry`` the path starts from the deployment's initial state."""
    d = data.deployments[m]
    W, K = stage.shape
    values = np.empty((W, K))
    if entry is None:
        prev = np.full(K, np.inf)
        prev[d.initial] = 0.0
        prev = reach(data, d, g, prev, True)
    else:
        prev = entry
    prev = prev + stage[0]
    values[0] = prev
    for t in range(1, W):
        prev = reach(data, d, g, prev, True) + stage[t]
        values[t] = prev
    final = values[-1] + (0.0 if exit_ is None else exit_)
    k = int(np.argmin(final))
    best = float(final[k])
    path = np.empty(W, dtype=np.int64)
    path[-1] = k
    for t in range(W - 1, 0, -1):
        k = int(np.argmin(values[t - 1] + step_cost_to(data, d, k)))
        path[t - 1] = k
    return best, path


@dataclass
class SplitBound:
    value_usd: float
    iterations: int
    seconds: float
    # configurations either copy chose in the last iterations, per deployment and
    # window period: where good schedules are likely to be
    hints: list[list[set[int]]] | None = None
    # per window period: joint configurations the period copy chose (each meets the cap
    # and inventory) -> (served loads, true period cost)
    states: list[dict[tuple[int, ...], tuple[FloatArray, float]]] | None = None
    mu: list[FloatArray] | None = None  # multipliers of the best bound


def split_bound(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    a: int,
    b: int,
    entry: list[FloatArray] | None,
    exit_: list[FloatArray] | None,
    constant_usd: float,
    upper_bound_usd: float,
    deadline: Deadline,
    max_iter: int = 200,
    theta0: float = 1.0,
    patience: int = 5,
    mu0: list[FloatArray] | None = None,
    improve: Callable[[list[dict[tuple[int, ...], tuple[FloatArray, float]]]], float | None]
    | None = None,
    target_gap: float = 0.0,
    on_bound: Callable[[float], None] | None = None,
    pool: Pool[ScheduleData] | None = None,
    restart_every: int | None = None,
) -> SplitBound:
    """Best ``L(mu)`` found by subgradient ascent by ``deadline``.

    ``improve(states)`` (optional), called every few iterations with the joint period
    states seen so far, may return a better upper bound (a schedule built from them);
    the ascent stops once the bound is within ``target_gap`` of the upper bound.
    ``on_bound`` (optional) sees every better bound as soon as it is found; ``pool``
    (optional, sharing ``data``) solves the period problems side by side.

    Steps are Polyak's towards the upper bound, their factor ``theta`` halved after
    ``patience`` iterations without a better bound; with ``restart_every``, every that
    many iterations the ascent starts again from the best multipliers with the factor
    ``theta0`` (a restarted subgradient method: halving alone shrinks the steps long
    before the multipliers settle)."""
    t0 = time.perf_counter()
    hints_from = deadline.fraction(HINTS_AFTER)
    M = len(data.deployments)
    W = b - a
    mu = (
        [x.copy() for x in mu0]
        if mu0 is not None
        else [np.zeros((W, d.n_configs)) for d in data.deployments]
    )
    best_mu = [x.copy() for x in mu]
    best = -np.inf
    hints: list[list[set[int]]] = [[set() for _ in range(W)] for _ in range(M)]
    # a period's problem changes only when one of its multipliers moved
    cache: list[PeriodSolution | None] = [None] * W
    dirty = [True] * W
    states: list[dict[tuple[int, ...], tuple[FloatArray, float]]] = [{} for _ in range(W)]
    theta = theta0
    stall = 0
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - reported
        y = np.zeros((M, W), dtype=np.int64)
        total = constant_usd
        todo = [i for i in range(W) if dirty[i] or cache[i] is None]
        tasks = [(a + i, [-mu[m][i] for m in range(M)], cache[i], deadline) for i in todo]
        if pool is not None:
            found = pool.map(solve_period, tasks)
        else:
            found = [solve_period(data, *task) for task in tasks]
        if any(f is not None and not f.proven for f in found):
            break  # a deadline cut a period short: this iteration's value is no bound
        for i, f in zip(todo, found, strict=True):
            cache[i], dirty[i] = f, False
        for i in range(W):
            sol = cache[i]
            if sol is None:
                return SplitBound(np.inf, it, time.perf_counter() - t0, hints, states, best_mu)
            total += sol.cost_usd
            y[:, i] = sol.config
            key = tuple(int(k) for k in sol.config)
            if key not in states[i]:
                true_cost = sol.cost_usd + sum(float(mu[m][i, key[m]]) for m in range(M))
                states[i][key] = (sol.served.copy(), true_cost)
        x = np.zeros((M, W), dtype=np.int64)
        for m in range(M):
            v, path = path_with_boundary(
                data,
                m,
                grids[m],
                None if entry is None else entry[m],
                mu[m],
                None if exit_ is None else exit_[m],
            )
            total += v
            x[m] = path
        if total > best + 1e-12 * max(abs(best), 1.0) if np.isfinite(best) else True:
            best, stall = total, 0
            best_mu = [x.copy() for x in mu]
            if on_bound is not None:
                on_bound(best)
        else:
            stall += 1
            if stall >= patience:
                theta, stall = theta / 2, 0
        if it > max_iter // 4 or hints_from.expired():
            for m in range(M):
                for i in range(W):
                    hints[m][i].add(int(x[m, i]))
                    hints[m][i].add(int(y[m, i]))
        if improve is not None and it % 10 == 0:
            ub = improve(states)
            if ub is not None and ub < upper_bound_usd:
                upper_bound_usd = ub
        if np.isfinite(best) and upper_bound_usd - best <= target_gap * abs(upper_bound_usd):
            break
        diff = x != y
        norm2 = 2.0 * float(diff.sum())
        if norm2 == 0 or deadline.expired() or stop_requested():
            break  # x == y: the relaxation's solution is feasible for both copies
        if restart_every is not None and it % restart_every == 0:
            mu = [x.copy() for x in best_mu]
            theta, stall = theta0, 0
            dirty = [True] * W
            continue
        step = theta * max(upper_bound_usd - total, 1e-9 * abs(upper_bound_usd)) / norm2
        for m in range(M):
            for q in np.flatnonzero(diff[m]):
                mu[m][q, x[m, q]] += step
                mu[m][q, y[m, q]] -= step
                dirty[q] = True
        if theta < 1e-4:
            break
    return SplitBound(float(best), it, time.perf_counter() - t0, hints, states, best_mu)


def joint_path(
    data: ScheduleData,
    a: int,
    states: list[list[tuple[tuple[int, ...], FloatArray, float]]],
    entry: list[FloatArray] | None,
    exit_: list[FloatArray] | None,
) -> tuple[float, list[int]] | None:
    """Best sequence of joint states over the window (exact transitions between them).

    ``states[i]`` lists (configs, served, period cost) candidates for window period
    ``i``; the cost of a sequence is entry + period costs + transitions + exit. Returns
    (cost, chosen index per period) or None when no sequence meets the limits."""

    M = len(data.deployments)
    cfg0 = np.array([s[0] for s in states[0]], dtype=np.int64).reshape(-1, M)
    val = np.array([s[2] for s in states[0]], dtype=float)
    if entry is None:
        for m, d in enumerate(data.deployments):
            val = val + transition_cost(data, d, d.initial, cfg0[:, m])
    else:
        for m in range(M):
            val = val + entry[m][cfg0[:, m]]
    back: list[IntArray] = []
    prev_cfg = cfg0
    for i in range(1, len(states)):
        cfg = np.array([s[0] for s in states[i]], dtype=np.int64).reshape(-1, M)
        step = np.zeros((prev_cfg.shape[0], cfg.shape[0]))
        for m, d in enumerate(data.deployments):
            step += transition_cost(data, d, prev_cfg[:, m][:, None], cfg[:, m][None, :])
        tot = val[:, None] + step
        arg = np.argmin(tot, axis=0)
        val = tot[arg, np.arange(cfg.shape[0])] + np.array([s[2] for s in states[i]])
        back.append(arg.astype(np.int64))
        prev_cfg = cfg
    if exit_ is not None:
        for m in range(M):
            val = val + exit_[m][prev_cfg[:, m]]
    last = int(np.argmin(val))
    if not np.isfinite(val[last]):
        return None
    picks = [last]
    j = last
    for arg in reversed(back):
        j = int(arg[j])
        picks.append(j)
    return float(val[last]), list(reversed(picks))
