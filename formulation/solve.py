"""Solve a schedule problem and report it (SPEC 4 and the response of SPEC 6.1).

One pipeline for every size, :func:`solve`; its phases run top to bottom
(:func:`_phases`), each named in ``stats["phases"]`` with its time, and share the time
limit through one :class:`TimeBudget`. What each phase does and when it runs is
:data:`formulation.phases.PHASES`, the one list of them (``docs/schedule.md`` and the
README are written from it); a phase not listed there is refused.

The relaxation finds its multipliers by column generation with dual smoothing
(``auto``, default) or by the volume algorithm (``volume``); on the benchmark sites
column generation reaches the Lagrangian dual optimum sooner (``docs/schedule.md``). A
caller's ``monitor`` sees the state as it changes and may stop the solve (jobs'
cancellation).

``Method.COMPACT`` replaces the phases after ``baselines`` by the compact MILP over
every candidate in one HiGHS run (exact, for small instances and as the reference).

The reported gap is always measured against a bound that holds for the full problem;
restrictions used to find schedules never enter it, and it never falls below the sum
of the deployments' uncapped optima. Whatever happens, the returned schedule is never
worse than a violation-free baseline, and the wall time stays within the limit (plus
the pricing of the result) because every phase is given a deadline
(:class:`formulation.budget.Deadline`; the phases' shares of the limit, and every
kernel's share of its phase, are named in :mod:`formulation.budget`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation import memory
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
    keep_choices,
    local_grids,
    relax,
    uncoupled_bound,
)
from formulation.budget import (
    GUIDED_AT_LEAST_S,
    NEIGHBOURHOOD_AT_LEAST_S,
    VOLUME_REPAIR_AT_MOST,
    VOLUME_REPAIR_EVERY,
    Deadline,
    TimeBudget,
)
from formulation.data import ScheduleData, build_data, undominated
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.infeasible import InfeasibleError, check_feasible_before, infeasible_after
from formulation.milp.compact import (
    Allowed,
    MilpResult,
    estimated_build_s,
    estimated_root_s,
    solve_compact,
)
from formulation.phases import PHASE_NAMES
from formulation.primal.baselines import (
    GreedyReport,
    greedy_ramped,
    greedy_with_report,
    static_peak,
)
from formulation.primal.heuristics import coordinate_descent
from formulation.primal.window import (
    GuidedStart,
    binding_periods,
    guided_start,
    solve_guided,
    solve_windowed,
    window_choices,
    window_span,
)
from formulation.problem import Method, ScheduleProblem
from formulation.processes.interrupt import Interrupted, interruptible, process_stopping
from formulation.subproblems.dp import DeploymentGrid, deployment_grid

log = logging.getLogger(__name__)

UNCOUPLED_SOURCE = "sum of the deployments' optima within their local limits"
GUIDED_SOURCE = (
    "the window where the site binds, guided by one-period optima (their Lagrangian "
    "decomposition against per-deployment paths, or the window MILP over every "
    "candidate), exact DPs outside it"
)

Progress = Callable[[str], None]
#: sees the solve's state whenever it changes (``phase``, ``objective_usd``,
#: ``lower_bound_usd``, ``gap``, ``elapsed_s``); returning True asks the solve to stop:
#: every phase ends at its next check and the best schedule found comes back, with
#: status ``stopped`` unless it is already proven
Monitor = Callable[[dict[str, Any]], bool]


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


def diagnose_infeasible(data: ScheduleData, fallback: str, deadline: Deadline) -> InfeasibleError:
    """Name the periods where even the LP relaxation cannot meet the site constraints
    (transition limits from the initial state included), looked for until ``deadline``;
    else a plain explanation."""
    dec = decompose(data, deadline)
    if dec.converged and (dec.lp_slack_periods or dec.lp_inventory_slack):
        return infeasible_after(data, dec.lp_slack_periods, dec.lp_inventory_slack)
    reason = (
        "the relaxation is feasible but no integer schedule was found"
        if dec.converged
        else "no schedule was found and the LP relaxation, which would name the periods at "
        "fault, did not converge within the time limit"
    )
    return InfeasibleError(
        fallback,
        [
            {
                "constraint": "integrality",
                "reason": f"{reason}; raise solver.time_limit_s or relax "
                "transitions.max_instance_changes_per_period",
            }
        ],
    )


class Run:
    """The state one solve carries through its phases: the incumbent, the proven
    bound, their history and the phases' timings."""

    def __init__(
        self,
        problem: ScheduleProblem,
        say: Progress,
        monitor: Monitor | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        self.problem = problem
        self.opts = problem.solver
        limit_s = problem.solver.time_limit_s
        if deadline is not None:
            limit_s = min(limit_s, deadline.remaining())
        self.budget = TimeBudget(limit_s)
        self._say = say
        self.monitor = monitor
        self.current = ""
        self.stopped = False
        self.best: Priced | None = None
        self.source = ""
        self.lower_bound = -np.inf
        self.greedy: GreedyReport | None = None
        # the tables and baselines, once built (the end of a run cut short needs them)
        self.data: ScheduleData | None = None
        self.base: dict[str, Priced] = {}
        # the limit this solve had: its own, or what the request's deadline left it
        self.stats: dict[str, Any] = {"time_limit_s": round(limit_s, 3), "phases": [], "trace": []}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASE_NAMES:  # the list the documents are written from
            raise ValueError(f"phase {name!r} is not in formulation.phases.PHASES")
        t0 = time.perf_counter()
        self.current = name
        self._notify()
        try:
            yield
        finally:
            self.stats["phases"].append(
                {"name": name, "seconds": round(time.perf_counter() - t0, 3)}
            )

    def _trace(self) -> None:
        ub = None if self.best is None else round(self.best.objective_usd, 6)
        lb = round(self.lower_bound, 6) if np.isfinite(self.lower_bound) else None
        self.stats["trace"].append([round(self.budget.elapsed(), 3), ub, lb])
        self._notify()

    def say(self, msg: str) -> None:
        """Report progress (and let the monitor, if any, see the state)."""
        self._say(msg)
        self._notify()

    def _notify(self) -> None:
        if self.monitor is None or self.stopped:
            return
        gap = self.gap()
        state = {
            "phase": self.current,
            "objective_usd": None if self.best is None else self.best.objective_usd,
            "lower_bound_usd": self.lower_bound if np.isfinite(self.lower_bound) else None,
            "gap": gap if np.isfinite(gap) else None,
            "elapsed_s": round(self.budget.elapsed(), 3),
        }
        if self.monitor(state):
            self.stop()

    def should_stop(self) -> bool:
        """Whether the run was asked to stop, by its monitor (which sees the state) or
        by its process (a server shutting down)."""
        self._notify()
        if not self.stopped and process_stopping():
            self.stop()
        return self.stopped

    def stop(self) -> None:
        """End every phase at its next check (the limit becomes the time used so far)."""
        self.stopped = True
        self.budget.limit_s = min(self.budget.limit_s, self.budget.elapsed())
        self._say("stop requested: returning the best schedule found so far")

    def offer(self, p: Priced | None, source: str) -> bool:
        """Keep ``p`` if it is violation-free and cheaper than the incumbent."""
        if p is None or not p.violation_free:
            return False
        if self.best is not None and p.objective_usd >= self.best.objective_usd - 1e-9 * max(
            abs(self.best.objective_usd), 1.0
        ):
            return False
        self.best, self.source = p, source
        self._trace()
        gap = self.gap()
        shown = f", gap {gap:.3%}" if np.isfinite(gap) else ""
        self.say(f"{source}: schedule at ${p.objective_usd:,.4f}{shown}")
        return True

    def bound(self, value: float, source: str | None = None) -> None:
        """Raise the proven bound to ``value`` if higher; ``source`` names how it was
        proven (reported as ``stats["lower_bound"]``)."""
        if value > self.lower_bound:
            self.lower_bound = value
            if source is not None:
                self.stats["lower_bound"] = source
            self._trace()

    def upper(self) -> float:
        return np.inf if self.best is None else self.best.objective_usd

    def gap(self) -> float:
        if self.best is None or not np.isfinite(self.lower_bound):
            return np.inf
        return max(0.0, (self.best.objective_usd - self.lower_bound) / max(abs(self.upper()), 1e-9))

    def closed(self) -> bool:
        return self.gap() <= self.opts.mip_gap + 1e-12

    def done(self) -> bool:
        """Nothing more to do: the gap is closed or a stop was requested."""
        return self.should_stop() or self.closed()

    def fits(self, choices: int, until: float, root: bool = True) -> bool:
        """Whether a MILP over ``choices`` can be built and solved before ``until``: its
        build within ``TimeBudget.BUILD_SHARE`` of the time left and, with ``root``, its
        root node (which HiGHS does not interrupt for its time limit) within the time
        left."""
        left = self.budget.left(until)
        if estimated_build_s(choices) > TimeBudget.BUILD_SHARE * left:
            return False
        return not root or estimated_root_s(choices) <= left


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
    with interruptible(run.should_stop, run.budget.deadline(TimeBudget.END)):
        try:
            return _phases(run)
        except Interrupted as e:
            # a round on other machines cut short by a stop or the limit: the run ends
            # with what it has
            if run.data is None:
                raise
            run.say(f"{run.current}: parallel round cut short ({e})")
            for name, p in run.base.items():  # offered already, unless cut in baselines
                run.offer(_undominated(run.data, p), f"baseline {name}")
            return _finish(run, run.data, run.base)


def _phases(run: Run) -> Outcome:
    problem = run.problem
    with run.phase("tables"):
        data = build_data(problem)
        check_feasible_before(data)
        grids = [deployment_grid(data, d) for d in data.deployments]
    run.data = data
    with run.phase("baselines"):
        base = run.base = _baselines(run, data, grids)
    if run.opts.method == Method.COMPACT:
        with run.phase("compact"):
            _compact(run, data, grids)
        return _finish(run, data, base)
    start = None
    if _cheap_rounds(run) and not run.done():
        with run.phase("one_period_bound"):
            start = _one_period_bound(run, data, grids)
    with run.phase("relaxation"):
        relaxation, lgrids, generation = _relaxation(run, data, grids)
    if not run.done() and relaxation.support:
        with run.phase("lp_support"):
            _lp_support(run, data, lgrids, relaxation.support)
            _column_milp(run, data, generation, TimeBudget.EXACT_WINDOW, "column_milp")
    guided = _guided(run)
    if not run.done() and not guided:
        with run.phase("repair"):
            starts = [*relaxation.hints, relaxation.best.schedule, relaxation.first.schedule]
            if run.best is not None:
                starts.insert(0, run.best.schedule)
            _repair(run, data, grids, starts)
    if not run.done():
        with run.phase("exact_window"):
            _exact_window(run, data, grids, lgrids, relaxation, base, guided, start)
    corridors = Corridors()
    run.stats["neighbourhoods"] = corridors.log
    if not run.done():
        with run.phase("neighbourhoods"):
            _neighbourhoods(
                run, data, lgrids, relaxation, corridors, _neighbourhoods_end(generation)
            )
    if _resumable(run, generation):
        assert generation is not None
        with run.phase("relaxation_resumed"):
            _resume_relaxation(run, data, lgrids, generation)
        if _milps_left(run):
            with run.phase("lp_support_resumed"):
                support = _support_of(generation.result())
                _lp_support(run, data, lgrids, support, TimeBudget.END, "lp_support_resumed")
                _column_milp(run, data, generation, TimeBudget.END, "column_milp_resumed")
        if _milps_left(run):
            with run.phase("neighbourhoods_resumed"):
                _neighbourhoods(run, data, lgrids, relaxation, corridors, TimeBudget.END)
    return _finish(run, data, base)


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
    MILP over Lagrangian-pruned choices closes sooner: 16 x 32 GPUs, 0.115% after the
    relaxation, is proven in 15 s that way and in 59 s guided)."""
    return _cheap_rounds(run) and run.gap() > TimeBudget.GUIDED_GAP


def _cheap_rounds(run: Run) -> bool:
    """The greedy baseline found every over-cap period's exact optimum within
    ``TimeBudget.GUIDED_ROUND`` of the limit."""
    report = run.greedy
    return report is not None and report.enumerated_all(
        TimeBudget.GUIDED_ROUND * run.budget.limit_s
    )


def _one_period_bound(run: Run, data: ScheduleData, grids: list[DeploymentGrid]) -> GuidedStart:
    """The guided window's first bound, taken before the relaxation because it is cheap
    here (``_cheap_rounds``) and can be far stronger (measured in
    ``docs/performance.md``); the relaxation then stops once its master LP falls to it."""
    run.say("one-period bound: exact one-period optima where the site binds, DPs elsewhere")
    t0 = time.perf_counter()
    deadline = run.budget.deadline(TimeBudget.ONE_PERIOD_BOUND)
    start = guided_start(data, grids, deadline, _workers(run))
    if np.isfinite(start.bound_usd):
        run.bound(start.bound_usd, GUIDED_SOURCE)
    run.stats["one_period_bound"] = {
        "periods": None if start.span is None else [start.span[0], start.span[1] - 1],
        "bound_usd": start.bound_usd if np.isfinite(start.bound_usd) else None,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return start


def _baselines(run: Run, data: ScheduleData, grids: list[DeploymentGrid]) -> dict[str, Priced]:
    run.say("baselines: static peak, greedy and greedy within transition limits")
    # the two without a deadline first (seconds on hundreds of deployments), so that
    # the greedy's one-period searches, which end at the phase's deadline, end the phase
    peak, ramped = static_peak(data), greedy_ramped(data, grids)
    run.base = {"static_peak": peak, "greedy_ramped": ramped}
    greedy_base, report = greedy_with_report(
        data, run.budget.deadline(TimeBudget.BASELINES), grids, _workers(run)
    )
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


def _compact(run: Run, data: ScheduleData, grids: list[DeploymentGrid]) -> None:
    run.bound(uncoupled_bound(data, local_grids(data, grids)), UNCOUPLED_SOURCE)
    choices = sum(int(d.period_allowed().sum()) for d in data.deployments)
    # the compact MILP is the exact reference the caller asked for: only its build is
    # weighed against the time (its root may then run past the limit)
    if not run.fits(choices, TimeBudget.END, root=False):
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
        run.budget.deadline(TimeBudget.END),
        run.opts.mip_gap,
        run.opts.threads,
        start=run.best.schedule if run.best else None,
    )
    if r.status == "infeasible":
        raise diagnose_infeasible(data, "HiGHS proved the problem infeasible", _diagnosis(run))
    if r.schedule is not None:
        run.offer(price_schedule(data, r.schedule), "compact MILP")
    if r.bound_usd is not None:
        run.bound(r.bound_usd, "compact MILP (HiGHS)")
    run.stats.update(binaries=r.n_binaries, milp_build_s=r.build_s, milp_solve_s=r.solve_s)


def _diagnosis(run: Run) -> Deadline:
    """When naming the periods of an infeasible problem ends: the end of the limit (what
    the phases left of it, its reserve included). With nothing left the error says so
    rather than run past the limit (:func:`diagnose_infeasible`'s plain explanation)."""
    return run.budget.end()


def _workers(run: Run) -> int:
    """Worker processes for the DPs: ``solver.threads``, at most the machine's cores."""
    return memory.workers(run.opts.threads)


def _relaxation_source(how: str) -> str:
    return (
        f"Lagrangian relaxation of the site cap and GPU inventories ({how}), each "
        "deployment's exact DP within its local limits as the subproblem"
    )


COLUMN_GENERATION = "column generation with dual smoothing"


def _relaxation(
    run: Run, data: ScheduleData, grids: list[DeploymentGrid]
) -> tuple[Relaxation, list[DeploymentGrid], ColumnGeneration | None]:
    """The Lagrangian bound and its multipliers, by the method the problem names, and
    column generation's state when it may go on later (``relaxation_resumed``)."""
    lgrids = local_grids(data, grids)
    oracle = DualOracle(data, lgrids, _workers(run))
    # when one-period rounds are cheap the guided window may follow: the relaxation
    # then ends sooner, leaving the window its time
    until = TimeBudget.RELAXATION_AT_LEAST if _cheap_rounds(run) else TimeBudget.RELAXATION
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
            data, "no deployment schedule fits the site's limits", _diagnosis(run)
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
    run: Run, data: ScheduleData, lgrids: list[DeploymentGrid], generation: ColumnGeneration
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

    oracle = DualOracle(data, lgrids, _workers(run))
    try:
        generation.rounds(
            oracle,
            run.budget.deadline(TimeBudget.END),
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
    deadline: Deadline | None = None,
) -> None:
    """Exact per-deployment re-optimisation from each start until none improves, by
    ``deadline`` (default: the repair phase's)."""
    if deadline is None:
        deadline = run.budget.deadline(TimeBudget.REPAIR, TimeBudget.REPAIR_AT_LEAST)
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
    until: float = TimeBudget.EXACT_WINDOW,  # the repair that follows keeps REPAIR_AT_LEAST
    key: str = "lp_support",
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
    r, improved = _restricted_milp(run, data, allowed, until, "MILP over the master LP's support")
    run.stats[key] = {
        "choices": choices,
        "build_s": round(r.build_s, 3),
        "solve_s": round(r.solve_s, 3),
        "status": r.status,
        "improved": improved,
    }


def _restricted_milp(
    run: Run, data: ScheduleData, allowed: Allowed, until: float, label: str
) -> tuple[MilpResult, bool]:
    """The compact MILP over ``allowed``, started from the incumbent, given the time
    left before ``until`` but at most ``TimeBudget.NEIGHBOURHOOD`` of the limit; its
    schedule offered as ``label``. Returns the result and whether it improved."""
    assert run.best is not None
    r = solve_compact(
        data,
        run.budget.deadline(until).within(TimeBudget.NEIGHBOURHOOD * run.budget.limit_s),
        run.opts.mip_gap / 2,
        run.opts.threads,
        allowed,
        start=run.best.schedule,
    )
    improved = r.schedule is not None and run.offer(price_schedule(data, r.schedule), label)
    return r, improved


def binding_windows(data: ScheduleData, best: Priced, length: int, pad: int = 1) -> list[set[int]]:
    """Spans of at most ``length`` periods covering the periods where ``best`` draws
    within 2% of the cap (or uses every GPU of a pool), each padded by ``pad``."""
    ts = sorted(binding_periods(data, best, slack=0.02))
    out: list[set[int]] = []
    while ts:
        first = ts[0]
        chunk = [t for t in ts if t < first + length]
        ts = ts[len(chunk) :]
        lo, hi = max(chunk[0] - pad, 0), min(chunk[-1] + pad, data.n_periods - 1)
        out.append(set(range(lo, hi + 1)))
    return out


@dataclass
class Corridors:
    """Where the corridor search stands, kept from one of its phases to the next: the
    radius, the time windows still to visit (``None`` while over the whole horizon),
    whether the current pass of windows has improved, and one log row per MILP."""

    radius: int = 1
    windows: list[set[int]] | None = None
    passed_without_gain: bool = True
    log: list[dict[str, Any]] = field(default_factory=list)


def _neighbourhoods(
    run: Run,
    data: ScheduleData,
    lgrids: list[DeploymentGrid],
    relaxation: Relaxation,
    st: Corridors,
    until: float = TimeBudget.END,
) -> None:
    """Corridor MILPs around the incumbent and the Lagrangian paths, each given at most
    ``TimeBudget.NEIGHBOURHOOD`` of the limit, until fraction ``until`` of it, from
    ``st`` on (and left in it). Over the whole horizon first, the radius growing
    while a corridor is solved without improvement; once one runs out of time without
    improving, over time windows where the cap binds (the incumbent fixed outside), one
    after another, the radius growing after a pass without improvement."""
    while (
        not run.done()
        and run.best is not None
        and run.budget.left(until) > NEIGHBOURHOOD_AT_LEAST_S
    ):
        focus = None
        if st.windows is not None:
            if not st.windows:
                if st.passed_without_gain:
                    st.radius += 1
                st.windows = binding_windows(data, run.best, TimeBudget.WINDOW_PERIODS)
                st.passed_without_gain = True
                if not st.windows:
                    break
            focus = st.windows.pop(0)
        centres = [run.best.schedule.config, relaxation.best.schedule.config]
        allowed = corridor(
            data, centres, st.radius, range(data.n_periods), grids=lgrids, focus=focus
        )
        choices = sum(len(r) for rows in allowed for r in rows)
        if not run.fits(choices, until):
            if st.windows is None:
                st.windows = []  # too large over the whole horizon: windows instead
                continue
            break
        where = "all periods" if focus is None else f"periods {min(focus)}..{max(focus)}"
        run.say(f"corridor MILP: radius {st.radius}, {where}, {choices:,} choices")
        r, improved = _restricted_milp(
            run, data, allowed, until, f"corridor MILP (radius {st.radius})"
        )
        st.log.append(
            {
                "radius": st.radius,
                "periods": None if focus is None else [min(focus), max(focus)],
                "choices": choices,
                "build_s": round(r.build_s, 3),
                "solve_s": round(r.solve_s, 3),
                "status": r.status,
                "improved": improved,
            }
        )
        if improved:
            st.passed_without_gain = False
        if st.windows is None:
            if r.status == "optimal" and not improved:
                st.radius += 1
            elif r.status != "optimal" and not improved:
                st.windows = []  # the whole horizon is too hard: windows from here on


def _exact_window(
    run: Run,
    data: ScheduleData,
    grids: list[DeploymentGrid],
    lgrids: list[DeploymentGrid],
    relaxation: Relaxation,
    base: dict[str, Priced],
    guided: bool,
    start: GuidedStart | None,
) -> None:
    opts = run.opts
    if run.best is None:
        return
    if guided:
        label = "window MILP guided by one-period optima"
        g = solve_guided(
            data,
            grids,
            run.budget.deadline(TimeBudget.END).at_least(GUIDED_AT_LEAST_S),
            opts.mip_gap,
            opts.threads,
            run.best,
            lambda _msg: None,  # its findings reach the run below, as they come
            hints=[p.schedule for p in base.values()] + [relaxation.best.schedule],
            start=start,
            on_bound=lambda v: run.bound(v, GUIDED_SOURCE),
            on_schedule=lambda p: run.offer(p, label),
            workers=_workers(run),
        )
        run.stats["windows"] = g.stats.get("windows", [])
        if "infeasible_period" in g.stats:
            raise infeasible_after(data, [int(g.stats["infeasible_period"])], [])
        run.bound(g.lower_bound_usd, GUIDED_SOURCE)
        run.offer(g.priced, label)
        run.stats["split_bound"] = g.stats.get("split_bound", [])
        return
    span = window_span(data, grids)
    if span is None:  # the uncoupled optima meet the site: the relaxation proved it
        return
    # pruning rarely drops nine choices in ten: when even a tenth of the window's
    # choices cannot be built in time, skip the pruning's DPs as well
    # the window MILP is where a bound above the relaxation's comes from: only its build
    # is weighed (its root, unlike the corridors' on 32 deployments, has kept to its
    # limit on every benchmark site)
    unpruned = window_choices(data, span, None)
    if not run.fits(unpruned // 10, TimeBudget.EXACT_WINDOW, root=False):
        run.stats["exact_window"] = f"skipped: {unpruned:,} choices before pruning"
        return
    allowed, kept, total = keep_choices(data, lgrids, relaxation.best, run.upper())
    run.stats.update(choices_kept=kept, choices_total=total)
    run.say(f"Lagrangian pruning kept {kept:,} of {total:,} (deployment, period, config) choices")
    need = window_choices(data, span, allowed)
    if not run.fits(need, TimeBudget.EXACT_WINDOW, root=False):
        run.stats["exact_window"] = f"skipped: {need:,} choices do not fit in the time left"
        return
    w = solve_windowed(
        data,
        grids,
        run.budget.deadline(TimeBudget.EXACT_WINDOW),
        opts.mip_gap,
        opts.threads,
        run.best,
        allowed,
        run.say,
    )
    run.stats["windows"] = w.stats.get("windows", [])
    run.offer(w.priced, "window MILP")
    if np.isfinite(w.lower_bound_usd):
        # a relaxation of the problem over the kept choices, whose optimum is the full
        # optimum unless the incumbent is already optimal
        run.bound(
            min(run.upper(), w.lower_bound_usd),
            "window MILP over the choices Lagrangian pruning keeps, exact DPs outside it",
        )


def _finish(run: Run, data: ScheduleData, base: dict[str, Priced]) -> Outcome:
    best = run.best
    if best is None:
        raise diagnose_infeasible(
            data, "no feasible schedule found within the time limit", _diagnosis(run)
        )
    status = "optimal" if run.closed() else "stopped" if run.stopped else "time_limit"
    run.stats["incumbent_from"] = run.source
    return Outcome(
        status, data, best, run.lower_bound, run.gap(), run.budget.elapsed(), base, run.stats
    )
