"""The process that runs HiGHS for :class:`formulation.milp.highs.HighsProcess`.

It imports only numpy and highspy, receives one model at a time as arrays (HiGHS's
column-wise LP with integrality, options and a start), and sends back every improving
MIP solution as HiGHS finds it, then the final status, objective, bound and solution.
The parent can therefore end it at any moment (its time limit, a stop request) and
keep the best schedule it had: HiGHS does not check its own time limit inside the
root node's separation rounds, and only a process boundary makes the limit hard.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import highspy
import numpy as np

from formulation.processes.lifetime import kill_on_parent_death


def flush_c_stdio() -> None:
    """Write out what the C library holds buffered for the standard streams."""
    with suppress(OSError, AttributeError):  # no C library to flush: nothing buffered
        ctypes.CDLL(None).fflush(None)


@contextmanager
def stdout_discarded() -> Iterator[None]:
    """Within the block, whatever native code writes to descriptor 1 is dropped: HiGHS
    prints its banner there when a process constructs its first model, before any
    option can silence it (on the command line that is noise on standard error under
    ``--json``, once per process that runs HiGHS)."""
    sys.stdout.flush()
    flush_c_stdio()
    try:
        saved = os.dup(1)
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:  # pragma: no cover - no standard output, or no null device
        yield
        return
    try:
        os.dup2(null, 1)
        yield
    finally:
        flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def new_highs() -> highspy.Highs:
    """A ``highspy.Highs`` with its log off, its banner dropped (:func:`stdout_discarded`)."""
    with stdout_discarded():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
    return h


def serve(conn: Any, parent_pid: int) -> None:
    """Solve the models ``conn`` sends until it sends None or closes."""
    kill_on_parent_death()
    if os.getppid() != parent_pid:
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        solve(conn, msg)


def main() -> None:
    """``python -m formulation.milp.highs_child PARENT_PID``: messages on standard input and
    output (pickled, framed by :mod:`multiprocessing.connection`); HiGHS's own output
    goes to standard error."""
    from multiprocessing.connection import Connection

    out = os.dup(1)
    os.dup2(2, 1)  # HiGHS's banner and logs never reach the parent's messages
    reader = Connection(os.dup(0), writable=False)
    writer = Connection(out, readable=False)
    serve(_Duplex(reader, writer), int(sys.argv[1]))


class _Duplex:
    """One connection object over a pipe each way."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self._reader, self._writer = reader, writer

    def recv(self) -> Any:
        return self._reader.recv()

    def send(self, obj: Any) -> None:
        self._writer.send(obj)


def solve(conn: Any, msg: dict[str, Any]) -> None:
    h = new_highs()
    lp = highspy.HighsLp()
    lp.num_col_ = int(msg["num_col"])
    lp.num_row_ = int(msg["num_row"])
    lp.col_cost_ = msg["col_cost"]
    lp.col_lower_ = msg["col_lower"]
    lp.col_upper_ = msg["col_upper"]
    lp.row_lower_ = msg["row_lower"]
    lp.row_upper_ = msg["row_upper"]
    lp.offset_ = float(msg["offset"])
    lp.sense_ = highspy.ObjSense(msg["sense"])
    lp.a_matrix_.format_ = highspy.MatrixFormat(int(msg["format"]))
    lp.a_matrix_.num_col_ = lp.num_col_
    lp.a_matrix_.num_row_ = lp.num_row_
    lp.a_matrix_.start_ = msg["start"]
    lp.a_matrix_.index_ = msg["index"]
    lp.a_matrix_.value_ = msg["value"]
    lp.integrality_ = [highspy.HighsVarType(int(v)) for v in msg["integrality"]]
    h.passModel(lp)
    for key, value in msg["options"].items():
        h.setOptionValue(key, value)
    if msg.get("start_values") is not None:
        sol = highspy.HighsSolution()
        sol.col_value = list(msg["start_values"])
        sol.value_valid = True
        h.setSolution(sol)

    def improving(event: Any) -> None:
        out = event.data_out
        conn.send(("incumbent", float(out.objective_function_value), np.array(out.mip_solution)))

    last = [0.0]

    def progress(event: Any) -> None:  # the dual bound, a few times a second
        now = time.perf_counter()
        if now - last[0] >= BOUND_EVERY_S:
            last[0] = now
            conn.send(("bound", float(event.data_out.mip_dual_bound)))

    h.cbMipImprovingSolution.subscribe(improving)
    h.cbMipInterrupt.subscribe(progress)
    h.run()
    info = h.getInfo()
    x = None
    if info.primal_solution_status == FEASIBLE_POINT:
        x = np.array(h.getSolution().col_value)
    conn.send(
        (
            "done",
            int(h.getModelStatus()),
            float(info.objective_function_value),
            float(info.mip_dual_bound),
            x,
        )
    )


#: HiGHS's ``primal_solution_status`` of a feasible point
FEASIBLE_POINT = 2
#: seconds between two reports of the dual bound
BOUND_EVERY_S = 0.25


if __name__ == "__main__":
    main()
