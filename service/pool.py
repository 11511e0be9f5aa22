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
