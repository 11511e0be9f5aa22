"""Asking a running solve to stop, wherever it is.

:func:`formulation.solve.solve` sets :data:`STOP` for the duration of a run (with
:func:`interruptible`); long loops and every HiGHS MILP started inside the run ask
:func:`stop_requested` as they go, so that a cancelled job or a server shutting down
gets its answer within a second or so, with the best schedule found, instead of
waiting for a MILP's own time limit. Outside a run nothing is ever asked to stop. A
process-wide flag (:func:`stop_process_on`) stops every run of a solver process at
once: a server shutting down sets it.

A run may also name the end of its limit (:data:`END`): work on other machines
(:mod:`formulation.processes.raypool`) waits for its tasks no longer than that, nor past
a stop, and ends with :class:`Interrupted` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from formulation.budget import Deadline

#: returns True once the current run should stop
STOP: ContextVar[Callable[[], bool] | None] = ContextVar("pdwatt_stop", default=None)
#: the end of the current run's limit (None: outside a run, or none)
END: ContextVar[Deadline | None] = ContextVar("pdwatt_end", default=None)
#: returns True once every run of this process should stop (a server shutting down
#: tells its solver processes so); see :func:`stop_process_on`
_PROCESS_STOP: list[Callable[[], bool]] = []


def stop_process_on(flag: Callable[[], bool]) -> None:
    """From now on, every run in this process stops (with its best schedule) once
    ``flag()`` is true."""
    _PROCESS_STOP[:] = [flag]


def process_stopping() -> bool:
    return any(flag() for flag in _PROCESS_STOP)


class Interrupted(Exception):
    """A round of parallel work was cut short by a stop request or the end of the run's
    limit: its results are not all there, and the run ends with what it has."""


@contextmanager
def interruptible(stop: Callable[[], bool], end: Deadline | None = None) -> Iterator[None]:
    """Within the block, :func:`stop_requested` asks ``stop`` and :func:`past_end` tells
    whether ``end`` has passed."""
    token = STOP.set(stop)
    until = END.set(end)
    try:
        yield
    finally:
        END.reset(until)
        STOP.reset(token)


def past_end() -> bool:
    """Whether the current run's limit has ended (False outside a run)."""
    end = END.get()
    return end is not None and end.expired()


def stop_requested() -> bool:
    stop = STOP.get()
    return stop is not None and stop()
