"""Time in a solve: one deadline object, and every share of the time limit named here.

A request has one time limit (``solver.time_limit_s``), whatever it runs: a
demand-response what-if's two solves and a flexibility curve's many share it through
one :class:`Deadline`. A schedule solve has that one limit. :class:`TimeBudget`
shares it among the phases of :func:`formulation.solve.solve` through named fractions
of the limit; each phase hands its kernels a :class:`Deadline`, an absolute
``time.monotonic()`` time, and a kernel that shares its time further takes a part of
the time it has left (:meth:`Deadline.fraction`) or guarantees a floor
(:meth:`Deadline.at_least`). No kernel takes a duration: a deadline stays the same
however long its caller took to hand it on.

The constants below are every share and floor of time the solve uses, grouped by the
kernel that uses them; nothing else in ``formulation/`` writes one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True, order=True)
class Deadline:
    """An absolute ``time.monotonic()`` time by which a piece of work ends (``inf``:
    none)."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """``seconds`` from now."""
        return cls(time.monotonic() + seconds)

    @classmethod
    def never(cls) -> Deadline:
        return cls(math.inf)

    def remaining(self) -> float:
        """Seconds left (0 once past)."""
        return max(self.at - time.monotonic(), 0.0)

    def expired(self) -> bool:
        return time.monotonic() > self.at

    def fraction(self, share: float) -> Deadline:
        """The deadline ``share`` of the time left from now (a sub-deadline for part of
        the work)."""
        now = time.monotonic()
        return Deadline(now + share * max(self.at - now, 0.0))

    def at_least(self, seconds: float) -> Deadline:
        """This deadline, but not sooner than ``seconds`` from now."""
        return Deadline(max(self.at, time.monotonic() + seconds))

    def later(self, seconds: float) -> Deadline:
        """This deadline moved ``seconds`` later."""
        return Deadline(self.at + seconds)

    def within(self, seconds: float) -> Deadline:
        """This deadline, but not later than ``seconds`` from now."""
        return Deadline(min(self.at, time.monotonic() + seconds))


@dataclass
class TimeBudget:
    """The time limit, shared by the phases through named fractions of it: each phase
    ends by the time its fraction of the limit has elapsed (``deadline``), whatever the
    earlier phases used; ``RESERVE`` is kept at the end for pricing and reporting."""

    limit_s: float
    started: float = field(default_factory=time.monotonic)

    BASELINES: ClassVar[float] = 0.10
    RELAXATION: ClassVar[float] = 0.25
    #: the least share of the limit the relaxation and the repair get when earlier
    #: phases overran their own
    RELAXATION_AT_LEAST: ClassVar[float] = 0.12
    REPAIR_AT_LEAST: ClassVar[float] = 0.05
    REPAIR: ClassVar[float] = 0.40
    #: the window MILP over pruned choices ends here (the window guided by
    #: one-period optima, whose own neighbourhoods grow inside it, runs to the end)
    EXACT_WINDOW: ClassVar[float] = 0.55
    END: ClassVar[float] = 1.0
    #: at most this share of the limit for one neighbourhood MILP, and the length of
    #: its time windows (periods)
    NEIGHBOURHOOD: ClassVar[float] = 0.2
    WINDOW_PERIODS: ClassVar[int] = 12
    #: when column generation stopped short of convergence, the neighbourhoods end
    #: this share of the limit before the end, which goes back to column generation
    #: (``relaxation_resumed``)
    RESUMED_RELAXATION: ClassVar[float] = 0.15
    RESERVE: ClassVar[float] = 0.03
    #: the window is guided by one-period optima when one round of them takes at most
    #: this share of the limit (``_guided`` in formulation/solve.py)
    GUIDED_ROUND: ClassVar[float] = 0.05
    #: and when the relaxation leaves a gap above this
    GUIDED_GAP: ClassVar[float] = 0.005
    #: the one-period bound taken before the relaxation ends by here
    ONE_PERIOD_BOUND: ClassVar[float] = 0.15
    #: at most this share of the limit for the integer program over column
    #: generation's columns (``column_milp`` in formulation/primal/relaxed.py): on 256
    #: deployments HiGHS spent the 120 s of a neighbourhood's share on its 1,280 columns
    COLUMN_MILP: ClassVar[float] = 0.05
    #: a restricted MILP is built only if its estimated Pyomo build time
    #: (:func:`formulation.milp.compact.estimated_build_s`) is at most this share of the time
    #: its phase has left (the greedy baseline's MILP too)
    BUILD_SHARE: ClassVar[float] = 0.3

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def deadline(self, until: float, at_least: float = 0.0) -> Deadline:
        """When a phase ending at fraction ``until`` stops; with ``at_least``, not
        before that fraction of the limit from now (when earlier phases overran), but
        never past the end."""
        end = self.started + self.limit_s * (1.0 - self.RESERVE)
        planned = self.started + self.limit_s * min(until, 1.0 - self.RESERVE)
        return Deadline(min(max(planned, time.monotonic() + at_least * self.limit_s), end))

    def left(self, until: float = END, at_least: float = 0.0) -> float:
        return self.deadline(until, at_least).remaining()

    def end(self) -> Deadline:
        """The end of the limit, the reserve included: where nothing of the solve may
        run past (the diagnosis of an infeasible problem, after the phases)."""
        return Deadline(self.started + self.limit_s)


# ------------------------------------------------------------ the relaxation (solve.py)

#: with the volume algorithm, the Lagrangian heuristic repairs a point at most once per
#: this share of the relaxation's phase, each repair within the same share
VOLUME_REPAIR_EVERY = 0.05
#: and spends at most this share of the phase on repairs in all
VOLUME_REPAIR_AT_MOST = 0.2

# ---------------------------------------------------- the later phases (solve.py)

#: a neighbourhood MILP starts only with this much time left (seconds)
NEIGHBOURHOOD_AT_LEAST_S = 0.2
#: the guided window gets at least this (seconds), even when the phases before it
#: used the whole limit
GUIDED_AT_LEAST_S = 0.1

# ------------------------------------------------------------ the window (window.py)

#: the window MILP over the broken periods' span gets at least this (seconds)
WINDOW_MILP_AT_LEAST_S = 0.5
#: each start the guided window repairs by coordinate descent gets this share of the
#: window's time, and at least ``WINDOW_REPAIR_AT_LEAST_S``, the repairs together never
#: past the window's deadline
WINDOW_REPAIR_SHARE = 0.05
WINDOW_REPAIR_AT_LEAST_S = 0.1
#: one round of the decomposition's ascent (between which the window's schedules are
#: looked for) may take this share of the time the window has left
ROUND_SHARE = 0.6
#: a round starts only with this much time left (seconds), a window MILP only with
#: ``WINDOW_STEP_AT_LEAST_S``
ROUND_AT_LEAST_S = 0.3
WINDOW_STEP_AT_LEAST_S = 0.2

# -------------------------------------------------------- the decomposition (split.py)

#: the ascent collects the configurations its copies choose (hints for schedules) once
#: this share of its time has passed
HINTS_AFTER = 0.5

# ---------------------------------------------------------- HiGHS (milp.py, highs.py)

#: HiGHS's own time limit: this share of what is left once its model is loaded (the
#: rest reads the solution back), and at least ``HIGHS_AT_LEAST_S``
HIGHS_SHARE = 0.95
HIGHS_AT_LEAST_S = 0.01
#: how long past its own time limit a MILP may run before its process is ended:
#: HiGHS usually stops by itself within this (a share of the limit plus seconds)
HIGHS_GRACE_SHARE = 0.02
HIGHS_GRACE_S = 0.5

# ------------------------------------------------ the demand-response what-if (dr.py)

#: a demand-response what-if runs two solves within its request's one time limit: the
#: baseline ends by this share of the limit and the response has what is left, so at
#: least the rest of the limit (less what the baseline's pricing took past its own end),
#: and all of it that an early-proven baseline left unused
DR_BASELINE_SHARE = 0.5

# ------------------------------------------------------- the flexibility curve (flex.py)

#: each of a flexibility curve's MILPs gets an equal share of the time its request has
#: left over the evaluations still to run, and at least this (seconds), never past the
#: request's deadline: once that has passed, the curve's remaining points are not
#: evaluated and the answer says so (status ``time_limit``)
FLEX_MILP_AT_LEAST_S = 0.2
