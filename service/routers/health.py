"""Health, readiness and Prometheus metrics; never behind the API key or the pool."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import PoolDep
from service.metrics import busy_workers, registry

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(pool: PoolDep) -> dict[str, object]:
    """Ready to take work; reports solver workers in use."""
    return {"status": "ready", "busy_workers": pool.busy, "workers": pool.workers}


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(pool: PoolDep) -> Response:
    """Prometheus text format."""
    busy_workers.set(pool.busy)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
