"""``POST /v1/sites/{site_id}/shed``: a site power target that starts now, answered at
once with the GPU settings to apply (see :mod:`service.sites.shed`)."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from model.errors import InputError
from service.routers.deps import ApiKey, PoolDep, SettingsDep
from service.routers.errors import PROBLEM, PROBLEM_SCHEMA, problem, problem_responses
from service.runtime.jobstore import job_store
from service.runtime.records import Contention, EventRetracted, SiteNotFound
from service.runtime.store import Store, store_for
from service.sites import registry as sites
from service.sites import shed as site_shed
from service.sites import shed_event

router = APIRouter(
    prefix="/v1/sites", tags=["sites"], dependencies=[ApiKey], responses=problem_responses(401, 503)
)

SiteId = Annotated[
    str, PathParam(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="site id")
]

_RESPONSES: dict[int | str, dict[str, Any]] = {
    **problem_responses(422),
    404: {"description": "no such site", "content": {PROBLEM: {"schema": PROBLEM_SCHEMA}}},
    409: {
        "description": "the site has no plan covering the time of the shed, or its latest "
        "plan was made for another clock, horizon or deployments (nothing says what "
        "runs), or it changed too often while the shed was recorded",
        "content": {PROBLEM: {"schema": PROBLEM_SCHEMA}},
    },
}


def _not_found(site_id: str) -> JSONResponse:
    return problem(404, "Not Found", f"no site {site_id!r}")


def _no_plan(detail: str) -> JSONResponse:
    return problem(
        409,
        "Conflict",
        detail,
        "/problems/no-running-plan",
        errors=[{"field": "site_id", "reason": detail}],
    )


@router.post("/{site_id}/shed", responses=_RESPONSES)
async def shed(
    site_id: SiteId,
    body: shed_event.ShedBody,
    request: Request,
    settings: SettingsDep,
    pool: PoolDep,
) -> JSONResponse:
    """Bring the site's power to `target_kw` now, without stopping an instance.

    Answers at once with the GPU setting each deployment applies now per role
    (`prefill_setting`, `decode_setting`) for the instances its latest plan runs in the
    current period, the load each then serves, the site power before (as planned) and
    after, the shortfall when settings alone cannot reach the target (and the instance
    changes the next period boundary brings: when a GPU pool can bind they take the
    solve pipeline, run in a solver worker within the site's `solver.time_limit_s`;
    with every worker busy `next_boundary` says so, and the settings are answered all
    the same), and the cost per hour. The target is recorded as an OpenADR capacity
    limit from `at` (default now) for `duration` (default: to the horizon's end), like
    a posted event, and the site is re-planned
    from the next period boundary as a job (`replan.job_id`). Where the target is below
    the least the site can draw (from the counts running now, within the transition
    limit), that least draw is recorded instead, so that the site stays plannable:
    `stored_limits` says what was recorded, `stored_target_reason` why when it is not
    the target. With `dry_run`, the same answer (the settings now, the next boundary,
    `stored_limits` as they would be recorded) and `dry_run: true`, recording nothing:
    no event is stored and no re-plan is started. The same shed posted again (its event
    already in force, `event.duplicate`) starts no re-plan of its own: `replan` names
    the site's re-plan queued or running (`coalesced`), or says that the latest plan
    was made with it.
    """
    store: Store = store_for(settings.database_url)
    when = body.at or datetime.now(UTC)
    try:
        site = await run_in_threadpool(store.get_site, site_id)
        plan = await run_in_threadpool(store.latest_plan, site_id)
    except SiteNotFound:
        return _not_found(site_id)
    if plan is None:
        return _no_plan(f"site {site_id!r} has no plan yet: POST /v1/sites/{site_id}/plan first")
    try:
        answer = await site_shed.immediate(
            site, plan, when, settings, pool, body.target_kw * 1000.0
        )
    except site_shed.NoRunningPlan as e:
        return _no_plan(str(e))
    event, stored = await run_in_threadpool(
        shed_event.stored_event, site, body, when, settings, answer
    )
    answer |= stored
    if body.dry_run:
        answer["dry_run"] = True  # nothing recorded, nothing re-planned
        answer["site_version"] = site.version
        return JSONResponse(answer)
    try:
        site, answer["event"] = await run_in_threadpool(sites.merge_event, store, site_id, event)
    except SiteNotFound:
        return _not_found(site_id)
    except (Contention, EventRetracted) as e:
        return problem(409, "Conflict", str(e))
    except InputError as e:
        raise shed_event.shed_error(e) from None
    answer["site_version"] = site.version
    jobs = job_store(settings.database_url)
    if answer["event"]["duplicate"]:  # already in force: planned for, or being re-planned
        reload = partial(store.latest_plan, site_id)  # a re-plan may end meanwhile
        kept = await run_in_threadpool(
            site_shed.duplicate_replan, jobs, site, plan, answer, reload
        )
        if kept is not None:
            answer["replan"] = kept
            return JSONResponse(answer)
    job_id, answer["replan"] = await run_in_threadpool(site_shed.replan_job, jobs, site, answer)
    if answer["replan"].get("job_id") is not None:  # the job made, or the queued one it joined
        await run_in_threadpool(jobs.set_trigger, answer["replan"]["job_id"], "shed")
    if job_id is not None:
        await request.app.state.jobs.submit(job_id)
    return JSONResponse(answer)
