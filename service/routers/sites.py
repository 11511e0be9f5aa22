"""Sites that persist: register, plan, take OpenADR events and forecasts, re-plan, and
hand per-period replica targets to an autoscaler.

A site is a schedule request (SPEC 6.1) kept under an id, plus ``name`` and
``plan_start`` (the wall-clock start of period 0). Its latest plan is kept, and every
OpenADR 3.1.0 event posted against it is merged into its stored grid signals (see
:mod:`service.sites.openadr`) and logged.

Choices where the issue is silent:

* ``current`` {``period``, ``state``} on a plan, event or forecast post re-plans the
  periods from ``current.period`` on, starting from ``state`` (every deployment's
  running ``n_p``, ``n_d``), so transition limits hold from that state. The plan then
  covers only those periods (its period indices stay those of the full horizon).
  ``current`` is checked against the site the update makes before anything is stored
  (:func:`service.sites.plans.check_current`): an update refused with a 4xx stores
  nothing.
* An event or forecast is stored first and the site re-planned after. When no schedule
  meets it, the answer is a 422 problem (``/problems/infeasible``) that says the update
  was stored (with the answer's ``event``: its id, to retract it); when every solver
  worker is busy it is 202 with ``plan`` null. The latest
  plan is then ``stale``: computed from an older version of the site.
* "Latest plan" is the plan of the newest site version (then the last stored), so two
  concurrent posts can't leave the plan of the older version on top.
* ``?replan=job`` on an event or forecast post hands the re-plan to a ``site_plan`` job
  (:mod:`service.runtime.jobstore`) instead: 202 at once with the job's id and ``Location``, whose
  progress (best schedule, bound, gap) ``GET /v1/jobs/{id}`` reports as it runs and
  whose result is the plan (an infeasible site fails the job with the problem).
* The same event posted twice (same canonical JSON) is merged once, and while the
  latest plan was made from the site as it is, not re-planned again
  (:func:`service.sites.registry.in_force`: ``replanned`` false).
* ``DELETE .../events/{id}`` retracts an event: kept in the log, marked retracted;
  the grid recomputed from the one the site was registered with and the events merged
  since that are not retracted (:func:`service.sites.registry.without_event`), then re-planned
  as after an event post.
* ``PUT`` replaces the whole site (events merged before are replaced with it);
  ``If-Match: "<version>"`` on ``PUT`` refuses a replace over a newer version (412).
* Every endpoint here, reads included, needs the API key when one is set: sites hold
  a site's demand and grid contract.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Response
from fastapi.responses import JSONResponse

from service.routers.busy import worker_lost
from service.routers.deps import PoolDep, SettingsDep
from service.routers.site_common import (
    SiteId,
    StoreDep,
    busy,
    etag,
    if_match_version,
    latest_of,
    problems,
    replan_now,
    sites_router,
    store_call,
)
from service.runtime.pool import PoolFull, WorkerLost
from service.runtime.records import (
    Update,
)
from service.sites import registry as sites
from service.sites.plans import plan_doc
from service.sites.schemas import (
    PlanBody,
    SiteRequest,
)

router = sites_router()


@router.post("", status_code=201, responses=problems(413, 422))
async def create_site(req: SiteRequest, settings: SettingsDep, store: StoreDep) -> JSONResponse:
    """Register a site (a schedule request plus `name` and `plan_start`); returns its id."""
    name, body = sites.site_body(req, settings)
    site = await store_call(store.create_site, name, body)
    return JSONResponse(
        sites.site_doc(site),
        status_code=201,
        headers={**etag(site.version), "Location": f"/v1/sites/{site.id}"},
    )


@router.get("")
async def list_sites(store: StoreDep) -> dict[str, Any]:
    """Every registered site: id, name, version."""
    return {"sites": await store_call(store.list_sites)}


@router.get("/{site_id}", responses=problems(404, 422))
async def get_site(site_id: SiteId, store: StoreDep) -> JSONResponse:
    """The site as stored (grid signals include the events merged so far)."""
    site = await store_call(store.get_site, site_id)
    return JSONResponse(sites.site_doc(site), headers=etag(site.version))


@router.put("/{site_id}", responses=problems(404, 409, 412, 413, 422))
async def replace_site(
    site_id: SiteId,
    req: SiteRequest,
    settings: SettingsDep,
    store: StoreDep,
    if_match: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """Replace the whole site; `If-Match: "<version>"` guards against a newer version."""
    name, body = sites.site_body(req, settings)
    site, _ = await store_call(
        store.update_site,
        site_id,
        lambda _s: Update(name, body, registers=True),
        if_match_version(if_match),
    )
    return JSONResponse(sites.site_doc(site), headers=etag(site.version))


@router.delete("/{site_id}", status_code=204, responses=problems(404, 422))
async def delete_site(site_id: SiteId, store: StoreDep) -> Response:
    """Delete the site, its plans and its events."""
    await store_call(store.delete_site, site_id)
    return Response(status_code=204)


@router.post(
    "/{site_id}/plan",
    responses=problems(404, 413, 422, 429),
)
async def plan_site(
    site_id: SiteId,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    body: PlanBody | None = None,
) -> JSONResponse:
    """Solve the stored request (or, with `current`, its remaining periods) and keep it."""
    site = await store_call(store.get_site, site_id)
    current = body.current if body else None
    try:
        doc = await replan_now(settings, pool, site, current, "user")
    except PoolFull:
        raise busy(settings) from None
    except WorkerLost:
        raise worker_lost(settings.retry_after_s) from None
    return JSONResponse(doc)


@router.get("/{site_id}/plan", responses=problems(404, 422))
async def latest_plan(site_id: SiteId, store: StoreDep) -> dict[str, Any]:
    """The latest plan; `stale` when the site changed after it was computed."""
    site, plan = await latest_of(store, site_id)
    return plan_doc(plan, site.version)
