"""Exact solve by lazy coupling: the MILP only where the site constraints bind.

Relax the site cap and the GPU inventory in every period outside a window ``W``.
The relaxed problem is exact dynamic programming outside ``W`` (each deployment on its
own, as in :mod:`formulation.dp` at zero prices) and the compact MILP inside ``W``,
joined by two cost vectors per deployment: the least cost of reaching each
configuration at the window's first period (forward DP, transition included) and the
least cost of finishing the horizon from each configuration at its last period
(backward DP). Its optimum is a lower bound on the full problem (a relaxation), and
when the assembled schedule also meets the constraints outside ``W`` it is optimal
for the full problem. Otherwise the periods it breaks join ``W`` and the window
grows (row generation over periods). ``W`` starts as the span of the periods where
the deployments' independent optima break the site constraints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.data import ScheduleData, slice_periods
from formulation.dp import (
    DeploymentGrid,
    backward_values,
    reach,
    shortest_path,
    stage_costs,
    step_cost_from,
    step_cost_to,
)
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.heuristics import coordinate_descent
from formulation.interrupt import stop_requested
from formulation.lagrange import site_constant_usd, uncoupled_schedule
from formulation.milp import Allowed, solve_compact
from formulation.period import PeriodSolution, decisions_cost, solve_period
from formulation.split import SplitBound, joint_path, split_bound
from formulation.workers import ForkPool

IntArray = NDArray[np.int64]

#: the decomposition's subgradient ascent halves its step factor after ``PATIENCE``
#: iterations without a better bound, and starts again from its best multipliers, with
#: its first step factor, every ``RESTART_EVERY`` iterations
#: (formulation.split.split_bound)
PATIENCE = 15
RESTART_EVERY = 25
#: one round of the ascent (between which the window's schedules are looked for) may
#: take this share of the time the window has left
ROUND_SHARE = 0.6


@dataclass
class WindowResult:
    priced: Priced | None  # best violation-free schedule found (None if none)
    lower_bound_usd: float
    proven: bool  # the relaxed MILP was solved to its gap and its schedule is feasible
    stats: dict[str, Any] = field(default_factory=dict)


def round_stats(sb: SplitBound) -> dict[str, Any]:
    """One round of the ascent as the solve's statistics report it. A round cut short
    before its first bound has none: ``value_usd`` is then null, never -inf (results are
    stored and served as strict JSON, which has no infinities)."""
    return {
        "value_usd": float(sb.value_usd) if np.isfinite(sb.value_usd) else None,
        "iterations": sb.iterations,
        "seconds": round(sb.seconds, 3),
    }


def _uncoupled(data: ScheduleData, grids: list[DeploymentGrid]) -> tuple[list[Any], Schedule]:
    """Each deployment's own optimum (zero prices) with its DP tables."""
    T = data.n_periods
    zero = np.zeros(T)
    tabs = []
    cfg = np.zeros((len(data.deployments), T), dtype=np.int64)
    served = np.zeros((len(data.deployments), T))
    for m, d in enumerate(data.deployments):
        stage, full = stage_costs(data, d, grids[m], zero, zero)
        _, path, fwd = shortest_path(data, d, grids[m], stage)
        back = backward_values(data, d, grids[m], stage)
        tabs.append((stage, full, fwd, back))
        cfg[m] = path
        served[m] = np.where(full[np.arange(T), path], d.smax_rps[np.arange(T), path], 0.0)
    return tabs, Schedule(cfg, served)


def _assemble(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    tabs: list[Any],
    a: int,
    b: int,
    inner: Schedule,
) -> Schedule:
    """Window schedule plus the DP paths before and after it."""
    T = data.n_periods
    M = len(data.deployments)
    cfg = np.zeros((M, T), dtype=np.int64)
    served = np.zeros((M, T))
    cfg[:, a:b] = inner.config
    served[:, a:b] = inner.served_rps
    for m, d in enumerate(data.deployments):
        stage, full, fwd, back = tabs[m]
        k = int(cfg[m, a])
        for t in range(a - 1, -1, -1):  # backtrack the forward DP into the window
            k = int(np.argmin(fwd[t] + step_cost_to(data, d, k)))
            cfg[m, t] = k
        k = int(cfg[m, b - 1])
        for t in range(b, T):  # follow the backward DP out of the window
            step = step_cost_from(data, d, k)
            k = int(np.argmin(step + stage[t] + back[t]))
            cfg[m, t] = k
        outside = np.r_[0:a, b:T].astype(np.int64)
        ks = cfg[m, outside]
        served[m, outside] = np.where(full[outside, ks], d.smax_rps[outside, ks], 0.0)
    return Schedule(cfg, served)


def window_span(
    data: ScheduleData, grids: list[DeploymentGrid], pad: int = 1
) -> tuple[int, int] | None:
    """Periods ``[a, b)`` of the first window :func:`solve_windowed` builds: the span of
    the periods where the deployments' uncoupled optima break the site constraints,
    ``pad`` on each side; None when they break none."""
    first = price_schedule(data, uncoupled_schedule(data, grids))
    broken = set(first.cap_violations) | set(first.inventory_violations)
    if not broken:
        return None
    return max(min(broken) - pad, 0), min(max(broken) + 1 + pad, data.n_periods)


def window_choices(data: ScheduleData, span: tuple[int, int], allowed: Allowed | None) -> int:
    """(deployment, period, configuration) choices of a window MILP over ``span``."""
    a, b = span
    if allowed is None:
        return (b - a) * sum(int(d.allowed.sum()) for d in data.deployments)
    return sum(len(rows[t]) for rows in allowed for t in range(a, b))


def solve_windowed(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    time_limit_s: float,
    mip_gap: float,
    threads: int | None = None,
    incumbent: Priced | None = None,
    allowed: Allowed | None = None,
    progress: Callable[[str], None] | None = None,
    pad: int = 1,
) -> WindowResult:
    """See the module docstring. ``allowed`` (optional) restricts the window MILP to
    choices known to be safe to keep (e.g. Lagrangian pruning against ``incumbent``)."""
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    T = data.n_periods
    tabs, free = _uncoupled(data, grids)
    first = price_schedule(data, free)
    stats: dict[str, Any] = {"windows": []}
    best = incumbent
    if first.violation_free:
        stats["windows"].append({"periods": 0})
        return WindowResult(first, first.objective_usd, True, stats)
    broken = set(first.cap_violations) | set(first.inventory_violations)
    lb = -np.inf
    while True:
        a = max(min(broken) - pad, 0)
        b = min(max(broken) + 1 + pad, T)
        sub = slice_periods(data, a, b)
        entry = None
        if a > 0:
            entry = [
                reach(data, d, grids[m], tabs[m][2][a - 1], True)
                for m, d in enumerate(data.deployments)
            ]
        exit_ = [tabs[m][3][b - 1] for m in range(len(data.deployments))] if b < T else None
        sub_allowed = None if allowed is None else [rows[a:b] for rows in allowed]
        start = None
        if best is not None:
            start = Schedule(best.schedule.config[:, a:b], best.schedule.served_rps[:, a:b])
        left = time_limit_s - (time.perf_counter() - t0)
        say(f"window MILP over periods {a}..{b - 1}")
        r = solve_compact(sub, max(left, 0.5), mip_gap, threads, sub_allowed, start, entry, exit_)
        outside_const = site_constant_usd(data) - site_constant_usd(sub)
        stats["windows"].append(
            {
                "first": a,
                "last": b - 1,
                "binaries": r.n_binaries,
                "build_s": round(r.build_s, 3),
                "solve_s": round(r.solve_s, 3),
                "status": r.status,
            }
        )
        if r.bound_usd is not None and np.isfinite(r.bound_usd):
            lb = max(lb, r.bound_usd + outside_const)
        if r.schedule is None:
            return WindowResult(best, lb, False, stats)
        full = price_schedule(data, _assemble(data, grids, tabs, a, b, r.schedule))
        if full.violation_free:
            if best is None or full.objective_usd < best.objective_usd:
                best = full
            return WindowResult(best, lb, r.status == "optimal", stats)
        new = (set(full.cap_violations) | set(full.inventory_violations)) - set(range(a, b))
        if not new or time.perf_counter() - t0 > time_limit_s or stop_requested():
            return WindowResult(best, lb, False, stats)
        broken |= new


def _joint_states_schedule(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    tabs: list[Any],
    a: int,
    b: int,
    period_states: list[dict[tuple[int, ...], tuple[np.ndarray, float]]] | None,
    sols: list[Any],
    best: Priced | None,
    entry: list[np.ndarray] | None,
    exit_: list[np.ndarray] | None,
) -> Priced | None:
    """The best transition-feasible sequence of cap-feasible joint period states: those
    the decomposition's period copies chose, the one-period optima and the incumbent's."""

    states: list[list[tuple[tuple[int, ...], np.ndarray, float]]] = []
    for i, t in enumerate(range(a, b)):
        pool: dict[tuple[int, ...], tuple[np.ndarray, float]] = dict(
            period_states[i] if period_states else {}
        )
        s = sols[i]
        pool.setdefault(tuple(int(k) for k in s.config), (s.served, s.cost_usd))
        if best is not None:
            cfg = best.schedule.config[:, t]
            srv = best.schedule.served_rps[:, t]
            pool.setdefault(tuple(int(k) for k in cfg), (srv, decisions_cost(data, t, cfg, srv)))
        states.append([(k, v[0], v[1]) for k, v in pool.items()])
    found = joint_path(data, a, states, entry, exit_)
    if found is None:
        return None
    _, picks = found
    M = len(data.deployments)
    cfg = np.zeros((M, b - a), dtype=np.int64)
    srv = np.zeros((M, b - a))
    for i, j in enumerate(picks):
        cfg[:, i] = states[i][j][0]
        srv[:, i] = states[i][j][1]
    full = price_schedule(data, _assemble(data, grids, tabs, a, b, Schedule(cfg, srv)))
    return full if full.violation_free else None


def _guided_allowed(
    data: ScheduleData,
    a: int,
    b: int,
    anchors: list[list[set[int]]],
    radius: int,
) -> list[list[list[int]]]:
    """Per deployment and window period: the anchor configurations and every candidate
    within ``radius`` instances of one in each phase, plus off."""
    out = []
    for m, d in enumerate(data.deployments):
        pos = {(int(p), int(q)): i for i, (p, q) in enumerate(zip(d.n_p, d.n_d, strict=True))}
        rows = []
        for t in range(a, b):
            keep: set[int] = set()
            for k in anchors[m][t - a]:
                for dp in range(-radius, radius + 1):
                    for dq in range(-radius, radius + 1):
                        j = pos.get((int(d.n_p[k]) + dp, int(d.n_d[k]) + dq))
                        if j is not None:
                            keep.add(j)
            keep.add(0)
            rows.append(sorted(k for k in keep if d.allowed[k]))
        out.append(rows)
    return out


def binding_periods(data: ScheduleData, p: Priced, slack: float = 0.0) -> set[int]:
    """The periods where schedule ``p`` draws the site's whole cap (within ``slack``,
    a share of the cap) or uses every GPU of a pool: where the site constraints hold
    it back.

    The guided window spans these as well as the periods where the uncoupled optima
    break the site: a period whose constraint binds on the best known schedule is one
    whose cap the relaxation would otherwise drop, letting the window's bound fall
    short of that schedule by what the binding period costs it (the demo under the
    admission tables: the uncoupled optima break periods 68-77, the best schedules
    also draw the full cap at 78, and the decomposition over 68-77 converges to
    477.30 USD against an optimum near 477.94, over 68-78 to 477.94)."""
    at_cap = p.site_power_w >= data.power_cap_w * (1.0 - max(slack, 1e-9))
    full = (p.gpus_used >= data.pool_gpus[:, None]).any(axis=0)
    return {int(t) for t in np.flatnonzero(at_cap | full)}


@dataclass
class GuidedStart:
    """What the guided window starts from: each deployment's uncoupled optimum and its
    DP tables, the span ``[a, b)`` of the periods where those optima break the site
    (None when they break none), the exact one-period optima in it, and the bound they
    give (see :func:`guided_start`)."""

    tabs: list[Any]
    free: Schedule
    first: Priced
    span: tuple[int, int] | None
    solutions: list[PeriodSolution] = field(default_factory=list)
    bound_usd: float = -np.inf
    infeasible_period: int | None = None


def _span_bound(
    data: ScheduleData, tabs: list[Any], a: int, b: int, sols: list[PeriodSolution]
) -> float:
    """Exact DP before ``a`` and from ``b`` on (caps relaxed there), the one-period optima
    ``sols`` inside (transitions relaxed), and the site's constant cost."""
    T, M = data.n_periods, len(data.deployments)
    before = sum(float(np.min(tabs[m][2][a - 1])) for m in range(M)) if a > 0 else 0.0
    after = sum(float(np.min(tabs[m][0][b] + tabs[m][3][b])) for m in range(M)) if b < T else 0.0
    return before + sum(s.cost_usd for s in sols) + after + site_constant_usd(data)


def _period_optima(
    data: ScheduleData, a: int, b: int, deadline: float | None = None, workers: int = 1
) -> tuple[list[PeriodSolution], int | None, bool]:
    """The one-period optima of periods ``a..b-1`` (on ``workers`` forked processes);
    the first period where none exists (or None); and whether every one is proven (a
    ``deadline`` may cut them short)."""
    with ForkPool(data, workers) as pool:
        found = pool.map(solve_period, [(t, None, None, deadline) for t in range(a, b)])
    sols: list[PeriodSolution] = []
    for t, s in zip(range(a, b), found, strict=True):
        if s is None:
            return sols, t, True
        sols.append(s)
    return sols, None, all(s.proven for s in sols)


def guided_start(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    deadline: float | None = None,
    workers: int = 1,
) -> GuidedStart:
    """The first step of :func:`solve_guided`, on its own so that a solve can take its
    bound early: exact DP for each deployment before and after the span where the
    uncoupled optima break the site, and inside it the sum of the exact one-period
    optima, which ignore transitions. That is a relaxation of the full problem, hence a
    proven lower bound (-inf when ``deadline``, a ``time.perf_counter`` time, cut a
    one-period search short; the uncoupled schedule's cost when it meets the site)."""
    tabs, free = _uncoupled(data, grids)
    first = price_schedule(data, free)
    if first.violation_free:
        return GuidedStart(tabs, free, first, None, bound_usd=first.objective_usd)
    broken = set(first.cap_violations) | set(first.inventory_violations)
    a, b = min(broken), max(broken) + 1
    sols, infeasible, proven = _period_optima(data, a, b, deadline, workers)
    bound = _span_bound(data, tabs, a, b, sols) if proven and infeasible is None else -np.inf
    return GuidedStart(tabs, free, first, (a, b), sols, bound, infeasible)


def solve_guided(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    time_limit_s: float,
    mip_gap: float,
    threads: int | None = None,
    incumbent: Priced | None = None,
    progress: Callable[[str], None] | None = None,
    max_radius: int = 4,
    hints: list[Schedule] | None = None,
    start: GuidedStart | None = None,
    on_bound: Callable[[float], None] | None = None,
    on_schedule: Callable[[Priced], object] | None = None,
    workers: int = 1,
) -> WindowResult:
    """Window solve guided by the exact one-period optima (see :mod:`formulation.period`).

    Lower bound: that of :func:`guided_start` (``start``, if the caller has it), raised
    by the Lagrangian decomposition of :func:`formulation.split.split_bound`, and by the
    window MILP over every candidate when it runs.

    Schedules: the window MILP (transitions exact, entry and exit costs from the DP)
    restricted to configurations within ``radius`` instances of the one-period optima,
    of the DP path and of the incumbent; the radius grows until the gap closes or time
    runs out. The restriction only limits which schedules are found, never the bound.

    ``on_bound`` and ``on_schedule`` (optional) see every better bound and schedule as
    soon as it is found, before the result comes back. The decomposition's period
    problems run on ``workers`` forked processes (:class:`formulation.workers.ForkPool`).
    """

    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    with ForkPool(data, workers) as pool:
        return _guided(
            data,
            grids,
            time_limit_s,
            mip_gap,
            threads,
            incumbent,
            say,
            max_radius,
            hints,
            start,
            on_schedule,
            on_bound,
            pool,
            t0,
        )


def _guided(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    time_limit_s: float,
    mip_gap: float,
    threads: int | None,
    incumbent: Priced | None,
    say: Callable[[str], None],
    max_radius: int,
    hints: list[Schedule] | None,
    start: GuidedStart | None,
    on_schedule: Callable[[Priced], object] | None,
    on_bound: Callable[[float], None] | None,
    pool: ForkPool[ScheduleData],
    t0: float,
) -> WindowResult:
    T, M = data.n_periods, len(data.deployments)
    init = start if start is not None else guided_start(data, grids)
    tabs, free, first = init.tabs, init.free, init.first
    stats: dict[str, Any] = {"windows": []}
    if first.violation_free:
        stats["windows"].append({"periods": 0})
        return WindowResult(first, first.objective_usd, True, stats)
    best = incumbent

    def found_schedule(p: Priced, how: str) -> None:
        say(f"{how}: ${p.objective_usd:.4f}")
        if on_schedule is not None:
            on_schedule(p)

    def found_bound(value: float) -> None:
        if on_bound is not None:
            on_bound(value if best is None else min(value, best.objective_usd))

    for h in [free, *(hints or [])]:
        cd = coordinate_descent(data, grids, h, time_limit_s=max(0.05 * time_limit_s, 0.1))
        if cd.violation_free and (best is None or cd.objective_usd < best.objective_usd):
            best = cd
            found_schedule(best, "feasible schedule (repaired by coordinate descent)")
    const = site_constant_usd(data)
    broken = set(first.cap_violations) | set(first.inventory_violations)
    if best is not None:
        broken |= binding_periods(data, best)
    lb = -np.inf
    reuse = True
    while True:
        a, b = min(broken), max(broken) + 1
        if reuse and init.span == (a, b):
            sols, infeasible = init.solutions, init.infeasible_period
            if infeasible is None and not np.isfinite(init.bound_usd):
                sols, infeasible, _ = _period_optima(data, a, b)  # cut short: again, exactly
        else:
            say(f"one-period optima for periods {a}..{b - 1} (transitions relaxed)")
            sols, infeasible, _ = _period_optima(data, a, b)
        reuse = False
        if infeasible is not None:
            stats["infeasible_period"] = infeasible
            return WindowResult(best, lb, False, stats)
        lb = max(lb, _span_bound(data, tabs, a, b, sols))
        found_bound(lb)
        anchors: list[list[set[int]]] = [[set() for _ in range(a, b)] for _ in range(M)]
        for i, s in enumerate(sols):
            for m in range(M):
                anchors[m][i].add(int(s.config[m]))
                anchors[m][i].add(int(free.config[m, a + i]))
                if best is not None:
                    anchors[m][i].add(int(best.schedule.config[m, a + i]))
        sub = slice_periods(data, a, b)
        entry = None
        if a > 0:
            entry = [
                reach(data, d, grids[m], tabs[m][2][a - 1], True)
                for m, d in enumerate(data.deployments)
            ]
        exit_ = [tabs[m][3][b - 1] for m in range(M)] if b < T else None
        grown = False
        outside_const = const - site_constant_usd(sub)
        # first the decomposition bound (its period solutions give schedules and its
        # hints enlarge the anchors), then window MILPs of growing radius
        radii: list[int | None] = [*range(1, max_radius + 1), None]
        for step_i, radius in enumerate(radii):
            left = time_limit_s - (time.perf_counter() - t0)
            if left <= 0.2 or stop_requested():
                break
            if step_i == 0:
                gap_now = (
                    np.inf
                    if best is None
                    else (best.objective_usd - lb) / max(abs(best.objective_usd), 1e-9)
                )
                if gap_now <= mip_gap:
                    continue
                mu = None
                for _round in range(8):
                    lb_before = lb
                    ub_before = np.inf if best is None else best.objective_usd
                    left = time_limit_s - (time.perf_counter() - t0)
                    if left <= 0.3 or stop_requested():
                        break
                    say(f"Lagrangian decomposition bound over periods {a}..{b - 1}")
                    target = best.objective_usd if best is not None else lb + abs(lb) * 0.005 + 1e-3
                    found: list[Priced] = []

                    def improve(
                        states: list[dict[tuple[int, ...], tuple[np.ndarray, float]]],
                        found: list[Priced] = found,
                        ref0: Priced | None = best,
                        a: int = a,
                        b: int = b,
                        sols: list[Any] = sols,
                        entry: list[np.ndarray] | None = entry,
                        exit_: list[np.ndarray] | None = exit_,
                    ) -> float | None:
                        ref = found[-1] if found else ref0
                        cand = _joint_states_schedule(
                            data, grids, tabs, a, b, states, sols, ref, entry, exit_
                        )
                        if cand is None or (
                            ref is not None and cand.objective_usd >= ref.objective_usd
                        ):
                            return None
                        found.append(cand)
                        found_schedule(cand, "joint-state path over the window")
                        return cand.objective_usd

                    sb = split_bound(
                        data,
                        grids,
                        a,
                        b,
                        entry,
                        exit_,
                        const,
                        target,
                        time_limit_s=ROUND_SHARE * left,
                        max_iter=100_000,  # each round ends by its time
                        theta0=2.0,
                        patience=PATIENCE,
                        restart_every=RESTART_EVERY,
                        mu0=mu,
                        improve=improve,
                        target_gap=mip_gap,
                        on_bound=found_bound,
                        pool=pool,
                    )
                    if found and (best is None or found[-1].objective_usd < best.objective_usd):
                        best = found[-1]
                    mu = sb.mu
                    stats.setdefault("split_bound", []).append(round_stats(sb))
                    if np.isfinite(sb.value_usd):
                        cap_ub = np.inf if best is None else best.objective_usd
                        lb = max(lb, min(sb.value_usd, cap_ub))
                    if sb.hints is not None:
                        for m in range(M):
                            for i in range(b - a):
                                anchors[m][i] |= sb.hints[m][i]
                    cand = _joint_states_schedule(
                        data, grids, tabs, a, b, sb.states, sols, best, entry, exit_
                    )
                    improved = cand is not None and (
                        best is None or cand.objective_usd < best.objective_usd - 1e-9
                    )
                    if improved and cand is not None:
                        best = cand
                        found_schedule(cand, "joint-state path over the window")
                    if best is not None and (best.objective_usd - lb) <= mip_gap * abs(
                        best.objective_usd
                    ):
                        return WindowResult(best, lb, True, stats)
                    ub_now = np.inf if best is None else best.objective_usd
                    # rounds continue while they still move the bound or the schedule
                    if lb <= lb_before + 1e-7 * abs(lb) and ub_now >= ub_before - 1e-9:
                        break
                left = time_limit_s - (time.perf_counter() - t0)
                if left <= 0.2 or stop_requested():
                    break
            allowed = None if radius is None else _guided_allowed(data, a, b, anchors, radius)
            n_choices = (
                sum(int(d.allowed.sum()) for d in data.deployments) * (b - a)
                if allowed is None
                else sum(len(r) for rows in allowed for r in rows)
            )
            label = "all" if radius is None else f"radius {radius}"
            say(f"window MILP, periods {a}..{b - 1}, {label}: {n_choices} choices")
            warm = None
            if best is not None:
                warm = Schedule(best.schedule.config[:, a:b], best.schedule.served_rps[:, a:b])
            r = solve_compact(sub, left, mip_gap / 2, threads, allowed, warm, entry, exit_)
            stats["windows"].append(
                {
                    "first": a,
                    "last": b - 1,
                    "radius": radius,
                    "choices": n_choices,
                    "binaries": r.n_binaries,
                    "build_s": round(r.build_s, 3),
                    "solve_s": round(r.solve_s, 3),
                    "status": r.status,
                }
            )
            if radius is None and r.bound_usd is not None and np.isfinite(r.bound_usd):
                # every candidate in the window, exact DP outside it, caps outside
                # relaxed: a relaxation of the full problem, so its bound holds
                lb = max(lb, r.bound_usd + outside_const)
                found_bound(lb)
            if r.schedule is None:
                continue
            full = price_schedule(data, _assemble(data, grids, tabs, a, b, r.schedule))
            new = (set(full.cap_violations) | set(full.inventory_violations)) - set(range(a, b))
            if new:
                broken |= new
                grown = True
                break
            if full.violation_free and (best is None or full.objective_usd < best.objective_usd):
                best = full
                found_schedule(full, f"window MILP ({label})")
            if best is not None and (best.objective_usd - lb) <= mip_gap * abs(best.objective_usd):
                return WindowResult(best, min(lb, best.objective_usd), True, stats)
        if not grown or time.perf_counter() - t0 > time_limit_s or stop_requested():
            return WindowResult(best, lb, False, stats)
