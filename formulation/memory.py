"""Memory a schedule solve needs, estimated before any table is built.

A solve holds, per deployment, arrays of one number per (period, candidate
configuration) - loads, powers, stage costs, forward and backward DP values - and the
HiGHS models of its restricted MILPs grow with the choices they keep. Its peak
resident memory is therefore close to affine in the number of such cells::

    MB  ~=  BASE_MB + BYTES_PER_CELL * sum_m T * K_m / 2**20

``BASE_MB`` and ``BYTES_PER_CELL`` are measured upper envelopes of this code's peak
resident memory (``benchmarks/bench_memory.py`` prints the measured ratio for single
deployments of 32 to 192 GPUs and sites of several deployments): an engineering
estimate of the implementation, not a model of the deployments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from model.errors import InputError

#: interpreter, numpy, Pyomo, HiGHS and the tables' fixed part (MB)
BASE_MB = 300.0
#: peak bytes per (period, candidate) cell, over the measured solves
BYTES_PER_CELL = 1400.0


@dataclass(frozen=True)
class MemoryEstimate:
    total_mb: float
    per_deployment_mb: tuple[float, ...]

    def largest(self) -> int:
        return max(range(len(self.per_deployment_mb)), key=lambda i: self.per_deployment_mb[i])


def estimate(n_periods: int, candidates: Sequence[int]) -> MemoryEstimate:
    """Estimated peak memory of a solve with these candidate counts per deployment."""
    per = tuple(BYTES_PER_CELL * n_periods * k / 2**20 for k in candidates)
    return MemoryEstimate(BASE_MB + sum(per), per)


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
