"""The FastAPI application: ``uvicorn service.main:app`` or ``pdwatt serve``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from starlette.middleware.gzip import GZipMiddleware

from formulation.request import publishing
from model.jsondoc import repeated_key, repeated_reason
from service import console
from service.jobs.queue import RedisJobs
from service.jobs.runner import JobRunner
from service.requests.limits import MAX_FLEX_EVALUATIONS, time_limit
from service.requests.schemas import MAX_JSON_DEPTH
from service.routers import (
    catalog,
    errors,
    fleets,
    health,
    jobs,
    shed,
    site_updates,
    sites,
    solves,
)
from service.routers.deps import known_query
from service.runtime import database
from service.runtime.metrics import method_label, request_seconds, requests_total
from service.runtime.pool import SolvePool
from service.runtime.settings import Settings, get_settings
from service.runtime.webhooks import Notifier
from service.sites import replan
from service.sites import shed as site_shed

#: on shutdown, running jobs are asked to stop and given this long to return their best
#: schedules (``docker stop`` waits 10 s before killing)
SHUTDOWN_GRACE_S = 7.0
#: responses of at least this many bytes are gzipped for a client that accepts it (the
#: console's scripts, the API's JSON); smaller ones gain too little to be worth it
GZIP_MIN_BYTES = 1024
#: gzip's level: 6 gives within 0.2% of level 9's size on the console's scripts, a
#: quarter faster
GZIP_LEVEL = 6

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyLimit:
    """Refuses bodies larger than ``limit`` bytes (413), declared or streamed; a body
    sent to ``/v1/`` as anything but JSON (415: every route there reads JSON); and JSON
    bodies that give a key twice in one object (422 naming the object: the parser would
    keep the last value and drop the other silently)."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _too_large(send, self.limit)
            return
        # buffer the body (bounded), then replay it to the application
        chunks: list[Message] = []
        seen = 0
        while True:
            msg = await receive()
            chunks.append(msg)
            if msg["type"] != "http.request":
                break
            seen += len(msg.get("body", b""))
            if seen > self.limit:
                await _too_large(send, self.limit)
                return
            if not msg.get("more_body", False):
                break

        headers = dict(scope.get("headers") or [])
        body = b"".join(m.get("body", b"") for m in chunks if m["type"] == "http.request")
        ctype = headers.get(b"content-type", b"")
        if body and scope.get("path", "").startswith("/v1/") and b"json" not in ctype:
            await _unsupported(send, ctype.decode("latin-1"))  # every /v1 body is JSON
            return
        if body and b"json" in ctype:
            found = repeated_key(body)
            if found is not None:  # Python's parser would keep the last value: refuse
                await _repeated(send, *found)
                return

        async def replay() -> Message:
            if chunks:
                return chunks.pop(0)
            return await receive()

        await self.app(scope, replay, send)


async def _send_problem(send: Send, doc: dict[str, Any]) -> None:
    """An RFC 9457 problem answered from the middleware, before any route."""
    import json

    body = json.dumps(doc).encode()
    await send(
        {
            "type": "http.response.start",
            "status": doc["status"],
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _repeated(send: Send, at: str, key: str) -> None:
    reason, field = repeated_reason(key), at or "body"
    await _send_problem(
        send,
        {
            "type": "/problems/validation",
            "title": "Invalid request",
            "status": 422,
            "detail": f"{field}: {reason}",
            "errors": [{"field": field, "reason": reason}],
        },
    )


async def _unsupported(send: Send, ctype: str) -> None:
    given = f"{ctype!r}" if ctype else "none"
    await _send_problem(
        send,
        {
            "type": "about:blank",
            "title": "Unsupported Media Type",
            "status": 415,
            "detail": f"the body must be JSON (content-type: application/json); content-type "
            f"given: {given}",
            "errors": [{"field": "content-type", "reason": "must be application/json"}],
        },
    )


async def _too_large(send: Send, limit: int) -> None:
    await _send_problem(
        send,
        {
            "type": "about:blank",
            "title": "Content Too Large",
            "status": 413,
            "detail": f"request body larger than {limit} bytes",
        },
    )


def begin_shutdown(app: FastAPI) -> None:
    """The server received SIGTERM: running jobs are marked cancelled, then every
    running solve (jobs and synchronous requests) stops within a fraction of a second
    and answers with its best schedule; uvicorn then lets the requests finish."""
    jobs_runner = getattr(app.state, "jobs", None)
    if jobs_runner is not None:
        jobs_runner.cancel_running()
    app.state.pool.stop_solves()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.jobs = (
            JobRunner(
                settings.database_url, app.state.pool, app.state.notifier, kernels=settings.kernels
            )
            if settings.redis_url is None
            else RedisJobs(settings.database_url, settings.redis_url)
        )
        app.state.jobs.recover()
        # with a Redis queue the workers re-plan sites; without, this process does
        replans = (
            asyncio.get_running_loop().create_task(
                replan.run_forever(
                    settings.database_url, app.state.jobs.submit, settings.replan_check_s
                )
            )
            if settings.redis_url is None
            else None
        )
        # the fast response's tables of each site's running counts, in this process,
        # which answers sheds (service.sites.shed)
        warming = asyncio.get_running_loop().create_task(
            site_shed.warm_forever(settings, settings.replan_check_s)
        )
        yield
        warming.cancel()
        if replans is not None:
            replans.cancel()
        await app.state.jobs.stop(SHUTDOWN_GRACE_S)
        app.state.pool.shutdown()
        database.release(settings.database_url)

    app = FastAPI(
        title="pdwatt",
        version="0.1.0",
        description="Power-aware provisioning of prefill/decode disaggregated LLM inference: "
        "capacity, power and Pareto fronts per configuration, and site schedules under "
        "power caps and grid signals. Errors are RFC 9457 problem details.",
        lifespan=lifespan,
        docs_url=None,  # served offline by service.console
        redoc_url=None,
        dependencies=[Depends(known_query)],
    )
    app.state.settings = settings
    app.state.pool = SolvePool(settings.workers, settings.max_solve_memory_mb, settings.ray_address)
    app.state.notifier = Notifier.of(settings)
    errors.install(app)
    for r in (
        solves.router,
        catalog.router,
        health.router,
        sites.router,
        site_updates.router,
        shed.router,
        fleets.router,
        jobs.router,
    ):
        app.include_router(r)
    console.install(app)
    # innermost: it sees each answer whole, so that a small one is sent as it is (the
    # middleware below passes every answer on as a stream, which gzip would compress
    # whatever its size)
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)

    @app.middleware("http")
    async def observe(request: Any, call_next: Any) -> Any:
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")  # the route's template, not the URL
        request_seconds.labels(path).observe(time.perf_counter() - t0)
        requests_total.labels(path, method_label(request.method), str(response.status_code)).inc()
        return response

    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    _publish_limits(app, settings)
    return app


def _publish_limits(app: FastAPI, settings: Settings) -> None:
    """This server's limits in its OpenAPI document: every one under
    ``info.x-pdwatt-limits``, and the per-field bounds they set (``maximum``,
    ``maxItems``) on the fields they bound, so a client can check a request before
    sending it. The schemas are generated from the request models with this server's
    time limit published (:func:`formulation.request.publishing` of
    :func:`service.requests.limits.time_limit`): ``solver.time_limit_s``'s default and maximum,
    every ``solver`` default object and every example's time limit are generated from
    it. The other bounds are the schedule's own (:mod:`formulation.request`) in the
    models; a server's settings, read when the app is made, can only tighten them, and
    those are written over the generated document here."""
    build = app.openapi
    limit = time_limit(settings)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        with publishing(limit):
            doc = build()
        doc["info"]["x-pdwatt-limits"] = {
            "max_body_bytes": settings.max_body_bytes,
            "max_periods": settings.max_periods,
            "max_deployments": settings.max_deployments,
            "max_site_gpus": settings.max_site_gpus,
            "max_front_gpus": settings.max_front_gpus,
            "max_time_limit_s": limit.max_s,
            "max_solve_memory_mb": settings.max_solve_memory_mb,
            "max_flex_evaluations": MAX_FLEX_EVALUATIONS,
            "max_json_depth": MAX_JSON_DEPTH,
        }
        comps = doc.get("components", {}).get("schemas", {})

        def bound(schema: str, field: str, key: str, value: float) -> None:
            prop = comps.get(schema, {}).get("properties", {}).get(field)
            if prop is not None:
                prop[key] = min(prop.get(key, value), value)

        bound("FrontRequest", "max_gpus", "maximum", settings.max_front_gpus)
        bound("DeploymentIn", "demand_rps", "maxItems", settings.max_periods)
        if settings.max_deployments is not None:
            for schema in ("ScheduleRequest", "SiteRequest"):
                bound(schema, "deployments", "maxItems", settings.max_deployments)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


app = create_app()
