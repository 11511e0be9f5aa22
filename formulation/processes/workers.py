"""Worker processes forked once with a solve's data in memory.

The solve's independent subproblems (one DP per deployment, one one-period problem per
period) are many small numpy operations, serialised by the interpreter lock, so
threads do not help (``benchmarks/bench_dual.py`` measures both). A :class:`ForkPool`
forks its workers with the shared state already in memory: each task sends only its
arguments and receives its result. Where processes cannot be forked, where this
process may not have children (a daemonic worker) or where a worker dies (e.g. out of
memory), the tasks run serially in this process, with the same results. The workers
end with the process that forked them (:func:`formulation.processes.lifetime.die_with_parent`):
a solve killed from outside (the out-of-memory killer) leaves none of them running.

Every pool answers :class:`Pool`: ``map`` hands each task the whole shared state,
``map_parts`` only the part of it the task names (one deployment's tables), which a pool
on other machines (:mod:`formulation.processes.raypool`) sends where the task runs and no
further. :func:`formulation.processes.executor.open_pool` opens the one this process
uses.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Generic, Protocol, TypeVar

from formulation.processes.lifetime import die_with_parent

S = TypeVar("S")
S_contra = TypeVar("S_contra", contravariant=True)
R = TypeVar("R")

#: ``part(shared, key)``: the part of the shared state a task naming ``key`` needs
Part = Callable[[Any, Any], Any]

_SHARED: dict[int, Any] = {}


class Pool(Protocol[S_contra]):
    """What the solve's parallel work runs on (this module's :class:`ForkPool`, or
    :class:`formulation.processes.raypool.RayPool`)."""

    @property
    def parallel(self) -> bool: ...

    def map(self, fn: Callable[..., R], tasks: Sequence[tuple[Any, ...]]) -> list[R]:
        """``fn(shared, *task)`` for every task, results in the order of ``tasks``."""
        ...

    def map_parts(
        self, fn: Callable[..., R], part: Part, tasks: Sequence[tuple[Any, ...]]
    ) -> list[R]:
        """``fn(part(shared, key), *rest)`` for every task ``(key, *rest)``, results in
        the order of ``tasks``: a task sees only the part of the shared state it names."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Pool[S_contra]: ...

    def __exit__(self, *exc: object) -> None: ...


def _run(key: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn(_SHARED[key], *args)


def _run_part(key: int, fn: Callable[..., Any], part: Part, args: tuple[Any, ...]) -> Any:
    return fn(part(_SHARED[key], args[0]), *args[1:])


def can_fork() -> bool:
    """Whether worker processes can be forked from this process."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon  # may not have children
    )


class ForkPool(Generic[S]):
    """``map(fn, tasks)`` runs ``fn(shared, *task)`` for every task, on ``workers``
    forked processes when there are more than one and they can be forked, else here."""

    def __init__(self, shared: S, workers: int) -> None:
        self.shared = shared
        self._key = id(self)
        self._pool: ProcessPoolExecutor | None = None
        if workers > 1 and can_fork():
            _SHARED[self._key] = shared  # before the first task forks the workers
            context = multiprocessing.get_context("fork")
            self._pool = ProcessPoolExecutor(
                workers, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),)
            )

    @property
    def parallel(self) -> bool:
        return self._pool is not None

    def map(self, fn: Callable[..., R], tasks: Sequence[tuple[Any, ...]]) -> list[R]:
        """Results in the order of ``tasks``; ``fn`` must be a module-level function.
        An exception ``fn`` raises in a worker is raised here."""
        return self._all(_run, (fn,), tasks, lambda args: fn(self.shared, *args))

    def map_parts(
        self, fn: Callable[..., R], part: Part, tasks: Sequence[tuple[Any, ...]]
    ) -> list[R]:
        """``fn(part(shared, key), *rest)`` for every task ``(key, *rest)``; the worker
        takes its part of the state it inherited (nothing more is sent)."""
        return self._all(
            _run_part, (fn, part), tasks, lambda args: fn(part(self.shared, args[0]), *args[1:])
        )

    def _all(
        self,
        runner: Callable[..., Any],
        head: tuple[Any, ...],
        tasks: Sequence[tuple[Any, ...]],
        here: Callable[[tuple[Any, ...]], R],
    ) -> list[R]:
        if self._pool is not None and len(tasks) > 1:
            try:
                futures = [self._pool.submit(runner, self._key, *head, args) for args in tasks]
                return [f.result() for f in futures]
            except (BrokenProcessPool, OSError):
                # a worker died (e.g. out of memory), or none could start: go on serially
                self.close()
        return [here(args) for args in tasks]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        _SHARED.pop(self._key, None)

    def __enter__(self) -> ForkPool[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
