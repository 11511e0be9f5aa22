"""A bounded pool of solver processes: solves never block the event loop, and when
every worker is busy a request is refused at once (429) rather than queued."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any


class PoolFull(Exception):
    """Every worker is busy."""


class SolvePool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._busy = 0
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            ctx = multiprocessing.get_context("spawn")
            self._executor = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
        return self._executor

    @property
    def busy(self) -> int:
        return self._busy

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            if self._busy >= self.workers:
                raise PoolFull()
            self._busy += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool(), fn, *args)
        finally:
            with self._lock:
                self._busy -= 1

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def too_busy(retry_after_s: int) -> Exception:
    """The 429 answer when every solver worker is busy (RFC 9457 via the handlers)."""
    from fastapi import HTTPException

    return HTTPException(
        status_code=429,
        detail="every solver worker is busy; retry later",
        headers={"Retry-After": str(retry_after_s)},
    )


async def run_or_429(
    pool: SolvePool, retry_after_s: int, fn: Callable[..., Any], *args: Any
) -> Any:
    """``pool.run``, answering 429 with Retry-After when every worker is busy."""
    try:
        return await pool.run(fn, *args)
    except PoolFull:
        raise too_busy(retry_after_s) from None
