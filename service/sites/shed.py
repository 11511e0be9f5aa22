"""Fast demand response of a registered site: the use case behind ``POST
/v1/sites/{id}/shed`` and the ``immediate`` answer of an event whose cap holds now.

A shed is a capacity limit that starts now. It is answered at once with the GPU
settings each deployment applies now, for the instances its latest plan runs in the
current period (:func:`formulation.whatif.shed.fast_response`), and it is kept as an
OpenADR event (an ``IMPORT_CAPACITY_LIMIT`` of ``target_kw`` from now, merged into the
site's cap and logged like any event); the site is then re-planned, as a ``site_plan``
job, from the next period boundary and the running ``(n_P, n_D)``, so that instance
changes follow where the settings do not suffice. The event it records is made in
:mod:`service.sites.shed_event`. No HTTP here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from formulation.problem import Host, ScheduleProblem, expand_series, problem_from_dict
from formulation.whatif.shed import (
    CACHE_SIZE,
    NeedsPipeline,
    boundary_data,
    fast_response,
    next_boundary,
    settings_data,
)
from model.errors import InputError
from service.requests.limits import solve_host
from service.requests.schemas import dump
from service.runtime.job import replan_scope
from service.runtime.jobstore import JobStore
from service.runtime.pool import PoolFull, SolvePool, WorkerLost
from service.runtime.records import Plan, Site, SiteNotFound
from service.runtime.settings import Settings
from service.runtime.store import Store, store_for
from service.sites.plans import (
    Applied,
    AppliedDeployment,
    Current,
    SitePlanRequest,
    State,
    n_periods,
    plan_differs,
    request_of,
)
from service.sites.registry import made_with, periods_at, planned_with

log = logging.getLogger(__name__)


class NoRunningPlan(LookupError):
    """The site has no plan covering the time of the shed: nothing tells what runs."""


def plan_of(site: Site, plan: Plan) -> Plan:
    """``plan`` when it was made for the site's clock, horizon and deployments as they
    are; :class:`NoRunningPlan` saying what changed otherwise (a ``PUT`` since)."""
    changed = plan_differs(site, plan)
    if changed is not None:
        raise NoRunningPlan(changed)
    return plan


def running_state(plan: Plan, when: datetime) -> tuple[int, dict[str, Any]]:
    """The period of the plan at ``when`` and its record; :class:`NoRunningPlan` when
    the plan does not cover it."""
    from service.sites.registry import NoPeriod

    try:
        t, periods = periods_at(plan, when)
    except NoPeriod as e:
        raise NoRunningPlan(str(e)) from None
    return t, periods[0]


@dataclass(frozen=True)
class BoundaryCall:
    """The next boundary's instance changes when only the solve pipeline gives them (a
    GPU pool can bind): what a solver worker needs to answer them
    (:func:`solve_boundary`)."""

    body: dict[str, Any]  # the site's stored body
    host: Host  # the server's (service.requests.limits.solve_host)
    period: int
    running: tuple[tuple[int, int], ...]
    target_w: float


def solve_boundary(call: BoundaryCall) -> dict[str, Any]:
    """:func:`~formulation.whatif.shed.next_boundary` of ``call``, in a solver worker,
    within the site's time limit (its request's ``solver.time_limit_s``: a shed asks
    for none of its own)."""
    problem = problem_from_dict(request_of(call.body), call.host)
    return next_boundary(problem, call.period, call.running, call.target_w)


def settings_now(
    site: Site, plan: Plan, when: datetime, settings: Settings, target_w: float | None = None
) -> tuple[dict[str, Any], BoundaryCall | None]:
    """The settings to apply at ``when`` under the site's cap in that period (or
    ``target_w``, W, where it is lower), for the counts the plan runs then, with the
    site power before (as planned) and after, the shortfall and the cost per hour, the
    plan's in the period by the same terms and the change (``planned_cost_usd_per_h``,
    ``cost_change_usd_per_h``); when
    the settings fall short, the next boundary's instance changes under the same cap,
    or, when only the solve pipeline gives them, the call that does (``next_boundary``
    is then None). No solve runs here: this answers in the API process."""
    t, record = running_state(plan_of(site, plan), when)
    problem = site_problem(site, settings)
    running = running_counts(problem, record)
    cap = expand_series("grid.power_cap_w", site.body["grid"]["power_cap_w"], n_periods(site.body))
    target_w = cap[t] if target_w is None else min(target_w, cap[t])  # never above the cap
    planned = (
        float(record["power_w"]),
        [float(record["deployments"][d.name]["served_rps"]) for d in problem.deployments],
    )
    try:
        r = fast_response(problem, t, running, target_w, planned)
    except InputError as e:
        if e.field.split(".")[0] != "running":
            raise
        raise NoRunningPlan(
            f"the latest plan's counts no longer fit the site: {e.reason}"
        ) from None
    doc = r.document()
    before = float(record["power_w"])
    out: dict[str, Any] = {
        "at": when.isoformat(),
        "period": t,
        "plan_id": plan.id,
        "target_w": doc.pop("target_w"),
        "met": doc.pop("met"),
        "site_power_before_w": before,
        "site_power_w": doc.pop("site_power_w"),
        "shed_w": before - r.site_power_w,
        "shortfall_w": doc.pop("shortfall_w"),
        **{k: v for k, v in doc.items() if k != "period"},
        "next_boundary": None,
    }
    call = None
    if not r.met and t + 1 < problem.n_periods:
        try:
            out["next_boundary"] = next_boundary(problem, t + 1, running, target_w, pipeline=False)
        except NeedsPipeline:
            call = BoundaryCall(site.body, problem.host, t + 1, tuple(running), float(target_w))
    return out, call


#: the answer's ``next_boundary`` when its solve could not run, by the reason
NOT_SOLVED = {
    PoolFull: "not solved now: every solver worker is busy; the site's re-plan gives the "
    "instance changes",
    WorkerLost: "not solved now: the solver worker stopped before answering; the site's "
    "re-plan gives the instance changes",
}


async def immediate(
    site: Site,
    plan: Plan,
    when: datetime,
    settings: Settings,
    pool: SolvePool,
    target_w: float | None = None,
) -> dict[str, Any]:
    """:func:`settings_now` (in a thread: it reads kept tables, or builds them), and
    the next boundary's solve pipeline, when only it answers, in a solver worker of
    ``pool``; with every worker busy (or the worker lost) the settings are answered
    all the same, ``next_boundary`` saying why it was not solved."""
    out, call = await asyncio.to_thread(settings_now, site, plan, when, settings, target_w)
    if call is not None:
        try:
            out["next_boundary"] = await pool.run(solve_boundary, call)
        except (PoolFull, WorkerLost) as e:
            out["next_boundary"] = {
                "period": call.period,
                "feasible": None,
                "reason": NOT_SOLVED[type(e)],
            }
    return out


def site_problem(site: Site, settings: Settings) -> ScheduleProblem:
    """The schedule problem of a registered site, on this server's host."""
    return problem_from_dict(request_of(site.body), solve_host(settings))


def running_counts(problem: ScheduleProblem, record: dict[str, Any]) -> list[tuple[int, int]]:
    """Each deployment's ``(n_P, n_D)`` in a plan's period ``record``, in the problem's
    order; :class:`NoRunningPlan` when the plan does not name one."""
    try:
        return [
            (record["deployments"][d.name]["n_p"], record["deployments"][d.name]["n_d"])
            for d in problem.deployments
        ]
    except KeyError as e:
        raise NoRunningPlan(
            f"the latest plan does not name deployment {e.args[0]!r}: re-plan the site"
        ) from None


def warm(site: Site, plan: Plan, when: datetime, settings: Settings) -> bool:
    """Build the fast response's tables for the counts the plan runs at ``when``, and
    those of the next boundary's period from them, so that a shed then answers from
    them; False when the plan does not cover ``when``."""
    try:
        t, record = running_state(plan_of(site, plan), when)
        problem = site_problem(site, settings)
        running = running_counts(problem, record)
        settings_data(problem, running)
    except (NoRunningPlan, InputError):
        return False
    if t + 1 < problem.n_periods:
        try:
            boundary_data(problem, t + 1, running)
        except InputError as e:  # a shed would meet the same refusal: nothing to keep
            log.info("next boundary's tables of site %s not built: %s", site.id, e)
    return True


def warm_sites(store: Store, settings: Settings, now: datetime) -> int:
    """:func:`warm` the sites whose latest plan covers ``now``, as many as the fast
    response keeps tables of (:data:`~formulation.whatif.shed.CACHE_SIZE`: warming more
    would drop the first ones' tables and build them again at every check); how many
    were."""
    done = 0
    for summary in store.list_sites():
        if done >= CACHE_SIZE:
            log.info(
                "shed tables kept for %d sites only; the others build on their first shed", done
            )
            break
        try:
            site = store.get_site(summary["id"])
        except SiteNotFound:  # deleted meanwhile
            continue
        plan = store.latest_plan(site.id)
        if plan is not None and warm(site, plan, now, settings):
            done += 1
    return done


async def warm_forever(settings: Settings, every_s: float) -> None:
    """Keep the fast response's tables of every site's running counts built: checked
    every ``every_s`` seconds (a kept table costs a lookup), so that a shed, or an event
    capping now, answers from them after a plan changes the counts."""
    store = store_for(settings.database_url)
    while True:
        try:
            await asyncio.to_thread(warm_sites, store, settings, datetime.now(UTC))
        except SQLAlchemyError as e:  # the database is away: try again next time
            log.warning("shed tables not built: %s", e)
        except Exception:  # a site the core refuses must not stop the others' tables
            log.exception("shed tables not built")
        await asyncio.sleep(every_s)


def duplicate_replan(
    jobs: JobStore,
    site: Site,
    latest: Plan | None,
    shed: dict[str, Any],
    reload: Callable[[], Plan | None] | None = None,
) -> dict[str, Any] | None:
    """The answer's ``replan`` for a shed whose event was already in force (its merge
    wrote nothing, the site is as it was): none when the ``latest`` plan was made from
    the site as it is (with the event), else the site's re-plan queued or running (made
    for the same event); None when neither holds and a re-plan is due. ``reload`` reads
    the site's latest plan again: a re-plan that ended since ``latest`` was read has
    stored its plan before it ended, so with no re-plan queued or running the plan read
    afterwards is the one to judge by (else a repeat arriving as the re-plan ends would
    start a second one)."""
    if not shed["event"]["duplicate"]:
        return None

    def in_force(plan: Plan) -> dict[str, Any]:
        return {
            "job_id": None,
            "site_version": site.version,
            "reason": planned_with(shed["event"]["id"], plan, site.version),
        }

    if latest is not None and made_with(site, latest):
        return in_force(latest)
    job = jobs.active(replan_scope(site.id))
    if job is None:
        fresh = reload() if reload is not None else None
        return in_force(fresh) if fresh is not None and made_with(site, fresh) else None
    return {
        "job_id": job.id,
        "status": job.status,
        "location": f"/v1/jobs/{job.id}",
        "from_period": int(shed["period"]) + 1,
        "site_version": site.version,
        "coalesced": True,  # the site's re-plan queued or running takes this request
    }


def replan_job(
    jobs: JobStore, site: Site, shed: dict[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """A ``site_plan`` job re-planning ``site`` from the period after the shed's, from
    the counts running in the shed's period (a queued re-plan of the site takes this
    request instead: at most one waits per site); ``(the id of a job to submit, or
    None, the answer's ``replan``)``. No job when the shed's period is the horizon's
    last."""
    t = int(shed["period"])
    if t + 1 >= n_periods(site.body):
        return None, {"job_id": None, "reason": "the shed's period is the horizon's last"}
    state = {name: State(n_p=d["n_p"], n_d=d["n_d"]) for name, d in shed["deployments"].items()}
    applied = Applied(
        period=t,
        power_w=shed["site_power_w"],
        # the limit recorded for the shed's period: the target, or the least draw the
        # running counts reach when the target is below it
        # (service.sites.shed_event.stored_event)
        power_cap_w=max(
            shed["target_w"],
            1000.0 * shed["stored_limits"][0]["limit_kw"] if shed.get("stored_limits") else 0.0,
        ),
        deployments={
            name: AppliedDeployment(**{k: d[k] for k in AppliedDeployment.model_fields})
            for name, d in shed["deployments"].items()
        },
    )
    req = SitePlanRequest(
        site_id=site.id, current=Current(period=t + 1, state=state), applied=applied
    )
    job, created = jobs.create("site_plan", dump(req), coalesce=replan_scope(site.id))
    return job.id if created else None, {
        "job_id": job.id,
        "status": job.status,
        "location": f"/v1/jobs/{job.id}",
        "from_period": t + 1,
        "site_version": site.version,
        "coalesced": not created,  # a queued re-plan of the site took this request
    }
