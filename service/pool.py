"""A bounded pool of solver processes: solves never block the event loop, and when
every worker is busy a request is refused at once (429) rather than queued.

A worker that dies (killed by the out-of-memory killer, ``kill -9``) breaks the whole
``ProcessPoolExecutor``: the pool then replaces it, answers the requests that were
running in it with 503 and Retry-After, and later requests run on fresh workers.
Workers ask the kernel to end them when the server process dies (Linux
``PR_SET_PDEATHSIG``), so solver children never outlive the server. When the server
starts shutting down, :meth:`SolvePool.stop_solves` stops every running solve within
a fraction of a second; each answers with the best schedule it has.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from formulation.lifetime import kill_on_parent_death


class PoolFull(Exception):
    """Every worker is busy."""


class WorkerLost(Exception):
    """The worker running a request died (or its pool was shut down) before answering."""


def _init_worker(server_pid: int, stopping: Any) -> None:
    """Worker initializer: end with the server (:func:`_die_with_parent`), and stop
    every solve, keeping its best schedule, once the server starts shutting down
    (``stopping``, a multiprocessing Event the pool sets)."""
    from formulation.interrupt import stop_process_on

    _die_with_parent(server_pid)
    stop_process_on(stopping.is_set)


def _die_with_parent(server_pid: int) -> None:
    """Worker initializer: end this process when the server that started it dies.

    On Linux the kernel's parent-death signal covers a server that dies later, and the
    check after it one that died while this worker was still starting (the task it was
    given would otherwise run orphaned). Elsewhere a watchdog thread notices the
    re-parenting within half a second."""
    if kill_on_parent_death():
        if os.getppid() != server_pid:
            os.kill(os.getpid(), signal.SIGKILL)
        return

    def watch() -> None:
        while os.getppid() == server_pid:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="pdwatt-parent-watch", daemon=True).start()


class SolvePool:
    """``workers`` solver processes; each solve may use up to ``memory_budget_mb``
    (estimated before its tables are built, see :mod:`formulation.memory`)."""

    def __init__(self, workers: int, memory_budget_mb: float | None = None) -> None:
        self.workers = workers
        self.memory_budget_mb = memory_budget_mb
        self._busy = 0
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self.replaced = 0  # executors replaced after a worker died
        self._ctx = multiprocessing.get_context("spawn")
        self._stopping = self._ctx.Event()

    def _pool(self) -> ProcessPoolExecutor:
        self.repair()
        with self._lock:
            if self._executor is None:
                self._executor = ProcessPoolExecutor(
                    max_workers=self.workers,
                    mp_context=self._ctx,
                    initializer=_init_worker,
                    initargs=(os.getpid(), self._stopping),
                )
            return self._executor

    def _discard(self, broken: ProcessPoolExecutor) -> None:
        """Drop ``broken`` (if it is still the current executor); the next request
        starts a fresh one."""
        with self._lock:
            if self._executor is not broken:
                return
            self._executor = None
            self.replaced += 1
        broken.shutdown(wait=False, cancel_futures=True)

    @property
    def busy(self) -> int:
        return self._busy

    def repair(self) -> bool:
        """Drop a broken executor (a worker died while idle, or mid-request) so that the
        next request starts fresh workers; True when one was dropped."""
        ex = self._executor
        if ex is not None and getattr(ex, "_broken", False):
            self._discard(ex)
            return True
        return False

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        with self._lock:
            if self._busy >= self.workers:
                raise PoolFull()
            self._busy += 1
        try:
            executor = self._pool()
            loop = asyncio.get_running_loop()
            try:
                return await loop.run_in_executor(executor, fn, *args)
            except BrokenProcessPool:
                self._discard(executor)
                raise WorkerLost() from None
        finally:
            with self._lock:
                self._busy -= 1

    def stop_solves(self) -> None:
        """Ask every running solve to stop now and answer with its best schedule (the
        server is shutting down)."""
        self._stopping.set()

    def kill(self) -> None:
        """End every solver process of this process now (their solves are lost) and
        start fresh ones on the next request."""
        with self._lock:
            ex, self._executor = self._executor, None
        for proc in multiprocessing.active_children():
            proc.kill()
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        with self._lock:
            ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)


def too_busy(retry_after_s: int) -> Exception:
    """The 429 answer when every solver worker is busy (RFC 9457 via the handlers)."""
    from fastapi import HTTPException

    return HTTPException(
        status_code=429,
        detail="every solver worker is busy; retry later",
        headers={"Retry-After": str(retry_after_s)},
    )


def worker_lost(retry_after_s: int) -> Exception:
    """The 503 answer when the worker of this request died; the pool is already replaced."""
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
