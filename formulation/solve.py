"""Solve a schedule problem and report it (SPEC 4 and the response of SPEC 6.1).

One pipeline for every size, :func:`solve`: the phases of :data:`STEPS` run top to
bottom (:func:`_phases`), each when its predicate holds, each named in
``stats["phases"]`` with its time, and share the time limit through one
:class:`TimeBudget`. What each phase does and when it runs is
:data:`formulation.phases.PHASES`, the one list of them (``docs/schedule.md`` and the
README are written from it; ``tests/test_docs.py`` checks that :data:`STEPS` runs
exactly its phases, in its order).

The relaxation finds its multipliers by column generation with dual smoothing
(``auto``, default) or by the volume algorithm (``volume``); on the benchmark sites
column generation reaches the Lagrangian dual optimum sooner (``docs/schedule.md``). A
caller's ``monitor`` sees the state as it changes and may stop the solve (jobs'
cancellation; the state is :class:`formulation.run.Run`).

``Method.COMPACT`` replaces the phases after ``baselines`` by the compact MILP over
every candidate in one HiGHS run (exact, for small instances and as the reference).

The reported gap is always measured against a bound that holds for the full problem;
restrictions used to find schedules never enter it, and it never falls below the sum
of the deployments' uncapped optima. Whatever happens, the returned schedule is never
worse than a violation-free baseline, and the wall time stays within the limit (plus
the pricing of the result) because every phase is given a deadline
(:class:`formulation.budget.Deadline`; the phases' shares of the limit are :data:`STEPS`'
``until``, and every kernel's share of its phase is named in :mod:`formulation.budget`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.bounds.decomposition import (
    ColumnGeneration,
    DecompositionResult,
    decompose,
    integer_columns,
    make_column,
    schedule_of_columns,
)
from formulation.bounds.lagrange import (
    DualOracle,
    Point,
    Relaxation,
    corridor,
    cost_ceiling,
    local_grids,
    relax,
    uncoupled_bound,
)
from formulation.budget import (
    NEIGHBOURHOOD_AT_LEAST_S,
    VOLUME_REPAIR_AT_MOST,
    VOLUME_REPAIR_EVERY,
    Deadline,
    TimeBudget,
)
from formulation.data import ScheduleData, build_data, undominated
from formulation.diagnosis import diagnose_infeasible, diagnosis_deadline
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.infeasible import check_feasible_before, infeasible_after
from formulation.milp.compact import count_choices, estimated_build_s, solve_compact
from formulation.primal.baselines import greedy_ramped, greedy_with_report, static_peak
from formulation.primal.heuristics import coordinate_descent
from formulation.primal.search import (
    GUIDED_SOURCE,
    Corridors,
    exact_window,
    restricted_milp,
    search_corridors,
)
from formulation.primal.window import GuidedStart, guided_start
from formulation.problem import Method, ScheduleProblem
from formulation.processes.interrupt import Interrupted, interruptible
from formulation.run import Monitor, Progress, Run
from formulation.subproblems.dp import DeploymentGrid, deployment_grid

log = logging.getLogger(__name__)

UNCOUPLED_SOURCE = "sum of the deployments' optima within their local limits"


@dataclass
class Outcome:
    status: str  # optimal | time_limit | stopped (a monitor asked the solve to stop)
    data: ScheduleData
    priced: Priced
    lower_bound_usd: float
    mip_gap: float
    solve_time_s: float
    baselines: dict[str, Priced]
    stats: dict[str, Any] = field(default_factory=dict)


def solve(
    problem: ScheduleProblem,
    progress: Progress | None = None,
    monitor: Monitor | None = None,
    deadline: Deadline | None = None,
) -> Outcome:
    """The schedule with the least cost found within the time limit, and a proven
    lower bound (see the module docstring for the phases). With ``deadline``, the limit
    is the time left before it when that is less than ``solver.time_limit_s``: the
    deadline of a request that runs several solves (a demand-response what-if's two)."""
    run = Run(problem, progress or (lambda _msg: None), monitor, deadline)
    s = Solving(run)
    with interruptible(run.should_stop, run.budget.deadline(TimeBudget.END)):
        try:
            return _phases(s)
        except Interrupted as e:
            # a round on other machines cut short by a stop or the limit: the run ends
            # with what it has
            if not hasattr(s, "base"):  # cut before the baselines: nothing to end with
                raise
            run.say(f"{run.current}: parallel round cut short ({e})")
            for name, p in s.base.items():  # offered already, unless cut in baselines
                run.offer(_undominated(s.data, p), f"baseline {name}")
            return _finish(s)


# ------------------------------------------------------------------ the pipeline


class Solving:
    """What the phases hand on to those after them, each set by the phase named beside
    it (a phase that did not run leaves its fields unset: the predicates of those
    after it say when they may read them)."""

    data: ScheduleData  # tables
    grids: list[DeploymentGrid]  # tables: each deployment's exact DP
    base: dict[str, Priced]  # baselines
    relaxation: Relaxation  # relaxation
    lgrids: list[DeploymentGrid]  # relaxation: the DPs within the site's local limits
    generation: ColumnGeneration | None  # relaxation: column generation, to go on later

    def __init__(self, run: Run) -> None:
        self.run = run
        self.start: GuidedStart | None = None  # one_period_bound
        self.corridors = Corridors()  # neighbourhoods, for neighbourhoods_resumed
        self.resumed = False  # relaxation_resumed ran

    @cached_property
    def guided(self) -> bool:
        """Whether the window is guided by one-period optima (:func:`_guided`), decided
        once, when ``repair`` asks (after ``lp_support``)."""
        return _guided(self.run)


@dataclass(frozen=True)
class Step:
    """One phase: its ``name`` (as in :data:`formulation.phases.PHASES` and the
    response's ``solver.phases``), ``when`` it runs (asked when its turn comes), the
    fraction of the limit by which it ends (``until``; a function of the solve's state
    where what the solve measured decides it; ``END`` also for ``tables``, which takes
    no deadline), and what it ``does``, given that fraction. With ``last``, a phase
    that runs ends the pipeline (``compact``, in place of the phases after it)."""

    name: str
    when: Callable[[Solving], bool]
    until: float | Callable[[Solving], float]
    does: Callable[[Solving, float], None]
    last: bool = False

    def ends(self, s: Solving) -> float:
        return self.until(s) if callable(self.until) else self.until


def _always(_s: Solving) -> bool:
    return True


def _open(s: Solving) -> bool:
    """The gap is open and no stop was asked for."""
    return not s.run.done()


def _tables(s: Solving, _until: float) -> None:
    s.data = build_data(s.run.problem)
    s.run.milp_choices = s.data.milp_choices
    check_feasible_before(s.data)
    s.grids = [deployment_grid(s.data, d) for d in s.data.deployments]


def _baselines_step(s: Solving, until: float) -> None:
    s.base = _baselines(s, until)


def _compact_step(s: Solving, until: float) -> None:
    _compact(s.run, s.data, s.grids, until)


def _one_period_bound_step(s: Solving, until: float) -> None:
    s.start = _one_period_bound(s.run, s.data, s.grids, until)


def _relaxation_step(s: Solving, until: float) -> None:
    s.relaxation, s.lgrids, s.generation = _relaxation(s.run, s.data, s.grids, until)


def _lp_support_step(s: Solving, until: float) -> None:
    _lp_support(s.run, s.data, s.lgrids, s.relaxation.support, until, "lp_support")
    _column_milp(s.run, s.data, s.generation, until, "column_milp")


def _repair_step(s: Solving, until: float) -> None:
    run, relaxation = s.run, s.relaxation
    starts = [*relaxation.hints, relaxation.best.schedule, relaxation.first.schedule]
    if run.best is not None:
        starts.insert(0, run.best.schedule)
    _repair(run, s.data, s.grids, starts, run.budget.deadline(until, TimeBudget.REPAIR_AT_LEAST))


def _exact_window_step(s: Solving, until: float) -> None:
    exact_window(s.run, s.data, s.grids, s.lgrids, s.relaxation, s.base, s.guided, s.start, until)


def _neighbourhoods_step(s: Solving, until: float) -> None:
    s.run.stats.setdefault("neighbourhoods", s.corridors.log)
    search_corridors(s.run, s.data, s.lgrids, s.relaxation, s.corridors, until)


def _relaxation_resumed_step(s: Solving, until: float) -> None:
    assert s.generation is not None
    s.resumed = True
    _resume_relaxation(s.run, s.data, s.lgrids, s.generation, until)


def _lp_support_resumed_step(s: Solving, until: float) -> None:
    assert s.generation is not None
    support = _support_of(s.generation.result())
    _lp_support(s.run, s.data, s.lgrids, support, until, "lp_support_resumed")
    _column_milp(s.run, s.data, s.generation, until, "column_milp_resumed")


def _neighbourhoods_resumed_step(s: Solving, until: float) -> None:
    search_corridors(s.run, s.data, s.lgrids, s.relaxation, s.corridors, until)


#: the phases in the order they run (:func:`_phases`)
STEPS: tuple[Step, ...] = (
    Step("tables", _always, TimeBudget.END, _tables),
    Step("baselines", _always, TimeBudget.BASELINES, _baselines_step),
    Step(
        "compact",
        lambda s: s.run.opts.method == Method.COMPACT,
        TimeBudget.END,
        _compact_step,
        last=True,
    ),
    Step(
        "one_period_bound",
        lambda s: _cheap_rounds(s.run) and not s.run.done(),
        TimeBudget.ONE_PERIOD_BOUND,
        _one_period_bound_step,
    ),
    Step(
        "relaxation",
        _always,
        # when one-period rounds are cheap the guided window may follow: the relaxation
        # then ends sooner, leaving the window its time
        lambda s: TimeBudget.RELAXATION_AT_LEAST if _cheap_rounds(s.run) else TimeBudget.RELAXATION,
        _relaxation_step,
    ),
    Step(
        "lp_support",
        lambda s: _open(s) and bool(s.relaxation.support),
        TimeBudget.EXACT_WINDOW,  # the repair that follows keeps REPAIR_AT_LEAST
        _lp_support_step,
    ),
    Step("repair", lambda s: _open(s) and not s.guided, TimeBudget.REPAIR, _repair_step),
    Step(
        "exact_window",
        _open,
        # the guided window, whose own neighbourhoods grow inside it, runs to the end
        lambda s: TimeBudget.END if s.guided else TimeBudget.EXACT_WINDOW,
        _exact_window_step,
    ),
    Step(
        "neighbourhoods",
        _open,
        lambda s: _neighbourhoods_end(s.generation),
        _neighbourhoods_step,
    ),
    Step(
        "relaxation_resumed",
        lambda s: _resumable(s.run, s.generation),
        TimeBudget.END,
        _relaxation_resumed_step,
    ),
    Step(
        "lp_support_resumed",
        lambda s: s.resumed and _milps_left(s.run),
        TimeBudget.END,
        _lp_support_resumed_step,
    ),
    Step(
        "neighbourhoods_resumed",
        lambda s: s.resumed and _milps_left(s.run),
        TimeBudget.END,
        _neighbourhoods_resumed_step,
    ),
)


def _phases(s: Solving) -> Outcome:
    run = s.run
    for step in STEPS:
        if step.when(s):
            with run.phase(step.name):
                step.does(s, step.ends(s))
            if step.last:
                break
    return _finish(s)


# ------------------------------------------------------------------ the phases


def _milps_left(run: Run) -> bool:
    """Whether restricted MILPs may go on after the resumed relaxation: it ended before
    the limit with the gap open and at least a corridor's least time left
    (``lp_support_resumed``, ``neighbourhoods_resumed``)."""
    return (
        not run.done()
        and run.best is not None
        and run.budget.left(TimeBudget.END) > NEIGHBOURHOOD_AT_LEAST_S
    )


def _guided(run: Run) -> bool:
    """Whether the window is solved guided by one-period optima, from what the solve
    has measured so far: the greedy baseline found every over-cap period's exact
    optimum (no GPU pool can bind) within ``TimeBudget.GUIDED_ROUND`` of the limit
    (each round of the window's decomposition bound solves those periods again), and
    the relaxation left a gap above ``TimeBudget.GUIDED_GAP`` (a smaller one the window
    MILP over Lagrangian-pruned choices closes sooner: measured in
    ``docs/performance.md``)."""
    return _cheap_rounds(run) and run.gap() > TimeBudget.GUIDED_GAP


def _cheap_rounds(run: Run) -> bool:
    """The greedy baseline found every over-cap period's exact optimum within
    ``TimeBudget.GUIDED_ROUND`` of the limit."""
    report = run.greedy
    return report is not None and report.enumerated_all(
        TimeBudget.GUIDED_ROUND * run.budget.limit_s
    )


def _one_period_bound(
    run: Run, data: ScheduleData, grids: list[DeploymentGrid], until: float
) -> GuidedStart:
    """The guided window's first bound, taken before the relaxation because it is cheap
    here (``_cheap_rounds``) and can be far stronger (measured in
    ``docs/performance.md``); the relaxation then stops once its master LP falls to it."""
    run.say("one-period bound: exact one-period optima where the site binds, DPs elsewhere")
    t0 = time.perf_counter()
    deadline = run.budget.deadline(until)
    start = guided_start(data, grids, deadline, run.workers())
    if np.isfinite(start.bound_usd):
        run.bound(start.bound_usd, GUIDED_SOURCE)
    run.stats["one_period_bound"] = {
        "periods": None if start.span is None else [start.span[0], start.span[1] - 1],
        "bound_usd": start.bound_usd if np.isfinite(start.bound_usd) else None,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return start


def _baselines(s: Solving, until: float) -> dict[str, Priced]:
    run, data, grids = s.run, s.data, s.grids
    run.say("baselines: static peak, greedy and greedy within transition limits")
    # the two without a deadline first (seconds on hundreds of deployments), so that
    # the greedy's one-period searches, which end at the phase's deadline, end the phase;
    # kept at once, for a run whose greedy round is cut short (solve)
    peak, ramped = static_peak(data), greedy_ramped(data, grids)
    s.base = {"static_peak": peak, "greedy_ramped": ramped}
    greedy_base, report = greedy_with_report(data, run.budget.deadline(until), grids, run.workers())
    run.greedy = report
    run.stats["greedy"] = report.as_stats()
    base = {"static_peak": peak, "greedy": greedy_base, "greedy_ramped": ramped}
    for name, p in base.items():
        run.offer(_undominated(data, p), f"baseline {name}")
    return base


def _undominated(data: ScheduleData, p: Priced) -> Priced:
    """``p`` with its dominated setting pairs replaced (:func:`undominated`; the same
    schedule without settings): no dearer, and inside every solver's choices."""
    config = undominated(data, p.schedule.config)
    if np.array_equal(config, p.schedule.config):
        return p
    return price_schedule(data, Schedule(config, p.schedule.served_rps))


def _compact(run: Run, data: ScheduleData, grids: list[DeploymentGrid], until: float) -> None:
    run.bound(uncoupled_bound(data, local_grids(data, grids)), UNCOUPLED_SOURCE)
    choices = count_choices(data)
    # the compact MILP is the exact reference the caller asked for: only its build is
    # weighed against the time (its root may then run past the limit)
    if not run.fits(choices, until, root=False):
        # building alone would overrun the limit: the best baseline and the
        # zero-price bound come back, and the reason with them
        run.stats["compact"] = (
            f"not built: {choices:,} choices need about {estimated_build_s(choices):,.0f} s "
            f"to build, more than {TimeBudget.BUILD_SHARE:.0%} of the time left; use "
            "method auto or raise solver.time_limit_s"
        )
        return
    run.say("compact MILP over every candidate")
    r = solve_compact(
        data,
        run.budget.deadline(until),
        run.opts.mip_gap,
        run.opts.threads,
        start=run.best.schedule if run.best else None,
    )
    if r.status == "infeasible":
        raise diagnose_infeasible(
            data, "HiGHS proved the problem infeasible", diagnosis_deadline(run.budget)
        )
    if r.schedule is not None:
        run.offer(price_schedule(data, r.schedule), "compact MILP")
    if r.bound_usd is not None:
        run.bound(r.bound_usd, "compact MILP (HiGHS)")
    run.stats.update(binaries=r.n_binaries, milp_build_s=r.build_s, milp_solve_s=r.solve_s)


def _relaxation_source(how: str) -> str:
    return (
        f"Lagrangian relaxation of the site cap and GPU inventories ({how}), each "
        "deployment's exact DP within its local limits as the subproblem"
    )


COLUMN_GENERATION = "column generation with dual smoothing"


def _relaxation(
    run: Run, data: ScheduleData, grids: list[DeploymentGrid], until: float
) -> tuple[Relaxation, list[DeploymentGrid], ColumnGeneration | None]:
    """The Lagrangian bound and its multipliers, by the method the problem names, and
    column generation's state when it may go on later (``relaxation_resumed``)."""
    lgrids = local_grids(data, grids)
    oracle = DualOracle(data, lgrids, run.workers())
    deadline = run.budget.deadline(until, TimeBudget.RELAXATION_AT_LEAST)
    volume = run.opts.method == Method.VOLUME
    how = "volume algorithm" if volume else COLUMN_GENERATION
    source = _relaxation_source(how)
    generation = None
    try:
        if volume:
            r = _volume(run, data, grids, oracle, deadline, source)
        else:
            r, generation = _column_generation(run, data, lgrids, oracle, deadline, source)
    finally:
        oracle.close()
    if r.best.value_usd > cost_ceiling(data, lgrids):
        # some deployment has no path within what the site allows it, or the bound
        # outgrew what any schedule can cost: no schedule is feasible
        raise diagnose_infeasible(
            data, "no deployment schedule fits the site's limits", diagnosis_deadline(run.budget)
        )
    run.stats["relaxation"] = {
        "method": how,
        "iterations": r.iterations,
        "seconds": round(r.seconds, 3),
        "first_bound_usd": r.first.value_usd,
        "bound_usd": r.best.value_usd,
        "stopped_below_bound": r.beaten,
        "dual_evaluations_s": round(oracle.seconds, 3),
        "history": [[round(t, 3), round(v, 6)] for t, v in r.history],
    }
    return r, lgrids, generation


def _neighbourhoods_end(generation: ColumnGeneration | None) -> float:
    """Where the neighbourhoods end (a fraction of the limit): at the end, or
    ``TimeBudget.RESUMED_RELAXATION`` before it when column generation stopped short of
    convergence (its bound, not the schedule, is then what leaves the gap open on the
    benchmark sites: docs/clocks.md section 8)."""
    if generation is None or generation.converged:
        return TimeBudget.END
    return TimeBudget.END - TimeBudget.RESUMED_RELAXATION


def _resumable(run: Run, generation: ColumnGeneration | None) -> bool:
    """Whether column generation may go on once the schedules' phases are over: it
    stopped short of convergence, the gap is open and a round as long as its longest
    fits in the time left (``relaxation_resumed``)."""
    return (
        generation is not None
        and not generation.converged
        and not run.done()
        and run.budget.left(TimeBudget.END) >= generation.round_s
    )


def _resume_relaxation(
    run: Run,
    data: ScheduleData,
    lgrids: list[DeploymentGrid],
    generation: ColumnGeneration,
    until: float,
) -> None:
    """Column generation again, from the columns, master LP and best multipliers it
    stopped with, in the time the schedules' phases left unused: whole rounds until
    the end of the limit, convergence, or the gap closed. Its bound is the best
    Lagrangian value seen, so it never falls; each better one is reported as found."""
    source = _relaxation_source(COLUMN_GENERATION)
    before, rounds = generation.best_lb, generation.iterations
    t0 = time.perf_counter()
    run.say(f"relaxation resumed: column generation from round {rounds}")

    def progress(msg: str) -> None:
        run.bound(generation.best_lb, source)
        run.say(msg)

    oracle = DualOracle(data, lgrids, run.workers())
    try:
        generation.rounds(
            oracle,
            run.budget.deadline(until),
            progress=progress,
            stop=run.done,
            bound_to_beat=lambda: run.lower_bound,
            whole=True,
        )
    finally:
        oracle.close()
    run.bound(generation.best_lb, source)
    run.stats["relaxation_resumed"] = {
        "rounds": generation.iterations - rounds,
        "seconds": round(time.perf_counter() - t0, 3),
        "bound_before_usd": before,
        "bound_usd": generation.best_lb,
        "converged": generation.converged,
        "dual_evaluations_s": round(oracle.seconds, 3),
    }


def _volume(
    run: Run,
    data: ScheduleData,
    grids: list[DeploymentGrid],
    oracle: DualOracle,
    deadline: Deadline,
    source: str,
) -> Relaxation:
    run.say("Lagrangian relaxation (volume algorithm): one DP per deployment per step")
    repairs = {"last": -np.inf, "spent": 0.0}
    phase = run.budget.limit_s * (TimeBudget.RELAXATION - TimeBudget.BASELINES)

    def on_point(p: Point) -> None:
        run.bound(p.value_usd, source)
        if run.offer(price_schedule(data, p.schedule), "Lagrangian relaxation"):
            return
        # Lagrangian heuristic: at most VOLUME_REPAIR_AT_MOST of the phase, once per
        # VOLUME_REPAIR_EVERY of it
        now = run.budget.elapsed()
        every = VOLUME_REPAIR_EVERY * phase
        if now - repairs["last"] < every or repairs["spent"] > VOLUME_REPAIR_AT_MOST * phase:
            return
        t0 = time.perf_counter()
        _repair(run, data, grids, [p.schedule], deadline.within(every))  # never past the phase
        repairs["last"] = now
        repairs["spent"] += time.perf_counter() - t0

    return relax(oracle, deadline, run.upper, run.opts.mip_gap, on_point, stop=lambda: run.stopped)


def _zero_prices(run: Run, data: ScheduleData, oracle: DualOracle) -> Relaxation:
    first = oracle(np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods)))
    run.bound(first.value_usd, UNCOUPLED_SOURCE)
    run.offer(price_schedule(data, first.schedule), "Lagrangian relaxation")
    return Relaxation(first, first, 0, 0.0, [(0.0, first.value_usd)])


def _column_generation(
    run: Run,
    data: ScheduleData,
    lgrids: list[DeploymentGrid],
    oracle: DualOracle,
    deadline: Deadline,
    source: str,
) -> tuple[Relaxation, ColumnGeneration | None]:
    run.say("Lagrangian relaxation (column generation): one DP per deployment per round")
    zero = _zero_prices(run, data, oracle)
    if run.closed():
        return zero, None
    first = zero.first
    warm = _warm_point(run, data, oracle)
    extra = []
    if run.best is not None:
        for m in range(len(data.deployments)):
            cfg, served = run.best.schedule.config[m], run.best.schedule.served_rps[m]
            extra.append(make_column(data, m, cfg, served))
    dec = decompose(
        data,
        deadline,
        extra_columns=extra,
        progress=run.say,
        oracle=oracle,
        stop=lambda: run.stopped,
        first=first,
        bound_to_beat=lambda: run.lower_bound,
        warm=warm,
    )
    if dec.converged and (dec.lp_slack_periods or dec.lp_inventory_slack):
        raise infeasible_after(data, dec.lp_slack_periods, dec.lp_inventory_slack)
    assert dec.prices_w is not None and dec.prices_gpu is not None
    best = oracle(dec.prices_w, dec.prices_gpu)
    run.bound(max(best.value_usd, dec.lower_bound_usd), source)
    run.offer(price_schedule(data, best.schedule), "Lagrangian relaxation")
    # the LP's heaviest column per deployment: a rounded Dantzig-Wolfe solution
    rounded = []
    for m in range(len(data.deployments)):
        own = [i for i, c in enumerate(dec.columns) if c.deployment == m]
        rounded.append(dec.columns[max(own, key=lambda i: dec.weights[i])])
    hints = [schedule_of_columns(data, rounded)]
    relaxation = Relaxation(
        best, first, dec.iterations, dec.seconds, dec.history, hints, _support_of(dec), dec.beaten
    )
    return relaxation, dec.generation


def _warm_point(run: Run, data: ScheduleData, oracle: DualOracle) -> Point | None:
    """The dual function at the periods' own cap prices (the multipliers of each
    over-cap period's one-period problem, transitions ignored, that the greedy
    baseline found), when it found any: a bound and a stability centre for column
    generation far closer than zero prices where the cap binds in many periods (its
    first LP duals are those of a master with few columns)."""
    prices = None if run.greedy is None else run.greedy.cap_prices
    if prices is None or not np.any(prices > 0) or run.done():
        return None
    point = oracle(prices.astype(float), np.zeros((len(data.pools), data.n_periods)))
    run.bound(point.value_usd, _relaxation_source(COLUMN_GENERATION))
    run.offer(price_schedule(data, point.schedule), "Lagrangian relaxation")
    run.stats["warm_start"] = {"bound_usd": point.value_usd}
    return point


def _repair(
    run: Run,
    data: ScheduleData,
    grids: list[DeploymentGrid],
    starts: list[Schedule],
    deadline: Deadline,
) -> None:
    """Exact per-deployment re-optimisation from each start until none improves, by
    ``deadline``."""
    for st in starts:
        if deadline.expired():
            return
        cand = coordinate_descent(data, grids, st, deadline)
        run.offer(cand, "Lagrangian heuristic")


def _column_milp(
    run: Run, data: ScheduleData, generation: ColumnGeneration | None, until: float, key: str
) -> None:
    """One whole column per deployment from column generation's master, the best
    within the site's constraints (:func:`integer_columns`), the incumbent's paths
    among the columns and its first solution; until fraction ``until`` of the limit,
    at most ``TimeBudget.COLUMN_MILP`` of it. Cheap at any size (a binary per
    column), it gives a schedule wherever the columns combine into a better one than
    the incumbent. Its figures in ``stats[key]``."""
    if generation is None or run.best is None or run.done():
        return
    best = run.best.schedule
    for m in range(len(data.deployments)):
        generation.master.add(make_column(data, m, best.config[m], best.served_rps[m]))
    deadline = run.budget.deadline(until).within(TimeBudget.COLUMN_MILP * run.budget.limit_s)
    choice = integer_columns(generation, deadline, run.opts.mip_gap / 2, start=best)
    improved = choice.schedule is not None and run.offer(
        price_schedule(data, choice.schedule), "MILP over the master's columns"
    )
    run.stats[key] = {
        "columns": choice.columns,
        "seconds": round(choice.seconds, 3),
        "status": choice.status,
        "improved": improved,
    }


def _support_of(dec: DecompositionResult) -> list[tuple[int, NDArray[np.int64]]]:
    """The master LP's support: (deployment, whole-horizon configurations) of each column
    the LP uses."""
    used = zip(dec.columns, dec.weights, strict=True)
    return [(c.deployment, c.config) for c, w in used if w > 1e-9]


def _lp_support(
    run: Run,
    data: ScheduleData,
    lgrids: list[DeploymentGrid],
    support: list[tuple[int, NDArray[np.int64]]],
    until: float,
    key: str,
) -> None:
    """The compact MILP restricted to the configurations of the master LP's columns
    (``support``) and of the incumbent, in every period (price-and-branch on the LP's
    support), until fraction ``until`` of the limit: a small MILP whose optimum is
    usually close to the best schedule. Schedules only; its figures in ``stats[key]``."""
    if run.best is None:
        return
    base = run.best.schedule.config
    paths = [base]
    for m, cfg in support:
        path = base.copy()
        path[m] = cfg
        paths.append(path)
    allowed = corridor(data, paths, 0, range(data.n_periods), grids=lgrids)
    choices = sum(len(r) for rows in allowed for r in rows)
    if not run.fits(choices, until):
        run.stats[key] = {"choices": choices, "status": "not built: no time"}
        return
    run.say(f"MILP over the master LP's support: {choices:,} choices")
    r, improved = restricted_milp(run, data, allowed, until, "MILP over the master LP's support")
    run.stats[key] = {
        "choices": choices,
        "build_s": round(r.build_s, 3),
        "solve_s": round(r.solve_s, 3),
        "status": r.status,
        "improved": improved,
    }


def _finish(s: Solving) -> Outcome:
    run, data = s.run, s.data
    best = run.best
    if best is None:
        raise diagnose_infeasible(
            data, "no feasible schedule found within the time limit", diagnosis_deadline(run.budget)
        )
    if run.opts.method != Method.COMPACT:  # the corridors' log, whether they ran or not
        run.stats.setdefault("neighbourhoods", s.corridors.log)
    status = "optimal" if run.closed() else "stopped" if run.stopped else "time_limit"
    run.stats["incumbent_from"] = run.source
    return Outcome(
        status, data, best, run.lower_bound, run.gap(), run.budget.elapsed(), s.base, run.stats
    )
