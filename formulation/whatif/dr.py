"""Demand-response what-if: the site's answer to "drop to X kW from 16:00 to 19:00".

:func:`demand_response` solves the schedule request as given (the *baseline*) and the
same request with the event's cap applied in the event window (the *response*: the
smaller of the request's cap and the event's cap in each window period), and reports
the power shed, the demand lost per deployment, the cost of responding and the
recovery after the event.

The event (JSON): the window, as ``start_period``/``end_period`` (end exclusive) or
``start_minute``/``end_minute`` (every period overlapping ``[start, end)``), and
exactly one of

* ``cap_w``: a new absolute site cap (W, after PUE);
* ``reduction_w``: W below the **baseline schedule's site power** in each window
  period (what a DR programme measures: shed against the customer's baseline load),
  never below 0;
* ``reduction_pct``: percent of the **request's cap** in each window period.

and optionally a ``name``.

Choices where the issue is silent:

* One time limit for the request: the schedule request's ``solver.time_limit_s``
  bounds both solves together (one :class:`~formulation.budget.Deadline`). The
  baseline ends by :data:`~formulation.budget.DR_BASELINE_SHARE` of it (half), and the
  response has what is left: the other half at least, less what the baseline's
  pricing took past its end, and more when the baseline was proven optimal sooner.
  Each solve's ``solve_time_s`` reports its part.
* The event is known when the plan is made: the response re-plans the whole horizon,
  so it may prepare before the window (ramp down early when transition limits are
  tight) and recovers after it. ``preparation`` and ``recovery`` report both.
* The response is a restriction of the baseline (caps only go down), so the better of
  the two schedules found is used for each problem wherever it is feasible: the
  baseline is never reported dearer than the response (``cost_delta_usd >= 0`` up to
  rounding), and the response's lower bound is at least the baseline's. For a
  ``reduction_w`` event the baseline is kept as first solved, since the event's caps
  are measured against it.
* An infeasible event is one the response solve proves infeasible. It is answered
  with :class:`~formulation.infeasible.InfeasibleError` whose conflicts give, per window
  period whose cap is too low, ``deepest_feasible_cap_w``: the least site power the
  site can reach in that period when it runs the baseline plan up to the event and
  then ramps every deployment down as fast as its transition limit allows (see
  :func:`deepest_feasible_caps`). That cap is reachable without notice; with
  preparation before the window the site may go lower.
* ``recovery.periods`` counts the periods after the window before the response runs
  the baseline's configurations again (0: already in the first period after it);
  ``instance_starts``/``stops`` are the response's transitions from the window's end
  up to and including that period. ``rejoined`` is false when the plans still differ
  at the horizon's end (or the window ends with the horizon).
* ``demand_lost`` and ``power_shed_w`` are over the whole horizon (response minus
  baseline), so load shifted to before or after the window shows up too.
* ``settings_only`` gives, per window period, what GPU settings alone shed when the
  event comes without notice: the baseline's instances kept, the least-cost settings
  and served loads within the event's cap applied at once
  (:func:`~formulation.whatif.shed.fast_response`), the demand that loses and what the
  period costs more; beside ``power_shed_w``, what instance changes (planned with
  notice) shed.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from formulation.budget import DR_BASELINE_SHARE, Deadline
from formulation.data import ScheduleData, build_data
from formulation.evaluate import FEAS_RTOL, Priced, price_schedule
from formulation.infeasible import InfeasibleError
from formulation.problem import Host, ScheduleProblem, problem_from_dict
from formulation.request import ScheduleRequest
from formulation.results import response
from formulation.shed_figures import cost_delta, power_shed
from formulation.whatif.shed import fast_response
from model.errors import InputError

if TYPE_CHECKING:  # the solve loads Pyomo and HiGHS, which the API's schemas do not need
    from formulation.solve import Outcome

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Progress = Callable[[str], None]

CAP_FORMS = ("cap_w", "reduction_w", "reduction_pct")
#: The event of ``pdwatt dr --demo``: on top of the demo's own evening event.
DEMO_EVENT: dict[str, Any] = {
    "name": "20% cut 12:00-14:00",
    "start_minute": 720,
    "end_minute": 840,
    "reduction_pct": 20,
}
EVENT_KEYS = {"name", "start_period", "end_period", "start_minute", "end_minute", *CAP_FORMS}


@dataclass(frozen=True)
class Event:
    start: int  # first period of the window
    end: int  # one past the last
    kind: str  # cap_w | reduction_w | reduction_pct
    value: float
    name: str | None = None
    #: the window in minutes as asked, when it was given in minutes (it is planned over
    #: the whole periods it touches)
    asked_minutes: tuple[float, float] | None = None

    def record(self, period_minutes: float) -> dict[str, Any]:
        """The window as planned, and as asked where that was not on period boundaries."""
        out: dict[str, Any] = {
            "start_period": self.start,
            "end_period": self.end,
            "start_minute": self.start * period_minutes,
            "end_minute": self.end * period_minutes,
        }
        planned = (out["start_minute"], out["end_minute"])
        if self.asked_minutes is not None and self.asked_minutes != planned:
            out["asked_minutes"] = list(self.asked_minutes)
            out["window_note"] = (
                f"minutes {self.asked_minutes[0]:g}-{self.asked_minutes[1]:g} widened to the "
                f"whole periods they touch, {planned[0]:g}-{planned[1]:g}"
            )
        return out


@contextlib.contextmanager
def request_errors(prefix: str) -> Iterator[None]:
    """Re-raise input errors of the schedule request with ``prefix`` on their field
    (``request.`` when the request is nested in an HTTP body)."""
    try:
        yield
    except InputError as e:
        if not prefix:
            raise
        err = copy.copy(e)
        err.field = f"{prefix}{e.field}"
        err.args = (f"{err.field}: {e.reason}",)
        raise err from e


def _given(ev: Mapping[str, Any], key: str) -> bool:
    return ev.get(key) is not None


def _number(field: str, v: Any, lo: float = 0.0, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InputError(field, f"must be a finite number, got {v!r}")
    if v < lo:
        raise InputError(field, f"must be >= {lo:g}, got {v:g}")
    if hi is not None and v > hi:
        raise InputError(field, f"must be <= {hi:g}, got {v:g}")
    return float(v)


def parse_event(event: Any, problem: ScheduleProblem) -> Event:
    """Validate ``event`` against the request's horizon; errors name ``event.<field>``."""
    if not isinstance(event, Mapping):
        raise InputError("event", f"must be an object, got {type(event).__name__}")
    extra = sorted(set(event) - EVENT_KEYS)
    if extra:
        raise InputError(
            f"event.{extra[0]}", f"unknown field; known: {', '.join(sorted(EVENT_KEYS))}"
        )
    n = problem.n_periods
    pm = float(problem.period_minutes)
    by_period = _given(event, "start_period") or _given(event, "end_period")
    by_minute = _given(event, "start_minute") or _given(event, "end_minute")
    if by_period and by_minute:
        raise InputError("event.start_minute", "give the window in periods or in minutes, not both")
    if by_period:
        for key in ("start_period", "end_period"):
            v = event.get(key)
            if v is None:
                raise InputError(f"event.{key}", "is required with the window in periods")
            if isinstance(v, bool) or not isinstance(v, int):
                raise InputError(f"event.{key}", f"must be an integer, got {v!r}")
        start, end = int(event["start_period"]), int(event["end_period"])
        if not 0 <= start < n:
            raise InputError(
                "event.start_period", f"must be in 0..{n - 1} (the horizon), got {start}"
            )
        if end <= start:
            raise InputError("event.end_period", f"must be > start_period ({start}), got {end}")
        if end > n:
            raise InputError(
                "event.end_period", f"must be <= {n} (the horizon's periods; exclusive), got {end}"
            )
    elif by_minute:
        horizon = n * pm
        for key in ("start_minute", "end_minute"):
            if event.get(key) is None:
                raise InputError(f"event.{key}", "is required with the window in minutes")
        s_min = _number("event.start_minute", event["start_minute"], 0.0)
        e_min = _number("event.end_minute", event["end_minute"], 0.0)
        if s_min >= horizon:
            raise InputError(
                "event.start_minute", f"must be < {horizon:g} (the horizon's end), got {s_min:g}"
            )
        if e_min <= s_min:
            raise InputError("event.end_minute", f"must be > start_minute ({s_min:g})")
        if e_min > horizon * (1 + 1e-12):
            raise InputError(
                "event.end_minute", f"must be <= {horizon:g} (the horizon's end), got {e_min:g}"
            )
        start = int(math.floor(s_min / pm + 1e-9))
        end = min(n, max(start + 1, int(math.ceil(e_min / pm - 1e-9))))
        asked = (s_min, e_min)
    else:
        raise InputError(
            "event.start_period",
            "the window is required: start_period/end_period or start_minute/end_minute",
        )
    forms = [k for k in CAP_FORMS if _given(event, k)]
    if not forms:
        raise InputError("event.cap_w", "give exactly one of cap_w, reduction_w, reduction_pct")
    if len(forms) > 1:
        raise InputError(
            f"event.{forms[1]}",
            f"give only one of cap_w, reduction_w, reduction_pct (got {' and '.join(forms)})",
        )
    kind = forms[0]
    value = _number(f"event.{kind}", event[kind], 0.0, 100.0 if kind == "reduction_pct" else None)
    name = event.get("name")
    if name is not None and not isinstance(name, str):
        raise InputError("event.name", "must be a string")
    return Event(start, end, kind, value, name, asked if by_minute else None)


def event_caps(ev: Event, request_cap_w: FloatArray, baseline_power_w: FloatArray) -> FloatArray:
    """The site cap in each window period under the event (never above the request's)."""
    old = request_cap_w[ev.start : ev.end]
    if ev.kind == "cap_w":
        new = np.full(old.shape, ev.value)
    elif ev.kind == "reduction_pct":
        new = old * (1.0 - ev.value / 100.0)
    else:
        new = np.maximum(baseline_power_w[ev.start : ev.end] - ev.value, 0.0)
    return np.minimum(old, new)


def with_caps(problem: ScheduleProblem, caps: FloatArray) -> ScheduleProblem:
    grid = dataclasses.replace(problem.grid, power_cap_w=tuple(float(c) for c in caps))
    return dataclasses.replace(problem, grid=grid)


# ------------------------------------------------------------------ deepest feasible cap


def deepest_feasible_caps(data: ScheduleData, state: IntArray, start: int, end: int) -> FloatArray:
    """Least site power reachable in each period ``start..end-1`` from configurations
    ``state`` (one per deployment) held in period ``start - 1``.

    Per deployment, the configurations reachable in the window's ``j``-th period form a
    growing set: ``R_0 = {state}``, ``R_j`` = the allowed configurations within the
    transition limit (``|dn_P| + |dn_D| <= L``) of some member of ``R_{j-1}`` (every
    allowed one when there is no limit). This is a breadth-first search, i.e. the
    exact "ramp down as fast as the limit allows". The deployment's least net IT power
    in that period is the least ``P_k(0) - p_idle gpus_k`` over ``R_j`` (serving
    nothing). The site's floor is ``PUE x (p_idle x all GPUs + sum of those)``.

    Each period's floor is exact on its own. When fewer instances never draw more
    (true of the catalog's power curves: an idle instance draws more than an idle GPU)
    one ramp-down path attains every period's floor at once, so the floors form a cap
    profile the site can meet. GPU inventory is not binding on a ramp down.
    """
    width = end - start
    site = np.full(width, data.idle_site_it_w)
    L = data.max_changes
    for m, d in enumerate(data.deployments):
        net = d.bp_power_w[:, 0] - data.idle_gpu_power_w * d.gpus
        allowed = d.allowed
        dist = np.abs(d.n_p[:, None] - d.n_p[None, :]) + np.abs(d.n_d[:, None] - d.n_d[None, :])
        reach = np.zeros(d.n_configs, dtype=bool)
        reach[int(state[m])] = True
        for j in range(width):
            reach = allowed.copy() if L is None else allowed & (dist[reach] <= L).any(axis=0)
            if not reach.any():  # pragma: no cover - staying put is always within the limit
                site[j] = np.inf
                continue
            site[j] += float(net[reach].min())
    return data.pue * site


def _infeasible_event(
    data: ScheduleData,
    base: Outcome,
    ev: Event,
    caps: FloatArray,
    err: InfeasibleError,
) -> InfeasibleError:
    sched = base.priced.schedule
    if ev.start > 0:
        state = sched.config[:, ev.start - 1]
    else:
        state = np.array([d.initial for d in data.deployments], dtype=np.int64)
    floors = deepest_feasible_caps(data, state, ev.start, ev.end)
    window = caps[ev.start : ev.end]
    low = {
        ev.start + j
        for j in range(ev.end - ev.start)
        if window[j] < floors[j] * (1 - FEAS_RTOL) - 1e-6
    }
    named = {
        int(c["period"])
        for c in err.conflicts
        if isinstance(c.get("period"), int) and ev.start <= c["period"] < ev.end
    }
    conflicts: list[dict[str, Any]] = []
    for t in sorted(low | named):
        j = t - ev.start
        conflicts.append(
            {
                "period": t,
                "start_minute": t * data.problem.period_minutes,
                "constraint": "site_power_within_cap",
                "power_cap_w": float(window[j]),
                "deepest_feasible_cap_w": float(floors[j]),
                "reason": "the event cap is below the least the site can draw in this period "
                "when it ramps down from the baseline plan as fast as the transition limits "
                "allow"
                if t in low
                else "the solver found no schedule meeting the event's caps",
            }
        )
    conflicts += [c for c in err.conflicts if not isinstance(c.get("period"), int)]
    if low:
        msg = (
            f"the event's cap is below what the site can draw in {len(low)} period(s) of the "
            f"window, first {min(low)}; each conflict gives the deepest feasible cap"
        )
    else:
        msg = f"no schedule meets the event's caps: {err}"
    return InfeasibleError(msg, conflicts)


# ------------------------------------------------------------------ the what-if


def _rebest(o: Outcome, other: Priced, lb: float | None = None) -> Outcome:
    """``o`` with ``other``'s schedule if it is feasible for ``o``'s problem and cheaper,
    and with lower bound ``lb`` if that is higher."""
    best = o.priced
    stats = dict(o.stats)
    cand = price_schedule(o.data, other.schedule)
    if cand.violation_free and cand.objective_usd < best.objective_usd - 1e-9:
        best = cand
        stats["schedule_from"] = "the other solve of the demand-response what-if"
    bound = o.lower_bound_usd if lb is None else max(o.lower_bound_usd, lb)
    if best is o.priced and bound == o.lower_bound_usd:
        return o
    obj = best.objective_usd
    gap = max(0.0, (obj - bound) / max(abs(obj), 1e-9))
    target = o.data.problem.solver.mip_gap
    status = "optimal" if gap <= target + 1e-12 else "time_limit"
    return dataclasses.replace(
        o, priced=best, lower_bound_usd=bound, mip_gap=gap, status=status, stats=stats
    )


def _unserved(data: ScheduleData, p: Priced) -> tuple[FloatArray, FloatArray]:
    """Per deployment: unserved requests and their value, over the horizon."""
    sec = 3600.0 * data.period_hours
    req = np.zeros(len(data.deployments))
    usd = np.zeros(len(data.deployments))
    for m, d in enumerate(data.deployments):
        miss = np.maximum(d.demand_rps - p.schedule.served_rps[m], 0.0)
        req[m] = float(miss.sum() * sec)
        usd[m] = float(np.sum(miss * d.unserved_usd_per_rps))
    return req, usd


def _same(a: IntArray, b: IntArray) -> NDArray[np.bool_]:
    """Per period: every deployment runs the same configuration in both."""
    out: NDArray[np.bool_] = (a == b).all(axis=0)
    return out


def demand_response(
    body: ScheduleProblem | ScheduleRequest | dict[str, Any],
    event: dict[str, Any],
    progress: Progress | None = None,
    request_field: str = "",
    host: Host | None = None,
    monitor: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """The baseline and response schedules of a DR event, and what responding costs.

    ``request_field`` prefixes the field named by errors of the schedule request
    (``"request."`` for the HTTP body). Raises InputError (invalid request or event) or
    InfeasibleError (the baseline, or the event, cannot be met). ``monitor`` sees each
    solve's state (:data:`formulation.solve.Monitor`) with ``phase`` named after the
    solve (``baseline: relaxation``), ``done`` solves of ``total`` (2) and
    ``elapsed_s`` from the request's start; returning True stops the solve running
    (its best schedule is kept) and the next one.
    """
    from formulation.solve import solve  # loads Pyomo and HiGHS: only where a solve runs

    say = progress or (lambda _m: None)
    started = time.monotonic()

    def watch(step: str, done: int) -> Callable[[dict[str, Any]], bool] | None:
        if monitor is None:
            return None

        def seen(state: dict[str, Any]) -> bool:
            return monitor(
                state
                | {
                    "phase": f"{step}: {state.get('phase') or 'starting'}",
                    "done": done,
                    "total": 2,
                    "elapsed_s": round(time.monotonic() - started, 3),
                }
            )

        return seen

    with request_errors(request_field):
        problem = problem_from_dict(body, host)
    # one deadline for the request's two solves (see the module docstring)
    deadline = Deadline.after(problem.solver.time_limit_s)
    ev = parse_event(event, problem)
    with request_errors(request_field):
        data = build_data(problem)
        say("baseline: the request as given")
        base = solve(
            problem,
            lambda m: say(f"baseline: {m}"),
            watch("baseline", 0),
            deadline=deadline.fraction(DR_BASELINE_SHARE),
        )
    request_cap = data.power_cap_w
    caps = request_cap.copy()
    window_caps = event_caps(ev, request_cap, base.priced.site_power_w)
    caps[ev.start : ev.end] = window_caps
    dr_problem = with_caps(problem, caps)
    say(f"response: cap lowered in periods {ev.start}..{ev.end - 1}")
    try:
        resp = solve(
            dr_problem, lambda m: say(f"response: {m}"), watch("response", 1), deadline=deadline
        )
    except InfeasibleError as e:
        raise _infeasible_event(data, base, ev, caps, e) from e
    if monitor is not None:
        monitor({"phase": "report", "done": 2, "total": 2,
                 "elapsed_s": round(time.monotonic() - started, 3)})  # fmt: skip
    resp = _rebest(resp, base.priced, base.lower_bound_usd)
    if ev.kind != "reduction_w":
        base = _rebest(base, resp.priced)
    return report(data, ev, caps, base, resp)


def settings_only(data: ScheduleData, ev: Event, caps: FloatArray, base: Priced) -> dict[str, Any]:
    """Per window period: what GPU settings alone shed under the event's cap, applied at
    once to the baseline's running ``(n_P, n_D)`` (:func:`~formulation.whatif.shed.
    fast_response`: the least-cost settings and served loads within the cap), against
    the baseline's power, with the demand it loses and what the period then costs more
    (energy, carbon and unserved demand; no transition)."""
    sec = 3600.0 * data.period_hours
    rows: list[dict[str, Any]] = []
    for t in range(ev.start, ev.end):
        ks = base.schedule.config[:, t]
        running = [
            (int(d.n_p[k]), int(d.n_d[k])) for d, k in zip(data.deployments, ks, strict=True)
        ]
        r = fast_response(data.problem, t, running, float(caps[t]))
        served = np.array([d.served_rps for d in r.deployments])
        base_served = base.schedule.served_rps[:, t]
        value = np.array([d.unserved_usd_per_rps[t] for d in data.deployments])
        base_unserved = float(
            np.sum(
                np.maximum(np.array([d.demand_rps[t] for d in data.deployments]) - base_served, 0)
                * value
            )
        )
        base_cost = (
            float(base.site_power_w[t])
            * data.period_hours
            * (
                float(data.price_usd_per_mwh[t]) / 1e6
                + float(data.carbon_g_per_kwh[t]) * data.carbon_price_usd_per_tonne / 1e9
            )
        )
        rows.append(
            {
                "period": t,
                "cap_w": float(caps[t]),
                "baseline_power_w": float(base.site_power_w[t]),
                "power_w": r.site_power_w,
                "shed_w": float(base.site_power_w[t]) - r.site_power_w,
                "met": r.met,
                "shortfall_w": r.shortfall_w,
                "demand_lost_requests": float(np.sum(base_served - served) * sec),
                "cost_delta_usd": r.cost_usd_per_h * data.period_hours - base_cost - base_unserved,
                "settings": {
                    d.name: {"prefill": d.prefill_setting, "decode": d.decode_setting}
                    for d in r.deployments
                },
            }
        )
    shed = np.array([x["shed_w"] for x in rows])
    return {
        "periods": rows,
        "max_shed_w": float(shed.max()),
        "mean_shed_w": float(shed.mean()),
        "periods_met": sum(bool(x["met"]) for x in rows),
        "demand_lost_requests": float(sum(x["demand_lost_requests"] for x in rows)),
        "cost_delta_usd": float(sum(x["cost_delta_usd"] for x in rows)),
    }


def report(
    data: ScheduleData, ev: Event, caps: FloatArray, base: Outcome, resp: Outcome
) -> dict[str, Any]:
    pm = float(data.problem.period_minutes)
    bp, rp = base.priced, resp.priced
    win = slice(ev.start, ev.end)
    b_req, b_usd = _unserved(data, bp)
    r_req, r_usd = _unserved(data, rp)
    same = _same(bp.schedule.config, rp.schedule.config)
    # recovery: from the window's end to the first period running the baseline's configs
    after = [t for t in range(ev.end, data.n_periods) if same[t]]
    rejoin = after[0] if after else None
    stop = (rejoin + 1) if rejoin is not None else data.n_periods
    rec = slice(ev.end, stop)
    # preparation: the periods before the window in which the plans differ
    differ_before = [t for t in range(ev.start) if not same[t]]
    first = differ_before[0] if differ_before else None
    prep = slice(first if first is not None else ev.start, ev.start)
    periods = range(data.n_periods)
    figures = power_shed(
        {t: float(bp.site_power_w[t]) for t in periods},
        {t: float(rp.site_power_w[t]) for t in periods},
        range(ev.start, ev.end),
        data.period_hours,
    )
    assert figures is not None  # the window holds at least one period
    delta = cost_delta(
        {"objective_usd": bp.objective_usd, "totals": bp.totals},
        {"objective_usd": rp.objective_usd, "totals": rp.totals},
    )
    return {
        "event": {
            "name": ev.name,
            **ev.record(pm),
            "kind": ev.kind,
            "value": ev.value,
            "reference": {
                "cap_w": "absolute site cap",
                "reduction_w": "W below the baseline schedule's site power",
                "reduction_pct": "percent of the request's cap",
            }[ev.kind],
            "request_cap_w": [float(c) for c in data.power_cap_w[win]],
            "cap_w": [float(c) for c in caps[win]],
        },
        "baseline": response(base),
        "response": response(resp),
        "power_shed_w": [figures["power_shed_w"][t] for t in periods],
        "max_shed_w": figures["max_shed_w"],
        "mean_shed_w": figures["mean_shed_w"],
        "window_energy_shed_kwh": figures["window_energy_shed_kwh"],
        "energy_shed_kwh": figures["energy_shed_kwh"],
        "demand_lost": {
            d.name: {
                "requests": float(r_req[m] - b_req[m]),
                "value_usd": float(r_usd[m] - b_usd[m]),
            }
            for m, d in enumerate(data.deployments)
        },
        **delta,
        "settings_only": settings_only(data, ev, caps, bp),
        "preparation": {
            "first_changed_period": first,
            "periods": ev.start - first if first is not None else 0,
            "instance_starts": int(rp.starts[:, prep].sum()),
            "instance_stops": int(rp.stops[:, prep].sum()),
        },
        "recovery": {
            "periods_after_event": data.n_periods - ev.end,
            "rejoined": rejoin is not None,
            "rejoin_period": rejoin,
            "periods": (rejoin - ev.end) if rejoin is not None else None,
            "instance_starts": int(rp.starts[:, rec].sum()),
            "instance_stops": int(rp.stops[:, rec].sum()),
        },
    }
