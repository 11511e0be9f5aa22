"""Registered sites: the use cases behind ``/v1/sites`` that are not planning
(:mod:`service.sites.plans`): what a registration stores, how an OpenADR event or a
demand forecast changes a site (an event merged once, whoever posts it twice or at the
same time) and how a retracted event stops changing it, what follows when the re-plan
after an update cannot be made, and the replica targets of a plan. No HTTP here: the
router maps these results and errors to responses.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from formulation.infeasible import InfeasibleError
from formulation.problem import Host, problem_from_dict
from model.errors import InputError
from service.requests.limits import check_schedule
from service.requests.schemas import dump
from service.runtime.pool import PoolFull, WorkerLost
from service.runtime.records import EventRecord, EventRetracted, Plan, Site, Update
from service.runtime.settings import Settings
from service.runtime.store import Store
from service.sites import targets as site_targets
from service.sites.openadr import OadrEvent
from service.sites.plans import (
    Current,
    check_current,
    n_periods,
    period,
    plan_doc,
    plan_start,
    request_of,
)
from service.sites.schemas import ForecastBody, SiteRequest
from service.sites.signals import event_to_signals, merge_signals


class NoPeriod(LookupError):
    """The plan has no period at the time asked for."""


def site_body(req: SiteRequest, settings: Settings) -> tuple[str, dict[str, Any]]:
    """The name and the stored body of a site registration, checked as ``POST
    /v1/schedule`` checks its request (limits, memory), and its clock; the body has
    this server's defaults (``req`` itself is left as it is)."""
    req, _ = check_schedule(req, settings)
    body = dump(req)
    name = body.pop("name")
    try:
        req.plan_start + timedelta(minutes=req.period_minutes) * (n_periods(body) + 1)
    except OverflowError:
        raise InputError("plan_start", "the horizon ends past the year 9999") from None
    return name, body


def site_doc(site: Site) -> dict[str, Any]:
    return {
        "id": site.id,
        "name": site.name,
        "version": site.version,
        "created": site.created.isoformat(),
        "updated": site.updated.isoformat(),
        **site.body,
    }


@dataclass(frozen=True)
class Replan:
    """The re-plan an update asks for: from ``current`` (None: the whole horizon), on a
    server whose solves allow ``host``."""

    current: Current | None
    host: Host


def checked(update: Update, replan: Replan | None = None) -> Update:
    """The update, once its body passes the checks of a schedule request and the
    ``current`` of its re-plan passes those of the site it makes
    (:func:`service.sites.plans.check_current`): nothing that a registration would
    refuse, and no update whose re-plan would refuse its ``current``, is ever stored."""
    problem_from_dict(request_of(update.body))
    if replan is not None:
        check_current(update.body, replan.current, replan.host)
    return update


def event_signals(body: dict[str, Any], event: OadrEvent | dict[str, Any]) -> dict[str, Any]:
    """The grid signals an OpenADR event gives on the periods of a site's ``body``
    (:func:`service.sites.signals.event_to_signals`); :class:`InputError` naming the
    field at fault."""
    return event_to_signals(event, plan_start(body), body["period_minutes"], n_periods(body))


def with_event(
    site: Site, event: OadrEvent, doc: dict[str, Any], replan: Replan | None = None
) -> tuple[Update, dict[str, Any]]:
    """The site with an OpenADR event merged into its grid signals (the event ``doc``
    logged with it), and the signals the event gave; the re-plan's ``current`` checked
    against it (:class:`Replan`)."""
    signals = event_signals(site.body, event)
    grid = merge_signals(site.body["grid"], signals, n_periods(site.body))
    return checked(Update(site.name, {**site.body, "grid": grid}, doc), replan), signals


def with_forecast(
    site: Site, demand_rps: dict[str, list[float]], start: int, replan: Replan | None = None
) -> Update:
    """The site with the demand of the named deployments replaced from period
    ``start`` on (a series may be shorter than the rest of the horizon); the re-plan's
    ``current`` checked against it (:class:`Replan`)."""
    n = n_periods(site.body)
    if start >= n:
        raise InputError("from_period", f"must be < {n} (the horizon has {n} periods)")
    names = [d["name"] for d in site.body["deployments"]]
    for name, series in demand_rps.items():
        if name not in names:
            raise InputError(f"demand_rps.{name}", f"no such deployment; known: {names}")
        if start + len(series) > n:
            raise InputError(
                f"demand_rps.{name}",
                f"has {len(series)} values but only {n - start} periods remain from period {start}",
            )
    deps = []
    for d in site.body["deployments"]:
        new = demand_rps.get(d["name"])
        demand = list(d["demand_rps"])
        if new is not None:
            demand[start : start + len(new)] = new
        deps.append({**d, "demand_rps": demand})
    return checked(Update(site.name, {**site.body, "deployments": deps}), replan)


def merge_event(
    store: Store, site_id: str, event: OadrEvent, replan: Replan | None = None
) -> tuple[Site, dict[str, Any]]:
    """Merge ``event`` into site ``site_id`` once: the same event posted again (or by
    a concurrent post that merged it first) is checked the same way and writes
    nothing. The site as it now is, and the answer's ``event``: its id, whether it was
    a duplicate, and the signals it gave."""
    doc = event.model_dump(mode="json", exclude_none=True)
    seen: dict[str, Any] = {}

    def change(site: Site) -> Update:
        update, seen["signals"] = with_event(site, event, doc, replan)
        return update

    duplicate = store.find_event(site_id, doc)
    if duplicate is not None:
        site = store.get_site(site_id)
        change(site)  # the same checks and signals, nothing written
        event_id: int | None = duplicate
    else:
        site, event_id = store.update_site(site_id, change)
        if event_id is None:  # merged meanwhile by a concurrent post of the same event
            event_id = store.find_event(site_id, doc)
            duplicate = event_id
    if duplicate is not None:
        record = store.get_event(site_id, duplicate)
        if record.retracted is not None:  # its grid no longer holds it: say so
            raise EventRetracted(
                record,
                "; the same event is not merged again: send it as a new one (another "
                "id or modificationDateTime)",
            )
    sig = seen["signals"]
    return site, {
        "id": event_id,
        "duplicate": duplicate is not None,
        "programID": event.programID,
        "eventName": event.eventName,
        "types": sig["types"],
        "periods": sig["periods"],
        "notes": sig["notes"],
        "signals": sig,
    }


def in_force(site: Site, latest: Plan | None, answer: dict[str, Any]) -> dict[str, Any] | None:
    """The answer to an event post that needs no re-plan: the event was a duplicate
    (its merge wrote nothing: it is in force, merged and not retracted) and the
    ``latest`` plan was made from the site as it now is, so with the event. That plan,
    ``replanned`` false and why; None when a re-plan is due (not a duplicate, no plan
    yet, or a plan older than the site: an earlier re-plan put off or refused)."""
    if not answer["event"]["duplicate"] or latest is None or not made_with(site, latest):
        return None
    return answer | {
        "plan": plan_doc(latest, site.version),
        "replanned": False,
        "detail": planned_with(answer["event"]["id"], latest, site.version),
    }


def made_with(site: Site, latest: Plan) -> bool:
    """Whether the ``latest`` plan was made from the site as it now is (its events
    included)."""
    return latest.site_version == site.version


def planned_with(event_id: int, latest: Plan, version: int) -> str:
    """Why an event posted again is not re-planned: in force, and the ``latest`` plan
    made from the site at ``version`` with it."""
    return (
        f"event {event_id} is already in force and the latest plan ({latest.id}) was made "
        f"with it (site version {version}): not re-planned"
    )


class RegisteredGridUnknown(LookupError):
    """The site's grid as registered is not kept (a site registered before it was,
    with events merged since): its grid cannot be recomputed without an event."""


def without_event(
    site: Site, events: list[EventRecord], event_id: int, replan: Replan | None = None
) -> Update:
    """The site with its grid recomputed without event ``event_id``: the grid of its
    last registration with every event merged since (``events``: the site's log) that
    is neither retracted nor that one, in the order they were merged; the re-plan's
    ``current`` checked against it (:class:`Replan`)."""
    if site.registered_grid is None or site.registered_version is None:
        raise RegisteredGridUnknown(
            f"site {site.id!r} was registered before its registered grid was kept, and "
            "events were merged since: PUT the site to register its grid again"
        )
    since = site.registered_version
    live = sorted(
        (e for e in events if e.id != event_id and e.retracted is None and e.site_version > since),
        key=lambda e: e.site_version,
    )
    n = n_periods(site.body)
    grid = site.registered_grid
    for e in live:
        grid = merge_signals(grid, event_signals(site.body, e.event), n)
    return checked(Update(site.name, {**site.body, "grid": grid}), replan)


def retract_event(
    store: Store, site_id: str, event_id: int, replan: Replan | None = None
) -> tuple[Site, dict[str, Any]]:
    """Retract event ``event_id`` of site ``site_id``: it stays in the log, marked
    retracted, and the site's grid is recomputed without it (:func:`without_event`).
    The site as it now is, and the answer's ``event``: its id, when it was retracted,
    and whether it was in effect (merged since the site's last registration; an event
    a PUT replaced was not)."""
    site, record = store.retract_event(
        site_id, event_id, lambda s, events: without_event(s, events, event_id, replan)
    )
    since = site.registered_version  # kept: without_event needs it
    return site, {
        "id": record.id,
        "retracted": None if record.retracted is None else record.retracted.isoformat(),
        "retracted_version": record.retracted_version,
        "in_effect": since is not None and record.site_version > since,
    }


def merge_forecast(
    store: Store, site_id: str, forecast: ForecastBody, host: Host
) -> tuple[Site, dict[str, Any]]:
    """Replace the demand of the named deployments from ``forecast.from_period`` on
    (default: ``current.period``, else 0), its ``current`` checked first against the
    site it makes (re-plans on a server whose solves allow ``host``). The site as it
    now is, and the answer's ``site_version`` and ``from_period``."""
    start = forecast.from_period
    if start is None:
        start = forecast.current.period if forecast.current is not None else 0
    replan = Replan(forecast.current, host)
    site, _ = store.update_site(
        site_id, lambda s: with_forecast(s, forecast.demand_rps, start, replan)
    )
    return site, {"site_version": site.version, "from_period": start}


class StoredButInfeasible(InfeasibleError):
    """An update was stored, but no schedule meets the site it made."""

    def __init__(self, site_version: int, cause: InfeasibleError) -> None:
        super().__init__(
            f"the update was stored (site version {site_version}) but no schedule meets "
            f"it: {cause}",
            cause.conflicts,
        )
        self.site_version = site_version


@dataclass(frozen=True)
class Replanned:
    """The answer to an update: ``answer`` with its ``plan`` (null when the re-plan
    was put off: ``postponed``)."""

    answer: dict[str, Any]
    postponed: bool = False


async def replan_after_update(
    replan: Callable[[], Awaitable[dict[str, Any]]], site: Site, answer: dict[str, Any]
) -> Replanned:
    """Re-plan a site that was just updated; the update stands whatever happens. Every
    solver worker busy, or the worker died: the plan is put off (``plan`` null, and
    when to ask again). No schedule meets the site: :class:`StoredButInfeasible`."""
    try:
        answer["plan"] = await replan()
    except (PoolFull, WorkerLost) as e:
        why = "every solver worker is busy" if isinstance(e, PoolFull) else "the solver worker died"
        answer["plan"] = None
        answer["detail"] = f"update stored; {why}: POST /v1/sites/{site.id}/plan later"
        return Replanned(answer, postponed=True)
    except InfeasibleError as e:
        raise StoredButInfeasible(site.version, e) from None
    return Replanned(answer)


def targets_doc(site: Site, plan: Plan, periods: list[dict[str, Any]]) -> dict[str, Any]:
    """The replica targets of ``periods`` of the plan, with each period's GPU power
    limit (:mod:`service.sites.targets`)."""
    pue, idle_w = site_targets.site_power(plan.response, site.body)
    return {
        "site_id": site.id,
        "plan_id": plan.id,
        "plan_created": plan.created.isoformat(),
        "stale": plan.site_version < site.version,
        "period_minutes": plan.response["period_minutes"],
        "targets": site_targets.targets(plan.response, periods),
        "periods": site_targets.period_limits(periods, pue, idle_w),
    }


def targets_csv(doc: dict[str, Any]) -> str:
    return site_targets.targets_csv(doc)


def periods_at(plan: Plan, when: datetime) -> tuple[int, list[dict[str, Any]]]:
    """The period index the plan's clock is in at ``when`` and its periods; raises
    :class:`NoPeriod` when the plan does not cover it."""
    start, step = plan_start(plan.response), period(plan.response)  # the plan's own clock
    t = math.floor((when - start) / step)
    periods = [p for p in plan.response["schedule"]["periods"] if p["index"] == t]
    if not periods:
        first, n = plan.first_period, plan.response["n_periods"]
        raise NoPeriod(
            f"the latest plan has no period at {when.isoformat()}: it covers "
            f"[{(start + step * first).isoformat()}, {(start + step * n).isoformat()})"
        )
    return t, periods
