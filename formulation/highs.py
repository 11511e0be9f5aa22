"""HiGHS models that write nothing to standard output.

``highspy.Highs()`` prints its banner on the process's standard output (file
descriptor 1) while it is constructed, before any option can silence it; on the
command line that would corrupt ``--json`` output. :func:`quiet_highs` constructs the
model with descriptor 1 pointed at standard error, then turns its log off.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import highspy


def _flush_c_stdio() -> None:
    with suppress(OSError, AttributeError):  # no C library to flush: nothing buffered
        ctypes.CDLL(None).fflush(None)


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Within the block, whatever native code writes to descriptor 1 goes to 2."""
    sys.stdout.flush()
    _flush_c_stdio()
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no standard output at all
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)


def quiet_highs() -> highspy.Highs:
    """A new ``highspy.Highs`` with its log off and nothing written to standard output."""
    with stdout_to_stderr():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
    return h
