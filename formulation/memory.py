"""Memory a schedule solve needs, estimated before any table is built.

The estimate covers the solve's whole process tree: the solving process, the worker
processes it forks (:class:`formulation.processes.workers.ForkPool`) and its HiGHS
process (:mod:`formulation.milp.highs`). A worker forked with the tables in memory
shares their pages with the solving process (copy-on-write): only what it writes is
its own. So:

* the solving process keeps, for every deployment, a few numbers per (period,
  candidate configuration) cell for the whole solve (loads and powers at the most each
  may serve, the local restriction of :mod:`formulation.bounds.lagrange`):
  ``BYTES_PER_CELL`` per cell of all deployments;
* it and each of the ``w`` workers work on one deployment at a time with a larger set
  of such arrays (stage costs, forward and backward DP values, the re-optimisation's
  budgets): ``WORKING_BYTES_PER_CELL`` per cell of the largest deployment, ``1 + w``
  times;
* each worker of the greedy baseline's one-period enumeration
  (:func:`formulation.subproblems.period.solve_period`) holds Pareto fronts of partial
  sums, which grow with the options merged, up to what its blocks of
  ``MERGE_BLOCK`` pairs bound: ``ENUMERATION_BYTES_PER_CANDIDATE`` per candidate of all
  deployments, at most ``ENUMERATION_MAX_MB``, ``w`` times (none with one deployment);
* a restricted MILP is held twice, as the Pyomo model in the solving process and in
  the HiGHS process; its size is bounded by the time limit (a MILP is built only when
  its build fits ``TimeBudget.BUILD_SHARE`` of the time left,
  :func:`formulation.milp.compact.estimated_build_s`), by the cells and, under a
  memory budget, by what the rest of the solve leaves of it: the MILP builder refuses
  a larger one (:func:`formulation.milp.compact.solve_compact`, status ``memory``) and
  the phases do not start it (``Run.fits``). ``MILP_BYTES_PER_CHOICE`` per choice of
  the largest MILP so admitted, ``milp_choices``.

Hence, with ``C`` the cells of all deployments, ``C_max`` those of the largest, ``N``
the candidates of all deployments, ``B`` the budget (MB; none: unbounded) and::

    REST ~= BASE_MB + w WORKER_MB + (BYTES_PER_CELL C + (1 + w) WORKING_BYTES_PER_CELL C_max
                     + w min(ENUMERATION_BYTES_PER_CANDIDATE N, ENUMERATION_MAX_MB 2**20)) / 2**20
    X = min(C, BUILD_SHARE * limit_s / BUILD_S_PER_CHOICE, (B - REST) 2**20 / MILP_BYTES_PER_CHOICE)
    MB ~= REST + MILP_BYTES_PER_CHOICE X / 2**20

(``X`` = 0 for a solve of one deployment outside ``solver.method`` compact.) A solve is
refused only when ``REST`` exceeds the budget: the budget bounds its MILPs, not its
admission. The constants are measured upper envelopes of this code's whole-tree peak
(``benchmarks/bench_memory.py``: the peak of the sum of the tree's proportional set
sizes, from one deployment of 64 GPUs to 64 of 100 to 160, two workers): an
engineering estimate of the implementation, not a model of the deployments. Measured
tree peaks (sum of Pss; 10 s limit unless said): one deployment of 64, 128 and 192 GPUs
116, 174 and 239 MB; 8 x 32 GPUs 141 MB; 16 x 64, 174 MB; 32 x 128, 597 MB; the fleet
of 64 deployments of 100 to 160 GPUs (8,320 GPUs, 52.5 million cells, 546,559
candidates) 1,227 MB with tables about 1,020 MB of it, and its greedy baseline alone
1,508 MB (two workers of 523 and 594 MB Pss, a 2 million-pair block each); with a 300 s
limit 1,456 MB. Each forked worker owns about 20 MB of the interpreter's heap
(``WORKER_MB``). The MILP term: a compact MILP over all 95,000 choices of two
deployments of 32 GPUs (``solver.method`` compact, 150 s) peaked at 1,526 MB, 735 MB in
the solving process and 791 MB in HiGHS: about 16 KB per choice for both copies. It is
an upper bound: the bench's solves under load built no MILP of that size. A solve of
one deployment builds none (its relaxation is the exact optimum; :func:`builds_milp`),
so none is counted for it and the phases are held to none: one deployment of 64 GPUs
was estimated at 421 MB against a 149 MB tree peak with the 10 s limit's MILP term of
15,000 choices counted, 187 MB against 153 without it; the fleet at 300 s, whose limit
alone admits a 450,000-choice MILP (7 GB, which refused it under the default 4,096 MB
budget), is admitted with its MILPs bounded by the 2,178 MB the rest leaves.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

from model.errors import InputError

#: the interpreter with numpy and Pyomo loaded, before any table (measured 96 to 98 MB
#: of Pss in every case), with a margin (MB)
BASE_MB = 110.0
#: what each forked worker comes to own of the interpreter's heap (pages its reference
#: counts touch), measured about 20 MB
WORKER_MB = 25.0
#: bytes kept per (period, candidate) cell of every deployment: the loads and powers at
#: the most each may serve (16), the local restriction's copies where the site limits a
#: deployment on its own, and what the phases hold for a while beside them (measured
#: 17.7 to 20.4 on the fleets of 32 and 64 deployments)
BYTES_PER_CELL = 24.0
#: bytes per cell of the largest deployment, in the solving process and in each worker
#: (measured 20 to 27 on single deployments of 64 to 192 GPUs)
WORKING_BYTES_PER_CELL = 40.0
#: a one-period enumeration's fronts, per candidate of all deployments, per worker
ENUMERATION_BYTES_PER_CANDIDATE = 400.0
#: at most, per worker: its 2 million-pair blocks (about ten 16 MB arrays) and fronts
ENUMERATION_MAX_MB = 400.0
#: a restricted MILP's choice, as the Pyomo model and in the HiGHS process
MILP_BYTES_PER_CHOICE = 16384.0
#: the largest MILP a time limit admits: BUILD_SHARE (0.3) of it over the build time
#: per choice (2e-4 s), as in formulation.budget and formulation.milp.compact
MILP_CHOICES_PER_S = 0.3 / 2e-4


def workers(threads: int | None) -> int:
    """Worker processes a solve forks for its DPs and one-period problems:
    ``solver.threads``, at most the machine's cores."""
    cores = os.cpu_count() or 1
    return max(1, min(threads or cores, cores))


@dataclass(frozen=True)
class MemoryEstimate:
    total_mb: float
    per_deployment_mb: tuple[float, ...]
    cells: int = 0  # (period, candidate) cells of all deployments
    #: the largest MILP, in choices, the estimate counts: what the time limit admits,
    #: within the cells and, under a budget, within what the rest of the solve leaves
    #: of it
    milp_choices: int = 0
    #: the largest MILP the budget leaves room for (None: no budget); the MILP builder
    #: refuses a larger one (:func:`formulation.milp.compact.solve_compact`)
    milp_budget_choices: int | None = None


def estimate(
    n_periods: int,
    candidates: Sequence[int],
    workers: int = 1,
    milp_build_s: float | None = None,
    budget_mb: float | None = None,
    milp: bool = True,
) -> MemoryEstimate:
    """Estimated peak memory of a solve's process tree with these candidate counts per
    deployment and ``workers`` forked workers; ``milp_build_s``, the seconds its MILPs
    may take to build (the request's time limit: a size bound, not a deadline; None: no
    bound on the MILPs but the cells); ``budget_mb``, the memory the solve may take
    (None: no budget): its MILPs are bounded by what the rest leaves of it;
    ``per_deployment_mb``: what each deployment keeps. ``milp`` False: the solve builds
    no MILP (:func:`builds_milp`), so none is counted and ``milp_budget_choices`` is 0,
    which the MILP builder and the phases hold it to."""
    per = tuple(BYTES_PER_CELL * n_periods * k / 2**20 for k in candidates)
    cells = n_periods * sum(candidates)
    working = (1 + workers) * WORKING_BYTES_PER_CELL * n_periods * max(candidates, default=0)
    enumeration = 0.0
    if len(candidates) > 1:
        front = min(ENUMERATION_BYTES_PER_CANDIDATE * sum(candidates), ENUMERATION_MAX_MB * 2**20)
        enumeration = workers * front
    rest = BASE_MB + workers * WORKER_MB + sum(per) + (working + enumeration) / 2**20
    choices = float(cells)
    if milp_build_s is not None:
        choices = min(choices, MILP_CHOICES_PER_S * milp_build_s)
    room = None
    if budget_mb is not None:
        room = math.floor(max(0.0, (budget_mb - rest) * 2**20 / MILP_BYTES_PER_CHOICE))
        choices = min(choices, room)
    if not milp:
        room = choices = 0
    milp_choices = math.floor(choices + 1e-6)  # 0.3 / 2e-4 s is 1500 to rounding
    total = rest + MILP_BYTES_PER_CHOICE * milp_choices / 2**20
    return MemoryEstimate(total, per, cells, milp_choices, room)


def builds_milp(deployments: int, method: str) -> bool:
    """Whether a solve may build a MILP: with ``solver.method`` compact always; else
    only with several deployments, since with one the relaxation's bound is the exact
    optimum (its DP restricted to what the site allows it, formulation/phases.py) and
    the solve ends there."""
    return method == "compact" or deployments > 1


def check(
    n_periods: int,
    candidates: Sequence[int],
    budget_mb: float | None,
    workers: int = 1,
    milp_build_s: float | None = None,
    milp: bool = True,
) -> MemoryEstimate:
    """The estimate; InputError when it exceeds ``budget_mb``, naming the deployment
    that needs the most (its ``max_gpus``), or ``deployments`` when that one alone would
    fit and it is their number that does not."""
    est = estimate(n_periods, candidates, workers, milp_build_s, budget_mb, milp)
    if budget_mb is None or est.total_mb <= budget_mb:
        return est
    i = max(range(len(candidates)), key=lambda j: candidates[j])
    alone = estimate(n_periods, [candidates[i]], workers, milp_build_s, budget_mb, milp).total_mb
    need = f"this solve would need about {est.total_mb:,.0f} MB"
    over = f"above the memory budget of {budget_mb:,.0f} MB"
    raise_budget = "raise the budget (PDWATT_MAX_SOLVE_MEMORY_MB, --max-memory-mb)"
    if len(candidates) > 1 and alone <= budget_mb:
        raise InputError(
            "deployments",
            f"{need} for {len(candidates):,} deployments ({sum(candidates):,} "
            f"configurations over {n_periods} periods), {over}; plan fewer deployments "
            f"at once, lower their max_gpus, use fewer periods, or {raise_budget}",
        )
    raise InputError(
        f"deployments[{i}].max_gpus",
        f"{need} ({est.per_deployment_mb[i]:,.0f} MB for this deployment's "
        f"{candidates[i]:,} configurations over {n_periods} periods), {over}; lower "
        f"max_gpus, set bounds, use fewer periods, or {raise_budget}",
    )
