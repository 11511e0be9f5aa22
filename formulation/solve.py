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
column generation reaches the Lagrangian dual optimum sooner (``docs/schedule.md``).
The relaxation's phases are :mod:`formulation.bounds.relaxation`, the schedules drawn
from it :mod:`formulation.primal.relaxed` and the local search
:mod:`formulation.primal.search`; the steps here hand them the solve's state. A
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

from formulation.bounds.decomposition import ColumnGeneration
from formulation.bounds.lagrange import Relaxation, local_grids, uncoupled_bound
from formulation.bounds.relaxation import (
    UNCOUPLED_SOURCE,
    lagrangian_bound,
    resume_relaxation,
    support_of,
)
from formulation.budget import NEIGHBOURHOOD_AT_LEAST_S, Deadline, TimeBudget
from formulation.data import ScheduleData, build_data, undominated
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.infeasible import check_feasible_before
from formulation.milp.compact import count_choices, estimated_build_s, solve_compact
from formulation.primal.baselines import greedy_ramped, greedy_with_report, static_peak
from formulation.primal.relaxed import column_milp, lp_support, repair
from formulation.primal.search import GUIDED_SOURCE, Corridors, exact_window, search_corridors
from formulation.primal.window import GuidedStart, guided_start
from formulation.problem import Method, ScheduleProblem
from formulation.processes.interrupt import Interrupted, interruptible
from formulation.run import Monitor, Progress, Run
from formulation.subproblems.dp import DeploymentGrid, deployment_grid

log = logging.getLogger(__name__)


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
    tables: ScheduleData | None = None,
) -> Outcome:
    """The schedule with the least cost found within the time limit, and a proven
    lower bound (see the module docstring for the phases). With ``deadline``, the limit
    is the time left before it when that is less than ``solver.time_limit_s``: the
    deadline of a request that runs several solves (a demand-response what-if's two).
    ``tables``: the problem's data built already, or changed beyond what a request can
    say (a fleet's site whose requests are valued per period at the routing's prices,
    formulation.fleet.solve); by default built from ``problem``."""
    run = Run(problem, progress or (lambda _msg: None), monitor, deadline)
    run.tables = tables
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
    s.data = s.run.tables if s.run.tables is not None else build_data(s.run.problem)
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
    def repair_points(starts: list[Schedule], deadline: Deadline) -> None:
        repair(s.run, s.data, s.grids, starts, deadline)

    s.relaxation, s.lgrids, s.generation = lagrangian_bound(
        s.run, s.data, s.grids, until, repair_points
    )


def _lp_support_step(s: Solving, until: float) -> None:
    lp_support(s.run, s.data, s.lgrids, s.relaxation.support, until, "lp_support")
    column_milp(s.run, s.data, s.generation, until, "column_milp")


def _repair_step(s: Solving, until: float) -> None:
    run, relaxation = s.run, s.relaxation
    starts = [*relaxation.hints, relaxation.best.schedule, relaxation.first.schedule]
    if run.best is not None:
        starts.insert(0, run.best.schedule)
    repair(run, s.data, s.grids, starts, run.budget.deadline(until, TimeBudget.REPAIR_AT_LEAST))


def _exact_window_step(s: Solving, until: float) -> None:
    exact_window(s.run, s.data, s.grids, s.lgrids, s.relaxation, s.base, s.guided, s.start, until)


def _neighbourhoods_step(s: Solving, until: float) -> None:
    s.run.stats.setdefault("neighbourhoods", s.corridors.log)
    search_corridors(s.run, s.data, s.lgrids, s.relaxation, s.corridors, until)


def _relaxation_resumed_step(s: Solving, until: float) -> None:
    assert s.generation is not None
    s.resumed = True
    resume_relaxation(s.run, s.data, s.lgrids, s.generation, until)


def _lp_support_resumed_step(s: Solving, until: float) -> None:
    assert s.generation is not None
    support = support_of(s.generation.result())
    lp_support(s.run, s.data, s.lgrids, support, until, "lp_support_resumed")
    column_milp(s.run, s.data, s.generation, until, "column_milp_resumed")


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


# ------------------------------------------------------------------ when they run


def _milps_left(run: Run) -> bool:
    """Whether restricted MILPs may go on after the resumed relaxation: it ended before
    the limit with the gap open and at least a corridor's least time left
    (``lp_support_resumed``, ``neighbourhoods_resumed``)."""
    return (
        not run.done()
        and run.best is not None
        and run.budget.left(TimeBudget.END) > NEIGHBOURHOOD_AT_LEAST_S
    )


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


# ------------------------------------------------------------------ the phases


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
        raise run.infeasible(data, "HiGHS proved the problem infeasible")
    if r.schedule is not None:
        run.offer(price_schedule(data, r.schedule), "compact MILP")
    if r.bound_usd is not None:
        run.bound(r.bound_usd, "compact MILP (HiGHS)")
    run.stats.update(binaries=r.n_binaries, milp_build_s=r.build_s, milp_solve_s=r.solve_s)


def _finish(s: Solving) -> Outcome:
    run, data = s.run, s.data
    best = run.best
    if best is None:
        raise run.infeasible(data, "no feasible schedule found within the time limit")
    if run.opts.method != Method.COMPACT:  # the corridors' log, whether they ran or not
        run.stats.setdefault("neighbourhoods", s.corridors.log)
    status = "optimal" if run.closed() else "stopped" if run.stopped else "time_limit"
    run.stats["incumbent_from"] = run.source
    return Outcome(
        status, data, best, run.lower_bound, run.gap(), run.budget.elapsed(), s.base, run.stats
    )
