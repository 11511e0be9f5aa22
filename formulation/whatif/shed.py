"""Fast demand response: the GPU settings that meet a new site cap now, with the running
instances kept.

A lower cap that starts now cannot wait for instance changes (they take effect at the
next period boundary, and a starting instance serves nothing while it loads). A
setting (a locked SM clock or a power limit per GPU, docs/clocks.md) takes effect in
under a second and keeps every instance serving. :func:`fast_response` chooses, for
period ``t`` of a site's schedule problem and the ``(n_P, n_D)`` each deployment runs,
one prefill and one decode setting per deployment and the load each serves, at least
cost under a site power target:

* the choice per deployment is among the settings it lists
  (``deployments[i].settings``), or, when it lists none, the settings its GPU offers by
  default (docs/clocks.md section 5); the full clock is always among them;
* served loads are the schedule's: the cost-minimising ones (a deployment may serve
  less than it could when the cap leaves no room, its unserved demand priced at its
  value), at most ``min(demand, headroom x capacity)`` at the setting;
* cost is the schedule objective's for the period: site energy and carbon, plus the
  value of unserved demand (no transition: the instances do not change);
* it is exact: the period is a multiple-choice knapsack over each deployment's setting
  pairs (the running ``(n_P, n_D)`` at each pair, serving 0, its most, or, for at most
  one deployment, the most that fits), solved by the one-period enumeration of
  :func:`formulation.subproblems.period.solve_period` on a problem whose only
  candidates are those pairs.

When no choice of settings meets the target, even serving nothing, the answer is the
least power the settings reach (every deployment at its pair of least idle draw,
serving nothing), its shortfall against the target, and the instance changes the
schedule makes at the next period boundary under the same cap
(:func:`next_boundary`: the one-period schedule from the running state, within the
transition limit; the site's re-plan decides the rest of the horizon). With the
previous state fixed, every transition term of a configuration (its starts and stops
at their prices, and whether it is within the limit) depends on it alone, so that
period too is the one-period enumeration, the transitions as its offsets, over the
configurations within reach of the running counts; the solve pipeline answers only
when a GPU pool can bind.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from cachetools import LRUCache

from formulation.budget import Deadline
from formulation.data import (
    ScheduleData,
    build_data,
    deployment_specs,
    setting_lists,
    take_periods,
)
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.infeasible import InfeasibleError
from formulation.problem import ScheduleProblem, SolverOptions, validate
from formulation.subproblems.dp import transition_cost
from formulation.subproblems.period import pool_can_bind, solve_period
from model.errors import InputError
from model.spec import DeploymentSpec


@dataclass(frozen=True)
class DeploymentShed:
    """One deployment's answer: the settings to apply now and what it then serves."""

    name: str
    n_p: int
    n_d: int
    prefill_setting: str
    decode_setting: str
    demand_rps: float
    served_rps: float
    capacity_rps: float
    power_w: float  # IT power of its instances at the served load (before PUE)


@dataclass(frozen=True)
class Shed:
    """The fast response to a site power target in period ``period``."""

    period: int
    target_w: float
    #: True when the settings meet the target (then ``shortfall_w`` is 0)
    met: bool
    site_power_w: float  # after PUE, idle GPUs included
    shortfall_w: float
    #: site energy, carbon and unserved demand at their values, per hour
    cost_usd_per_h: float
    energy_usd_per_h: float
    carbon_usd_per_h: float
    unserved_usd_per_h: float
    deployments: tuple[DeploymentShed, ...]
    #: the same per-hour cost of the plan in the period (its site power and served
    #: loads), and the change the shed makes to it (None: no plan given)
    planned_cost_usd_per_h: float | None = None
    cost_change_usd_per_h: float | None = None

    def document(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["deployments"] = {d.pop("name"): d for d in out["deployments"]}
        return out


def _running(problem: ScheduleProblem, running: Sequence[tuple[int, int]]) -> None:
    if len(running) != len(problem.deployments):
        raise InputError(
            "running", f"needs one (n_p, n_d) per deployment ({len(problem.deployments)})"
        )
    for d, (n_p, n_d) in zip(problem.deployments, running, strict=True):
        if n_p < 0 or n_d < 0 or (n_p == 0) != (n_d == 0):
            raise InputError(
                f"running.{d.name}",
                f"({n_p}, {n_d}): n_p and n_d both 0 or both >= 1",
            )


def fixed_counts(
    problem: ScheduleProblem,
    running: Sequence[tuple[int, int]],
    settings: Sequence[tuple[tuple[str, ...], tuple[str, ...]] | None] | None = None,
) -> ScheduleProblem:
    """``problem`` with each deployment held at its running ``(n_P, n_D)`` (its only
    candidate, and its initial state; the plan that runs them kept them within
    ``max_gpus``); ``settings[m]`` (optional) replaces deployment ``m``'s setting lists."""
    _running(problem, running)
    deps = []
    for m, (d, (n_p, n_d)) in enumerate(zip(problem.deployments, running, strict=True)):
        change: dict[str, Any] = {
            "initial_n_p": n_p,
            "initial_n_d": n_d,
            "min_n_p": n_p,
            "max_n_p": n_p,
            "min_n_d": n_d,
            "max_n_d": n_d,
        }
        if settings is not None and settings[m] is not None:
            pre, dec = settings[m]  # type: ignore[misc]
            change.update(prefill_settings=tuple(pre), decode_settings=tuple(dec))
        deps.append(dataclasses.replace(d, **change))
    return dataclasses.replace(problem, deployments=tuple(deps))


def one_period(
    problem: ScheduleProblem, t: int, target_w: float, running: Sequence[tuple[int, int]]
) -> ScheduleProblem:
    """Period ``t`` of ``problem`` alone under the cap ``target_w``, starting from the
    running ``(n_P, n_D)`` (its instance counts free within the bounds)."""
    _period(problem, t)
    deps = tuple(
        dataclasses.replace(d, demand_rps=(d.demand_rps[t],), initial_n_p=a, initial_n_d=b)
        for d, (a, b) in zip(problem.deployments, running, strict=True)
    )
    grid = dataclasses.replace(
        problem.grid,
        power_cap_w=(float(target_w),),
        price_usd_per_mwh=(problem.grid.price_usd_per_mwh[t],),
        carbon_g_per_kwh=(problem.grid.carbon_g_per_kwh[t],),
    )
    return dataclasses.replace(problem, deployments=deps, grid=grid)


def _period(problem: ScheduleProblem, t: int) -> None:
    if not 0 <= t < problem.n_periods:
        raise InputError("period", f"must be in 0..{problem.n_periods - 1}, got {t}")


def offered(
    problem: ScheduleProblem, specs: Sequence[DeploymentSpec]
) -> list[tuple[tuple[str, ...], tuple[str, ...]] | None]:
    """Per deployment of ``problem`` (``specs``: their resolved specs): the settings the
    fast response chooses among, per phase: those it lists, or its GPU's default offer
    when it lists none, with the full clock always among them (None: a GPU without clock
    data, the full clock only)."""
    out: list[tuple[tuple[str, ...], tuple[str, ...]] | None] = []
    for spec, listed in zip(specs, problem.deployments, strict=True):
        clocks = spec.gpu_clocks()
        if clocks is None:
            out.append(None)
            continue
        full = clocks.full_clock
        phases = []
        for texts in (listed.prefill_settings, listed.decode_settings):
            if listed.prefill_settings is None and listed.decode_settings is None:
                texts = clocks.settings
            texts = tuple(texts or ())
            phases.append(texts if full in texts else (full, *texts))
        out.append((phases[0], phases[1]))
    return out


def _least_power(data: ScheduleData) -> tuple[np.ndarray, np.ndarray]:
    """Per deployment: the allowed candidate of least draw at zero load, and zero loads."""
    cfg = np.zeros(len(data.deployments), dtype=np.int64)
    for m, d in enumerate(data.deployments):
        ks = np.flatnonzero(d.allowed)
        cfg[m] = int(ks[np.argmin(d.bp_power_w[ks, 0])])
    return cfg, np.zeros(len(data.deployments))


#: how many tables each cache keeps (the least recently used goes first)
CACHE_SIZE = 16
#: the tables of the last few (site, running counts) asked about: a shed answers from
#: them in a fraction of the time their capacity model takes
_CACHE: LRUCache[str, ScheduleData] = LRUCache(CACHE_SIZE)
#: and those of the next boundary's period (:func:`boundary_data`), as many
_NEXT: LRUCache[str, ScheduleData] = LRUCache(CACHE_SIZE)
_lock = threading.Lock()


def _key(problem: ScheduleProblem, running: Sequence[tuple[int, int]]) -> str:
    """What the tables depend on: the problem but its cap (replaced by each target)."""
    doc = dataclasses.asdict(problem)
    doc["grid"].pop("power_cap_w")
    text = json.dumps([doc, [list(r) for r in running]], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


_BOUNDS = re.compile(r"^deployments\[(\d+)\]\.(?:max_gpus|initial|max_n_p|max_n_d)")


@contextmanager
def _counts_named(problem: ScheduleProblem, running: Sequence[tuple[int, int]]) -> Iterator[None]:
    """Counts the deployment's bounds or max_gpus do not allow: an input error naming
    ``running.<deployment>``."""
    try:
        yield
    except InputError as e:
        m = _BOUNDS.match(e.field)
        if m is None:
            raise
        name = problem.deployments[int(m.group(1))].name
        raise InputError(f"running.{name}", f"{running[int(m.group(1))]}: {e.reason}") from e


def settings_data(problem: ScheduleProblem, running: Sequence[tuple[int, int]]) -> ScheduleData:
    """The tables of the fast response over the whole horizon: each deployment at its
    running counts only, at every setting pair :func:`offered` gives (kept for the next
    call with the same problem, cap aside, and counts)."""

    def build() -> ScheduleData:
        plain = fixed_counts(problem, running)
        with _counts_named(problem, running):
            validate(plain)  # the counts against the bounds, before any spec is resolved
        specs = deployment_specs(plain)
        for i, (d, spec) in enumerate(zip(plain.deployments, specs, strict=True)):
            setting_lists(i, d, spec)  # the listed settings, named as the schedule names them
        with _counts_named(problem, running):
            return build_data(fixed_counts(problem, running, offered(plain, specs)), specs)

    return _kept(_CACHE, _key(problem, running), build)


def _kept(
    cache: LRUCache[str, ScheduleData], key: str, build: Callable[[], ScheduleData]
) -> ScheduleData:
    """``cache[key]``, built by ``build`` when missing and kept, the least recently
    used of more than :data:`CACHE_SIZE` dropped."""
    with _lock:
        hit = cache.get(key)
        if hit is not None:
            return hit
    data = build()
    with _lock:
        cache[key] = data
    return data


def is_cached(problem: ScheduleProblem, running: Sequence[tuple[int, int]]) -> bool:
    """Whether :func:`settings_data` of ``problem`` and ``running`` is kept."""
    with _lock:
        return _key(problem, running) in _CACHE


def boundary_cached(problem: ScheduleProblem, t: int, running: Sequence[tuple[int, int]]) -> bool:
    """Whether :func:`boundary_data` of ``problem``, ``t`` and ``running`` is kept."""
    with _lock:
        return _key(problem, running) + f":{t}" in _NEXT


def clear_cache() -> None:
    with _lock:
        _CACHE.clear()
        _NEXT.clear()


def fast_response(
    problem: ScheduleProblem,
    t: int,
    running: Sequence[tuple[int, int]],
    target_w: float,
    planned: tuple[float, Sequence[float]] | None = None,
) -> Shed:
    """The least-cost settings (and served loads) that keep site power within
    ``target_w`` (W, after PUE, as the schedule's cap) in period ``t`` with the running
    ``(n_P, n_D)`` of each deployment. When none meets the target: the least power
    settings reach, and the shortfall. ``planned``: the plan's site power (W, after
    PUE) and served load per deployment (req/s) in the period, whose cost per hour, by
    the same terms (:func:`hourly_cost`), the answer gives beside its own, with the
    change."""
    _period(problem, t)
    if not (np.isfinite(target_w) and target_w >= 0):
        raise InputError("target_w", f"must be a finite number >= 0, got {target_w!r}")
    data = take_periods(settings_data(problem, running), np.array([t]))
    data = dataclasses.replace(data, power_cap_w=np.array([float(target_w)]))
    if pool_can_bind(data, 0):  # the counts are fixed: they use more GPUs than there are
        raise InputError("running", "uses more GPUs of a pool than the site's gpu_inventory has")
    sol = solve_period(data, 0)
    if sol is not None:
        cfg, served = sol.config, sol.served
    else:
        cfg, served = _least_power(data)
    r = _answer(data, t, target_w, cfg, served, met=sol is not None)
    if planned is None:
        return r
    site_w, loads = planned
    if len(loads) != len(data.deployments):
        raise InputError(
            "planned", f"needs one served load per deployment ({len(data.deployments)})"
        )
    before = sum(hourly_cost(data, float(site_w), loads))
    return dataclasses.replace(
        r, planned_cost_usd_per_h=before, cost_change_usd_per_h=r.cost_usd_per_h - before
    )


def hourly_cost(
    data: ScheduleData, site_w: float, served: Sequence[float]
) -> tuple[float, float, float]:
    """Energy, carbon and unserved demand's value per hour (USD) of one period's data
    (the first) at site power ``site_w`` (W, after PUE) and served loads ``served``
    (req/s per deployment): the schedule objective's terms of the period, per hour."""
    energy = site_w * float(data.price_usd_per_mwh[0]) / 1e6
    carbon = site_w * float(data.carbon_g_per_kwh[0]) / 1e6 / 1e3 * data.carbon_price_usd_per_tonne
    unserved = sum(
        max(float(d.demand_rps[0]) - float(s), 0.0) * float(d.unserved_usd_per_rps[0])
        for d, s in zip(data.deployments, served, strict=True)
    )
    return energy, carbon, unserved / data.period_hours


def _answer(
    data: ScheduleData, t: int, target_w: float, cfg: np.ndarray, served: np.ndarray, met: bool
) -> Shed:
    deps = []
    it = data.idle_gpu_power_w * float(
        data.total_gpus - sum(int(d.gpus[cfg[m]]) for m, d in enumerate(data.deployments))
    )
    for m, d in enumerate(data.deployments):
        k = int(cfg[m])
        s = float(served[m])
        p = d.power_at(k, s)
        it += p
        pair = d.setting_of(k)
        clocks = d.spec.gpu_clocks()
        full = "default" if clocks is None else clocks.full_clock
        pre, dec = pair if pair is not None else (full, full)
        deps.append(
            DeploymentShed(
                name=d.name,
                n_p=int(d.n_p[k]),
                n_d=int(d.n_d[k]),
                prefill_setting=pre,
                decode_setting=dec,
                demand_rps=float(d.demand_rps[0]),
                served_rps=s,
                capacity_rps=float(d.capacity_rps[k]),
                power_w=float(p),
            )
        )
    site = data.pue * it
    energy, carbon, unserved_h = hourly_cost(data, site, [float(x) for x in served])
    return Shed(
        period=t,
        target_w=float(target_w),
        met=met,
        site_power_w=float(site),
        shortfall_w=0.0 if met else max(float(site) - float(target_w), 0.0),
        cost_usd_per_h=float(energy + carbon + unserved_h),
        energy_usd_per_h=float(energy),
        carbon_usd_per_h=float(carbon),
        unserved_usd_per_h=float(unserved_h),
        deployments=tuple(deps),
    )


def reachable(problem: ScheduleProblem, running: Sequence[tuple[int, int]]) -> ScheduleProblem:
    """``problem`` with each deployment's counts bounded to what one period can reach
    from its running ``(n_P, n_D)``: within ``max_instance_changes_per_period`` of each
    count (a box around the running counts that holds every configuration the limit
    allows, and a few it does not, which :func:`transition_offsets` leaves out), and
    the running counts as the initial state. Without a limit, every configuration."""
    _running(problem, running)
    limit = problem.transitions.max_instance_changes_per_period
    deps = []
    for d, (n_p, n_d) in zip(problem.deployments, running, strict=True):
        change: dict[str, Any] = {"initial_n_p": n_p, "initial_n_d": n_d}
        if limit is not None:
            change.update(
                min_n_p=max(d.min_n_p, n_p - limit),
                max_n_p=n_p + limit if d.max_n_p is None else min(d.max_n_p, n_p + limit),
                min_n_d=max(d.min_n_d, n_d - limit),
                max_n_d=n_d + limit if d.max_n_d is None else min(d.max_n_d, n_d + limit),
            )
        deps.append(dataclasses.replace(d, **change))
    return dataclasses.replace(problem, deployments=tuple(deps))


def boundary_data(
    problem: ScheduleProblem, t: int, running: Sequence[tuple[int, int]]
) -> ScheduleData:
    """The tables of period ``t`` alone, from the running ``(n_P, n_D)``, over the
    configurations one period can reach from them (:func:`reachable`), at the setting
    pairs each deployment lists (cap aside: each target replaces it; kept for the next
    call with the same problem, counts and period, as :func:`settings_data` keeps its)."""
    _period(problem, t)
    _running(problem, running)

    def build() -> ScheduleData:
        with _counts_named(problem, running):
            return build_data(one_period(reachable(problem, running), t, 0.0, running))

    return _kept(_NEXT, _key(problem, running) + f":{t}", build)


def transition_offsets(data: ScheduleData) -> list[np.ndarray]:
    """Per deployment of ``data`` (one period from its initial state): the cost of
    moving to each configuration, its instance starts and stops at their prices, inf
    where the move changes more instances than ``max_instance_changes_per_period``
    allows (settings change for free). With the previous state fixed these are the
    period's only transition terms, each a function of the configuration alone."""
    return [
        transition_cost(data, d, d.initial, np.arange(d.n_configs, dtype=np.int64))
        for d in data.deployments
    ]


@dataclass(frozen=True)
class BoundaryPlan:
    """The one-period schedule at a boundary from the running counts."""

    period: int
    #: ``enumeration`` (exact one-period enumeration with the transitions as offsets)
    #: or ``milp`` (the solve pipeline, when a GPU pool can bind)
    method: str
    #: the one-period tables and the schedule priced on them (None: infeasible)
    data: ScheduleData | None
    priced: Priced | None
    #: a proven lower bound on the period's cost (the plan's own cost when enumerated)
    lower_bound_usd: float | None = None
    reason: str | None = None
    #: the pipeline's status, time and the limit it had (``milp`` only)
    status: str | None = None
    solve_time_s: float | None = None
    time_limit_s: float | None = None

    def document(self, running: Sequence[tuple[int, int]]) -> dict[str, Any]:
        if self.priced is None or self.data is None:
            return {"period": self.period, "feasible": False, "reason": self.reason}
        changes = {}
        for m, d in enumerate(self.data.deployments):
            k = int(self.priced.schedule.config[m, 0])
            n_p, n_d = running[m]
            if (int(d.n_p[k]), int(d.n_d[k])) != (n_p, n_d):
                changes[d.name] = {
                    "from": {"n_p": n_p, "n_d": n_d},
                    "to": {"n_p": int(d.n_p[k]), "n_d": int(d.n_d[k])},
                }
        return {
            "period": self.period,
            "feasible": True,
            "site_power_w": float(self.priced.site_power_w[0]),
            "instance_changes": changes,
        }


class NeedsPipeline(Exception):
    """The next boundary needs the solve pipeline (a GPU pool can bind), which the
    caller asked to run elsewhere (a server runs it in its solver pool, never in the
    process that answers requests: the pipeline's HiGHS process and output capture
    serve one solve per process at a time)."""


def boundary_plan(
    problem: ScheduleProblem,
    t: int,
    running: Sequence[tuple[int, int]],
    target_w: float,
    deadline: Deadline | None = None,
    pipeline: bool = True,
) -> BoundaryPlan:
    """Period ``t`` alone under the cap ``target_w`` from the running ``(n_P, n_D)``,
    its counts and settings free within the bounds and the transition limit, solved
    exactly: with the previous state fixed, a configuration's starts, stops and limit
    depend on it alone, so the period is the one-period enumeration
    (:func:`~formulation.subproblems.period.solve_period`) with the transition costs
    as offsets and the configurations beyond the limit left out. When a GPU pool can
    bind (which the enumeration does not handle), the solve pipeline on the same
    period, within the problem's own time limit (``solver.time_limit_s``, the site's
    request's) from when it starts, or by ``deadline`` when that comes sooner; with
    ``pipeline`` false, :class:`NeedsPipeline` instead."""
    if not (np.isfinite(target_w) and target_w >= 0):
        raise InputError("target_w", f"must be a finite number >= 0, got {target_w!r}")
    data = boundary_data(problem, t, running)
    data = dataclasses.replace(data, power_cap_w=np.array([float(target_w)]))
    offsets = transition_offsets(data)
    if pool_can_bind(data, 0, offsets):
        if not pipeline:
            raise NeedsPipeline()
        return _boundary_pipeline(problem, t, running, target_w, deadline)
    sol = solve_period(data, 0, offsets)
    if sol is None:
        return BoundaryPlan(
            t,
            "enumeration",
            None,
            None,
            reason="no configurations the transition limit lets the deployments reach from "
            "the running counts fit under the cap",
        )
    priced = price_schedule(data, Schedule(sol.config[:, None], sol.served[:, None]))
    return BoundaryPlan(t, "enumeration", data, priced, priced.objective_usd)


def _boundary_pipeline(
    problem: ScheduleProblem,
    t: int,
    running: Sequence[tuple[int, int]],
    target_w: float,
    deadline: Deadline | None,
) -> BoundaryPlan:
    from formulation.solve import solve  # loads Pyomo and HiGHS: only where a solve runs

    p1 = one_period(reachable(problem, running), t, target_w, running)
    limit_s = problem.solver.time_limit_s
    p1 = dataclasses.replace(
        p1, solver=SolverOptions(time_limit_s=limit_s, mip_gap=p1.solver.mip_gap, threads=1)
    )
    try:
        with _counts_named(problem, running):
            o = solve(p1, deadline=deadline)
    except InfeasibleError as e:
        return BoundaryPlan(t, "milp", None, None, reason=str(e))
    return BoundaryPlan(
        t,
        "milp",
        o.data,
        o.priced,
        o.lower_bound_usd,
        status=o.status,
        solve_time_s=o.solve_time_s,
        time_limit_s=o.stats["time_limit_s"],
    )


def next_boundary(
    problem: ScheduleProblem,
    t: int,
    running: Sequence[tuple[int, int]],
    target_w: float,
    deadline: Deadline | None = None,
    pipeline: bool = True,
) -> dict[str, Any]:
    """The instance changes the schedule makes at the start of period ``t`` from the
    running ``(n_P, n_D)`` under the cap ``target_w`` (:func:`boundary_plan`), with the
    site power then. ``{"feasible": False, ...}`` when even that cannot meet the cap;
    :class:`NeedsPipeline` when only the solve pipeline answers and ``pipeline`` is
    false."""
    plan = boundary_plan(problem, t, running, target_w, deadline, pipeline)
    return plan.document(running)
