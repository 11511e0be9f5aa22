"""The memory a process tree holds: a solve's process, its forked workers and HiGHS.

A page that forked workers share with the process that forked them (copy-on-write)
is one page of memory, not one per process: summing resident sets counts it once per
process. Two honest measures count it once:

* a memory cgroup around the tree (cgroup v2 ``memory.peak``), where this process may
  create one (:func:`cgroup_v2_parent`);
* else the sum over the tree of each process's proportional set size (``Pss`` of
  ``/proc/PID/smaps_rollup``: each page divided among the processes that map it),
  sampled while the tree runs (:class:`TreeSampler`); the peak of the sum is the tree's
  peak, to within what happens between two samples.

Linux only (elsewhere every measure reads 0). Standard library only.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def children_of() -> dict[int, list[int]]:
    """Every process's children, from ``/proc/PID/stat`` (its fourth field, the parent)."""
    out: dict[int, list[int]] = {}
    with suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:  # ended meanwhile
                continue
            # the command name is in parentheses and may hold spaces: split after it
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            out.setdefault(ppid, []).append(int(name))
    return out


def tree(root: int) -> list[int]:
    """``root`` and all its descendants that are alive now."""
    kids = children_of()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def pss_kb(pid: int) -> dict[str, int]:
    """``Pss`` and ``Rss`` of one process in kB (zeros when it has ended or cannot be read)."""
    out = {"Pss": 0, "Rss": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in out:
                    out[key] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def command_line(pid: int) -> str:
    """The process's command line, arguments separated by spaces ("" when it has ended)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def tree_pss_mb(root: int) -> float:
    """The tree's memory now: the sum of its processes' ``Pss`` (MB)."""
    return sum(pss_kb(p)["Pss"] for p in tree(root)) / 1024


class TreeSampler:
    """Samples :func:`tree_pss_mb` of ``root`` every ``interval_s`` on a thread, keeping
    the peak (``peak_mb``), the time series (``samples``: seconds since start, MB),
    each process's ``Pss`` at the peak (``at_peak``: pid -> MB) and each process's own
    peak (``peak_by_pid``: pid -> MB) with its command line (``commands``)."""

    def __init__(self, root: int, interval_s: float = 0.05) -> None:
        self.root = root
        self.interval_s = interval_s
        self.peak_mb = 0.0
        self.at_peak: dict[int, float] = {}
        self.peak_by_pid: dict[int, float] = {}
        self.commands: dict[int, str] = {}
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._t0 = time.time()

    def start(self) -> TreeSampler:
        self._t0 = time.time()
        self._thread.start()
        return self

    def sample(self) -> float:
        per = {p: pss_kb(p)["Pss"] / 1024 for p in tree(self.root)}
        mb = sum(per.values())
        for p, v in per.items():
            if p not in self.commands:
                self.commands[p] = command_line(p)
            self.peak_by_pid[p] = max(self.peak_by_pid.get(p, 0.0), v)
        self.samples.append((time.time() - self._t0, mb))
        if mb > self.peak_mb:
            self.peak_mb, self.at_peak = mb, per
        return mb

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def stop(self) -> float:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.peak_mb


def cgroup_v2_parent() -> Path | None:
    """A cgroup v2 group with the memory controller for its children, in which this
    process may create a child group (None: none here, e.g. cgroup v1 or no rights)."""
    with suppress(OSError, ValueError):
        if "memory" not in (CGROUP_ROOT / "cgroup.controllers").read_text().split():
            return None  # not a cgroup v2 mount, or no memory controller
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                group = CGROUP_ROOT / line[3:].lstrip("/")
                control = (group / "cgroup.subtree_control").read_text().split()
                if "memory" in control and os.access(group, os.W_OK):
                    return group
    return None


@contextmanager
def memory_cgroup(name: str) -> Iterator[Path | None]:
    """A new child memory cgroup (removed after the block), or None where none can be
    made. A process joins it by writing its pid to ``cgroup.procs``; its peak is read
    from ``memory.peak`` (:func:`cgroup_peak_mb`)."""
    parent = cgroup_v2_parent()
    group = None
    if parent is not None:
        with suppress(OSError):
            (parent / name).mkdir()
            group = parent / name
    try:
        yield group
    finally:
        if group is not None:
            with suppress(OSError):
                group.rmdir()


def join_cgroup(group: Path) -> None:
    """Move this process into ``group`` (its children then start inside it)."""
    (group / "cgroup.procs").write_text(str(os.getpid()))


def cgroup_peak_mb(group: Path) -> float | None:
    """The peak memory of ``group`` (MB), None where the kernel does not keep it."""
    try:
        return int((group / "memory.peak").read_text()) / 2**20
    except (OSError, ValueError):
        return None
