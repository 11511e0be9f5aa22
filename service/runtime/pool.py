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
import os
import pickle
import select
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

from formulation.processes.lifetime import (
    die_with_parent,
    kill_process_group,
    lead_process_group,
    reap_orphans,
)

log = logging.getLogger(__name__)

#: seconds between two looks at a busy worker's process where no pidfd tells at once
WATCH_S = 0.5
#: once the server shuts down, seconds a solve has to answer with its best schedule
#: before its worker is killed
STOP_GRACE_S = 5.0
#: seconds an idle worker has to exit when the pool shuts down, before it is killed
EXIT_WAIT_S = 2.0
#: what a worker sends when it takes a call: from then on the call may have run
TAKEN = "taken"
#: what the pool sends a worker to make it exit
EXIT = b""


class PoolFull(Exception):
    """Every worker is busy."""


class WorkerLost(Exception):
    """The worker running a request died (or was ended) before answering."""


# ------------------------------------------------------------ in a worker process


def _serve(conn: Any, parent_pid: int, stopping: Any) -> None:
    """A worker: run the calls ``conn`` sends, ``(fn, args)`` pickled, until it sends
    :data:`EXIT` or closes; answer each with ``(True, result)`` or ``(False, exception)``.

    The worker leads a process group (its solve's children join it), ends with the
    process that started it, and stops every solve, keeping its best schedule, once
    ``stopping`` (a multiprocessing Event) is set."""
    from formulation.processes.interrupt import stop_process_on

    lead_process_group()
    die_with_parent(parent_pid)
    stop_process_on(stopping.is_set)
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if data == EXIT:
            return
        conn.send(TAKEN)
        try:
            fn, args = pickle.loads(data)
            reply: tuple[bool, Any] = (True, fn(*args))
        except Exception as exc:  # noqa: BLE001 - raised again in the server
            reply = (False, _portable(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - the result cannot be pickled
            conn.send((False, RuntimeError(f"the solver's answer could not be sent: {exc!r}")))


def _portable(exc: Exception) -> Exception:
    """``exc`` with its traceback in this process as a note, or, when it would not
    survive the trip to the server, a RuntimeError that names it."""
    exc.add_note("in the solver process:\n" + "".join(traceback.format_exception(exc)))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


# ------------------------------------------------------------ in the server


class _Lost(Exception):
    """The worker ended during a call; ``taken``: after taking it."""

    def __init__(self, taken: bool) -> None:
        super().__init__(taken)
        self.taken = taken


class _Worker:
    """One solver process, the server's end of its pipe, and a pidfd that becomes
    readable when the process ends (where the system has them). Both descriptors are
    closed (:meth:`close`) once the worker is buried and no thread reads the pipe."""

    def __init__(self, ctx: Any, stopping: Any) -> None:
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(
            target=_serve,
            args=(theirs, os.getpid(), stopping),
            name="pdwatt-solver",
            daemon=False,  # a daemonic process may not have children: its solve forks
        )
        self.process.start()
        theirs.close()
        self.pid: int = self.process.pid
        self.exit_fd: int | None = None
        if hasattr(os, "pidfd_open"):
            with contextlib.suppress(OSError):
                self.exit_fd = os.pidfd_open(self.pid)
        self.taken = False  # the current call was taken
        self.buried = False

    def exited(self) -> bool:
        """Whether the process has ended; it is not reaped (see :meth:`bury`)."""
        if self.buried:
            return True
        if self.exit_fd is not None:
            # poll, not select: select refuses descriptors at or above FD_SETSIZE (1024),
            # which a server with many open connections reaches
            ready = select.poll()
            ready.register(self.exit_fd, select.POLLIN)
            return bool(ready.poll(0))
        if hasattr(os, "waitid"):
            try:
                flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
                return os.waitid(os.P_PID, self.pid, flags) is not None
            except ChildProcessError:
                return True
        return not self.process.is_alive()

    def exchange(self, payload: bytes) -> tuple[bool, Any]:
        """Send a pickled call and wait for its answer (blocking; in a thread)."""
        self.taken = False
        try:
            self.conn.send_bytes(payload)
            if self.conn.recv() != TAKEN:
                raise RuntimeError("solver worker out of step")
            self.taken = True
            reply: tuple[bool, Any] = self.conn.recv()
        except (EOFError, OSError):
            raise _Lost(self.taken) from None
        return reply

    def ask_to_exit(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send_bytes(EXIT)

    def bury(self) -> int | None:
        """End the process and what is left of its solve (its process group), reap
        them; the exit code (negative: the signal that ended it)."""
        if self.buried:
            return self.process.exitcode
        self.buried = True
        kill_process_group(self.pid)  # before the leader is reaped
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()
        self.process.join(EXIT_WAIT_S)
        reap_orphans(self.pid)
        return self.process.exitcode

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.exit_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.exit_fd)
            self.exit_fd = None


class SolvePool:
    """``workers`` solver processes; each solve may use up to ``memory_budget_mb``
    (estimated before its tables are built, see :mod:`formulation.memory`)."""

    def __init__(self, workers: int, memory_budget_mb: float | None = None) -> None:
        self.workers = workers
        self.memory_budget_mb = memory_budget_mb
        self.replaced = 0  # workers replaced after they died
        self._busy = 0
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._active: set[_Worker] = set()
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
            except _Lost as lost:
                if lost.taken:
                    raise WorkerLost() from None
            # the worker died before it took the call (killed while idle): the call
            # never ran, so a fresh worker runs it
            try:
                return await self._call(payload)
            except _Lost:
                raise WorkerLost() from None
        finally:
            with self._lock:
                self._busy -= 1

    def _take(self) -> _Worker:
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
            worker = _Worker(self._ctx, self._stopping)
        with self._lock:
            self._active.add(worker)
        return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._active.discard(worker)
            if not worker.buried and not self._closed:
                self._idle.append(worker)
                return
        if not worker.buried:  # the pool shut down during the call
            worker.ask_to_exit()
            worker.bury()
        worker.close()

    def _lost(self, worker: _Worker, what: str, died: bool = True) -> None:
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
        ended = _ExitWatch(loop, worker)
        try:
            while True:
                await asyncio.wait(
                    {answer, ended.future}, timeout=WATCH_S, return_when=asyncio.FIRST_COMPLETED
                )
                if answer.done():
                    break
                if worker.exited():
                    self._lost(worker, "died while it ran a call")
                    raise _Lost(worker.taken)
                if self._overdue():
                    stop = f"killed: its solve did not stop within {STOP_GRACE_S:g} s of shutdown"
                    self._lost(worker, stop, died=False)
                    raise _Lost(True)
            try:
                ok, value = answer.result()
            except _Lost:
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


def _closed_after(call: asyncio.Future[Any], worker: _Worker) -> None:
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


class _ExitWatch:
    """``future`` is done when the worker's process ends; it never is without a pidfd
    (or where the event loop cannot watch one): the caller also looks now and then."""

    def __init__(self, loop: asyncio.AbstractEventLoop, worker: _Worker) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.fd: int | None = None
        if worker.exit_fd is not None:
            try:
                loop.add_reader(worker.exit_fd, self._ready)
                self.fd = worker.exit_fd
            except (NotImplementedError, OSError, ValueError):
                pass

    def _ready(self) -> None:
        self.close()
        if not self.future.done():
            self.future.set_result(None)

    def close(self) -> None:
        if self.fd is not None:
            self.loop.remove_reader(self.fd)
            self.fd = None


#: every pool of this process, so that none leaves a worker behind at exit
_POOLS: weakref.WeakSet[SolvePool] = weakref.WeakSet()


@atexit.register
def _kill_all() -> None:
    # before multiprocessing's own exit hook, which would wait for the workers
    for pool in list(_POOLS):
        pool.kill()


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
