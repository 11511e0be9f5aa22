"""A bounded pool of solver processes: solves never block the event loop, and when
every worker is busy a request is refused at once (429) rather than queued.

Each worker is a process of its own (started with ``spawn``) that runs one call at a
time, sent to it over a pipe. The pool watches the *process* of every busy worker (a
pidfd on Linux, else a look every :data:`WATCH_S`), not only its pipe, whose ends the
solve's own children may hold open. So a worker that dies (killed by the
out-of-memory killer, ``kill -9``) is noticed at once:

* the request it ran answers 503 with Retry-After (:class:`WorkerLost`); the requests
  on the other workers go on;
* what is left of its solve (its forked workers, its HiGHS process, which all end with
  it by the parent-death signal) is killed with its process group, which the worker
  leads, and reaped when it was re-parented to this process (a container's first
  process); the worker is replaced by a fresh one on the next request;
* a worker found dead while idle is replaced before it is given a call, and a call
  whose worker died before taking it runs on a fresh one: the next request runs.

Workers end with the process that started them
(:func:`formulation.processes.lifetime.die_with_parent`), so none outlives the server. When the
server starts shutting down, :meth:`SolvePool.stop_solves` stops every running solve
within a fraction of a second (each answers with the best schedule it has); a solve
that has not answered :data:`STOP_GRACE_S` later is killed, so that a shutdown never
waits on one.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.util  # noqa: F401 - its exit hook is registered before ours
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

from service.runtime.worker import EXIT_WAIT_S, ExitWatch, Lost, Worker

log = logging.getLogger(__name__)

#: seconds between two looks at a busy worker's process where no pidfd tells at once
WATCH_S = 0.5
#: once the server shuts down, seconds a solve has to answer with its best schedule
#: before its worker is killed
STOP_GRACE_S = 5.0


class PoolFull(Exception):
    """Every worker is busy."""


class WorkerLost(Exception):
    """The worker running a request died (or was ended) before answering."""


class SolvePool:
    """``workers`` solver processes; each solve may use up to ``memory_budget_mb``
    (estimated before its tables are built, see :mod:`formulation.memory`) and runs its
    parallel work on the Ray cluster at ``ray_address`` when one is named
    (``PDWATT_RAY_ADDRESS``), else on processes of its own."""

    def __init__(
        self, workers: int, memory_budget_mb: float | None = None, ray_address: str | None = None
    ) -> None:
        self.workers = workers
        self.memory_budget_mb = memory_budget_mb
        self.ray_address = ray_address
        self.replaced = 0  # workers replaced after they died
        self._busy = 0
        self._lock = threading.Lock()
        self._idle: list[Worker] = []
        self._active: set[Worker] = set()
        self._ctx = multiprocessing.get_context("spawn")
        self._stopping = self._ctx.Event()
        self._stop_asked: float | None = None
        self._closed = False
        _POOLS.add(self)

    @property
    def busy(self) -> int:
        return self._busy

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker (``fn`` module-level, arguments and result
        picklable); its exception is raised here. :class:`PoolFull` when every worker
        is busy, :class:`WorkerLost` when the worker died while running it."""
        payload = bytes(ForkingPickler.dumps((fn, args)))
        with self._lock:
            if self._closed:
                raise WorkerLost()
            if self._busy >= self.workers:
                raise PoolFull()
            self._busy += 1
        try:
            try:
                return await self._call(payload)
            except Lost as lost:
                if lost.taken:
                    raise WorkerLost() from None
            # the worker died before it took the call (killed while idle): the call
            # never ran, so a fresh worker runs it
            try:
                return await self._call(payload)
            except Lost:
                raise WorkerLost() from None
        finally:
            with self._lock:
                self._busy -= 1

    def _take(self) -> Worker:
        """An idle live worker, or a new one; idle workers found dead are replaced."""
        dead = []
        worker = None
        with self._lock:
            while self._idle:
                candidate = self._idle.pop()
                if candidate.exited():
                    dead.append(candidate)
                else:
                    worker = candidate
                    break
        for d in dead:
            self._lost(d, "died while idle")
            d.close()
        if worker is None:
            worker = Worker(self._ctx, self._stopping, self.ray_address)
        with self._lock:
            self._active.add(worker)
        return worker

    def _give_back(self, worker: Worker) -> None:
        with self._lock:
            self._active.discard(worker)
            if not worker.buried and not self._closed:
                self._idle.append(worker)
                return
        if not worker.buried:  # the pool shut down during the call
            worker.ask_to_exit()
            worker.bury()
        worker.close()

    def _lost(self, worker: Worker, what: str, died: bool = True) -> None:
        """Bury ``worker``, which ``died`` (or which this pool ends: ``what`` says why);
        a fresh worker takes the next call."""
        with self._lock:
            self._active.discard(worker)
            if worker.buried:
                return
            if died:
                self.replaced += 1
        code = worker.bury()
        log.warning("solver worker %d %s (exit code %s)", worker.pid, what, code)

    async def _call(self, payload: bytes) -> Any:
        worker = self._take()
        loop = asyncio.get_running_loop()
        answer = _in_thread(loop, worker.exchange, payload)
        ended = ExitWatch(loop, worker)
        try:
            while True:
                await asyncio.wait(
                    {answer, ended.future}, timeout=WATCH_S, return_when=asyncio.FIRST_COMPLETED
                )
                if answer.done():
                    break
                if worker.exited():
                    self._lost(worker, "died while it ran a call")
                    raise Lost(worker.taken)
                if self._overdue():
                    stop = f"killed: its solve did not stop within {STOP_GRACE_S:g} s of shutdown"
                    self._lost(worker, stop, died=False)
                    raise Lost(True)
            try:
                ok, value = answer.result()
            except Lost:
                self._lost(worker, "died while it ran a call")
                raise
            except Exception:
                self._lost(worker, "killed: its answer could not be read", died=False)
                raise
            self._give_back(worker)
            if ok:
                return value
            raise value
        except asyncio.CancelledError:
            # nobody waits for this call's answer any more: its solve is ended with it
            self._lost(worker, "killed: its call was cancelled", died=False)
            raise
        finally:
            ended.close()
            if worker.buried:  # its descriptors are closed once no thread reads them
                answer.add_done_callback(lambda f: _closed_after(f, worker))

    def _overdue(self) -> bool:
        return self._stop_asked is not None and time.monotonic() - self._stop_asked > STOP_GRACE_S

    def repair(self) -> bool:
        """Replace the idle workers that died (the next request starts fresh ones);
        True when there was one."""
        with self._lock:
            dead = [w for w in self._idle if w.exited()]
            self._idle = [w for w in self._idle if w not in dead]
        for w in dead:
            self._lost(w, "died while idle")
            w.close()
        return bool(dead)

    def stop_solves(self) -> None:
        """Ask every running solve to stop now and answer with its best schedule (the
        server is shutting down); one still running :data:`STOP_GRACE_S` later is
        killed."""
        self._stop_asked = time.monotonic()
        self._stopping.set()

    def kill(self) -> None:
        """End every solver process of this pool now: the calls they had taken raise
        :class:`WorkerLost` (their solves are lost); later calls start fresh ones."""
        with self._lock:
            idle, self._idle = self._idle, []
            busy = list(self._active)
        for w in idle:
            w.bury()
            w.close()
        for w in busy:  # closed by their calls
            w.bury()

    def shutdown(self) -> None:
        """Idle workers exit (killed if they do not within :data:`EXIT_WAIT_S`); busy
        ones are killed. Later calls raise :class:`WorkerLost`."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._active)
        for w in idle:
            w.ask_to_exit()
        deadline = time.monotonic() + EXIT_WAIT_S
        for w in idle:
            w.process.join(max(0.0, deadline - time.monotonic()))
            w.bury()
            w.close()
        for w in busy:  # closed by their calls
            if not w.buried:
                log.warning("solver worker %d killed: the server stopped", w.pid)
                w.bury()


def _closed_after(call: asyncio.Future[Any], worker: Worker) -> None:
    """``call`` of a buried worker ended: nobody waits for its outcome any more."""
    if not call.cancelled():
        call.exception()  # retrieved: it is no news
    worker.close()


def _in_thread(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any
) -> asyncio.Future[Any]:
    """``fn(*args)`` in a thread of its own (a call waits as long as its solve runs:
    it must not hold one of the event loop's shared threads)."""
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def run() -> None:
        try:
            out = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
            out = (False, exc)
        with contextlib.suppress(RuntimeError):  # the event loop is closed
            loop.call_soon_threadsafe(settle, *out)

    threading.Thread(target=run, name="pdwatt-solver-call", daemon=True).start()
    return fut


#: every pool of this process, so that none leaves a worker behind at exit
_POOLS: weakref.WeakSet[SolvePool] = weakref.WeakSet()


@atexit.register
def _kill_all() -> None:
    # before multiprocessing's own exit hook, which would wait for the workers
    for pool in list(_POOLS):
        pool.kill()
