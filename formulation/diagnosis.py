"""Why a schedule problem has no schedule, once the phases found none: the periods
where even the LP relaxation cannot meet the site constraints (:func:`diagnose_infeasible`).

The error itself, and the checks that need no solve, are :mod:`formulation.infeasible`,
which loads no solver; this module runs column generation's master LP (HiGHS), so only
a solve imports it.
"""

from __future__ import annotations

from formulation.bounds.decomposition import decompose
from formulation.budget import Deadline, TimeBudget
from formulation.data import ScheduleData
from formulation.infeasible import InfeasibleError, infeasible_after


def diagnosis_deadline(budget: TimeBudget) -> Deadline:
    """When naming the periods of an infeasible problem ends: the end of the limit (what
    the phases left of it, its reserve included). With nothing left the error says so
    rather than run past the limit (:func:`diagnose_infeasible`'s plain explanation)."""
    return budget.end()


def diagnose_infeasible(data: ScheduleData, fallback: str, deadline: Deadline) -> InfeasibleError:
    """Name the periods where even the LP relaxation cannot meet the site constraints
    (transition limits from the initial state included), looked for until ``deadline``;
    else a plain explanation."""
    dec = decompose(data, deadline)
    if dec.converged and (dec.lp_slack_periods or dec.lp_inventory_slack):
        return infeasible_after(data, dec.lp_slack_periods, dec.lp_inventory_slack)
    reason = (
        "the relaxation is feasible but no integer schedule was found"
        if dec.converged
        else "no schedule was found and the LP relaxation, which would name the periods at "
        "fault, did not converge within the time limit"
    )
    return InfeasibleError(
        fallback,
        [
            {
                "constraint": "integrality",
                "reason": f"{reason}; raise solver.time_limit_s or relax "
                "transitions.max_instance_changes_per_period",
            }
        ],
    )
