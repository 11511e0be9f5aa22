"""Fleets that persist (``/v1/fleets``; docs/fleet.md, section 6): registered sites planned
together, with the demand of origin regions routed among them.

A fleet is its member sites (ids of ``/v1/sites``) with the regions, routing and solver
of a fleet request. It holds no site data of its own: each member keeps its deployments,
grid signals, OpenADR events and forecasts (``POST /v1/sites/{id}/events``: the events
of one site), and ``POST /v1/fleets/{id}/plan`` plans the members as they are then,
through the same check and solve as ``POST /v1/fleet/schedule``. A plan says which
members changed since it was made (``stale``, ``changed_sites``). A member site is not
deleted while a fleet plans with it (409). ``POST /v1/fleets/{id}/sites/{site}/events``
merges an OpenADR event into one member, as the site's own route does, and plans the
fleet in the same request.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from formulation.fleet.request import parse_fleet
from formulation.infeasible import InfeasibleError
from model.errors import InputError
from service.fleets import registry
from service.fleets.schemas import FleetEventBody, FleetRegistration
from service.routers.busy import run_or_429
from service.routers.deps import ApiKey, PoolDep, SettingsDep
from service.routers.errors import Problem, problem_responses
from service.routers.site_common import SiteId, StoreDep, store_call
from service.runtime.fleetstore import FleetStore, fleet_store_for
from service.runtime.pool import SolvePool
from service.runtime.records import Fleet, FleetNotFound, Site, SiteNotFound
from service.runtime.settings import Settings
from service.runtime.store import Store
from service.sites import registry as site_registry
from service.sites.plans import plan_start
from service.usecases.rows import Checked, Context
from service.usecases.table import USE_CASES, observed, run

router = APIRouter(
    prefix="/v1/fleets",
    tags=["fleets"],
    dependencies=[ApiKey],
    responses=problem_responses(401, 503),
)

FleetId = Annotated[
    str,
    PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="fleet id"),
]


def get_fleets(settings: SettingsDep) -> FleetStore:
    return fleet_store_for(settings.database_url)


FleetsDep = Annotated[FleetStore, Depends(get_fleets)]


def _members(store: Store, ids: Sequence[str], field: str = "sites") -> list[Site]:
    """The member sites as they now are; an unknown one is the request's fault when it
    named it (422 naming ``sites[i]``)."""
    out = []
    for i, sid in enumerate(ids):
        try:
            out.append(store.get_site(sid))
        except SiteNotFound:
            raise InputError(f"{field}[{i}]", f"no registered site {sid!r}") from None
    return out


def _checked(settings: Settings, body: dict[str, Any], members: Sequence[Site]) -> Checked:
    """The fleet request of ``members`` with the fleet's ``body``, checked as ``POST
    /v1/fleet/schedule`` checks its request."""
    req = parse_fleet(registry.fleet_request(body, members))
    return USE_CASES["fleet_schedule"].check(req, settings, "")


def _fleet(fleets: FleetStore, fleet_id: str) -> Fleet:
    try:
        return fleets.get_fleet(fleet_id)
    except FleetNotFound:
        raise HTTPException(404, f"no fleet {fleet_id!r}") from None


@router.post("", status_code=201, responses=problem_responses(413, 422))
async def create_fleet(
    req: FleetRegistration, settings: SettingsDep, store: StoreDep, fleets: FleetsDep
) -> JSONResponse:
    """Register a fleet over registered sites; checked as a fleet schedule request over
    the sites as they are now. Returns its id."""
    name, ids, body = registry.fleet_body(req)
    members = await run_in_threadpool(_members, store, ids)
    await run_in_threadpool(_checked, settings, body, members)
    try:
        fleet = await run_in_threadpool(fleets.create_fleet, name, ids, body)
    except SiteNotFound as e:  # deleted meanwhile
        at = f"sites[{ids.index(e.site_id)}]"
        raise InputError(at, f"no registered site {e.site_id!r}") from None
    return JSONResponse(
        registry.fleet_doc(fleet, members),
        status_code=201,
        headers={"Location": f"/v1/fleets/{fleet.id}"},
    )


@router.get("")
async def list_fleets(fleets: FleetsDep) -> dict[str, Any]:
    """Every registered fleet: id, name, version and member sites."""
    found = await run_in_threadpool(fleets.list_fleets)
    return {
        "fleets": [
            {"id": f.id, "name": f.name, "version": f.version, "sites": list(f.site_ids)}
            for f in found
        ]
    }


@router.get("/{fleet_id}", responses=problem_responses(404, 422))
async def get_fleet(fleet_id: FleetId, store: StoreDep, fleets: FleetsDep) -> dict[str, Any]:
    """The fleet as stored, with its members' names."""
    fleet = await run_in_threadpool(_fleet, fleets, fleet_id)
    members = await run_in_threadpool(_members, store, fleet.site_ids)
    return registry.fleet_doc(fleet, members)


@router.delete("/{fleet_id}", status_code=204, responses=problem_responses(404, 422))
async def delete_fleet(fleet_id: FleetId, fleets: FleetsDep) -> Response:
    """Delete the fleet and its plans; its member sites stay."""
    try:
        await run_in_threadpool(fleets.delete_fleet, fleet_id)
    except FleetNotFound:
        raise HTTPException(404, f"no fleet {fleet_id!r}") from None
    return Response(status_code=204)


async def _plan_now(
    fleet: Fleet, settings: Settings, pool: SolvePool, store: Store, fleets: FleetStore
) -> dict[str, Any]:
    """Plan the fleet's members as they are now and keep the plan (as answered)."""
    members = await run_in_threadpool(_members, store, fleet.site_ids)
    checked = await run_in_threadpool(_checked, settings, fleet.body, members)
    uc = USE_CASES["fleet_schedule"]
    t0 = time.perf_counter()
    ctx = Context(pool.memory_budget_mb, settings.kernels)
    doc = await run_or_429(pool, settings.retry_after_s, run, uc.kind, checked, ctx)
    observed(uc, t0, doc)
    versions = {m.id: m.version for m in members}
    start = plan_start(members[0].body)
    try:
        plan = await run_in_threadpool(
            fleets.add_plan, fleet, versions, start, doc["status"], doc, time.perf_counter() - t0
        )
    except FleetNotFound:  # deleted while it was being planned
        raise HTTPException(404, f"no fleet {fleet.id!r}") from None
    return registry.plan_doc(fleet, plan, members)


@router.post("/{fleet_id}/plan", responses=problem_responses(404, 413, 422, 429))
async def plan_fleet(
    fleet_id: FleetId,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    fleets: FleetsDep,
) -> dict[str, Any]:
    """Plan the fleet's members as they are now (their events and forecasts merged), as
    ``POST /v1/fleet/schedule`` plans a fleet request, and keep the plan."""
    fleet = await run_in_threadpool(_fleet, fleets, fleet_id)
    return await _plan_now(fleet, settings, pool, store, fleets)


@router.post(
    "/{fleet_id}/sites/{site_id}/events", responses=problem_responses(404, 409, 413, 422, 429)
)
async def post_site_event(
    fleet_id: FleetId,
    site_id: SiteId,
    body: FleetEventBody,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    fleets: FleetsDep,
) -> Any:
    """Merge an OpenADR 3.1.0 event into one member site's grid signals (as ``POST
    /v1/sites/{id}/events`` merges it: the same event posted twice is merged once), then
    plan the fleet: the regions' demand moves to the other sites where the event makes
    that cheaper. Answers the event as merged and the fleet's new plan."""
    fleet = await run_in_threadpool(_fleet, fleets, fleet_id)
    if site_id not in fleet.site_ids:
        raise HTTPException(404, f"site {site_id!r} is not a member of fleet {fleet_id!r}")
    _site, event = await store_call(
        site_registry.merge_event, store, site_id, body.event, event_field="event"
    )
    try:
        return {"event": event, **await _plan_now(fleet, settings, pool, store, fleets)}
    except HTTPException as e:  # every worker busy, or the worker died: the event stands
        if e.status_code not in (429, 503):
            raise
        why = "every solver worker is busy" if e.status_code == 429 else "the solver worker died"
        return JSONResponse(
            {
                "event": event,
                "plan": None,
                "detail": f"event stored; {why}: POST /v1/fleets/{fleet_id}/plan later",
            },
            status_code=202,
        )
    except InfeasibleError as e:
        raise Problem(
            422,
            "Infeasible schedule problem",
            f"the event was stored but no schedule meets the fleet: {e}",
            "/problems/infeasible",
            conflicts=e.conflicts,
            stored=True,
            event=event,
        ) from None


@router.get("/{fleet_id}/plan", responses=problem_responses(404, 422))
async def latest_plan(fleet_id: FleetId, store: StoreDep, fleets: FleetsDep) -> dict[str, Any]:
    """The latest plan; ``stale`` when a member site changed since (``changed_sites``)."""
    fleet = await run_in_threadpool(_fleet, fleets, fleet_id)
    plan = await run_in_threadpool(fleets.latest_plan, fleet_id)
    if plan is None:
        raise HTTPException(
            404, f"fleet {fleet_id!r} has no plan yet: POST /v1/fleets/{fleet_id}/plan"
        )
    members = await run_in_threadpool(_members, store, fleet.site_ids)
    return registry.plan_doc(fleet, plan, members)
