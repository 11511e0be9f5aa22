"""Child processes that end with their parent.

Every kind of child the product starts (the service's solver workers, the forked
workers of :class:`formulation.processes.workers.ForkPool` and the HiGHS process of
:mod:`formulation.milp.highs`) asks the kernel for the parent-death signal, so that none
outlives the process that started it: a killed solver worker takes its whole solve
with it, and a killed server its workers. A service's solver worker also leads a
process group of its own, which its descendants join, so that the service can end
what is left of a worker at once (:func:`kill_process_group`) and reap the processes
re-parented to it (:func:`reap_orphans`, when it runs as a container's first process).
Standard library only: the HiGHS process imports this before anything heavy.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

#: ``prctl`` option: the signal this process receives when its parent dies (Linux)
PR_SET_PDEATHSIG = 1
#: seconds between two looks of the watchdog thread (where the kernel cannot tell)
WATCH_S = 0.5


def kill_on_parent_death() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies. True on Linux when
    the request was accepted; False elsewhere (the caller then watches on its own).

    The kernel sends the signal when the *thread* that started this process ends, so
    a parent must start such children from a thread that lives as long as they do
    (its main thread, or the event loop's)."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    return False


def die_with_parent(parent_pid: int) -> None:
    """End this process (SIGKILL) when ``parent_pid``, the process that started it,
    dies.

    On Linux the kernel's parent-death signal covers a parent that dies later, and the
    check after it one that died while this process was still starting (it would
    otherwise run on, orphaned). Elsewhere a watchdog thread notices the re-parenting
    within :data:`WATCH_S`."""
    if kill_on_parent_death():
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="pdwatt-parent-watch", daemon=True).start()


def lead_process_group() -> bool:
    """Make this process the leader of a new process group, which the processes it
    starts (and theirs) join; False where there are no process groups."""
    if not hasattr(os, "setpgid"):
        return False
    try:
        os.setpgid(0, 0)
    except OSError:
        return False
    return True


def kill_process_group(leader: int) -> None:
    """SIGKILL every process of the group that process ``leader`` leads (see
    :func:`lead_process_group`): call it before reaping ``leader``. Nothing when
    ``leader`` leads no group (it died before making one): its group is then its
    parent's, which is never signalled."""
    if not hasattr(os, "killpg"):
        return
    try:
        if os.getpgid(leader) != leader:
            return
    except ProcessLookupError:
        pass  # reaped already; its group lives on while any member does
    except OSError:
        return
    if leader == os.getpgrp():
        return
    with contextlib.suppress(OSError):
        os.killpg(leader, signal.SIGKILL)


def reap_orphans(group: int, wait_s: float = 1.0) -> int:
    """Reap the processes of process group ``group`` that were re-parented to this
    process (it runs as a container's first process, or is a subreaper) once they
    end, waiting at most ``wait_s`` for them; how many were reaped. Elsewhere such
    orphans are init's to reap, and there are none here. Linux (reads ``/proc``)."""
    reaped = 0
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for pid, ppid, pgrp in _processes():
            # the leader is this process's own child, reaped by whoever started it
            if ppid != os.getpid() or pgrp != group or pid == group:
                continue
            try:
                done = os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:
                continue
            if done:
                reaped += 1
            else:
                left.append(pid)
        if not left or time.monotonic() > deadline:
            return reaped
        time.sleep(0.02)


def _processes() -> list[tuple[int, int, int]]:
    """``(pid, ppid, process group)`` of every process ``/proc`` shows (none elsewhere)."""
    out: list[tuple[int, int, int]] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out.append((int(name), int(fields[1]), int(fields[2])))
    return out
