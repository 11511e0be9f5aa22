"""HiGHS models that write nothing to standard output.

``highspy.Highs()`` prints its banner on the process's standard output (file
descriptor 1) when a process constructs its first model, before any option can silence
it; on the command line that would corrupt ``--json`` output, and on standard error it
is noise. :func:`quiet_highs` constructs the model with descriptor 1 pointed at the null
device (:func:`formulation.milp.highs_child.stdout_discarded`), then turns its log off.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np

from formulation.budget import HIGHS_GRACE_S, HIGHS_GRACE_SHARE, Deadline
from formulation.milp.highs_child import flush_c_stdio, new_highs

log = logging.getLogger(__name__)


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Within the block, whatever native code writes to descriptor 1 goes to 2."""
    sys.stdout.flush()
    flush_c_stdio()
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no standard output at all
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)


def quiet_highs() -> highspy.Highs:
    """A new ``highspy.Highs`` with its log off and nothing written to standard output."""
    return new_highs()


# --------------------------------------------------------------------------- a process


class HighsProcess:
    """HiGHS in a process of its own (:mod:`formulation.milp.highs_child`), started once and
    reused: a MILP that runs past its deadline (HiGHS does not look at its time limit
    inside the root node's separation rounds) or whose run is asked to stop is ended
    with the process, keeping the last improving solution HiGHS sent; the next MILP
    starts a new process."""

    POLL_S = 0.05

    def __init__(self) -> None:
        self._proc: Any = None
        self._conn: Any = None  # messages from the process
        self._send: Any = None  # models to it
        self.restarts = 0
        self.incumbents = 0  # improving solutions HiGHS sent for the current MILP

    def _ensure(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        import subprocess
        from multiprocessing.connection import Connection

        # a new interpreter running one module (not multiprocessing's spawn, which
        # would run the parent's main script again)
        proc = subprocess.Popen(
            [sys.executable, "-m", "formulation.milp.highs_child", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": _import_path()},
        )
        assert proc.stdin is not None and proc.stdout is not None
        self._send = Connection(os.dup(proc.stdin.fileno()), readable=False)
        self._conn = Connection(os.dup(proc.stdout.fileno()), writable=False)
        proc.stdin.close()
        proc.stdout.close()
        self._proc = proc

    def peak_rss_mb(self) -> float:
        """Peak resident memory of the running HiGHS process (MB; 0 when none runs or
        the system does not tell)."""
        if self._proc is None:
            return 0.0
        try:
            with open(f"/proc/{self._proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return 0.0

    def kill(self) -> None:
        if self._proc is not None:
            with suppress(Exception):
                self._proc.kill()
                self._proc.wait(2.0)
            for c in (self._conn, self._send):
                with suppress(Exception):
                    c.close()
            self.restarts += 1
        self._proc = self._conn = self._send = None

    def solve(
        self,
        model: dict[str, Any],
        deadline: Deadline,
        stop: Callable[[], bool] | None = None,
    ) -> HighsOutcome:
        """Run ``model`` (the arrays :func:`lp_arrays` gives, with ``options`` and
        ``start_values``) until ``deadline`` plus the grace
        (:data:`formulation.budget.HIGHS_GRACE_SHARE` of the time it has left and
        :data:`formulation.budget.HIGHS_GRACE_S`)."""
        limit_s = deadline.remaining()
        killed_at = Deadline.after(limit_s * (1.0 + HIGHS_GRACE_SHARE) + HIGHS_GRACE_S)
        try:
            self._ensure()
            self._send.send(model)
        except OSError:  # no process could be started, or it died: HiGHS here, unguarded
            log.warning("HiGHS process unavailable; solving in this process")
            self.kill()
            return _in_process(model)
        best: tuple[float, Any] | None = None
        bound: float | None = None
        self.incumbents = 0
        while True:
            try:
                ready = self._conn.poll(self.POLL_S)
                msg = self._conn.recv() if ready else None
            except (EOFError, OSError):  # the process died (memory): what it sent stands
                self.kill()
                return HighsOutcome("lost", best, bound, None)
            # the stop request and the deadline are checked whatever HiGHS sends
            if msg is not None and msg[0] == "incumbent":
                best = (msg[1], msg[2])
                self.incumbents += 1
            elif msg is not None and msg[0] == "bound":
                bound = msg[1]
            elif msg is not None and msg[0] == "done":
                return _finished(msg, best)
            asked = False
            if stop is not None:
                try:
                    asked = bool(stop())
                except Exception:  # noqa: BLE001 - a broken check stops the MILP
                    asked = True
            if asked or killed_at.expired():
                self.kill()
                return HighsOutcome("stopped" if asked else "killed", best, bound, None)


@dataclass
class HighsOutcome:
    status: str  # optimal | time_limit | infeasible | interrupted | killed | stopped | lost | error
    best: tuple[float, Any] | None  # (objective, column values) of the best solution sent
    bound: float | None  # HiGHS's dual bound (the last one it sent if the process was ended)
    highs_status: int | None


_STATUS = {
    int(highspy.HighsModelStatus.kOptimal): "optimal",
    int(highspy.HighsModelStatus.kTimeLimit): "time_limit",
    int(highspy.HighsModelStatus.kInterrupt): "interrupted",
    int(highspy.HighsModelStatus.kInfeasible): "infeasible",
    int(highspy.HighsModelStatus.kSolutionLimit): "time_limit",
    int(highspy.HighsModelStatus.kIterationLimit): "time_limit",
}


def _finished(msg: tuple[Any, ...], best: tuple[float, Any] | None) -> HighsOutcome:
    """The outcome of HiGHS's final message (its solution, else the last one it sent)."""
    _, status, objective, bound, x = msg
    final = (objective, x) if x is not None else best
    return HighsOutcome(_STATUS.get(status, "error"), final, bound, status)


def lp_arrays(h: highspy.Highs) -> dict[str, Any]:
    """The model loaded in ``h`` as plain arrays, for another process."""
    lp = h.getLp()
    a = lp.a_matrix_
    return {
        "format": int(a.format_),
        "num_col": lp.num_col_,
        "num_row": lp.num_row_,
        "col_cost": np.asarray(lp.col_cost_, dtype=float),
        "col_lower": np.asarray(lp.col_lower_, dtype=float),
        "col_upper": np.asarray(lp.col_upper_, dtype=float),
        "row_lower": np.asarray(lp.row_lower_, dtype=float),
        "row_upper": np.asarray(lp.row_upper_, dtype=float),
        "offset": float(lp.offset_),
        "sense": int(lp.sense_),
        "start": np.asarray(a.start_, dtype=np.int64),
        "index": np.asarray(a.index_, dtype=np.int64),
        "value": np.asarray(a.value_, dtype=float),
        "integrality": np.asarray([int(v) for v in lp.integrality_], dtype=np.int64),
    }


def _import_path() -> str:
    """PYTHONPATH for the HiGHS process: where this package is imported from, then the
    caller's own."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


class _Collect:
    """A connection that keeps what is sent to it (HiGHS run in this process)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, obj: Any) -> None:
        self.sent.append(obj)


def _in_process(model: dict[str, Any]) -> HighsOutcome:
    from formulation.milp import highs_child

    conn = _Collect()
    with stdout_to_stderr():
        highs_child.solve(conn, model)
    best: tuple[float, Any] | None = None
    for msg in conn.sent:
        if msg[0] == "incumbent":
            best = (msg[1], msg[2])
        elif msg[0] == "done":
            return _finished(msg, best)
    return HighsOutcome("error", best, None, None)


#: one HiGHS process per solver process (a server's solve workers each have theirs)
PROCESS = HighsProcess()
