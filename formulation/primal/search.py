"""The local search of a solve's later phases, around its incumbent: the exact window
where the site binds (``exact_window``: :func:`exact_window`) and the corridor MILPs
(``neighbourhoods``, ``neighbourhoods_resumed``: :func:`search_corridors`, from where
the :class:`Corridors` state says the last one stopped).

They read and raise the solve's state through :class:`Search` (the incumbent, the
bound, the time left), which :class:`formulation.run.Run` is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from formulation.bounds.lagrange import Relaxation, corridor, keep_choices
from formulation.bounds.relaxation import Bounding
from formulation.budget import GUIDED_AT_LEAST_S, NEIGHBOURHOOD_AT_LEAST_S, TimeBudget
from formulation.data import ScheduleData
from formulation.evaluate import Priced, price_schedule
from formulation.infeasible import infeasible_after
from formulation.milp.compact import Allowed, MilpResult, free_choices, solve_compact
from formulation.primal.window import (
    GuidedStart,
    binding_periods,
    solve_guided,
    solve_windowed,
    window_choices,
    window_span,
)
from formulation.subproblems.dp import DeploymentGrid

GUIDED_SOURCE = (
    "the window where the site binds, guided by one-period optima (their Lagrangian "
    "decomposition against per-deployment paths, or the window MILP over every "
    "candidate), exact DPs outside it"
)


class Search(Bounding, Protocol):
    """What the search needs of the solve's state (:class:`formulation.run.Run`): what
    the relaxation reads of it, and whether a MILP fits."""

    def fits(
        self, choices: int, until: float, root: bool = True, free: int | None = None
    ) -> bool: ...


def restricted_milp(
    run: Search, data: ScheduleData, allowed: Allowed, until: float, label: str
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


def search_corridors(
    run: Search,
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
    improving, or is too large for the time left, over time windows where the cap binds
    (the incumbent fixed outside), one after another, at the radius the whole horizon
    stopped at, the radius growing after a pass without improvement. A window too
    large for the time left is split in two halves, down to one period: on hundreds of
    deployments a window of twelve periods is refused where its halves are not."""
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
        if not run.fits(choices, until, free=free_choices(allowed)):
            where = "all periods" if focus is None else f"periods {min(focus)}..{max(focus)}"
            st.log.append(
                {
                    "radius": st.radius,
                    "periods": None if focus is None else [min(focus), max(focus)],
                    "choices": choices,
                    "status": "not built: no time",
                }
            )
            run.say(f"corridor MILP not built: radius {st.radius}, {where}, {choices:,} choices")
            if focus is None:
                _to_windows(st)  # too large over the whole horizon: windows instead
                continue
            if len(focus) > 1:
                assert st.windows is not None
                st.windows[:0] = halves(focus)
                continue
            break
        where = "all periods" if focus is None else f"periods {min(focus)}..{max(focus)}"
        run.say(f"corridor MILP: radius {st.radius}, {where}, {choices:,} choices")
        r, improved = restricted_milp(
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
                _to_windows(st)  # the whole horizon is too hard: windows from here on


def _to_windows(st: Corridors) -> None:
    """The search turns from the whole horizon to windows, their first pass at the
    radius the whole horizon reached (no pass of windows has gone without gain yet)."""
    st.windows = []
    st.passed_without_gain = False


def halves(window: set[int]) -> list[set[int]]:
    """A window of consecutive periods split into its two halves, earlier first."""
    ts = sorted(window)
    mid = (len(ts) + 1) // 2
    return [set(ts[:mid]), set(ts[mid:])]


def exact_window(
    run: Search,
    data: ScheduleData,
    grids: list[DeploymentGrid],
    lgrids: list[DeploymentGrid],
    relaxation: Relaxation,
    base: dict[str, Priced],
    guided: bool,
    start: GuidedStart | None,
    until: float,
) -> None:
    """The window MILP where the site binds, until fraction ``until`` of the limit:
    guided by the one-period optima (from ``start``, the bound taken before the
    relaxation, when there is one) with ``guided``, its bounds and schedules reported as
    found; else over the choices Lagrangian pruning keeps, when its model fits in the
    time left, exact DPs outside it."""
    opts = run.opts
    if run.best is None:
        return
    if guided:
        label = "window MILP guided by one-period optima"
        g = solve_guided(
            data,
            grids,
            run.budget.deadline(until).at_least(GUIDED_AT_LEAST_S),
            opts.mip_gap,
            opts.threads,
            run.best,
            lambda _msg: None,  # its findings reach the run below, as they come
            hints=[p.schedule for p in base.values()] + [relaxation.best.schedule],
            start=start,
            on_bound=lambda v: run.bound(v, GUIDED_SOURCE),
            on_schedule=lambda p: run.offer(p, label),
            workers=run.workers(),
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
    if not run.fits(unpruned // 10, until, root=False):
        run.stats["exact_window"] = f"skipped: {unpruned:,} choices before pruning"
        return
    allowed, kept, total = keep_choices(data, lgrids, relaxation.best, run.upper())
    run.stats.update(choices_kept=kept, choices_total=total)
    run.say(f"Lagrangian pruning kept {kept:,} of {total:,} (deployment, period, config) choices")
    need = window_choices(data, span, allowed)
    if not run.fits(need, until, root=False):
        run.stats["exact_window"] = f"skipped: {need:,} choices do not fit in the time left"
        return
    w = solve_windowed(
        data,
        grids,
        run.budget.deadline(until),
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
