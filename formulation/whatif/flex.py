"""Site flexibility curve: the best served demand as a function of the site power cap.

For a period, the site-level capacity-power Pareto front across deployments: at each
cap, the configurations and served loads that minimise the period's cost (energy and
carbon of the site draw plus the value of unserved demand, SPEC 4) within that cap.
An energy-management system bids this curve into a DR programme.

This is a **one-period** flexibility: transitions (their costs, limits and the state
of neighbouring periods) are ignored, as an EMS bids it. Each cap is solved exactly
by Pareto enumeration (:func:`formulation.subproblems.period.solve_period`); when a GPU pool can
bind, by the compact MILP on the period alone (:func:`formulation.milp.compact.solve_compact`
on :func:`formulation.primal.baselines.periods_alone`).

The request's ``solver.time_limit_s`` bounds the whole curve (one
:class:`~formulation.budget.Deadline` from when the request is read): each MILP gets an
equal share of the time left over the evaluations still to run, and at least
:data:`~formulation.budget.FLEX_MILP_AT_LEAST_S`, never past the deadline. Once the
deadline has passed no further cap is evaluated: the answer's ``status`` is then
``time_limit`` (else ``complete``), each period lists the caps left out in
``unevaluated_caps_w`` and the answer the periods left out in ``unevaluated_periods``
(the first period always starts, so an answer has a curve whenever its unconstrained
end is found in time); a cap whose MILP found no plan in its time is listed there too,
never as infeasible. ``solve_time_s`` is the curve's time from the request read.

Caps run from the least site draw (:func:`formulation.infeasible.min_site_power_w`: every
deployment at its least-power allowed configuration serving nothing; no plan exists
below it) up to the unconstrained draw (the period's optimum without a cap, i.e. each
deployment's own optimum when no pool binds), at ``n_points`` evenly spaced levels
that include both end points exactly.

A plan that fits a lower cap fits every higher one, so the curve keeps, at each cap,
the better of its own optimum and the previous point's plan (ties go to the plan that
serves more value): with exact solves this changes nothing but ties, and it makes the
period cost non-increasing and the served value non-decreasing along the curve.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.budget import FLEX_MILP_AT_LEAST_S, Deadline
from formulation.data import ScheduleData, build_data
from formulation.infeasible import min_site_power_w
from formulation.milp.compact import solve_compact
from formulation.primal.baselines import periods_alone
from formulation.problem import Host, ScheduleProblem, problem_from_dict
from formulation.request import ScheduleRequest
from formulation.subproblems.period import pool_can_bind, solve_period
from formulation.whatif.dr import request_errors
from model.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

MAX_POINTS = 1000
#: sees the curve's progress (``phase``, ``done``, ``total``, ``elapsed_s``) after each
#: evaluation; returning True stops it
Monitor = Callable[[dict[str, Any]], bool]
TRANSITIONS_NOTE = (
    "ignored: a one-period flexibility (no transition costs or limits, no neighbouring "
    "periods), as an energy-management system bids it"
)


@dataclasses.dataclass
class _Plan:
    config: IntArray  # (M,)
    served: FloatArray  # (M,)
    cost: float  # period cost: energy + carbon + unserved value
    value: float  # value of served demand through the period
    gap: float | None  # MILP gap, None when exact by enumeration


def _ceiling_w(data: ScheduleData) -> float:
    """More than any site draw: every deployment at its most power-hungry configuration."""
    it = data.idle_site_it_w
    for d in data.deployments:
        ok = np.flatnonzero(d.allowed)
        top = np.nanmax(d.bp_power_w[ok], axis=1) - data.idle_gpu_power_w * d.gpus[ok]
        it += max(float(top.max()), 0.0)
    return 2.0 * data.pue * it + 1.0


def _evaluate(data: ScheduleData, t: int, ks: IntArray, served: FloatArray) -> dict[str, float]:
    it = 0.0
    used = np.zeros(len(data.pools), dtype=np.int64)
    unserved_usd = 0.0
    value = 0.0
    for m, d in enumerate(data.deployments):
        k = int(ks[m])
        it += float(d.power_w(k, float(served[m]))[0])
        data.add_pool_use(used, m, k)
        u = float(d.unserved_usd_per_rps[t])
        unserved_usd += max(float(d.demand_rps[t]) - float(served[m]), 0.0) * u
        value += float(served[m]) * u
    it += data.idle_gpu_power_w * float(np.maximum(data.pool_gpus - used, 0).sum())
    energy = float(data.cost_usd_per_w[t]) * it
    return {
        "site_power_w": data.pue * it,
        "energy_usd": energy,
        "unserved_usd": unserved_usd,
        "value_usd": value,
    }


class _Unanswered(Exception):
    """A cap's MILP ended at its deadline without a plan: not proven infeasible, only
    not evaluated in the time the request had left."""


@dataclasses.dataclass
class _Clock:
    """The request's one deadline, shared by the curve's evaluations still to run, and
    the caller's monitor, told of each one done."""

    deadline: Deadline
    left: int  # evaluations still to run (per period: its unconstrained end, the caps below)
    started: float  # time.monotonic() when the request was read
    monitor: Monitor | None = None
    total: int = 0
    stopped: bool = False  # the monitor asked to stop

    def expired(self) -> bool:
        return self.stopped or self.deadline.expired()

    def skip(self, evaluations: int) -> None:
        """``evaluations`` will not run (their share goes to the others)."""
        self.left = max(self.left - evaluations, 0)
        self.tell()

    def tell(self, period: int | None = None) -> None:
        """Tell the monitor how far the curve is: evaluations done (run or left out) of
        the total, and the time since the request was read."""
        if self.monitor is None or self.stopped:
            return
        state = {
            "phase": "flexibility" if period is None else f"flexibility: period {period}",
            "done": self.total - self.left,
            "total": self.total,
            "elapsed_s": round(self.elapsed(), 3),
        }
        if self.monitor(state):
            self.stopped = True

    def next(self) -> Deadline:
        """The next evaluation's deadline: an equal share of the time left over the
        evaluations still to run, at least ``FLEX_MILP_AT_LEAST_S``, never past the
        request's (only a MILP uses it: an enumeration is exact and quick). It counts
        as done once asked for (the monitor is told at the next evaluation)."""
        share = self.deadline.fraction(1.0 / max(self.left, 1)).at_least(FLEX_MILP_AT_LEAST_S)
        self.left = max(self.left - 1, 0)
        return min(share, self.deadline)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _solve_at(data: ScheduleData, t: int, cap_w: float, deadline: Deadline) -> _Plan | None:
    """The period's optimum under ``cap_w``; None when no plan fits it, and
    :class:`_Unanswered` when its MILP found none by ``deadline``."""
    caps = data.power_cap_w.copy()
    caps[t] = cap_w * (1 + 1e-9) + 1e-6  # the end points exactly, despite rounding
    capped = dataclasses.replace(data, power_cap_w=caps)
    gap: float | None = None
    if not pool_can_bind(capped, t):
        sol = solve_period(capped, t)
        if sol is None:
            return None
        ks, served = sol.config, sol.served
    else:
        one = periods_alone(capped, np.array([t], dtype=np.int64))
        r = solve_compact(one, deadline, 1e-6)
        if r.schedule is None:
            if r.status == "infeasible":
                return None
            raise _Unanswered()
        ks, served = r.schedule.config[:, 0], r.schedule.served_rps[:, 0]
        gap = r.mip_gap
    ev = _evaluate(data, t, ks, served)
    return _Plan(
        ks.copy(), served.copy(), ev["energy_usd"] + ev["unserved_usd"], ev["value_usd"], gap
    )


def _point(data: ScheduleData, t: int, cap_w: float, plan: _Plan) -> dict[str, Any]:
    ev = _evaluate(data, t, plan.config, plan.served)
    dt = data.period_hours
    out: dict[str, Any] = {
        "cap_w": float(cap_w),
        "site_power_w": ev["site_power_w"],
        "served_rps": {d.name: float(plan.served[m]) for m, d in enumerate(data.deployments)},
        "total_served_rps": float(plan.served.sum()),
        "served_value_usd_per_h": ev["value_usd"] / dt,
        "energy_cost_usd_per_h": ev["energy_usd"] / dt,
        "unserved_value_usd_per_h": ev["unserved_usd"] / dt,
        "period_cost_usd": ev["energy_usd"] + ev["unserved_usd"],
        "configurations": {
            d.name: {"n_p": int(d.n_p[plan.config[m]]), "n_d": int(d.n_d[plan.config[m]])}
            for m, d in enumerate(data.deployments)
        },
    }
    if plan.gap is not None:
        out["mip_gap"] = float(plan.gap)
    return out


def period_curve(
    data: ScheduleData, t: int, n_points: int, floor_w: float, clock: _Clock
) -> dict[str, Any] | None:
    """The flexibility curve of period ``t`` (see the module docstring), its caps
    evaluated while ``clock``'s deadline has not passed (those left are listed in
    ``unevaluated_caps_w``); None when not even its unconstrained end was found in
    time."""
    try:
        top = _solve_at(data, t, _ceiling_w(data), clock.next())
    except _Unanswered:
        clock.skip(n_points - 1)
        return None
    if top is None:
        raise InputError("request", f"no plan fits the site in period {t} even without a cap")
    hi = _evaluate(data, t, top.config, top.served)["site_power_w"]
    hi = max(hi, floor_w)
    caps = np.unique(np.linspace(floor_w, hi, n_points))
    caps[-1] = hi
    clock.skip(n_points - len(caps))  # equal caps, one evaluation
    points: list[dict[str, Any]] = []
    infeasible: list[float] = []
    unevaluated: list[float] = []
    prev: _Plan | None = None
    for cap in caps:
        if cap == hi:
            plan: _Plan | None = top
        elif clock.expired():
            unevaluated.append(float(cap))
            clock.skip(1)
            continue
        else:
            try:
                plan = _solve_at(data, t, float(cap), clock.next())
            except _Unanswered:
                unevaluated.append(float(cap))
                continue
        clock.tell(t)
        if plan is None:
            infeasible.append(float(cap))
            continue
        if prev is not None:
            tol = 1e-9 * max(abs(plan.cost), 1.0)
            if prev.cost < plan.cost - tol or (
                abs(prev.cost - plan.cost) <= tol and prev.value > plan.value
            ):
                plan = prev
        prev = plan
        points.append(_point(data, t, float(cap), plan))
    out: dict[str, Any] = {
        "period": t,
        "start_minute": t * data.problem.period_minutes,
        "min_site_power_w": float(floor_w),
        "unconstrained_power_w": float(hi),
        "request_cap_w": float(data.power_cap_w[t]),
        "method": "milp" if pool_can_bind(data, t) else "pareto",
        "points": points,
    }
    if infeasible:
        out["infeasible_caps_w"] = infeasible
    if unevaluated:
        out["unevaluated_caps_w"] = unevaluated
    return out


def flexibility_curve(
    body: ScheduleProblem | ScheduleRequest | dict[str, Any],
    period: int | None = None,
    n_points: int = 25,
    request_field: str = "",
    host: Host | None = None,
    monitor: Monitor | None = None,
) -> dict[str, Any]:
    """Flexibility curve of one period (or of each period when ``period`` is None).

    ``request_field`` prefixes the fields named by errors of the schedule request
    (``"request."`` in the HTTP body). ``monitor`` is told, as the curve goes, its
    ``phase`` (the period), the evaluations ``done`` of ``total`` and ``elapsed_s``;
    returning True stops the curve as its deadline would (the caps left are listed
    in ``unevaluated_caps_w``).
    """
    with request_errors(request_field):
        problem = problem_from_dict(body, host)
        # one deadline for the whole curve, from the request's time limit
        started = time.monotonic()
        deadline = Deadline(started + problem.solver.time_limit_s)
        data = build_data(problem)
    n = data.n_periods
    if period is not None and (
        isinstance(period, bool) or not isinstance(period, int) or not 0 <= period < n
    ):
        raise InputError(
            "period", f"must be an integer in 0..{n - 1} (the horizon), got {period!r}"
        )
    if (
        isinstance(n_points, bool)
        or not isinstance(n_points, int)
        or not 2 <= n_points <= MAX_POINTS
    ):
        raise InputError("points", f"must be an integer in 2..{MAX_POINTS}, got {n_points!r}")
    periods = [period] if period is not None else list(range(n))
    floor = min_site_power_w(data)
    # per period: its unconstrained end, then the caps below it
    total = len(periods) * n_points
    clock = _Clock(deadline, total, started, monitor, total)
    clock.tell()
    curves: list[dict[str, Any]] = []
    unevaluated: list[int] = []
    for i, t in enumerate(periods):
        # the first period always starts (its unconstrained end at least), so that an
        # answer has a curve whenever one is found in time; the others only in time
        if i > 0 and clock.expired():
            unevaluated.append(t)
            clock.skip(n_points)
            continue
        curve = period_curve(data, t, n_points, float(floor[t]), clock)
        if curve is None:
            unevaluated.append(t)
        else:
            curves.append(curve)
    clock.left = 0
    clock.tell()
    partial = bool(unevaluated) or any("unevaluated_caps_w" in c for c in curves)
    out: dict[str, Any] = {
        "deployments": [d.name for d in data.deployments],
        "period_minutes": float(problem.period_minutes),
        "transitions": TRANSITIONS_NOTE,
        "status": "time_limit" if partial else "complete",
        "solve_time_s": round(clock.elapsed(), 3),
        "periods": curves,
    }
    if unevaluated:
        out["unevaluated_periods"] = unevaluated
    return out
