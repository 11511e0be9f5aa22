"""The HTTP answers of a busy or lost solver worker (:mod:`service.runtime.pool`): 429
with Retry-After when every worker is busy, 503 with Retry-After when the worker of a
request died (RFC 9457 via the handlers, :mod:`service.routers.errors`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.runtime.pool import PoolFull, SolvePool, WorkerLost


def too_busy(retry_after_s: int) -> Exception:
    """The 429 answer when every solver worker is busy (RFC 9457 via the handlers)."""
    from fastapi import HTTPException

    return HTTPException(
        status_code=429,
        detail="every solver worker is busy; retry later",
        headers={"Retry-After": str(retry_after_s)},
    )


def worker_lost(retry_after_s: int) -> Exception:
    """The 503 answer when the worker of this request died; it is already replaced."""
    from fastapi import HTTPException

    return HTTPException(
        status_code=503,
        detail="the solver worker running this request stopped before answering (it was "
        "killed, e.g. out of memory); it has been replaced: retry later",
        headers={"Retry-After": str(retry_after_s)},
    )


async def run_or_429(
    pool: SolvePool, retry_after_s: int, fn: Callable[..., Any], *args: Any
) -> Any:
    """``pool.run``, answering 429 with Retry-After when every worker is busy and 503
    with Retry-After when the worker died."""
    try:
        return await pool.run(fn, *args)
    except PoolFull:
        raise too_busy(retry_after_s) from None
    except WorkerLost:
        raise worker_lost(retry_after_s) from None
