"""Where a solve's parallel work runs: worker processes forked on this machine
(:class:`formulation.processes.workers.ForkPool`, the default) or, once :func:`use_ray`
named one, a Ray cluster (:class:`formulation.processes.raypool.RayPool`). The choice is
the process's, made at its start: ``pdwatt plan --ray`` (and ``dr``, ``flex``), and the
service's and ``pdwatt worker``'s ``PDWATT_RAY_ADDRESS`` for their solver processes.

Ray is an optional dependency (``pip install 'pdwatt[ray]'``), imported only once a
cluster is named. On a cluster, a round's tasks run on the cluster's CPUs whatever
``solver.threads`` (which bounds this machine's processes: HiGHS and the local pool).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from formulation.processes.workers import ForkPool, Pool
from model.errors import InputError

log = logging.getLogger(__name__)

S = TypeVar("S")

#: how Ray is installed beside the project
RAY_EXTRA = "pip install 'pdwatt[ray]'"

#: what the cluster's worker processes load when it is joined: the module of the solve,
#: which imports those of every task it sends (named, not imported: it imports this one)
SOLVE_MODULES = ("formulation.solve",)

# the Ray cluster of this process's solves, and whether it is joined ([]: none, local pool)
_CLUSTER: list[str] = []
_JOINED: list[bool] = [False]
_PRELOAD: list[str] = []  # modules the cluster's worker processes load when joined


def ray_missing() -> str | None:
    """Why Ray cannot be used in this Python (None: it can); imports it."""
    try:
        import ray  # noqa: F401
    except ImportError as e:
        return f"Ray is not installed in this Python ({e}): {RAY_EXTRA}"
    return None


def use_ray(
    address: str | None,
    source: str = "--ray",
    connect: bool = True,
    preload: Sequence[str] = SOLVE_MODULES,
) -> None:
    """From now on this process's solves run their parallel work on the Ray cluster at
    ``address`` (``auto``: the cluster this machine is part of; ``host:port`` its head;
    ``ray://host:10001`` through Ray Client), or on this machine when None. ``connect``:
    join it now, an :class:`InputError` naming ``source`` when no cluster answers; else
    at the first solve, which runs on this machine when none answers then. ``preload``:
    the modules of the tasks' functions, loaded in the cluster's worker processes when
    it is joined. Without Ray installed, an
    :class:`InputError` naming ``source`` either way."""
    if address is None:
        if _JOINED[0]:
            from formulation.processes.raypool import disconnect

            disconnect()
        _CLUSTER.clear()
        _JOINED[0] = False
        return
    missing = ray_missing()
    if missing is not None:
        raise InputError(source, missing)
    _CLUSTER[:] = [address]
    _PRELOAD[:] = list(preload)
    _JOINED[0] = False
    if connect:
        try:
            _join()
        except (OSError, RuntimeError, ValueError) as e:
            _CLUSTER.clear()
            raise InputError(source, f"no Ray cluster answered at {address!r}: {e}") from None


def ray_address() -> str | None:
    """The Ray cluster this process's solves use (None: this machine)."""
    return _CLUSTER[0] if _CLUSTER else None


def _join() -> None:
    """Join the named cluster unless joined; what Ray raises when it cannot."""
    if not _JOINED[0]:
        from formulation.processes.raypool import connect

        connect(_CLUSTER[0], _PRELOAD)
        _JOINED[0] = True


def _joined() -> bool:
    """Whether the named cluster is joined (joining it now if it answers)."""
    try:
        _join()
    except (OSError, RuntimeError, ValueError) as e:
        log.warning("no Ray cluster at %r (%s): solving on this machine", _CLUSTER[0], e)
        return False
    return True


def open_pool(shared: S, workers: int) -> Pool[S]:
    """The pool a solve's parallel work runs on: the Ray cluster this process uses
    (:func:`use_ray`), else ``workers`` processes forked here."""
    if _CLUSTER and _joined():
        from formulation.processes.raypool import RayPool

        return RayPool(shared)
    return ForkPool(shared, workers)


@contextmanager
def on_ray(address: str, preload: Sequence[str] = SOLVE_MODULES) -> Iterator[None]:
    """Within the block, solves use the Ray cluster at ``address`` (joined now, its
    workers loading ``preload``); this process's setting is restored after it (its
    connection closed)."""
    before, loaded = ray_address(), list(_PRELOAD)
    use_ray(address, preload=preload)
    try:
        yield
    finally:
        use_ray(None)
        if before is not None:
            use_ray(before, connect=False, preload=loaded)
