"""Read-only JSON routes of the console (``/ui/api/...``): what a page shows at once,
gathered from the store with the same calls the ``/v1`` routes make.

* ``GET /ui/api/config``: whether this server wants an API key (no key needed to ask).
* ``GET /ui/api/sites``: every site with its GPUs, deployments, latest plan in brief
  (status, gap, the objective and its terms: energy cost, carbon cost, value of
  unserved demand, transitions; peak power against the cap there), the plan's period
  now (``now``: draw against cap, headroom, price, carbon, each deployment's counts and
  settings) and its events, each dated on the site's periods with its cap, with the
  next one (a posted event or a run of periods whose cap the site's own grid signals
  lower below the horizon's highest); and the fleets it is a member of, each with its
  latest plan in brief and the site's shares of the regions now
  (:func:`service.fleets.registry.memberships`).
* ``GET /ui/api/sites/{id}``: the same for one site.
* ``GET /ui/api/fleets``: every fleet with its member sites and its latest plan in brief
  (status, gap, objective, stale and the members changed since).
* ``GET /ui/api/sites/{id}/page``: a site's page in one answer: the same brief, each
  event with its effect (:mod:`service.console.summary`: the power and energy it shed and what it
  cost, between the plan before it and the plan its re-plan made), the site, its
  latest plan and its replica targets now as the ``/v1`` routes answer them.
* ``GET /ui/api/jobs``: the jobs (queued, running, and the newest of each finished
  status), newest first, without their requests and results but with the solver's
  trace (time, best objective, proven bound) once they have one, each with its site's
  name, what asked for it (``trigger``) and how long it ran (``duration_s``); and the
  plans synchronous requests made (``plans``), which no job lists.

Every route but the first needs the API key when one is set, as the sites do.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.concurrency import run_in_threadpool

from service.console.summary import summary
from service.fleets.registry import fleets_brief, memberships
from service.routers.deps import ApiKey, SettingsDep
from service.routers.errors import problem_responses
from service.runtime.fleetstore import fleet_store_for
from service.runtime.job import FINAL, Job, JobNotFound
from service.runtime.jobstore import job_store
from service.runtime.records import Plan, PlanHead, Site, SiteNotFound
from service.runtime.store import store_for
from service.sites.plans import plan_doc
from service.sites.registry import NoPeriod, periods_at, site_doc, targets_doc

router = APIRouter(prefix="/ui/api", tags=["console"])

STATUSES = ("queued", "running", *FINAL)


@router.get("/config")
def config(settings: SettingsDep) -> dict[str, Any]:
    """What the console needs before anything else: whether to ask for an API key."""
    return {"api_key_required": settings.api_key is not None}


def _read(
    url: str,
    site_id: str,
    effects: bool = False,
    fleets: dict[str, list[dict[str, Any]]] | None = None,
) -> tuple[Site, Plan | None, dict[str, Any]]:
    """The site, its latest plan, and the site in brief (its events' effects too) with
    its fleets (``fleets``: every site's, when the caller read them already)."""
    store = store_for(url)
    site = store.get_site(site_id)
    plan = store.latest_plan(site_id)
    rows = store.list_events(site_id)
    if fleets is None:  # this site's fleets only
        fleets = memberships(fleet_store_for(url), store, datetime.now(UTC), site_id)
    brief = summary(site, plan, rows, store if effects else None)
    return site, plan, brief | {"fleets": fleets.get(site_id, [])}


def _site_summary(
    url: str, site_id: str, fleets: dict[str, list[dict[str, Any]]] | None = None
) -> dict[str, Any]:
    return _read(url, site_id, fleets=fleets)[2]


@router.get("/sites", dependencies=[ApiKey], responses=problem_responses(401))
async def sites(settings: SettingsDep) -> dict[str, Any]:
    """Every site in brief (see the module's doc), oldest first."""

    def gather() -> list[dict[str, Any]]:
        url = settings.database_url
        store = store_for(url)
        fleets = memberships(fleet_store_for(url), store, datetime.now(UTC))
        out = []
        for s in store.list_sites():
            try:
                out.append(_site_summary(url, s["id"], fleets))
            except SiteNotFound:  # deleted meanwhile
                continue
        return out

    return {"sites": await run_in_threadpool(gather)}


@router.get("/fleets", dependencies=[ApiKey], responses=problem_responses(401))
async def fleets(settings: SettingsDep) -> dict[str, Any]:
    """Every fleet in brief (:func:`service.fleets.registry.fleets_brief`), oldest first."""
    url = settings.database_url
    return {"fleets": await run_in_threadpool(fleets_brief, fleet_store_for(url), store_for(url))}


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
    """What a site's page shows, in one answer: the site in brief (``summary``, each
    event with its effect: power and energy shed, cost), the site
    as ``GET /v1/sites/{id}`` answers it (``site``), its latest plan as ``GET
    /v1/sites/{id}/plan`` does (``plan``, null before the first) and the plan's replica
    targets now as ``GET /v1/sites/{id}/targets/now`` does (``targets_now``: its
    ``period`` and ``targets``; null when the plan does not cover now)."""

    def gather() -> dict[str, Any]:
        site, plan, summary = _read(settings.database_url, site_id, effects=True)
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


def _duration_s(job: Job, now: datetime) -> float | None:
    """How long the job ran: from its start to its end (to now while it runs)."""
    if job.started is None:
        return None
    return ((job.finished or now) - job.started).total_seconds()


def _job_doc(job: Job, names: dict[str, str], now: datetime) -> dict[str, Any]:
    doc = job.document()
    doc.pop("result", None)
    doc["trace"] = _trace(job.result)
    site_id = job.request.get("site_id")
    doc["site_id"] = site_id
    doc["site_name"] = names.get(site_id) if isinstance(site_id, str) else None
    doc["duration_s"] = _duration_s(job, now)
    return doc


def _plan_row(h: PlanHead, names: dict[str, str]) -> dict[str, Any]:
    return {
        "plan_id": h.id,
        "site_id": h.site_id,
        "site_name": names.get(h.site_id),
        "site_version": h.site_version,
        "status": h.status,
        "first_period": h.first_period,
        "created": h.created.isoformat(),
        "duration_s": h.duration_s,
        "trigger": h.trigger,
    }


@router.get("/jobs", dependencies=[ApiKey], responses=problem_responses(401, 422))
async def jobs(
    settings: SettingsDep,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=500,
            description="jobs listed of each finished status, and synchronous plans, newest",
        ),
    ] = 50,
) -> dict[str, Any]:
    """Queued and running jobs, and the newest ``limit`` of each finished status
    (succeeded, failed, cancelled); newest first. Each with its site's name
    (``site_name``: null for a job of no site, or of a site deleted since), what asked
    for it (``trigger``) and how long it ran (``duration_s``, to now while it runs).
    ``plans``: the newest ``limit`` plans synchronous requests made (a plan, event,
    retraction or forecast answered with its plan), with site, trigger and how long
    each took."""

    def gather() -> dict[str, Any]:
        store = job_store(settings.database_url)
        sites = store_for(settings.database_url)
        names = {s["id"]: s["name"] for s in sites.list_sites()}
        now = datetime.now(UTC)
        out = []
        for status in STATUSES:
            ids = store.with_status(status)
            for job_id in ids[-limit:] if status in FINAL else ids:
                try:
                    job = store.get(job_id)
                except JobNotFound:
                    continue
                out.append(_job_doc(job, names, now))
        out.sort(key=lambda d: d["created"], reverse=True)
        plans = sites.plan_heads(synchronous=True, limit=limit)
        return {"jobs": out, "plans": [_plan_row(h, names) for h in plans]}

    return await run_in_threadpool(gather)
