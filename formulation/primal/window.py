"""Exact solve by lazy coupling: the MILP only where the site constraints bind.

Relax the site cap and the GPU inventory in every period outside a window ``W``.
The relaxed problem is exact dynamic programming outside ``W`` (each deployment on its
own, as in :mod:`formulation.subproblems.dp` at zero prices) and the compact MILP inside ``W``,
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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.bounds.lagrange import uncoupled_schedule
from formulation.bounds.split import SplitBound, joint_path, split_bound
from formulation.budget import (
    ROUND_AT_LEAST_S,
    ROUND_SHARE,
    WINDOW_MILP_AT_LEAST_S,
    WINDOW_REPAIR_AT_LEAST_S,
    WINDOW_REPAIR_SHARE,
    WINDOW_STEP_AT_LEAST_S,
    Deadline,
)
from formulation.data import ScheduleData, site_constant_usd, slice_periods
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.milp.compact import Allowed, solve_compact
from formulation.primal.heuristics import coordinate_descent
from formulation.processes.executor import open_pool
from formulation.processes.interrupt import stop_requested
from formulation.processes.workers import Pool
from formulation.subproblems.dp import (
    DeploymentGrid,
    backward_values,
    reach,
    shortest_path,
    stage_costs,
    step_cost_from,
    step_cost_to,
)
from formulation.subproblems.period import PeriodSolution, decisions_cost, solve_period

IntArray = NDArray[np.int64]

#: the decomposition's subgradient ascent halves its step factor after ``PATIENCE``
#: iterations without a better bound, and starts again from its best multipliers, with
#: its first step factor, every ``RESTART_EVERY`` iterations
#: (formulation.bounds.split.split_bound)
PATIENCE = 15
RESTART_EVERY = 25
#: at most this many rounds of the ascent over one window, the schedules looked for
#: between them (each round's time: formulation.budget.ROUND_SHARE)
MAX_ROUNDS = 8


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
        return sum(int(d.period_allowed()[a:b].sum()) for d in data.deployments)
    return sum(len(rows[t]) for rows in allowed for t in range(a, b))


def solve_windowed(
    data: ScheduleData,
    grids: list[DeploymentGrid],
    deadline: Deadline,
    mip_gap: float,
    threads: int | None = None,
    incumbent: Priced | None = None,
    allowed: Allowed | None = None,
    progress: Callable[[str], None] | None = None,
    pad: int = 1,
) -> WindowResult:
    """See the module docstring. ``allowed`` (optional) restricts the window MILP to
    choices known to be safe to keep (e.g. Lagrangian pruning against ``incumbent``);
    each window MILP gets at least ``WINDOW_MILP_AT_LEAST_S``."""
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
        say(f"window MILP over periods {a}..{b - 1}")
        milp_deadline = deadline.at_least(WINDOW_MILP_AT_LEAST_S)
        r = solve_compact(sub, milp_deadline, mip_gap, threads, sub_allowed, start, entry, exit_)
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
        if not new or deadline.expired() or stop_requested():
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
        pos: dict[tuple[int, int], list[int]] = {}  # a configuration's candidates
        for i, (p, q) in enumerate(zip(d.n_p.tolist(), d.n_d.tolist(), strict=True)):
            pos.setdefault((p, q), []).append(i)
        rows = []
        ok = d.period_allowed()
        for t in range(a, b):
            keep: set[int] = set()
            for k in anchors[m][t - a]:
                for dp in range(-radius, radius + 1):
                    for dq in range(-radius, radius + 1):
                        keep.update(pos.get((int(d.n_p[k]) + dp, int(d.n_d[k]) + dq), ()))
            keep.add(0)
            rows.append(sorted(k for k in keep if ok[t, k]))
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
    data: ScheduleData, a: int, b: int, deadline: Deadline | None = None, workers: int = 1
) -> tuple[list[PeriodSolution], int | None, bool]:
    """The one-period optima of periods ``a..b-1`` (on ``workers`` forked processes);
    the first period where none exists (or None); and whether every one is proven (a
    ``deadline`` may cut them short)."""
    with open_pool(data, workers) as pool:
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
    deadline: Deadline | None = None,
    workers: int = 1,
) -> GuidedStart:
    """The first step of :func:`solve_guided`, on its own so that a solve can take its
    bound early: exact DP for each deployment before and after the span where the
    uncoupled optima break the site, and inside it the sum of the exact one-period
    optima, which ignore transitions. That is a relaxation of the full problem, hence a
    proven lower bound (-inf when ``deadline`` cut a one-period search short; the
    uncoupled schedule's cost when it meets the site)."""
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
    deadline: Deadline,
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
    """Window solve guided by the exact one-period optima (see
    :mod:`formulation.subproblems.period`), by ``deadline``.

    Lower bound: that of :func:`guided_start` (``start``, if the caller has it), raised
    by the Lagrangian decomposition of :func:`formulation.bounds.split.split_bound` in rounds
    (:meth:`_Guided.bound_rounds`), and by the window MILP over every candidate when it
    runs.

    Schedules: between the rounds, the best transition-feasible path through the joint
    period states the decomposition saw (:func:`_joint_states_schedule`); then the
    window MILP (transitions exact, entry and exit costs from the DP) restricted to
    configurations within ``radius`` instances of the one-period optima, of the DP path
    and of the incumbent (:meth:`_Guided.window_milp`); the radius grows until the gap
    closes or time runs out. The restriction only limits which schedules are found,
    never the bound. A window MILP whose schedule breaks periods outside the window
    grows the window to them, and the steps start again over it.

    ``on_bound`` and ``on_schedule`` (optional) see every better bound and schedule as
    soon as it is found, before the result comes back. The decomposition's period
    problems run on the process's pool (:func:`formulation.processes.executor.open_pool`).
    """
    # each start's repair: a share of the window's whole time, and at least a floor
    repair_s = max(WINDOW_REPAIR_SHARE * deadline.remaining(), WINDOW_REPAIR_AT_LEAST_S)
    init = start if start is not None else guided_start(data, grids)
    if init.first.violation_free:
        stats: dict[str, Any] = {"windows": [{"periods": 0}]}
        return WindowResult(init.first, init.first.objective_usd, True, stats)
    with open_pool(data, workers) as pool:
        g = _Guided(
            data,
            grids,
            deadline,
            mip_gap,
            threads,
            incumbent,
            init,
            pool,
            progress or (lambda _m: None),
            on_bound,
            on_schedule,
        )
        starts = [init.free, *(hints or [])]
        g.repair(starts, deadline.within(len(starts) * repair_s))  # never past the window's
        broken = set(init.first.cap_violations) | set(init.first.inventory_violations)
        if g.best is not None:
            broken |= binding_periods(data, g.best)
        reuse = True
        while True:
            w = g.window(min(broken), max(broken) + 1, reuse)
            reuse = False
            if w is None:
                return g.result(False)
            out = g.steps(w, max_radius)
            if isinstance(out, WindowResult):
                return out
            broken |= out  # the window grows to the periods its schedule broke
            if deadline.expired() or stop_requested():
                return g.result(False)


@dataclass
class _Span:
    """One window ``[a, b)`` of the guided solve: the one-period optima in it, the
    window's data, the DP costs of entering and leaving it, and per deployment and
    window period the configurations its MILPs are restricted around (``anchors``)."""

    a: int
    b: int
    sols: list[PeriodSolution]
    sub: ScheduleData
    entry: list[np.ndarray] | None
    exit_: list[np.ndarray] | None
    anchors: list[list[set[int]]]


class _Guided:
    """The state of one :func:`solve_guided`: the incumbent, the bound and the
    statistics, shared by its steps (the window's one-period optima, the bound rounds,
    the schedule search between them and the window MILPs)."""

    def __init__(
        self,
        data: ScheduleData,
        grids: list[DeploymentGrid],
        deadline: Deadline,
        mip_gap: float,
        threads: int | None,
        incumbent: Priced | None,
        init: GuidedStart,
        pool: Pool[ScheduleData],
        say: Callable[[str], None],
        on_bound: Callable[[float], None] | None,
        on_schedule: Callable[[Priced], object] | None,
    ) -> None:
        self.data, self.grids, self.deadline = data, grids, deadline
        self.mip_gap, self.threads, self.init, self.pool = mip_gap, threads, init, pool
        self.say, self.on_bound, self.on_schedule = say, on_bound, on_schedule
        self.best = incumbent
        self.lb = -np.inf
        self.const = site_constant_usd(data)
        self.stats: dict[str, Any] = {"windows": []}

    def found_schedule(self, p: Priced, how: str) -> None:
        self.say(f"{how}: ${p.objective_usd:.4f}")
        if self.on_schedule is not None:
            self.on_schedule(p)

    def found_bound(self, value: float) -> None:
        if self.on_bound is not None:
            best = self.best
            self.on_bound(value if best is None else min(value, best.objective_usd))

    def upper(self) -> float:
        return np.inf if self.best is None else self.best.objective_usd

    def gap(self) -> float:
        if self.best is None:
            return np.inf
        return (self.best.objective_usd - self.lb) / max(abs(self.best.objective_usd), 1e-9)

    def closed(self) -> bool:
        best = self.best
        return best is not None and (best.objective_usd - self.lb) <= self.mip_gap * abs(
            best.objective_usd
        )

    def out_of_time(self, at_least_s: float) -> bool:
        return self.deadline.remaining() <= at_least_s or stop_requested()

    def result(self, proven: bool) -> WindowResult:
        return WindowResult(self.best, self.lb, proven, self.stats)

    def repair(self, starts: list[Schedule], deadline: Deadline) -> None:
        """Each start made feasible by coordinate descent, all by ``deadline``, each
        given an equal share of the time left (what one leaves goes to the next); the
        best becomes the incumbent if it beats it."""
        for i, h in enumerate(starts):
            share = deadline.fraction(1.0 / (len(starts) - i))
            cd = coordinate_descent(self.data, self.grids, h, share)
            if cd.violation_free and cd.objective_usd < self.upper():
                self.best = cd
                self.found_schedule(cd, "feasible schedule (repaired by coordinate descent)")

    def window(self, a: int, b: int, reuse: bool) -> _Span | None:
        """The window ``[a, b)``: its one-period optima (those of the start when it
        spans the same periods and ``reuse``), the bound they give, and its anchors;
        None when some period in it has no feasible mix (named in the statistics)."""
        data, init = self.data, self.init
        T, M = data.n_periods, len(data.deployments)
        if reuse and init.span == (a, b):
            sols, infeasible = init.solutions, init.infeasible_period
            if infeasible is None and not np.isfinite(init.bound_usd):
                sols, infeasible, _ = _period_optima(data, a, b)  # cut short: again, exactly
        else:
            self.say(f"one-period optima for periods {a}..{b - 1} (transitions relaxed)")
            sols, infeasible, _ = _period_optima(data, a, b)
        if infeasible is not None:
            self.stats["infeasible_period"] = infeasible
            return None
        tabs = init.tabs
        self.lb = max(self.lb, _span_bound(data, tabs, a, b, sols))
        self.found_bound(self.lb)
        anchors: list[list[set[int]]] = [[set() for _ in range(a, b)] for _ in range(M)]
        for i, s in enumerate(sols):
            for m in range(M):
                anchors[m][i].add(int(s.config[m]))
                anchors[m][i].add(int(init.free.config[m, a + i]))
                if self.best is not None:
                    anchors[m][i].add(int(self.best.schedule.config[m, a + i]))
        entry = None
        if a > 0:
            entry = [
                reach(data, d, self.grids[m], tabs[m][2][a - 1], True)
                for m, d in enumerate(data.deployments)
            ]
        exit_ = [tabs[m][3][b - 1] for m in range(M)] if b < T else None
        return _Span(a, b, sols, slice_periods(data, a, b), entry, exit_, anchors)

    def joint_path(
        self,
        w: _Span,
        states: list[dict[tuple[int, ...], tuple[np.ndarray, float]]] | None,
        ref: Priced | None,
    ) -> Priced | None:
        """The schedule search: :func:`_joint_states_schedule` over ``w``."""
        return _joint_states_schedule(
            self.data, self.grids, self.init.tabs, w.a, w.b, states, w.sols, ref, w.entry, w.exit_
        )

    def bound_rounds(self, w: _Span) -> bool:
        """Rounds of the decomposition bound over ``w`` (each within ``ROUND_SHARE`` of
        the time left, from the previous round's multipliers), a schedule looked for
        during and after each; they continue while they move the bound or the schedule.
        Returns whether the gap is closed."""
        mu = None
        for _round in range(MAX_ROUNDS):
            lb_before, ub_before = self.lb, self.upper()
            if self.out_of_time(ROUND_AT_LEAST_S):
                break
            self.say(f"Lagrangian decomposition bound over periods {w.a}..{w.b - 1}")
            lb = self.lb
            target = (
                self.best.objective_usd if self.best is not None else lb + abs(lb) * 0.005 + 1e-3
            )
            search = _PathSearch(self, w)
            sb = split_bound(
                self.data,
                self.grids,
                w.a,
                w.b,
                w.entry,
                w.exit_,
                self.const,
                target,
                self.deadline.fraction(ROUND_SHARE),
                max_iter=100_000,  # each round ends by its time
                theta0=2.0,
                patience=PATIENCE,
                restart_every=RESTART_EVERY,
                mu0=mu,
                improve=search,
                target_gap=self.mip_gap,
                on_bound=self.found_bound,
                pool=self.pool,
            )
            if search.found and search.found[-1].objective_usd < self.upper():
                self.best = search.found[-1]
            mu = sb.mu
            self.stats.setdefault("split_bound", []).append(round_stats(sb))
            if np.isfinite(sb.value_usd):
                self.lb = max(self.lb, min(sb.value_usd, self.upper()))
            if sb.hints is not None:
                for m in range(len(self.data.deployments)):
                    for i in range(w.b - w.a):
                        w.anchors[m][i] |= sb.hints[m][i]
            cand = self.joint_path(w, sb.states, self.best)
            if cand is not None and cand.objective_usd < self.upper() - 1e-9:
                self.best = cand
                self.found_schedule(cand, "joint-state path over the window")
            if self.closed():
                return True
            # rounds continue while they still move the bound or the schedule
            if self.lb <= lb_before + 1e-7 * abs(self.lb) and self.upper() >= ub_before - 1e-9:
                break
        return False

    def steps(self, w: _Span, max_radius: int) -> WindowResult | set[int]:
        """Over ``w``: first the bound rounds (their period solutions give schedules and
        their hints enlarge the anchors), then window MILPs of radius 1 to
        ``max_radius`` and over every candidate. Returns the result once the gap is
        closed or the steps are done, or the periods outside ``w`` that a window MILP's
        schedule breaks (the window grows to them)."""
        radii: list[int | None] = [*range(1, max_radius + 1), None]
        for step_i, radius in enumerate(radii):
            if self.out_of_time(WINDOW_STEP_AT_LEAST_S):
                break
            if step_i == 0:
                if self.gap() <= self.mip_gap:
                    continue
                if self.bound_rounds(w):
                    return self.result(True)
                if self.out_of_time(WINDOW_STEP_AT_LEAST_S):
                    break
            new = self.window_milp(w, radius)
            if new is None:
                continue
            if new:
                return new
            if self.closed():
                assert self.best is not None
                return WindowResult(
                    self.best, min(self.lb, self.best.objective_usd), True, self.stats
                )
        return self.result(False)

    def window_milp(self, w: _Span, radius: int | None) -> set[int] | None:
        """The window MILP over ``w``, restricted to ``radius`` instances around the
        anchors (None: every candidate, whose bound then holds for the full problem),
        from the incumbent. Returns None when it found no schedule, else the periods
        outside ``w`` its schedule breaks (empty when none: the schedule is offered)."""
        data, a, b = self.data, w.a, w.b
        allowed = None if radius is None else _guided_allowed(data, a, b, w.anchors, radius)
        n_choices = (
            sum(int(d.period_allowed()[a:b].sum()) for d in data.deployments)
            if allowed is None
            else sum(len(r) for rows in allowed for r in rows)
        )
        label = "all" if radius is None else f"radius {radius}"
        self.say(f"window MILP, periods {a}..{b - 1}, {label}: {n_choices} choices")
        warm = None
        if self.best is not None:
            warm = Schedule(
                self.best.schedule.config[:, a:b], self.best.schedule.served_rps[:, a:b]
            )
        r = solve_compact(
            w.sub, self.deadline, self.mip_gap / 2, self.threads, allowed, warm, w.entry, w.exit_
        )
        self.stats["windows"].append(
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
            self.lb = max(self.lb, r.bound_usd + self.const - site_constant_usd(w.sub))
            self.found_bound(self.lb)
        if r.schedule is None:
            return None
        full = price_schedule(data, _assemble(data, self.grids, self.init.tabs, a, b, r.schedule))
        new = (set(full.cap_violations) | set(full.inventory_violations)) - set(range(a, b))
        if new:
            return new
        if full.violation_free and full.objective_usd < self.upper():
            self.best = full
            self.found_schedule(full, f"window MILP ({label})")
        return set()


class _PathSearch:
    """The schedule search during one round of the bound: called by the ascent with the
    joint period states it has seen, the best path through them if it beats the last
    one found (or the incumbent at the round's start); each one found is reported."""

    def __init__(self, g: _Guided, w: _Span) -> None:
        self.g, self.w, self.ref0 = g, w, g.best
        self.found: list[Priced] = []

    def __call__(
        self, states: list[dict[tuple[int, ...], tuple[np.ndarray, float]]]
    ) -> float | None:
        ref = self.found[-1] if self.found else self.ref0
        cand = self.g.joint_path(self.w, states, ref)
        if cand is None or (ref is not None and cand.objective_usd >= ref.objective_usd):
            return None
        self.found.append(cand)
        self.g.found_schedule(cand, "joint-state path over the window")
        return cand.objective_usd
