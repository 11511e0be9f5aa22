"""The processes a test started, found through ``/proc`` (Linux).

The ``tree`` fixture puts a mark of its own in this process's environment; every
server, worker and solver process a test starts afterwards inherits it (the HiGHS
process too: it is started with a copy of its parent's environment), whatever its
parent or process group, and keeps it after being re-parented. ``marked`` lists the
live ones (a zombie, killed but not yet reaped, has ended); the fixture kills what a
failing test left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

MARK_VARIABLE = "SOLVE_TREE_MARK"

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the process table in /proc"
)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    cmdline: str

    @property
    def solver_worker(self) -> bool:
        """A multiprocessing ``spawn`` child: a solver worker, or (as a fork keeps the
        command line) a worker of a solve's own pool."""
        return "spawn_main" in self.cmdline

    @property
    def highs(self) -> bool:
        return "formulation.milp.highs_child" in self.cmdline


def marked(mark: str) -> list[Proc]:
    """The live processes whose environment holds ``mark``."""
    needle = f"{MARK_VARIABLE}={mark}".encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue  # ended meanwhile, or not ours to read
        if fields[0] != "Z":
            out.append(Proc(int(name), int(fields[1]), cmdline))
    return out


def busy_solver(mark: str, parent: int, timeout_s: float = 120.0) -> tuple[int, list[Proc]]:
    """Wait until a solver worker of process ``parent`` runs a solve with its own pool
    and its HiGHS process; ``(worker pid, its children)``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        procs = marked(mark)
        for worker in (p for p in procs if p.ppid == parent and p.solver_worker):
            kids = [p for p in procs if p.ppid == worker.pid]
            if any(k.solver_worker for k in kids) and any(k.highs for k in kids):
                return worker.pid, kids
        time.sleep(0.05)
    raise AssertionError(f"no solver worker of {parent} ran its pool and HiGHS together")


def descendants(mark: str, root: int) -> list[Proc]:
    """The live marked processes below process ``root``."""
    procs = marked(mark)
    out: list[Proc] = []
    parents = {root}
    while parents:
        kids = [p for p in procs if p.ppid in parents]
        out += kids
        parents = {p.pid for p in kids}
    return out


def left(mark: str, pids: list[int] | None = None, timeout_s: float = 10.0) -> list[Proc]:
    """The marked processes (of ``pids`` only, if given) still alive after waiting up
    to ``timeout_s`` for them to end."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in marked(mark) if pids is None or p.pid in pids]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.fixture
def tree(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A mark that every process the test starts inherits; afterwards, whatever is
    still alive is killed (the test asserts on :func:`left` itself). A test names it
    before the fixtures that start processes, which then stop them first."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK_VARIABLE, mark)
    yield mark
    for p in marked(mark):
        with contextlib.suppress(OSError):
            os.kill(p.pid, signal.SIGKILL)
