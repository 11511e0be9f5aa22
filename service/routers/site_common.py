"""What the sites API's routers share (:mod:`service.routers.sites`,
:mod:`service.routers.site_updates`): the site id in a path, the store, its calls with
their errors as problems, the ETag, the re-plan after an update (now or as a job) and
the OpenAPI responses of their errors."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from model.errors import InputError
from service.jobs.queue import RedisJobs
from service.jobs.runner import JobRunner
from service.routers.busy import too_busy
from service.routers.deps import ApiKey, SettingsDep
from service.routers.errors import PROBLEM, PROBLEM_SCHEMA, Problem, problem, problem_responses
from service.runtime.job import replan_scope
from service.runtime.jobstore import job_store
from service.runtime.pool import SolvePool
from service.runtime.records import (
    Contention,
    EventNotFound,
    EventRetracted,
    Origin,
    Plan,
    Site,
    SiteInFleet,
    SiteNotFound,
    VersionConflict,
)
from service.runtime.settings import Settings
from service.runtime.store import Store, store_for
from service.sites import registry as sites
from service.sites.plans import Current, SitePlanRequest
from service.usecases.rows import Checked, Context
from service.usecases.table import USE_CASES, observed, run

T = TypeVar("T")


SiteId = Annotated[
    str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="site id")
]


DOCS = {
    404: "no such site (or no plan yet, or no planned period at that time)",
    409: "the site changed too often while this update was applied; retry",
    412: "If-Match names an older version of the site",
}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses of these error statuses (RFC 9457 problem details)."""
    out = problem_responses(*(c for c in codes if c not in DOCS))
    for c in codes:
        if c in DOCS:
            out[c] = {"description": DOCS[c], "content": {PROBLEM: {"schema": PROBLEM_SCHEMA}}}
    return out


ACCEPTED: dict[int | str, dict[str, Any]] = {
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


def sites_router() -> APIRouter:
    """A router under ``/v1/sites``: every route needs the API key when one is set."""
    return APIRouter(
        prefix="/v1/sites",
        tags=["sites"],
        dependencies=[ApiKey],
        responses=problem_responses(401, 503),
    )


def get_store(settings: SettingsDep) -> Store:
    return store_for(settings.database_url)


StoreDep = Annotated[Store, Depends(get_store)]


async def store_call(
    fn: Callable[..., T], *args: Any, event_field: str = "event_id", **kwargs: Any
) -> T:
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
    except SiteInFleet as e:
        raise Problem(
            409,
            "Conflict",
            str(e),
            "/problems/site-in-fleet",
            fleets=[{"id": fid, "name": name} for fid, name in e.fleets],
        ) from None
    except (Contention, sites.RegisteredGridUnknown) as e:
        raise HTTPException(409, str(e)) from None


def etag(version: int) -> dict[str, str]:
    return {"ETag": f'"{version}"'}


def busy(settings: Settings) -> Exception:
    return too_busy(settings.retry_after_s)


async def replan_now(
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


@dataclass(frozen=True)
class Updated:
    """An update stored: the site it made, where its re-plan starts (``current``), the
    answer so far and what asked for the update (``trigger``)."""

    site: Site
    current: Current | None
    answer: dict[str, Any]
    trigger: str


async def answer_update(
    request: Request, settings: Settings, pool: SolvePool, replan: str, u: Updated
) -> JSONResponse:
    """The answer to an update: re-planned now (200), or the re-plan put off (202), or
    stored but infeasible (422, :class:`service.sites.registry.StoredButInfeasible`);
    with ``replan`` ``job``, the re-plan goes to a ``site_plan`` job instead (asked for
    by ``trigger``): 202 with the job's id (``job``) and ``Location``; ``plan`` null."""
    site, current, answer = u.site, u.current, u.answer
    if replan == "job":
        return await _in_job(request, settings, u)
    try:
        out = await sites.replan_after_update(
            lambda: replan_now(settings, pool, site, current, u.trigger), site, answer
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
    return JSONResponse(out.answer, status_code=status, headers=etag(site.version))


async def _in_job(request: Request, settings: Settings, u: Updated) -> JSONResponse:
    job_request: dict[str, Any] = {"site_id": u.site.id}
    if u.current is not None:
        job_request["current"] = u.current.model_dump(mode="json")
    store = job_store(settings.database_url)
    job, created = await run_in_threadpool(
        lambda: store.create(
            "site_plan", job_request, coalesce=replan_scope(u.site.id), trigger=u.trigger
        )
    )
    if created:  # else a queued re-plan of the site took this request
        runner: JobRunner | RedisJobs = request.app.state.jobs
        await runner.submit(job.id)
    answer = u.answer | {
        "plan": None,
        "job": {"id": job.id, "status": job.status, "coalesced": not created},
    }
    return JSONResponse(
        answer,
        status_code=202,
        headers={**etag(u.site.version), "Location": f"/v1/jobs/{job.id}"},
    )


def if_match_version(value: str | None) -> int | None:
    if value is None:
        return None
    m = re.fullmatch(r'\s*(?:W/)?"?(\d+)"?\s*', value)
    if m is None:
        raise InputError("If-Match", f'must be a site version such as "3", got {value!r}')
    return int(m.group(1))


async def latest_of(store: Store, site_id: str) -> tuple[Site, Plan]:
    site = await store_call(store.get_site, site_id)
    plan = await store_call(store.latest_plan, site_id)
    if plan is None:
        raise HTTPException(404, f"site {site_id!r} has no plan yet: POST /v1/sites/{site_id}/plan")
    return site, plan
