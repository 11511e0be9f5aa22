"""The relaxation phases of a solve: the Lagrangian bound and its multipliers
(``relaxation``: :func:`lagrangian_bound`), by column generation with dual smoothing
(:func:`column_generation`, the default) or by the volume algorithm (:func:`volume`),
and column generation resumed from where it stopped (``relaxation_resumed``:
:func:`resume_relaxation`).

They read and raise the solve's state through :class:`Bounding` (the incumbent, the
bound, the time left), which :class:`formulation.run.Run` is. The schedules a solve
draws from the relaxation are :mod:`formulation.primal.relaxed`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from formulation.bounds.decomposition import (
    ColumnGeneration,
    DecompositionResult,
    ascend,
    decompose,
    make_column,
    schedule_of_columns,
)
from formulation.bounds.lagrange import (
    DualOracle,
    Point,
    Relaxation,
    cost_ceiling,
    local_grids,
    relax,
)
from formulation.budget import VOLUME_REPAIR_AT_MOST, VOLUME_REPAIR_EVERY, Deadline, TimeBudget
from formulation.data import ScheduleData
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.infeasible import infeasible_after
from formulation.problem import Method, SolverOptions
from formulation.subproblems.dp import DeploymentGrid

UNCOUPLED_SOURCE = "sum of the deployments' optima within their local limits"

COLUMN_GENERATION = "column generation with dual smoothing"

#: the volume algorithm's Lagrangian heuristic: re-optimises the schedules given
#: (the points' own) by the deadline given, offering what it finds
Repair = Callable[[list[Schedule], Deadline], None]


class CapPrices(Protocol):
    """The greedy baseline's report as the relaxation reads it
    (:class:`formulation.primal.baselines.GreedyReport`)."""

    @property
    def cap_prices(self) -> NDArray[Any] | None: ...


class Bounding(Protocol):
    """What the relaxation needs of the solve's state (:class:`formulation.run.Run`)."""

    @property
    def best(self) -> Priced | None: ...

    @property
    def budget(self) -> TimeBudget: ...

    @property
    def opts(self) -> SolverOptions: ...

    @property
    def stats(self) -> dict[str, Any]: ...

    @property
    def stopped(self) -> bool: ...

    @property
    def lower_bound(self) -> float: ...

    @property
    def greedy(self) -> CapPrices | None: ...

    def say(self, msg: str) -> None: ...

    def offer(self, p: Priced | None, source: str) -> bool: ...

    def bound(self, value: float, source: str | None = None) -> None: ...

    def upper(self) -> float: ...

    def closed(self) -> bool: ...

    def done(self) -> bool: ...

    def workers(self) -> int: ...

    def infeasible(self, data: ScheduleData, fallback: str) -> Exception: ...


def relaxation_source(how: str) -> str:
    return (
        f"Lagrangian relaxation of the site cap and GPU inventories ({how}), each "
        "deployment's exact DP within its local limits as the subproblem"
    )


def lagrangian_bound(
    run: Bounding, data: ScheduleData, grids: list[DeploymentGrid], until: float, repair: Repair
) -> tuple[Relaxation, list[DeploymentGrid], ColumnGeneration | None]:
    """The Lagrangian bound and its multipliers, by the method the problem names, and
    column generation's state when it may go on later (``relaxation_resumed``).
    ``repair``: the volume algorithm's Lagrangian heuristic."""
    lgrids = local_grids(data, grids)
    oracle = DualOracle(data, lgrids, run.workers())
    deadline = run.budget.deadline(until, TimeBudget.RELAXATION_AT_LEAST)
    is_volume = run.opts.method == Method.VOLUME
    how = "volume algorithm" if is_volume else COLUMN_GENERATION
    source = relaxation_source(how)
    generation = None
    try:
        if is_volume:
            r = volume(run, data, oracle, deadline, source, repair)
        else:
            r, generation = column_generation(run, data, oracle, deadline, source)
    finally:
        oracle.close()
    if r.best.value_usd > cost_ceiling(data, lgrids):
        # some deployment has no path within what the site allows it, or the bound
        # outgrew what any schedule can cost: no schedule is feasible
        raise run.infeasible(data, "no deployment schedule fits the site's limits")
    run.stats["relaxation"] = {
        "method": how,
        "iterations": r.iterations,
        "seconds": round(r.seconds, 3),
        "first_bound_usd": r.first.value_usd,
        "bound_usd": r.best.value_usd,
        "stopped_below_bound": r.beaten,
        "volume_evaluations": 0 if generation is None else generation.volume_evaluations,
        "dual_evaluations_s": round(oracle.seconds, 3),
        "history": [[round(t, 3), round(v, 6)] for t, v in r.history],
    }
    return r, lgrids, generation


def resume_relaxation(
    run: Bounding,
    data: ScheduleData,
    lgrids: list[DeploymentGrid],
    generation: ColumnGeneration,
    until: float,
) -> None:
    """Column generation again, from the columns, master LP and best multipliers it
    stopped with, in the time the schedules' phases left unused: whole rounds (and the
    volume algorithm where they stall: :func:`ascend`) until the end of the limit,
    convergence, or the gap closed. Its bound is the best
    Lagrangian value seen, so it never falls; each better one is reported as found."""
    source = relaxation_source(COLUMN_GENERATION)
    before, rounds = generation.best_lb, generation.iterations
    evaluations = generation.volume_evaluations
    t0 = time.perf_counter()
    run.say(f"relaxation resumed: column generation from round {rounds}")

    def progress(msg: str) -> None:
        run.bound(generation.best_lb, source)
        run.say(msg)

    oracle = DualOracle(data, lgrids, run.workers())
    try:
        ascend(
            generation,
            oracle,
            run.budget.deadline(until),
            run.upper,
            run.opts.mip_gap,
            progress=progress,
            stop=run.done,
            bound_to_beat=lambda: run.lower_bound,
            whole=True,
            on_bound=lambda v: run.bound(v, source),
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
        "volume_evaluations": generation.volume_evaluations - evaluations,
        "dual_evaluations_s": round(oracle.seconds, 3),
    }


def volume(
    run: Bounding,
    data: ScheduleData,
    oracle: DualOracle,
    deadline: Deadline,
    source: str,
    repair: Repair,
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
        repair([p.schedule], deadline.within(every))  # never past the phase
        repairs["last"] = now
        repairs["spent"] += time.perf_counter() - t0

    return relax(oracle, deadline, run.upper, run.opts.mip_gap, on_point, stop=lambda: run.stopped)


def zero_prices(run: Bounding, data: ScheduleData, oracle: DualOracle) -> Relaxation:
    first = oracle(np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods)))
    run.bound(first.value_usd, UNCOUPLED_SOURCE)
    run.offer(price_schedule(data, first.schedule), "Lagrangian relaxation")
    return Relaxation(first, first, 0, 0.0, [(0.0, first.value_usd)])


def column_generation(
    run: Bounding,
    data: ScheduleData,
    oracle: DualOracle,
    deadline: Deadline,
    source: str,
) -> tuple[Relaxation, ColumnGeneration | None]:
    run.say("Lagrangian relaxation (column generation): one DP per deployment per round")
    zero = zero_prices(run, data, oracle)
    if run.closed():
        return zero, None
    first = zero.first
    warm = warm_point(run, data, oracle)
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
        upper_usd=run.upper,
        rel_gap=run.opts.mip_gap,
    )
    if dec.converged and (dec.lp_slack_periods or dec.lp_inventory_slack):
        raise infeasible_after(data, dec.lp_slack_periods, dec.lp_inventory_slack)
    assert dec.generation is not None
    best = dec.generation.best_point  # the dual function at the best multipliers
    run.bound(best.value_usd, source)
    run.offer(price_schedule(data, best.schedule), "Lagrangian relaxation")
    # the LP's heaviest column per deployment: a rounded Dantzig-Wolfe solution
    rounded = []
    for m in range(len(data.deployments)):
        own = [i for i, c in enumerate(dec.columns) if c.deployment == m]
        rounded.append(dec.columns[max(own, key=lambda i: dec.weights[i])])
    hints = [schedule_of_columns(data, rounded)]
    relaxation = Relaxation(
        best, first, dec.iterations, dec.seconds, dec.history, hints, support_of(dec), dec.beaten
    )
    return relaxation, dec.generation


def warm_point(run: Bounding, data: ScheduleData, oracle: DualOracle) -> Point | None:
    """The dual function at the periods' own cap prices (the multipliers of each
    over-cap period's one-period problem, transitions ignored, that the greedy
    baseline found), when it found any: a bound and a stability centre for column
    generation far closer than zero prices where the cap binds in many periods (its
    first LP duals are those of a master with few columns)."""
    prices = None if run.greedy is None else run.greedy.cap_prices
    if prices is None or not np.any(prices > 0) or run.done():
        return None
    point = oracle(prices.astype(float), np.zeros((len(data.pools), data.n_periods)))
    run.bound(point.value_usd, relaxation_source(COLUMN_GENERATION))
    run.offer(price_schedule(data, point.schedule), "Lagrangian relaxation")
    run.stats["warm_start"] = {"bound_usd": point.value_usd}
    return point


def support_of(dec: DecompositionResult) -> list[tuple[int, NDArray[np.int64]]]:
    """The master LP's support: (deployment, whole-horizon configurations) of each column
    the LP uses."""
    used = zip(dec.columns, dec.weights, strict=True)
    return [(c.deployment, c.config) for c, w in used if w > 1e-9]
