"""Asking a running solve to stop, wherever it is.

:func:`formulation.solve.solve` sets :data:`STOP` for the duration of a run (with
:func:`interruptible`); long loops and every HiGHS MILP started inside the run ask
:func:`stop_requested` as they go, so that a cancelled job or a server shutting down
gets its answer within a second or so, with the best schedule found, instead of
waiting for a MILP's own time limit. Outside a run nothing is ever asked to stop. A
process-wide flag (:func:`stop_process_on`) stops every run of a solver process at
once: a server shutting down sets it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: returns True once the current run should stop
STOP: ContextVar[Callable[[], bool] | None] = ContextVar("pdwatt_stop", default=None)
#: returns True once every run of this process should stop (a server shutting down
#: tells its solver processes so); see :func:`stop_process_on`
_PROCESS_STOP: list[Callable[[], bool]] = []


def stop_process_on(flag: Callable[[], bool]) -> None:
    """From now on, every run in this process stops (with its best schedule) once
    ``flag()`` is true."""
    _PROCESS_STOP[:] = [flag]


def process_stopping() -> bool:
    return any(flag() for flag in _PROCESS_STOP)


@contextmanager
def interruptible(stop: Callable[[], bool]) -> Iterator[None]:
    """Within the block, :func:`stop_requested` asks ``stop``."""
    token = STOP.set(stop)
    try:
        yield
    finally:
        STOP.reset(token)


def stop_requested() -> bool:
    stop = STOP.get()
    return stop is not None and stop()
