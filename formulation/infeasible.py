"""Infeasibility without a solver: :class:`InfeasibleError`, the site's least power
(:func:`min_site_power_w`) and the checks that need no solve.

A schedule problem is refused as infeasible before any phase when its cap lies below
the least the site can draw, or a deployment that must run needs more GPUs than its
pool has (:func:`check_feasible_before`); the LP relaxation names the periods of the
others (:func:`infeasible_after`, from :func:`formulation.diagnosis.diagnose_infeasible`).

This module imports neither Pyomo nor HiGHS, so that what answers requests without
solving (the HTTP API's process, its error handlers, the site checks) can name these
without loading a solver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.data import ScheduleData
from model.errors import PdwattError


class InfeasibleError(PdwattError):
    """No schedule meets every constraint; ``conflicts`` says where and why."""

    def __init__(self, message: str, conflicts: list[dict[str, Any]]) -> None:
        self.conflicts = conflicts
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:  # picklable across worker processes
        return (InfeasibleError, (str(self), self.conflicts))


def min_site_power_w(
    data: ScheduleData, among: Sequence[NDArray[np.bool_]] | None = None
) -> np.ndarray:
    """Least site power per period: every deployment at its least-power allowed config
    (of those ``among[m]`` marks, when given) serving nothing, every other GPU idle
    (ignoring transition limits)."""
    it = np.full(data.n_periods, data.idle_site_it_w)
    for m, d in enumerate(data.deployments):
        ok = np.flatnonzero(d.allowed if among is None else d.allowed & among[m])
        it += float(np.min(d.bp_power_w[ok, 0] - data.idle_gpu_power_w * d.gpus[ok]))
    return it * data.pue


def check_feasible_before(data: ScheduleData) -> None:
    """InfeasibleError when the cap is below the site's least draw in some period, or a
    deployment that must run needs more GPUs than its pool has."""
    floor = min_site_power_w(data)
    bad = np.flatnonzero(data.power_cap_w < floor * (1 - 1e-9) - 1e-6)
    if bad.size:
        conflicts = [
            {
                "period": int(t),
                "constraint": "site_power_within_cap",
                "power_cap_w": float(data.power_cap_w[t]),
                "min_site_power_w": float(floor[t]),
                "reason": "the cap is below the least the site can draw (idle GPUs and "
                "deployments that must run, at PUE)",
            }
            for t in bad
        ]
        raise InfeasibleError(
            f"the power cap is below the site's least possible draw in {bad.size} "
            f"period(s), first {int(bad[0])}",
            conflicts,
        )
    for i, d in enumerate(data.deployments):
        if not d.off_allowed:
            for g, gpus in data.pool_use(i):  # each phase's pool
                need = int(np.min(gpus[1:])) if d.n_configs > 1 else 0
                if need > data.pool_gpus[g]:
                    raise InfeasibleError(
                        f"deployment {d.name} needs at least {need} GPUs of {data.pools[g]}",
                        [{"constraint": "gpus_within_inventory", "deployment": d.name}],
                    )


def infeasible_after(
    data: ScheduleData, cap_periods: list[int], inv: list[tuple[int, int]]
) -> InfeasibleError:
    """The error naming the periods where the LP relaxation needed slack: on the cap
    (``cap_periods``) and on a pool's inventory (``inv``: ``(pool, period)``)."""
    conflicts: list[dict[str, Any]] = [
        {
            "period": t,
            "constraint": "site_power_within_cap",
            "power_cap_w": float(data.power_cap_w[t]),
            "reason": "no mix of reachable configurations fits under the cap: the transition "
            "limits from the initial state or from neighbouring periods prevent shedding enough",
        }
        for t in cap_periods
    ]
    conflicts += [
        {"period": t, "constraint": "gpus_within_inventory", "pool": data.pools[g]} for g, t in inv
    ]
    first = cap_periods[0] if cap_periods else inv[0][1]
    return InfeasibleError(
        f"no schedule meets the constraints (even its LP relaxation), first in period {first}",
        conflicts,
    )
