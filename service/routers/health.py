"""Health, readiness and Prometheus metrics; never behind the API key or the pool."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from service.jobs.queue import RedisJobs
from service.routers.deps import PoolDep, SettingsDep
from service.runtime.database import engine_for
from service.runtime.metrics import busy_workers, registry

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


def _database_ok(url: str) -> bool:
    try:
        with engine_for(url).connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError:
        return False


@router.get(
    "/readyz",
    responses={
        503: {
            "description": "not ready: the database (or the Redis queue) does not answer",
            "content": {"application/json": {}},
        }
    },
)
async def readyz(request: Request, pool: PoolDep, settings: SettingsDep) -> Any:
    """Ready to take work when the database answers and, with a Redis queue configured,
    Redis answers too (503, same document, otherwise). A solver pool broken by a dead
    worker is replaced here as on the next solve, so it never keeps the server unready;
    `workers_replaced` counts those replacements."""
    pool.repair()
    db_ok = await run_in_threadpool(_database_ok, settings.database_url)
    body: dict[str, Any] = {
        "busy_workers": pool.busy,
        "workers": pool.workers,
        "workers_replaced": pool.replaced,
        "database": "ok" if db_ok else "unavailable",
    }
    ok = db_ok
    queue = getattr(request.app.state, "jobs", None)
    if isinstance(queue, RedisJobs):
        queue_ok = await queue.ready()
        body["queue"] = "ok" if queue_ok else "unavailable"
        ok = ok and queue_ok
    body = {"status": "ready" if ok else "unavailable", **body}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(pool: PoolDep) -> Response:
    """Prometheus text format."""
    busy_workers.set(pool.busy)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
