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

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from model.errors import InputError
from service.jobs.queue import RedisJobs
from service.jobs.runner import JobRunner
from service.requests.limits import solve_host
from service.requests.schemas import DateTimeText
from service.routers.deps import ApiKey, PoolDep, SettingsDep
from service.routers.errors import PROBLEM, PROBLEM_SCHEMA, Problem, problem, problem_responses
from service.runtime.job import replan_scope
from service.runtime.jobstore import job_store
from service.runtime.pool import PoolFull, SolvePool, WorkerLost, too_busy, worker_lost
from service.runtime.records import (
    Contention,
    EventNotFound,
    EventRetracted,
    Origin,
    Plan,
    Site,
    SiteNotFound,
    Update,
    VersionConflict,
)
from service.runtime.settings import Settings
from service.runtime.store import Store, store_for
from service.sites import registry as sites
from service.sites import shed as site_shed
from service.sites import shed_event
from service.sites.plans import Current, SitePlanRequest, plan_doc
from service.sites.schemas import (
    EventBody,
    ForecastBody,
    PlanBody,
    RetractBody,
    SiteRequest,
    Targets,
)
from service.usecases.rows import Checked, Context
from service.usecases.table import USE_CASES, observed, run

router = APIRouter(
    prefix="/v1/sites", tags=["sites"], dependencies=[ApiKey], responses=problem_responses(401, 503)
)

T = TypeVar("T")

SiteId = Annotated[
    str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="site id")
]

_DOCS = {
    404: "no such site (or no plan yet, or no planned period at that time)",
    409: "the site changed too often while this update was applied; retry",
    412: "If-Match names an older version of the site",
}


def _problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses of these error statuses (RFC 9457 problem details)."""
    out = problem_responses(*(c for c in codes if c not in _DOCS))
    for c in codes:
        if c in _DOCS:
            out[c] = {"description": _DOCS[c], "content": {PROBLEM: {"schema": PROBLEM_SCHEMA}}}
    return out


_ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {
        "description": "update stored; re-plan refused (every solver worker busy), or handed "
        "to a job (`?replan=job`: `job` is its id and status): `plan` null",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}

#: ``now``: re-plan within the request; ``job``: in a ``site_plan`` job, answered at once
Replan = Annotated[
    Literal["now", "job"],
    Query(description="`job`: re-plan in a site_plan job (202 with its id) instead of now"),
]


def get_store(settings: SettingsDep) -> Store:
    return store_for(settings.database_url)


StoreDep = Annotated[Store, Depends(get_store)]

# ---------------------------------------------------------------- helpers


async def _db(fn: Callable[..., T], *args: Any, event_field: str = "event_id", **kwargs: Any) -> T:
    """Run a store call off the event loop; map store errors to problems (an unknown or
    retracted event's naming ``event_field``, the field that named it)."""
    try:
        return await run_in_threadpool(fn, *args, **kwargs)
    except SiteNotFound as e:
        raise HTTPException(404, f"no site {e.site_id!r}") from None
    except EventNotFound as e:
        raise Problem(
            404,
            "Not Found",
            str(e),
            "/problems/no-such-event",
            errors=[{"field": event_field, "reason": f"no event {e.event_id} of this site"}],
        ) from None
    except EventRetracted as e:
        when = None if e.record.retracted is None else e.record.retracted.isoformat()
        reason = f"event {e.record.id} was retracted at {when}"
        raise Problem(
            409,
            "Conflict",
            str(e),
            "/problems/event-retracted",
            errors=[{"field": event_field, "reason": reason}],
            event_id=e.record.id,
            retracted=when,
            retracted_version=e.record.retracted_version,
        ) from None
    except VersionConflict as e:
        raise HTTPException(412, f"{e}; GET the site and retry") from None
    except (Contention, sites.RegisteredGridUnknown) as e:
        raise HTTPException(409, str(e)) from None


def _etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def _too_busy(settings: Settings) -> Exception:
    return too_busy(settings.retry_after_s)


async def _replan(
    settings: Settings, pool: SolvePool, site: Site, current: Current | None, trigger: str
) -> dict[str, Any]:
    """Plan ``site`` and keep the plan (with what asked for it, ``trigger``): the
    ``site_plan`` use case, as its job runs it (:mod:`service.usecases.table`), in the solver
    pool."""
    request = Checked(SitePlanRequest(site_id=site.id, current=current))
    ctx = Context(
        pool.memory_budget_mb, settings.kernels, url=settings.database_url, origin=Origin(trigger)
    )
    t0 = time.perf_counter()
    try:
        doc: dict[str, Any] = await pool.run(run, "site_plan", request, ctx)
    except SiteNotFound as e:  # deleted meanwhile
        raise HTTPException(404, f"no site {e.site_id!r}") from None
    observed(USE_CASES["site_plan"], t0, doc)
    return doc


async def _after_update(
    pool: SolvePool,
    settings: Settings,
    site: Site,
    current: Current | None,
    answer: dict[str, Any],
    trigger: str,
) -> JSONResponse:
    """The answer to an update: re-planned (200), or the re-plan put off (202), or
    stored but infeasible (422, :class:`service.sites.registry.StoredButInfeasible`)."""
    try:
        out = await sites.replan_after_update(
            lambda: _replan(settings, pool, site, current, trigger), site, answer
        )
    except sites.StoredButInfeasible as e:
        return problem(
            422,
            "Infeasible schedule problem",
            str(e),
            "/problems/infeasible",
            conflicts=e.conflicts,
            stored=True,
            site_version=e.site_version,
            **{k: answer[k] for k in ("event",) if k in answer},  # what was stored
        )
    status = 202 if out.postponed else 200
    return JSONResponse(out.answer, status_code=status, headers=_etag(site.version))


async def _replan_job(
    request: Request,
    settings: Settings,
    site: Site,
    current: Current | None,
    answer: dict[str, Any],
    trigger: str,
) -> JSONResponse:
    """The answer to an update whose re-plan goes to a ``site_plan`` job (asked for by
    ``trigger``): 202 with the job's id (``job``) and ``Location``; ``plan`` null."""
    job_request: dict[str, Any] = {"site_id": site.id}
    if current is not None:
        job_request["current"] = current.model_dump(mode="json")
    store = job_store(settings.database_url)
    job, created = await run_in_threadpool(
        lambda: store.create(
            "site_plan", job_request, coalesce=replan_scope(site.id), trigger=trigger
        )
    )
    if created:  # else a queued re-plan of the site took this request
        runner: JobRunner | RedisJobs = request.app.state.jobs
        await runner.submit(job.id)
    answer |= {
        "plan": None,
        "job": {"id": job.id, "status": job.status, "coalesced": not created},
    }
    return JSONResponse(
        answer,
        status_code=202,
        headers={**_etag(site.version), "Location": f"/v1/jobs/{job.id}"},
    )


def _if_match(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.fullmatch(r'\s*(?:W/)?"?(\d+)"?\s*', value)
    if m is None:
        raise InputError("If-Match", f'must be a site version such as "3", got {value!r}')
    return int(m.group(1))


# ---------------------------------------------------------------- sites


@router.post("", status_code=201, responses=_problems(413, 422))
async def create_site(req: SiteRequest, settings: SettingsDep, store: StoreDep) -> JSONResponse:
    """Register a site (a schedule request plus `name` and `plan_start`); returns its id."""
    name, body = sites.site_body(req, settings)
    site = await _db(store.create_site, name, body)
    return JSONResponse(
        sites.site_doc(site),
        status_code=201,
        headers={**_etag(site.version), "Location": f"/v1/sites/{site.id}"},
    )


@router.get("")
async def list_sites(store: StoreDep) -> dict[str, Any]:
    """Every registered site: id, name, version."""
    return {"sites": await _db(store.list_sites)}


@router.get("/{site_id}", responses=_problems(404, 422))
async def get_site(site_id: SiteId, store: StoreDep) -> JSONResponse:
    """The site as stored (grid signals include the events merged so far)."""
    site = await _db(store.get_site, site_id)
    return JSONResponse(sites.site_doc(site), headers=_etag(site.version))


@router.put("/{site_id}", responses=_problems(404, 409, 412, 413, 422))
async def replace_site(
    site_id: SiteId,
    req: SiteRequest,
    settings: SettingsDep,
    store: StoreDep,
    if_match: Annotated[str | None, Header()] = None,
) -> JSONResponse:
    """Replace the whole site; `If-Match: "<version>"` guards against a newer version."""
    name, body = sites.site_body(req, settings)
    site, _ = await _db(
        store.update_site,
        site_id,
        lambda _s: Update(name, body, registers=True),
        _if_match(if_match),
    )
    return JSONResponse(sites.site_doc(site), headers=_etag(site.version))


@router.delete("/{site_id}", status_code=204, responses=_problems(404, 422))
async def delete_site(site_id: SiteId, store: StoreDep) -> Response:
    """Delete the site, its plans and its events."""
    await _db(store.delete_site, site_id)
    return Response(status_code=204)


# ---------------------------------------------------------------- plans


@router.post(
    "/{site_id}/plan",
    responses=_problems(404, 413, 422, 429),
)
async def plan_site(
    site_id: SiteId,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    body: PlanBody | None = None,
) -> JSONResponse:
    """Solve the stored request (or, with `current`, its remaining periods) and keep it."""
    site = await _db(store.get_site, site_id)
    current = body.current if body else None
    try:
        doc = await _replan(settings, pool, site, current, "user")
    except PoolFull:
        raise _too_busy(settings) from None
    except WorkerLost:
        raise worker_lost(settings.retry_after_s) from None
    return JSONResponse(doc)


@router.get("/{site_id}/plan", responses=_problems(404, 422))
async def latest_plan(site_id: SiteId, store: StoreDep) -> dict[str, Any]:
    """The latest plan; `stale` when the site changed after it was computed."""
    site, plan = await _latest(store, site_id)
    return plan_doc(plan, site.version)


async def _latest(store: Store, site_id: str) -> tuple[Site, Plan]:
    site = await _db(store.get_site, site_id)
    plan = await _db(store.latest_plan, site_id)
    if plan is None:
        raise HTTPException(404, f"site {site_id!r} has no plan yet: POST /v1/sites/{site_id}/plan")
    return site, plan


# ---------------------------------------------------------------- events and forecasts


@router.post(
    "/{site_id}/events",
    responses={**_ACCEPTED, **_problems(404, 409, 413, 422)},
)
async def post_event(
    site_id: SiteId,
    body: EventBody,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    request: Request,
    replan: Replan = "now",
) -> JSONResponse:
    """Merge an OpenADR 3.1.0 event into the site's grid signals, then re-plan.

    IMPORT_CAPACITY_LIMIT (KW) lowers `power_cap_w`, PRICE (per KWH or MWH, USD) and GHG
    (g/kWh) replace price and carbon on the periods they cover. Errors name the field,
    e.g. `event.intervals[1].payloads[0].type`. A capacity limit that holds now (it
    starts now or started earlier) is also answered at once as `POST .../shed` answers
    it: `immediate` gives the GPU settings to apply now for the instances the latest
    plan runs in the current period, under the site's cap there (docs/service.md);
    where the shed would be refused (no plan, or one made for another clock or horizon)
    `immediate` is null and `immediate_reason` says why, the event stored all the same.

    The same event posted again (`event.duplicate`) while it is in force (merged, not
    retracted) and the latest plan was made from the site as it is is not re-planned:
    200 at once, with that plan, `replanned` false and `detail` saying why (its
    `current`, if any, is not used: `POST .../plan` re-plans from a state). A
    duplicate of a retracted event is a 409 problem naming `event`.
    """
    checks = sites.Replan(body.current, solve_host(settings))
    site, event = await _db(
        sites.merge_event, store, site_id, body.event, checks, event_field="event"
    )
    answer: dict[str, Any] = {"event": event, "site_version": site.version}
    now = datetime.now(UTC)
    caps_now = shed_event.caps_now(body.event, now)
    plan = await _db(store.latest_plan, site_id) if caps_now or event["duplicate"] else None
    if caps_now:  # a cap from now: settings at once
        answer["immediate"] = None
        if plan is None:
            answer["immediate_reason"] = f"site {site_id!r} has no plan yet"
        else:
            try:
                answer["immediate"] = await site_shed.immediate(site, plan, now, settings, pool)
            except (site_shed.NoRunningPlan, InputError) as e:  # the event stands
                answer["immediate_reason"] = str(e)
    kept = sites.in_force(site, plan, answer)
    if kept is not None:  # the same event, already planned for: no re-plan
        return JSONResponse(kept, headers=_etag(site.version))
    if replan == "job":
        return await _replan_job(request, settings, site, body.current, answer, "event")
    return await _after_update(pool, settings, site, body.current, answer, "event")


@router.get("/{site_id}/events", responses=_problems(404, 422))
async def list_events(site_id: SiteId, store: StoreDep) -> JSONResponse:
    """The events merged into the site, oldest first; a retracted one says when
    (`retracted`) and the site version its retraction made (`retracted_version`).

    Answered as JSON directly, not through a response model: an event stored before
    the depth limit of its free-form fields (service.requests.schemas.MAX_JSON_DEPTH) may nest
    deeper than the model serialiser goes, and must still be listed."""
    await _db(store.get_site, site_id)
    rows = await _db(store.list_events, site_id)
    return JSONResponse(
        {
            "events": [
                {
                    "id": r.id,
                    "received": r.received.isoformat(),
                    "site_version": r.site_version,
                    "event": r.event,
                    "retracted": None if r.retracted is None else r.retracted.isoformat(),
                    "retracted_version": r.retracted_version,
                }
                for r in rows
            ]
        }
    )


@router.delete(
    "/{site_id}/events/{event_id}",
    responses={**_ACCEPTED, **_problems(404, 409, 413, 422)},
)
async def retract_event(
    site_id: SiteId,
    event_id: Annotated[int, PathParam(ge=1, le=2**62, description="the event's id")],
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    request: Request,
    body: RetractBody | None = None,
    replan: Replan = "now",
) -> JSONResponse:
    """Retract an event merged into the site, then re-plan.

    The event stays in `GET .../events`, marked `retracted` (with the time and the
    site version it made); the site's grid is recomputed from the grid it was
    registered with (its last POST or PUT) and every event merged since that is not
    retracted, in the order they were merged: a retracted shed's cap is lifted back to
    the cap before it. Re-planned as an event post is (`?replan=now|job`, an optional
    body with `current`), with the same answers. 404 for an unknown event, 409 for one
    already retracted: problems naming `event_id`.
    """
    current = body.current if body else None
    checks = sites.Replan(current, solve_host(settings))
    site, event = await _db(sites.retract_event, store, site_id, event_id, checks)
    answer: dict[str, Any] = {"event": event, "site_version": site.version}
    if replan == "job":
        return await _replan_job(request, settings, site, current, answer, "retraction")
    return await _after_update(pool, settings, site, current, answer, "retraction")


@router.post(
    "/{site_id}/forecast",
    responses={**_ACCEPTED, **_problems(404, 409, 413, 422)},
)
async def post_forecast(
    site_id: SiteId,
    body: ForecastBody,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    request: Request,
    replan: Replan = "now",
) -> JSONResponse:
    """Replace demand forecasts from `from_period` on (per deployment), then re-plan.

    A series may be shorter than the rest of the horizon: it replaces that many periods.
    """
    site, answer = await _db(sites.merge_forecast, store, site_id, body, solve_host(settings))
    if replan == "job":
        return await _replan_job(request, settings, site, body.current, answer, "forecast")
    return await _after_update(pool, settings, site, body.current, answer, "forecast")


# ---------------------------------------------------------------- orchestrator output


@router.get(
    "/{site_id}/targets",
    response_model=Targets,
    responses={200: {"content": {"text/csv": {}}}, **_problems(404, 422)},
)
async def targets(
    site_id: SiteId,
    store: StoreDep,
    format: Literal["json", "csv"] = Query("json", description="response format"),  # noqa: A002
) -> Any:
    """Replica targets of the latest plan: one per deployment and period.

    `num_prefill`/`num_decode` are the pair Dynamo Planner's connector applies;
    `replicas` gives the same counts per component for a Kubernetes scaler. A
    deployment that lists GPU settings also gets each role's setting (`gpu_settings`,
    and `dynamo`: the `dynamo.nvidia.com/gpu-power-limit` pod annotation per role);
    `periods` gives each period's `total_gpu_power_limit_w` (docs/service.md).
    """
    site, plan = await _latest(store, site_id)
    doc = sites.targets_doc(site, plan, plan.response["schedule"]["periods"])
    if format == "csv":
        return Response(sites.targets_csv(doc), media_type="text/csv")
    return JSONResponse(doc)


@router.get(
    "/{site_id}/targets/now",
    response_model=Targets,
    responses={200: {"content": {"text/csv": {}}}, **_problems(404, 422)},
)
async def targets_now(
    site_id: SiteId,
    store: StoreDep,
    at: Annotated[
        DateTimeText | None, Query(description="ISO date-time with offset (default: now)")
    ] = None,
    format: Literal["json", "csv"] = Query("json", description="response format"),  # noqa: A002
) -> Any:
    """The targets of the period the clock (or `at`) is in, from `plan_start`."""
    when = at or datetime.now(UTC)
    site, plan = await _latest(store, site_id)
    try:
        t, periods = sites.periods_at(plan, when)
    except sites.NoPeriod as e:
        raise HTTPException(404, str(e)) from None
    doc = sites.targets_doc(site, plan, periods)
    if format == "csv":
        return Response(sites.targets_csv(doc), media_type="text/csv")
    doc["period"] = t
    doc["at"] = when.isoformat()
    return JSONResponse(doc)
