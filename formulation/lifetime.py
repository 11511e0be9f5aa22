"""Child processes that end with their parent.

Both kinds of child the product starts (the service's solver workers and the HiGHS
process of :mod:`formulation.highs`) ask the kernel for the parent-death signal, so
that none outlives the process that started it. Standard library only: the HiGHS
process imports this before anything heavy.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import signal
import sys

#: ``prctl`` option: the signal this process receives when its parent dies (Linux)
PR_SET_PDEATHSIG = 1


def kill_on_parent_death() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies. True on Linux when
    the request was accepted; False elsewhere (the caller then watches on its own)."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    return False
