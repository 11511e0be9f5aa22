"""Fast demand response of a registered site: the use case behind ``POST
/v1/sites/{id}/shed`` and the ``immediate`` answer of an event whose cap holds now.

A shed is a capacity limit that starts now. It is answered at once with the GPU
settings each deployment applies now, for the instances its latest plan runs in the
current period (:func:`formulation.whatif.shed.fast_response`), and it is kept as an
OpenADR event (an ``IMPORT_CAPACITY_LIMIT`` of ``target_kw`` from now, merged into the
site's cap and logged like any event); the site is then re-planned, as a ``site_plan``
job, from the next period boundary and the running ``(n_P, n_D)``, so that instance
changes follow where the settings do not suffice. No HTTP here.
"""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import AwareDatetime, Field
from sqlalchemy.exc import SQLAlchemyError

from formulation.data import build_data
from formulation.problem import ScheduleProblem, expand_series, problem_from_dict
from formulation.solve import min_site_power_w
from formulation.whatif.shed import (
    CACHE_SIZE,
    boundary_data,
    fast_response,
    next_boundary,
    settings_data,
)
from model.errors import InputError
from service.jobs import JobStore
from service.limits import solve_host
from service.openadr import OadrEvent, event_to_signals
from service.schemas import Strict, dump
from service.settings import Settings
from service.site_plans import Current, SitePlanRequest, State, n_periods, request_of
from service.sites import event_signals, periods_at, plan_differs
from service.store import Plan, Site, SiteNotFound, Store, store_for

PROGRAM = "pdwatt-shed"
log = logging.getLogger(__name__)


class ShedBody(Strict):
    """What ``POST /v1/sites/{site_id}/shed`` takes."""

    target_kw: float = Field(
        ge=0, le=1e9, allow_inf_nan=False, description="site power target (kW, after PUE)"
    )
    at: AwareDatetime | None = Field(
        None, description="when the target starts: ISO 8601 date-time with offset (default: now)"
    )
    duration: str = Field(
        "P9999Y",
        pattern=r"^P(?:\d+Y)?(?:\d+M)?(?:\d+[DW])?(?:T(?:\d+H)?(?:\d+M)?(?:\d+S)?)?$",
        description="how long the target holds, ISO 8601 (default: to the horizon's end)",
    )


class NoRunningPlan(LookupError):
    """The site has no plan covering the time of the shed: nothing tells what runs."""


def shed_event(body: ShedBody, when: datetime, limit_kw: float | None = None) -> OadrEvent:
    """The shed as an OpenADR 3.1.0 event: a capacity limit of ``limit_kw`` (default
    ``target_kw``) from ``when`` for ``duration``."""
    kw = body.target_kw if limit_kw is None else limit_kw
    name = f"shed to {body.target_kw:g} kW"
    if kw != body.target_kw:
        name += f", held at the site's least draw {kw:g} kW"
    return OadrEvent.model_validate(
        {
            "programID": PROGRAM,
            "eventName": name,
            "payloadDescriptors": [{"payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
            "intervalPeriod": {"start": when.isoformat(), "duration": body.duration},
            "intervals": [
                {"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [kw]}]}
            ],
        }
    )


def least_draw_w(site: Site, settings: Settings) -> np.ndarray:
    """The least site power per period (W, after PUE): every deployment at its
    least-power configuration serving nothing, every other GPU idle, as the solver
    checks a cap before it solves (:func:`formulation.solve.min_site_power_w` over the
    site's tables, which the core keeps once built)."""
    return min_site_power_w(build_data(_problem(site, settings)))


def stored_event(
    site: Site, body: ShedBody, when: datetime, settings: Settings
) -> tuple[OadrEvent, dict[str, Any]]:
    """The event a shed stores and what the answer says of it: the capacity limit is
    the target, or the least the site can draw in the periods the shed covers where
    that is higher (a cap below it leaves no schedule, and every later re-plan of the
    site would fail), so that the site stays plannable; ``stored_target_kw`` and, when
    it differs from the target, ``stored_target_reason``. InputError (named after the
    shed's own fields) when the shed lies outside the site's horizon."""
    try:
        periods = event_signals(site.body, shed_event(body, when))["periods"]
    except InputError as e:
        raise shed_error(e) from None
    floor_w = float(np.max(least_draw_w(site, settings)[periods]))
    floor_kw = math.ceil(floor_w) / 1000.0  # whole watts, never below the least draw
    if body.target_kw * 1000.0 >= floor_w:
        return shed_event(body, when), {"stored_target_kw": body.target_kw}
    reason = (
        f"target_kw {body.target_kw:g} is below the least the site can draw in the periods "
        f"the shed covers ({floor_kw:g} kW: idle GPUs and every deployment at its least "
        f"draw, at PUE); the capacity limit stored is {floor_kw:g} kW, so that the site "
        "stays plannable"
    )
    return shed_event(body, when, floor_kw), {
        "stored_target_kw": floor_kw,
        "stored_target_reason": reason,
    }


def shed_error(e: InputError) -> InputError:
    """An error about the shed's event (:func:`shed_event`), named after the field of
    the shed's body at fault: ``duration`` for its length, ``at`` for where it lies in
    time (the event's other fields are the shed's own making)."""
    if e.field in ("event.duration", "event.intervalPeriod.duration"):
        return InputError("duration", e.reason)
    if e.field == "event" or e.field.startswith("event.") or e.field.startswith("event["):
        return InputError("at", f"the shed from at for duration: {e.reason}")
    return e


def caps_now(event: OadrEvent, when: datetime) -> bool:
    """Whether ``event`` limits the site's power at ``when`` (a capacity limit whose
    interval holds that instant)."""
    try:
        sig = event_to_signals(event, when, 1.0 / 60.0, 1)  # the one second from when
    except InputError:  # every interval lies outside that second
        return False
    return sig["power_cap_w"]["values"][0] is not None


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
    from service.sites import NoPeriod

    try:
        t, periods = periods_at(plan, when)
    except NoPeriod as e:
        raise NoRunningPlan(str(e)) from None
    return t, periods[0]


def immediate(
    site: Site, plan: Plan, when: datetime, settings: Settings, target_w: float | None = None
) -> dict[str, Any]:
    """The settings to apply at ``when`` under the site's cap in that period (or
    ``target_w``, W, where it is lower), for the counts the plan runs then, with the
    site power before (as planned) and after, the shortfall and the cost per hour; when
    the settings fall short, the next boundary's instance changes under the same cap."""
    t, record = running_state(plan_of(site, plan), when)
    problem = _problem(site, settings)
    running = running_counts(problem, record)
    cap = expand_series("grid.power_cap_w", site.body["grid"]["power_cap_w"], n_periods(site.body))
    target_w = cap[t] if target_w is None else min(target_w, cap[t])  # never above the cap
    try:
        r = fast_response(problem, t, running, target_w)
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
    if not r.met and t + 1 < problem.n_periods:
        out["next_boundary"] = next_boundary(problem, t + 1, running, target_w)
    return out


def _problem(site: Site, settings: Settings) -> ScheduleProblem:
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
        problem = _problem(site, settings)
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


def replan_job(
    jobs: JobStore, site: Site, shed: dict[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """A ``site_plan`` job re-planning ``site`` from the period after the shed's, from
    the counts running in the shed's period; ``(job id or None, the answer's
    ``replan``)``. None when the shed's period is the horizon's last."""
    t = int(shed["period"])
    if t + 1 >= n_periods(site.body):
        return None, {"job_id": None, "reason": "the shed's period is the horizon's last"}
    state = {name: State(n_p=d["n_p"], n_d=d["n_d"]) for name, d in shed["deployments"].items()}
    req = SitePlanRequest(site_id=site.id, current=Current(period=t + 1, state=state))
    job, _ = jobs.create("site_plan", dump(req))
    return job.id, {
        "job_id": job.id,
        "status": job.status,
        "location": f"/v1/jobs/{job.id}",
        "from_period": t + 1,
        "site_version": site.version,
    }
