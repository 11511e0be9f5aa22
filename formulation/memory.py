"""Memory a schedule solve needs, estimated before any table is built.

A solve keeps, for every deployment, a few numbers per (period, candidate
configuration) cell for its whole duration (loads, powers at zero load and at the
largest load, the local restriction of :mod:`formulation.bounds.lagrange`), and works on one
deployment at a time (per solver thread) with a larger set of such arrays (stage costs,
forward and backward DP values, the re-optimisation's budgets). The MILPs it builds are
bounded by their build time (:func:`formulation.milp.compact.estimated_build_s`), not by the
cells. Hence::

    MB  ~=  BASE_MB + (BYTES_PER_CELL * sum_m T K_m + WORKING_BYTES_PER_CELL * max_m T K_m) / 2**20

``BASE_MB``, ``BYTES_PER_CELL`` and ``WORKING_BYTES_PER_CELL`` are measured upper
envelopes of this code's peak resident memory, the solving process's and its HiGHS
process's together (``benchmarks/bench_memory.py`` prints the estimate beside both
measured peaks, from one deployment of 64 GPUs to 64 of 100 to 160): an engineering
estimate of the implementation, not a model of the deployments. On the fleet of 64
deployments of 100 to 160 GPUs (8,320 GPUs, 52.5 million cells) the solve peaked at
2,073 MB and its HiGHS process at 903 MB (2,976 MB; estimate 3,550 MB).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.errors import InputError

#: interpreter, numpy, Pyomo and the tables' fixed part (about 200 MB), and the HiGHS
#: process with the restricted MILPs, which their build-time limits keep bounded
#: whatever the site (measured up to 903 MB) (MB)
BASE_MB = 1200.0
#: bytes kept per (period, candidate) cell of every deployment: the loads and powers at
#: the most each may serve (16), the copies the local restriction of
#: formulation.bounds.lagrange keeps where the site limits a deployment on its own (up to 17),
#: and what the phases hold for a while beside them
BYTES_PER_CELL = 40.0
#: bytes per cell of the deployment being worked on (two solver threads)
WORKING_BYTES_PER_CELL = 300.0


@dataclass(frozen=True)
class MemoryEstimate:
    total_mb: float
    per_deployment_mb: tuple[float, ...]

    def largest(self) -> int:
        return max(range(len(self.per_deployment_mb)), key=lambda i: self.per_deployment_mb[i])


def estimate(n_periods: int, candidates: Sequence[int]) -> MemoryEstimate:
    """Estimated peak memory of a solve with these candidate counts per deployment
    (``per_deployment_mb``: what each one keeps)."""
    per = tuple(BYTES_PER_CELL * n_periods * k / 2**20 for k in candidates)
    working = WORKING_BYTES_PER_CELL * n_periods * max(candidates, default=0) / 2**20
    return MemoryEstimate(BASE_MB + sum(per) + working, per)


def check(n_periods: int, candidates: Sequence[int], budget_mb: float | None) -> MemoryEstimate:
    """The estimate; InputError naming the deployment that needs the most (its
    ``max_gpus``) when the whole exceeds ``budget_mb``."""
    est = estimate(n_periods, candidates)
    if budget_mb is not None and est.total_mb > budget_mb:
        i = est.largest()
        raise InputError(
            f"deployments[{i}].max_gpus",
            f"this solve would need about {est.total_mb:,.0f} MB "
            f"({est.per_deployment_mb[i]:,.0f} MB for this deployment's "
            f"{candidates[i]:,} configurations over {n_periods} periods), above the "
            f"memory budget of {budget_mb:,.0f} MB; lower max_gpus, set bounds, use fewer "
            "periods, or raise the budget (PDWATT_MAX_SOLVE_MEMORY_MB, --max-memory-mb)",
        )
    return est
