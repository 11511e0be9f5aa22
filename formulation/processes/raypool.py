"""The solve's parallel work on a Ray cluster: the :class:`formulation.processes.workers.Pool`
of :func:`formulation.processes.executor.open_pool` once a cluster is named.

What moves. The shared state is put in the cluster's object store once per pool, and a
task names its object rather than carrying it: ``map`` names the whole state (the site's
one-period problems need every deployment), ``map_parts`` the part the task needs (one
deployment's tables and the site's period arrays for its DP), put when a task first
names it. A node fetches an object the first time one of its tasks names it and keeps
it: after the first round a round moves only the tasks' arguments (prices, deadlines,
hints) and their results (paths). :meth:`RayPool.traffic` counts both, and what the
object store holds where.

Time. A task's :class:`formulation.budget.Deadline` (an instant of this machine's
monotonic clock) travels as a wall-clock instant and is read back on the node that runs
it. While it waits, the pool asks the run whether it was asked to stop or its limit has
ended (:mod:`formulation.processes.interrupt`); then the tasks not done are cancelled and
:class:`formulation.processes.interrupt.Interrupted` is raised: the run ends with what
it has. A task running then ends with its worker process (Ray starts another).

Failures. A task whose worker process or node is lost is run again by Ray, up to
:data:`MAX_RETRIES` times; beyond that (the cluster lost, an object lost with its node)
the pool runs the round here, serially, and every later round too, as a local pool
whose workers died does. An exception the task itself raises is raised here.

Ray is imported by this module's functions only, never when it is imported.
"""

from __future__ import annotations

import logging
import pickle
import socket
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from formulation.budget import Deadline
from formulation.processes.interrupt import Interrupted, past_end, process_stopping, stop_requested
from formulation.processes.workers import Part

log = logging.getLogger(__name__)

S = TypeVar("S")
R = TypeVar("R")

#: times Ray runs a task again when its worker process or node is lost
MAX_RETRIES = 3
#: seconds between two looks at the run's stop and limit while tasks run
WAIT_S = 0.1
#: seconds a cluster's head has to answer when it is joined
CONNECT_S = 5.0

_WHOLE = ("whole",)  # the key of the whole shared state among a pool's objects


@dataclass(frozen=True)
class WallDeadline:
    """A :class:`Deadline` on its way to another machine: a ``time.time()`` instant."""

    at: float

    @classmethod
    def of(cls, d: Deadline) -> WallDeadline:
        return cls(time.time() + (d.at - time.monotonic()))

    def here(self) -> Deadline:
        return Deadline(time.monotonic() + (self.at - time.time()))


def _portable(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(WallDeadline.of(a) if isinstance(a, Deadline) else a for a in args)


def _local(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.here() if isinstance(a, WallDeadline) else a for a in args)


def execute(fn: Callable[..., Any], shared: Any, *args: Any) -> tuple[str, Any]:
    """A task on a node: ``fn(shared, *args)`` with its deadlines read on this machine,
    and the node that ran it."""
    import ray

    return ray.get_runtime_context().get_node_id(), fn(shared, *_local(args))


_REMOTE: list[Any] = []


def _remote() -> Any:
    if not _REMOTE:
        import ray

        _REMOTE.append(
            ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(execute)
        )
    return _REMOTE[0]


def warm(modules: Sequence[str]) -> int:
    """A task that loads ``modules`` in its worker process."""
    import importlib
    import os

    for name in modules:
        importlib.import_module(name)
    return os.getpid()


def connect(address: str, preload: Sequence[str] = ()) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one this machine is part of)
    unless this process has joined one, and load ``preload`` (the modules of the tasks'
    functions) in one worker process per CPU of the cluster: a worker's first task
    would otherwise spend a second or more importing them, enough to cut a one-period
    search short. ConnectionError when no cluster answers."""
    import ray

    if ray.is_initialized():
        return
    _probe(address)
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    if preload:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(warm)
        ray.get([task.remote(tuple(preload)) for _ in range(cpus)])


def _probe(address: str) -> None:
    """ConnectionError unless something answers at the cluster's head within
    :data:`CONNECT_S` (``ray.init`` would wait minutes for a head that is not there)."""
    if address.startswith("ray://"):
        head = address.removeprefix("ray://")
    else:
        try:
            from ray._private.services import canonicalize_bootstrap_address
        except ImportError:  # another Ray: its own init says what is wrong
            return
        head = canonicalize_bootstrap_address(address) or address  # ConnectionError for auto
    host, _, port = head.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_S):
            pass
    except (OSError, ValueError) as e:
        raise ConnectionError(f"nothing answers at {head}: {e}") from None


def disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _size(obj: Any) -> int:
    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


@dataclass
class Traffic:
    """What a pool's rounds moved: the tasks' arguments and results (their pickled
    sizes, about what goes over the wire besides each task's fixed cost) and the
    shared objects (their sizes, and the copies the nodes fetched)."""

    maps: int = 0
    tasks: int = 0
    argument_bytes: int = 0
    result_bytes: int = 0
    object_bytes: int = 0  # put in the object store, once each
    objects: int = 0
    fetched_bytes: int = 0  # their copies on the other nodes that ran tasks naming them
    submit_s: float = 0.0  # this process's time sending the tasks (the puts apart)
    nodes: dict[str, int] = field(default_factory=dict)  # tasks per node


class RayPool(Generic[S]):
    """``map``/``map_parts`` (:class:`formulation.processes.workers.Pool`) on the Ray
    cluster this process joined (:func:`connect`)."""

    def __init__(self, shared: S) -> None:
        import ray

        self.shared = shared
        self._ray = ray
        self._objects: dict[Hashable, Any] = {}  # key -> ObjectRef
        self._sizes: dict[Hashable, int] = {}
        # (node, object key) of the objects on each node: put on this one
        self._seen: set[tuple[str, Hashable]] = set()
        self._home = ray.get_runtime_context().get_node_id()
        self._broken = False
        self.counts = Traffic()

    @property
    def parallel(self) -> bool:
        return not self._broken

    def map(self, fn: Callable[..., R], tasks: Sequence[tuple[Any, ...]]) -> list[R]:
        def here(args: tuple[Any, ...]) -> R:
            return fn(self.shared, *args)

        if self._broken or len(tasks) <= 1:
            return [here(a) for a in tasks]
        ref = self._object(_WHOLE, lambda: self.shared)
        return self._round(fn, [(_WHOLE, ref, a) for a in tasks], tasks, here)

    def map_parts(
        self, fn: Callable[..., R], part: Part, tasks: Sequence[tuple[Any, ...]]
    ) -> list[R]:
        def here(args: tuple[Any, ...]) -> R:
            return fn(part(self.shared, args[0]), *args[1:])

        if self._broken or len(tasks) <= 1:
            return [here(a) for a in tasks]
        items = []
        for a in tasks:
            key = (part, a[0])
            ref = self._object(key, lambda k=a[0]: part(self.shared, k))  # type: ignore[misc]
            items.append((key, ref, a[1:]))
        return self._round(fn, items, tasks, here)

    def _object(self, key: Hashable, make: Callable[[], Any]) -> Any:
        ref = self._objects.get(key)
        if ref is None:
            value = make()
            ref = self._objects[key] = self._ray.put(value)
            self._sizes[key] = _size(value)
            self.counts.object_bytes += self._sizes[key]
            self.counts.objects += 1
        return ref

    def _round(
        self,
        fn: Callable[..., R],
        items: Sequence[tuple[Hashable, Any, tuple[Any, ...]]],
        tasks: Sequence[tuple[Any, ...]],
        here: Callable[[tuple[Any, ...]], R],
    ) -> list[R]:
        """``tasks`` on the cluster as ``items`` (object key, object, arguments); when
        the cluster fails the round, ``here`` runs each task in this process."""
        ray = self._ray
        remote = _remote()
        c = self.counts
        c.maps += 1
        c.tasks += len(items)
        refs = []
        t0 = time.perf_counter()
        for _key, obj, args in items:
            refs.append(remote.remote(fn, obj, *_portable(args)))
        c.submit_s += time.perf_counter() - t0
        c.argument_bytes += sum(_size(_portable(args)) for _k, _o, args in items)
        try:
            self._wait(refs)
            out = ray.get(refs)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            raise (cause if isinstance(cause, Exception) else e) from None
        except ray.exceptions.RayError as e:
            # retries spent, or the cluster itself lost: this round and the next here
            log.warning("Ray round failed (%s): running it and later rounds here", e)
            self._broken = True
            return [here(a) for a in tasks]
        results = []
        for (key, _obj, _args), (node, value) in zip(items, out, strict=True):
            c.nodes[node] = c.nodes.get(node, 0) + 1
            if node != self._home and (node, key) not in self._seen:
                self._seen.add((node, key))
                c.fetched_bytes += self._sizes[key]
            c.result_bytes += _size(value)
            results.append(value)
        return results

    def _wait(self, refs: list[Any]) -> None:
        """Until every task is done; past the run's limit or on a stop, the tasks not
        done are cancelled and :class:`Interrupted` raised."""
        ray = self._ray
        pending = refs
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_S)
            if pending and (stop_requested() or process_stopping() or past_end()):
                for r in pending:
                    # a running task's worker process is ended (its DP or search would
                    # not look at the stop); one not started never starts
                    ray.cancel(r, force=True)
                raise Interrupted(f"{len(pending)} of {len(refs)} tasks cancelled")

    def traffic(self) -> Traffic:
        """What the pool's rounds moved so far (:class:`Traffic`)."""
        return self.counts

    def close(self) -> None:
        self._objects.clear()  # the object store frees what no task still holds

    def __enter__(self) -> RayPool[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
