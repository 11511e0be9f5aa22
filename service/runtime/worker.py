"""One solver process of the pool (:mod:`service.runtime.pool`): what runs in it
(:func:`serve`), and the server's handle on it (:class:`Worker`: its pipe, and a pidfd
that tells when it ends, :class:`ExitWatch`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.util  # noqa: F401 - its exit hook is registered before ours
import os
import pickle
import select
import traceback
from typing import Any

from formulation.processes.lifetime import (
    die_with_parent,
    kill_process_group,
    lead_process_group,
    reap_orphans,
)

#: seconds an idle worker has to exit when the pool shuts down, before it is killed
EXIT_WAIT_S = 2.0


#: what a worker sends when it takes a call: from then on the call may have run
TAKEN = "taken"


#: what the pool sends a worker to make it exit
EXIT = b""


def serve(conn: Any, parent_pid: int, stopping: Any, ray_address: str | None = None) -> None:
    """A worker: run the calls ``conn`` sends, ``(fn, args)`` pickled, until it sends
    :data:`EXIT` or closes; answer each with ``(True, result)`` or ``(False, exception)``.

    The worker leads a process group (its solve's children join it), ends with the
    process that started it, and stops every solve, keeping its best schedule, once
    ``stopping`` (a multiprocessing Event) is set. With ``ray_address``, its solves run
    their parallel work on that Ray cluster, joined now (or, when none answers now, at
    each solve until one does; until then on processes of its own)."""
    from formulation.processes.interrupt import stop_process_on

    lead_process_group()
    die_with_parent(parent_pid)
    stop_process_on(stopping.is_set)
    if ray_address is not None:
        join_cluster(ray_address)
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


def join_cluster(address: str) -> None:
    """This solver process's solves run their parallel work on the Ray cluster at
    ``address``: joined now, else (none answers) at each solve until one does."""
    from formulation.processes.executor import use_ray
    from model.errors import InputError

    try:
        use_ray(address, "PDWATT_RAY_ADDRESS")
    except InputError as e:
        logging.getLogger(__name__).warning("%s: solving on this machine until it answers", e)
        use_ray(address, "PDWATT_RAY_ADDRESS", connect=False)


def _portable(exc: Exception) -> Exception:
    """``exc`` with its traceback in this process as a note, or, when it would not
    survive the trip to the server, a RuntimeError that names it."""
    exc.add_note("in the solver process:\n" + "".join(traceback.format_exception(exc)))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


class Lost(Exception):
    """The worker ended during a call; ``taken``: after taking it."""

    def __init__(self, taken: bool) -> None:
        super().__init__(taken)
        self.taken = taken


class Worker:
    """One solver process, the server's end of its pipe, and a pidfd that becomes
    readable when the process ends (where the system has them). Both descriptors are
    closed (:meth:`close`) once the worker is buried and no thread reads the pipe."""

    def __init__(self, ctx: Any, stopping: Any, ray_address: str | None = None) -> None:
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(
            target=serve,
            args=(theirs, os.getpid(), stopping, ray_address),
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
            raise Lost(self.taken) from None
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


class ExitWatch:
    """``future`` is done when the worker's process ends; it never is without a pidfd
    (or where the event loop cannot watch one): the caller also looks now and then."""

    def __init__(self, loop: asyncio.AbstractEventLoop, worker: Worker) -> None:
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
