"""/v1/jobs: solves in the background (see :mod:`service.runtime.jobstore`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Depends, Header, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from service.jobs.queue import RedisJobs
from service.jobs.runner import JobRunner
from service.jobs.schemas import JobAccepted, JobDocument, JobRequest
from service.requests.schemas import NUL, dump
from service.routers.deps import ApiKey, SettingsDep
from service.routers.errors import problem, problem_responses
from service.runtime import webhooks
from service.runtime.job import IdempotencyConflict, JobNotFound
from service.runtime.jobstore import JobStore, job_store
from service.runtime.records import SiteNotFound
from service.runtime.settings import Settings
from service.runtime.webhooks import Notifier
from service.usecases.table import job_kind

router = APIRouter(prefix="/v1", tags=["jobs"], dependencies=[ApiKey])


def get_jobs(settings: SettingsDep) -> JobStore:
    return job_store(settings.database_url)


JobsDep = Annotated[JobStore, Depends(get_jobs)]


def _runner(request: Request) -> JobRunner | RedisJobs:
    runner: JobRunner | RedisJobs = request.app.state.jobs
    return runner


@router.post(
    "/jobs",
    status_code=202,
    response_model=JobAccepted,
    responses={200: {"model": JobAccepted}, **problem_responses(401, 404, 409, 413, 422)},
)
async def submit_job(
    job: JobRequest,
    request: Request,
    settings: SettingsDep,
    store: JobsDep,
    idempotency_key: Annotated[str | None, Header(min_length=1, max_length=128)] = None,
) -> JSONResponse:
    """Queue a solve; 202 with its ``Location``. With an ``Idempotency-Key`` already
    used for the same job, 200 with that job; for another job, 409."""
    if idempotency_key is not None and NUL in idempotency_key:
        return _invalid("Idempotency-Key", "must not contain the NUL character (U+0000)")
    # what the synchronous route of the same kind refuses (service.usecases.table); the job
    # keeps the request with this server's defaults (the stored document its worker
    # parses)
    try:
        checked = await run_in_threadpool(
            job_kind(job.kind).check, job.request, settings, "request."
        )
    except SiteNotFound as exc:  # a site plan's site must exist now
        return problem(
            404,
            "Not Found",
            f"no site {exc.site_id!r}",
            errors=[{"field": "request.site_id", "reason": "no such site"}],
        )
    webhook_url = None if job.webhook is None else job.webhook.url
    if webhook_url is not None:
        refused = await _webhook_refused(webhook_url, settings)
        if refused is not None:
            return refused
    try:
        created_job, created = await run_in_threadpool(
            store.create,
            job.kind,
            dump(checked.request),
            idempotency_key,
            webhook_url,
            trigger="user",
        )
    except IdempotencyConflict as exc:
        return problem(
            409,
            "Conflict",
            str(exc),
            errors=[{"field": "Idempotency-Key", "reason": "used for another request"}],
        )
    if created:
        await _runner(request).submit(created_job.id)
    return JSONResponse(
        {"id": created_job.id, "status": created_job.status},
        status_code=202 if created else 200,
        headers={"Location": f"/v1/jobs/{created_job.id}"},
    )


@router.get("/jobs/{job_id}", response_model=JobDocument, responses=problem_responses(401, 404))
def get_job(job_id: str, store: JobsDep) -> Any:  # sync: runs off the event loop
    """The job's status, progress and, once it has one, its result or error."""
    if NUL in job_id:  # no id holds one, and no database is asked about it
        raise _not_found(job_id)
    try:
        return JSONResponse(store.get(job_id).document())
    except JobNotFound:
        raise _not_found(job_id) from None


@router.delete("/jobs/{job_id}", response_model=JobDocument, responses=problem_responses(401, 404))
async def cancel_job(
    job_id: str, store: JobsDep, request: Request, background: BackgroundTasks
) -> Any:
    """Cancel: a queued job at once; a running schedule stops at its next check and
    keeps its best schedule so far; a finished job is left as it is."""
    if NUL in job_id:
        raise _not_found(job_id)
    try:
        job = await run_in_threadpool(store.cancel, job_id)
    except JobNotFound:
        raise _not_found(job_id) from None
    notifier: Notifier = request.app.state.notifier
    background.add_task(notifier.job_ended, store, job_id)  # once it has ended
    return JSONResponse(job.document())


async def _webhook_refused(url: str, settings: Settings) -> JSONResponse | None:
    if settings.webhook_secret is None:
        why = "this server has no PDWATT_WEBHOOK_SECRET and sends no unsigned notification"
        return _invalid("webhook", why)
    reason = await run_in_threadpool(webhooks.target_error, url, settings.webhook_allow_private)
    return None if reason is None else _invalid("webhook.url", reason)


def _invalid(field: str, reason: str) -> JSONResponse:
    return problem(
        422,
        "Invalid request",
        f"{field}: {reason}",
        "/problems/validation",
        errors=[{"field": field, "reason": reason}],
    )


def _not_found(job_id: str) -> Exception:
    return HTTPException(status_code=404, detail=f"no job {job_id!r}")
