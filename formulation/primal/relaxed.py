"""The schedules a solve draws from its relaxation: the compact MILP over the master
LP's support (``lp_support``, ``lp_support_resumed``: :func:`lp_support`), the integer
program over column generation's columns (:func:`column_milp`, in the same phases) and
exact per-deployment re-optimisation from the relaxation's schedules, the Lagrangian
heuristic (``repair``: :func:`repair`).

They read and raise the solve's state through :class:`formulation.primal.search.Search`,
which :class:`formulation.run.Run` is. The relaxation itself is
:mod:`formulation.bounds.relaxation`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from formulation.bounds.decomposition import ColumnGeneration, integer_columns, make_column
from formulation.bounds.lagrange import corridor
from formulation.budget import Deadline, TimeBudget
from formulation.data import ScheduleData
from formulation.evaluate import Schedule, price_schedule
from formulation.milp.compact import free_choices
from formulation.primal.heuristics import coordinate_descent
from formulation.primal.search import Search, restricted_milp
from formulation.subproblems.dp import DeploymentGrid


def repair(
    run: Search,
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


def column_milp(
    run: Search, data: ScheduleData, generation: ColumnGeneration | None, until: float, key: str
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


def lp_support(
    run: Search,
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
    if not run.fits(choices, until, free=free_choices(allowed)):
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
