"""The state one schedule solve carries through its phases (:class:`Run`): the
incumbent, the proven bound, their history, the phases' timings, and the monitor that
sees them change and may stop the solve (jobs' cancellation).

:func:`formulation.solve.solve` makes one per solve; the phases read and raise it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from formulation import memory
from formulation.budget import Deadline, TimeBudget
from formulation.data import ScheduleData
from formulation.diagnosis import diagnose_infeasible, diagnosis_deadline
from formulation.evaluate import Priced
from formulation.infeasible import InfeasibleError
from formulation.milp.compact import estimated_build_s, estimated_root_s
from formulation.phases import PHASE_NAMES
from formulation.primal.baselines import GreedyReport
from formulation.problem import ScheduleProblem
from formulation.processes.interrupt import process_stopping

Progress = Callable[[str], None]
#: sees the solve's state whenever it changes (``phase``, ``objective_usd``,
#: ``lower_bound_usd``, ``gap``, ``elapsed_s``); returning True asks the solve to stop:
#: every phase ends at its next check and the best schedule found comes back, with
#: status ``stopped`` unless it is already proven
Monitor = Callable[[dict[str, Any]], bool]


class Run:
    """The state one solve carries through its phases: the incumbent, the proven
    bound, their history and the phases' timings."""

    def __init__(
        self,
        problem: ScheduleProblem,
        say: Progress,
        monitor: Monitor | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        self.problem = problem
        self.opts = problem.solver
        limit_s = problem.solver.time_limit_s
        if deadline is not None:
            limit_s = min(limit_s, deadline.remaining())
        self.budget = TimeBudget(limit_s)
        self._say = say
        self.monitor = monitor
        self.current = ""
        self.stopped = False
        self.best: Priced | None = None
        self.source = ""
        self.lower_bound = -np.inf
        self.greedy: GreedyReport | None = None
        # the largest MILP the memory budget leaves room for (ScheduleData.milp_choices)
        self.milp_choices: int | None = None
        # the problem's data when the caller built it (formulation.solve.solve)
        self.tables: ScheduleData | None = None
        # the limit this solve had: its own, or what the request's deadline left it
        self.stats: dict[str, Any] = {"time_limit_s": round(limit_s, 3), "phases": [], "trace": []}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASE_NAMES:  # the list the documents are written from
            raise ValueError(f"phase {name!r} is not in formulation.phases.PHASES")
        t0 = time.perf_counter()
        self.current = name
        self._notify()
        try:
            yield
        finally:
            self.stats["phases"].append(
                {"name": name, "seconds": round(time.perf_counter() - t0, 3)}
            )

    def _trace(self) -> None:
        ub = None if self.best is None else round(self.best.objective_usd, 6)
        lb = round(self.lower_bound, 6) if np.isfinite(self.lower_bound) else None
        self.stats["trace"].append([round(self.budget.elapsed(), 3), ub, lb])
        self._notify()

    def say(self, msg: str) -> None:
        """Report progress (and let the monitor, if any, see the state)."""
        self._say(msg)
        self._notify()

    def _notify(self) -> None:
        if self.monitor is None or self.stopped:
            return
        gap = self.gap()
        state = {
            "phase": self.current,
            "objective_usd": None if self.best is None else self.best.objective_usd,
            "lower_bound_usd": self.lower_bound if np.isfinite(self.lower_bound) else None,
            "gap": gap if np.isfinite(gap) else None,
            "elapsed_s": round(self.budget.elapsed(), 3),
        }
        if self.monitor(state):
            self.stop()

    def should_stop(self) -> bool:
        """Whether the run was asked to stop, by its monitor (which sees the state) or
        by its process (a server shutting down)."""
        self._notify()
        if not self.stopped and process_stopping():
            self.stop()
        return self.stopped

    def stop(self) -> None:
        """End every phase at its next check (the limit becomes the time used so far)."""
        self.stopped = True
        self.budget.limit_s = min(self.budget.limit_s, self.budget.elapsed())
        self._say("stop requested: returning the best schedule found so far")

    def offer(self, p: Priced | None, source: str) -> bool:
        """Keep ``p`` if it is violation-free and cheaper than the incumbent."""
        if p is None or not p.violation_free:
            return False
        if self.best is not None and p.objective_usd >= self.best.objective_usd - 1e-9 * max(
            abs(self.best.objective_usd), 1.0
        ):
            return False
        self.best, self.source = p, source
        self._trace()
        gap = self.gap()
        shown = f", gap {gap:.3%}" if np.isfinite(gap) else ""
        self.say(f"{source}: schedule at ${p.objective_usd:,.4f}{shown}")
        return True

    def bound(self, value: float, source: str | None = None) -> None:
        """Raise the proven bound to ``value`` if higher; ``source`` names how it was
        proven (reported as ``stats["lower_bound"]``)."""
        if value > self.lower_bound:
            self.lower_bound = value
            if source is not None:
                self.stats["lower_bound"] = source
            self._trace()

    def upper(self) -> float:
        return np.inf if self.best is None else self.best.objective_usd

    def gap(self) -> float:
        if self.best is None or not np.isfinite(self.lower_bound):
            return np.inf
        return max(0.0, (self.best.objective_usd - self.lower_bound) / max(abs(self.upper()), 1e-9))

    def closed(self) -> bool:
        return self.gap() <= self.opts.mip_gap + 1e-12

    def done(self) -> bool:
        """Nothing more to do: the gap is closed or a stop was requested."""
        return self.should_stop() or self.closed()

    def fits(self, choices: int, until: float, root: bool = True, free: int | None = None) -> bool:
        """Whether a MILP over ``choices`` can be built and solved before ``until``: its
        build within ``TimeBudget.BUILD_SHARE`` of the time left and, with ``root``, its
        root node (which HiGHS does not interrupt for its time limit) over the ``free``
        choices (default: all of them; :func:`~formulation.milp.compact.free_choices`)
        within the time left; and within what the memory budget leaves for a MILP."""
        if self.milp_choices is not None and choices > self.milp_choices:
            return False
        left = self.budget.left(until)
        if estimated_build_s(choices) > TimeBudget.BUILD_SHARE * left:
            return False
        return not root or estimated_root_s(choices if free is None else free) <= left

    def infeasible(self, data: ScheduleData, fallback: str) -> InfeasibleError:
        """The error of a problem this run found infeasible: the periods and constraints
        responsible, diagnosed in the time the budget leaves for it, else ``fallback``
        (:func:`formulation.diagnosis.diagnose_infeasible`)."""
        return diagnose_infeasible(data, fallback, diagnosis_deadline(self.budget))

    def workers(self) -> int:
        """Worker processes for the DPs: ``solver.threads``, at most the machine's cores."""
        return memory.workers(self.opts.threads)
