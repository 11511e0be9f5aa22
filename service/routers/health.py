"""Health, readiness and Prometheus metrics; never behind the API key or the pool."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from service.deps import PoolDep, SettingsDep
from service.metrics import busy_workers, registry
from service.store import engine_for

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
            "description": "not ready: the solver pool is broken or the database does not answer",
            "content": {"application/json": {}},
        }
    },
)
async def readyz(pool: PoolDep, settings: SettingsDep) -> Any:
    """Ready to take work: the solver pool is sound and the database answers; reports
    solver workers in use. 503 (same document, `status` "unavailable") otherwise."""
    pool.repair()  # a dead worker is replaced, not reported forever
    pool_ok = pool.healthy
    db_ok = await run_in_threadpool(_database_ok, settings.database_url)
    body = {
        "status": "ready" if pool_ok and db_ok else "unavailable",
        "busy_workers": pool.busy,
        "workers": pool.workers,
        "solver_pool": "ok" if pool_ok else "broken",
        "database": "ok" if db_ok else "unavailable",
    }
    return JSONResponse(body, status_code=200 if pool_ok and db_ok else 503)


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(pool: PoolDep) -> Response:
    """Prometheus text format."""
    busy_workers.set(pool.busy)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
