"""Read-only JSON routes of the console (``/ui/api/...``): what a page shows at once,
gathered from the store with the same calls the ``/v1`` routes make.

* ``GET /ui/api/config``: whether this server wants an API key (no key needed to ask).
* ``GET /ui/api/sites``: every site with its GPUs, deployments, latest plan in brief
  (status, gap, cost, peak power against the cap there) and its events, each dated on
  the site's periods, with the next one.
* ``GET /ui/api/sites/{id}``: the same for one site.
* ``GET /ui/api/sites/{id}/page``: a site's page in one answer: the same brief, the site,
  its latest plan and its replica targets now as the ``/v1`` routes answer them.
* ``GET /ui/api/jobs``: the jobs (queued, running, and the newest of each finished
  status), newest first, without their requests and results but with the solver's
  trace (time, best objective, proven bound) once they have one.

Every route but the first needs the API key when one is set, as the sites do.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.concurrency import run_in_threadpool

from model.errors import InputError
from service.deps import ApiKey, SettingsDep
from service.errors import problem_responses
from service.jobs import FINAL, JobNotFound, job_store
from service.site_plans import n_periods, period, plan_doc, plan_head, plan_start
from service.sites import NoPeriod, event_signals, periods_at, site_doc, targets_doc
from service.store import EventRecord, Plan, Site, SiteNotFound, store_for

router = APIRouter(prefix="/ui/api", tags=["console"])

#: a period's site power at its cap within this relative tolerance is "at the cap"
AT_CAP_RTOL = 1e-6
STATUSES = ("queued", "running", *FINAL)


@router.get("/config")
def config(settings: SettingsDep) -> dict[str, Any]:
    """What the console needs before anything else: whether to ask for an API key."""
    return {"api_key_required": settings.api_key is not None}


def _events(site: Site, rows: list[EventRecord]) -> list[dict[str, Any]]:
    """The site's events with the periods they touch on its clock (``first_period``
    null for one that no longer lies in the horizon of the site as it is now) and when
    each was retracted (``retracted``, null while it holds)."""
    body = site.body
    start, step = plan_start(body), period(body)
    out = []
    for r in rows:
        ev: dict[str, Any] = {
            "id": r.id,
            "received": r.received.isoformat(),
            "programID": r.event.get("programID"),
            "eventName": r.event.get("eventName"),
            "first_period": None,
            "end_period": None,
            "types": [],
            "retracted": None if r.retracted is None else r.retracted.isoformat(),
        }
        try:
            sig = event_signals(body, r.event)
        except InputError as e:
            ev["note"] = f"{e.field}: {e.reason}"
        else:
            touched = sorted(sig["periods"])
            if touched:
                first, end = touched[0], touched[-1] + 1
                ev |= {
                    "first_period": first,
                    "end_period": end,
                    "start": (start + step * first).isoformat(),
                    "end": (start + step * end).isoformat(),
                }
            ev["types"] = sig["types"]
        out.append(ev)
    return out


def _plan_brief(plan: Plan, site: Site) -> dict[str, Any]:
    sched = plan.response["schedule"]
    periods = sched["periods"]
    peak = max(periods, key=lambda p: p["power_w"])
    return {
        **plan_head(plan, site.version),
        "mip_gap": sched.get("mip_gap"),
        "objective_usd": sched["objective_usd"],
        "unserved_value_usd": sched["totals"]["unserved_value_usd"],
        "first_period": plan.first_period,
        "peak_power_w": peak["power_w"],
        "peak_period": peak["index"],
        "cap_at_peak_w": peak["power_cap_w"],
        "periods_at_cap": sum(
            p["power_w"] >= p["power_cap_w"] * (1 - AT_CAP_RTOL) for p in periods
        ),
    }


def _summary(site: Site, plan: Plan | None, rows: list[EventRecord]) -> dict[str, Any]:
    body = site.body
    events = _events(site, rows)
    now = datetime.now(UTC)
    coming = [
        e
        for e in events
        if e.get("end") is not None
        and datetime.fromisoformat(e["end"]) > now
        and e["retracted"] is None  # a retracted event no longer comes
    ]
    return {
        "id": site.id,
        "name": site.name,
        "version": site.version,
        "plan_start": body["plan_start"],
        "period_minutes": body["period_minutes"],
        "n_periods": n_periods(body),
        "gpu_inventory": body["site"]["gpu_inventory"],
        "deployments": [
            {"name": d["name"], "model": d["model"], "gpu": d["gpu"]} for d in body["deployments"]
        ],
        "plan": None if plan is None else _plan_brief(plan, site),
        "events": events,
        "next_event": min(coming, key=lambda e: e["start"]) if coming else None,
    }


def _read(url: str, site_id: str) -> tuple[Site, Plan | None, dict[str, Any]]:
    """The site, its latest plan, and the site in brief."""
    store = store_for(url)
    site = store.get_site(site_id)
    plan = store.latest_plan(site_id)
    return site, plan, _summary(site, plan, store.list_events(site_id))


def _site_summary(url: str, site_id: str) -> dict[str, Any]:
    return _read(url, site_id)[2]


@router.get("/sites", dependencies=[ApiKey], responses=problem_responses(401))
async def sites(settings: SettingsDep) -> dict[str, Any]:
    """Every site in brief (see the module's doc), oldest first."""

    def gather() -> list[dict[str, Any]]:
        out = []
        for s in store_for(settings.database_url).list_sites():
            try:
                out.append(_site_summary(settings.database_url, s["id"]))
            except SiteNotFound:  # deleted meanwhile
                continue
        return out

    return {"sites": await run_in_threadpool(gather)}


@router.get("/sites/{site_id}", dependencies=[ApiKey], responses=problem_responses(401, 404, 422))
async def site(
    site_id: Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")],
    settings: SettingsDep,
) -> dict[str, Any]:
    """One site in brief."""
    try:
        return await run_in_threadpool(_site_summary, settings.database_url, site_id)
    except SiteNotFound:
        raise HTTPException(404, f"no site {site_id!r}") from None


@router.get(
    "/sites/{site_id}/page", dependencies=[ApiKey], responses=problem_responses(401, 404, 422)
)
async def site_page(
    site_id: Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")],
    settings: SettingsDep,
) -> dict[str, Any]:
    """What a site's page shows, in one answer: the site in brief (``summary``), the site
    as ``GET /v1/sites/{id}`` answers it (``site``), its latest plan as ``GET
    /v1/sites/{id}/plan`` does (``plan``, null before the first) and the plan's replica
    targets now as ``GET /v1/sites/{id}/targets/now`` does (``targets_now``: its
    ``period`` and ``targets``; null when the plan does not cover now)."""

    def gather() -> dict[str, Any]:
        site, plan, summary = _read(settings.database_url, site_id)
        return {
            "summary": summary,
            "site": site_doc(site),
            "plan": None if plan is None else plan_doc(plan, site.version),
            "targets_now": None if plan is None else _targets_now(site, plan),
        }

    try:
        return await run_in_threadpool(gather)
    except SiteNotFound:
        raise HTTPException(404, f"no site {site_id!r}") from None


def _targets_now(site: Site, plan: Plan) -> dict[str, Any] | None:
    """The plan's replica targets of the period its clock is in now (None: not covered)."""
    try:
        t, periods = periods_at(plan, datetime.now(UTC))
    except NoPeriod:
        return None
    return targets_doc(site, plan, periods) | {"period": t}


def _trace(result: dict[str, Any] | None) -> list[Any] | None:
    """The solver's (seconds, best objective, bound) trace of a schedule or site plan."""
    if not result:
        return None
    sched = result.get("schedule", result)
    solver = sched.get("solver") if isinstance(sched, dict) else None
    return solver.get("trace") if isinstance(solver, dict) else None


@router.get("/jobs", dependencies=[ApiKey], responses=problem_responses(401, 422))
async def jobs(
    settings: SettingsDep,
    limit: Annotated[
        int, Query(ge=1, le=500, description="jobs listed of each finished status, newest")
    ] = 50,
) -> dict[str, Any]:
    """Queued and running jobs, and the newest ``limit`` of each finished status
    (succeeded, failed, cancelled); newest first."""

    def gather() -> list[dict[str, Any]]:
        store = job_store(settings.database_url)
        out = []
        for status in STATUSES:
            ids = store.with_status(status)
            for job_id in ids[-limit:] if status in FINAL else ids:
                try:
                    job = store.get(job_id)
                except JobNotFound:
                    continue
                doc = job.document()
                doc.pop("result", None)
                doc["trace"] = _trace(job.result)
                doc["site_id"] = job.request.get("site_id")
                out.append(doc)
        out.sort(key=lambda d: d["created"], reverse=True)
        return out

    return {"jobs": await run_in_threadpool(gather)}
