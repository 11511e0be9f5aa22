"""Solve a schedule problem and report it (SPEC 4 and the response of SPEC 6.1).

``Method.AUTO`` (default):

1. tables and checks (:mod:`formulation.data`); infeasibility that shows before any
   solve (a cap below the least the site can draw) is reported with its periods;
2. baselines (:mod:`formulation.baselines`); the better violation-free one is the
   first incumbent;
3. where one-period enumeration applies (:func:`formulation.period.enumeration_applies`:
   up to 6 deployments of up to 300 candidates, no GPU pool that can bind), the guided
   window solve (:func:`formulation.window.solve_guided`): exact DP outside the periods
   where the site constraints bind; inside them a Lagrangian decomposition (one-period
   knapsacks x per-deployment paths, :mod:`formulation.split`) gives the proven bound
   and, through a DP over its joint period states, the schedules; window MILPs of
   growing neighbourhoods use what time is left;
4. otherwise (:func:`_solve_decomposed`): Dantzig-Wolfe column generation
   (:mod:`formulation.decomposition`) for the bound, block-coordinate descent for
   schedules, Lagrangian pruning of choices that cannot beat the incumbent, and the
   window MILP over the survivors.

The reported gap is always measured against a bound that holds for the full problem;
restrictions used to find schedules never enter it.

``Method.COMPACT`` solves the compact MILP over every candidate in one HiGHS run
(exact, but only small instances finish).

Whatever happens, the returned schedule is never worse than a violation-free baseline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from formulation.baselines import greedy, greedy_ramped, static_peak
from formulation.data import ScheduleData, build_data
from formulation.decomposition import (
    decompose,
    lagrangian_keep,
    make_column,
    schedule_of_columns,
    uncoupled_bound,
)
from formulation.dp import deployment_grid
from formulation.evaluate import Priced, price_schedule
from formulation.heuristics import coordinate_descent
from formulation.milp import solve_compact
from formulation.period import enumeration_applies
from formulation.problem import Method, ScheduleProblem
from formulation.window import solve_guided, solve_windowed
from model.errors import PdwattError

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


class InfeasibleError(PdwattError):
    """No schedule meets every constraint; ``conflicts`` says where and why."""

    def __init__(self, message: str, conflicts: list[dict[str, Any]]) -> None:
        self.conflicts = conflicts
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:  # picklable across worker processes
        return (InfeasibleError, (str(self), self.conflicts))


@dataclass
class Outcome:
    status: str  # optimal | time_limit
    data: ScheduleData
    priced: Priced
    lower_bound_usd: float
    mip_gap: float
    solve_time_s: float
    baselines: dict[str, Priced]
    stats: dict[str, Any] = field(default_factory=dict)


def min_site_power_w(data: ScheduleData) -> np.ndarray:
    """Least site power per period: every deployment at its least-power allowed config
    serving nothing, every other GPU idle (ignoring transition limits)."""
    it = np.full(data.n_periods, data.idle_site_it_w)
    for d in data.deployments:
        ok = np.flatnonzero(d.allowed)
        it += float(np.min(d.bp_power_w[ok, 0] - data.idle_gpu_power_w * d.gpus[ok]))
    return it * data.pue


def check_feasible_before(data: ScheduleData) -> None:
    floor = min_site_power_w(data)
    bad = np.flatnonzero(data.power_cap_w < floor * (1 - 1e-9) - 1e-6)
    if bad.size:
        conflicts = [
            {
                "period": int(t),
                "constraint": "site_power_within_cap",
                "power_cap_w": float(data.power_cap_w[t]),
                "min_site_power_w": float(floor[t]),
                "reason": "the cap is below the least the site can draw (idle GPUs and "
                "deployments that must run, at PUE)",
            }
            for t in bad
        ]
        raise InfeasibleError(
            f"the power cap is below the site's least possible draw in {bad.size} "
            f"period(s), first {int(bad[0])}",
            conflicts,
        )
    for i, d in enumerate(data.deployments):
        if not d.off_allowed:
            need = int(np.min(d.gpus[1:])) if d.n_configs > 1 else 0
            g = int(data.pool_of[i])
            if need > data.pool_gpus[g]:
                raise InfeasibleError(
                    f"deployment {d.name} needs at least {need} GPUs of {data.pools[g]}",
                    [{"constraint": "gpus_within_inventory", "deployment": d.name}],
                )


def _infeasible_after(
    data: ScheduleData, cap_periods: list[int], inv: list[tuple[int, int]]
) -> InfeasibleError:
    conflicts: list[dict[str, Any]] = [
        {
            "period": t,
            "constraint": "site_power_within_cap",
            "power_cap_w": float(data.power_cap_w[t]),
            "reason": "no mix of reachable configurations fits under the cap: the transition "
            "limits from the initial state or from neighbouring periods prevent shedding enough",
        }
        for t in cap_periods
    ]
    conflicts += [
        {"period": t, "constraint": "gpus_within_inventory", "pool": data.pools[g]} for g, t in inv
    ]
    first = cap_periods[0] if cap_periods else inv[0][1]
    return InfeasibleError(
        f"no schedule meets the constraints (even its LP relaxation), first in period {first}",
        conflicts,
    )


def diagnose_infeasible(data: ScheduleData, fallback: str) -> InfeasibleError:
    """Name the periods where even the LP relaxation cannot meet the site constraints
    (transition limits from the initial state included); else a plain explanation."""
    dec = decompose(data, 10.0)
    if dec.converged and (dec.lp_slack_periods or dec.lp_inventory_slack):
        return _infeasible_after(data, dec.lp_slack_periods, dec.lp_inventory_slack)
    return InfeasibleError(
        fallback,
        [
            {
                "constraint": "integrality",
                "reason": "the relaxation is feasible but no integer schedule was found; "
                "raise solver.time_limit_s or relax transitions.max_instance_changes_per_period",
            }
        ],
    )


def solve_problem(problem: ScheduleProblem, progress: Progress | None = None) -> Outcome:
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    opts = problem.solver
    data = build_data(problem)
    check_feasible_before(data)
    grids = [deployment_grid(data, d) for d in data.deployments]
    say("baselines: static peak, greedy and greedy within transition limits")
    base = {
        "static_peak": static_peak(data),
        "greedy": greedy(data, opts.time_limit_s * 0.2, grids),
        "greedy_ramped": greedy_ramped(data, grids),
    }
    clean = [p for p in base.values() if p.violation_free]
    incumbent = min(clean, key=lambda p: p.objective_usd) if clean else None
    stats: dict[str, Any] = {"tables_s": 0.0}

    def left() -> float:
        return opts.time_limit_s - (time.perf_counter() - t0)

    # never report a bound below the sum of the deployments' uncapped optima
    stats["uncoupled_bound_usd"] = uncoupled_bound(data, grids)

    if opts.method == Method.COMPACT:
        say("compact MILP over every candidate")
        r = solve_compact(
            data,
            left(),
            opts.mip_gap,
            opts.threads,
            start=incumbent.schedule if incumbent else None,
        )
        if r.status == "infeasible":
            raise diagnose_infeasible(data, "HiGHS proved the problem infeasible")
        best = price_schedule(data, r.schedule) if r.schedule is not None else incumbent
        if best is None:
            raise diagnose_infeasible(data, "no feasible schedule found within the time limit")
        if incumbent is not None and incumbent.objective_usd < best.objective_usd:
            best = incumbent
        lb = r.bound_usd if r.bound_usd is not None else -np.inf
        stats.update(binaries=r.n_binaries, milp_build_s=r.build_s, milp_solve_s=r.solve_s)
        return _finish(data, best, lb, base, t0, opts.mip_gap, stats)

    if enumeration_applies(data):
        g = solve_guided(
            data,
            grids,
            max(left(), 0.5),
            opts.mip_gap,
            opts.threads,
            incumbent,
            say,
            hints=[p.schedule for p in base.values()],
        )
        stats["windows"] = g.stats.get("windows", [])
        if "split_bound" in g.stats:
            stats["split_bound"] = g.stats["split_bound"]
        stats["lower_bound"] = (
            "Lagrangian decomposition of the coupled window (one-period knapsacks x "
            "per-deployment paths), exact DP outside it"
        )
        if "infeasible_period" in g.stats:
            t = int(g.stats["infeasible_period"])
            raise _infeasible_after(data, [t], [])
        best = g.priced if g.priced is not None else incumbent
        if best is None:
            raise diagnose_infeasible(data, "no feasible schedule found within the time limit")
        if incumbent is not None and incumbent.objective_usd < best.objective_usd:
            best = incumbent
        return _finish(data, best, g.lower_bound_usd, base, t0, opts.mip_gap, stats)
    return _solve_decomposed(data, grids, base, incumbent, clean, t0, left, say, stats)


def _solve_decomposed(
    data: ScheduleData,
    grids: list[Any],
    base: dict[str, Priced],
    incumbent: Priced | None,
    clean: list[Priced],
    t0: float,
    left: Callable[[], float],
    say: Progress,
    stats: dict[str, Any],
) -> Outcome:
    """When a GPU pool can bind: Dantzig-Wolfe bound, heuristics, pruned window MILP."""
    opts = data.problem.solver
    say("decomposition: pricing deployments by dynamic programming")
    extra = []
    for p in clean:
        for m in range(len(data.deployments)):
            extra.append(make_column(data, m, p.schedule.config[m], p.schedule.served_rps[m]))
    dec = decompose(data, max(left() * 0.4, 0.5), extra_columns=extra, progress=say)
    stats.update(
        decomposition_rounds=dec.iterations,
        decomposition_s=round(dec.seconds, 3),
        columns=len(dec.columns),
        lp_bound_usd=dec.lp_value_usd,
        lower_bound="Dantzig-Wolfe (Lagrangian) bound",
    )
    if dec.converged and (dec.lp_slack_periods or dec.lp_inventory_slack):
        raise _infeasible_after(data, dec.lp_slack_periods, dec.lp_inventory_slack)
    lb = dec.lower_bound_usd
    starts = []
    rounded = []
    for m in range(len(data.deployments)):
        own = [i for i, c in enumerate(dec.columns) if c.deployment == m]
        rounded.append(dec.columns[max(own, key=lambda i: dec.weights[i])])
    starts.append(schedule_of_columns(data, rounded))
    starts += [p.schedule for p in base.values()]
    best = incumbent
    say("primal heuristic: exact re-optimisation of each deployment given the others")
    for st in starts:
        cand = coordinate_descent(data, grids, st, time_limit_s=max(left() * 0.1, 0.2))
        if cand.violation_free and (best is None or cand.objective_usd < best.objective_usd):
            best = cand
    stats["heuristic_usd"] = None if best is None else best.objective_usd
    if best is None:
        raise InfeasibleError("no feasible schedule found within the time limit", [])
    gap = (best.objective_usd - lb) / max(abs(best.objective_usd), 1e-9)
    if gap > opts.mip_gap and left() > 0.5:
        allowed, kept, total = lagrangian_keep(data, dec, best.objective_usd)
        stats.update(choices_kept=kept, choices_total=total)
        say(f"Lagrangian pruning kept {kept} of {total} (deployment, period, config) choices")
        # keep a margin for building the window model and pricing the result, which
        # HiGHS's own time limit does not cover
        w = solve_windowed(
            data, grids, max(0.85 * left(), 0.5), opts.mip_gap, opts.threads, best, allowed, say
        )
        stats["windows"] = w.stats.get("windows", [])
        if (
            w.priced is not None
            and w.priced.violation_free
            and w.priced.objective_usd < best.objective_usd
        ):
            best = w.priced
        if np.isfinite(w.lower_bound_usd):
            # the window problem is a relaxation of the problem over the kept choices,
            # whose optimum is the full optimum unless the incumbent is already optimal
            lb = max(lb, min(best.objective_usd, w.lower_bound_usd))
    return _finish(data, best, lb, base, t0, opts.mip_gap, stats)


def _finish(
    data: ScheduleData,
    best: Priced,
    lb: float,
    base: dict[str, Priced],
    t0: float,
    target: float,
    stats: dict[str, Any],
) -> Outcome:
    lb = max(lb, stats.get("uncoupled_bound_usd", -np.inf))
    gap = max(0.0, (best.objective_usd - lb) / max(abs(best.objective_usd), 1e-9))
    status = "optimal" if gap <= target + 1e-12 else "time_limit"
    return Outcome(status, data, best, lb, gap, time.perf_counter() - t0, base, stats)


def solve(problem: ScheduleProblem, progress: Progress | None = None) -> Outcome:
    return solve_problem(problem, progress)
