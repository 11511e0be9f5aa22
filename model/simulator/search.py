"""The simulator's capacity search (:mod:`model.simulator`).

Capacity (:func:`find_capacity`). The decode admission queue sits in front of
a closed loop (the pool's tokens circulate through prefill and decode), so the
system is stable exactly when the arrival rate is below the loop's throughput
with the admission queue never empty. The capacity estimate is therefore the
**saturated throughput**: each decode instance is fed from an unbounded queue
(every request present at time 0), and the throughput is measured over the
last ``requests`` completions after ``requests * warmup_fraction /
(1 - warmup_fraction)`` warm-up completions, averaged over ``seeds`` seeds.
Its 95% confidence half-width comes from batch means (10 batches per seed,
Student t). The estimate is then checked against the open-loop definition of
stability with Poisson arrivals at ``(1 - margin)`` and ``(1 + margin)`` times
the estimate (default 5%): the **stability criterion** is that completions
over the second half of the horizon are at least 98% of the arrivals in it
(pooled over seeds); the check passes when the lower rate is stable and the
upper one is not. Latency at the lower rate is reported with the capacity.
Confidence obtained with the defaults (3 seeds, :func:`default_requests`
measured completions each) over the 384 configurations of the validation
report (docs/validation.md): 95% half-width median 0.6% of the capacity
(Mooncake 1.9%), at most 6.7% (fixed lengths, whose batch oscillates in
cohorts); the open-loop check passed for all 384.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from model.errors import InputError
from model.simulator.engine import STABLE_SHARE, SimResult, simulate
from model.simulator.samples import Samples, SimTiming

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CapacityEstimate:
    """Result of :func:`find_capacity` (rates in req/s)."""

    n_p: int
    n_d: int
    capacity_rps: float
    ci95_rps: float  # half-width of the 95% confidence interval
    seeds: int
    requests: int  # measured completions per seed
    runs: tuple[SimResult, ...]  # the saturated runs, one per seed
    check_margin: float | None = None
    lower: tuple[SimResult, ...] = ()  # open-loop runs at (1 - margin) * capacity
    upper: tuple[SimResult, ...] = ()  # open-loop runs at (1 + margin) * capacity

    @property
    def lower_stable(self) -> bool | None:
        return pooled_stable(self.lower) if self.lower else None

    @property
    def upper_stable(self) -> bool | None:
        return pooled_stable(self.upper) if self.upper else None

    @property
    def check_passed(self) -> bool | None:
        """True when stable at the lower rate and unstable at the upper one."""
        if not self.lower or not self.upper:
            return None
        return bool(self.lower_stable) and not self.upper_stable


def pooled_stable(runs: Sequence[SimResult]) -> bool:
    arrived = sum(r.arrived for r in runs)
    completed = sum(r.completed for r in runs)
    return completed >= STABLE_SHARE * arrived


def _t975(dof: int) -> float:
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.975, dof))


def find_capacity(
    timing: SimTiming,
    samples: Samples,
    n_p: int,
    n_d: int,
    *,
    seeds: int = 3,
    requests: int | None = None,
    warmup_fraction: float = 0.25,
    dispatch: str = "round_robin",
    check_margin: float | None = 0.05,
    check_requests: int | None = None,
    check_duration_s: float | None = None,
    first_seed: int = 0,
) -> CapacityEstimate:
    """Largest stable arrival rate of ``(n_p, n_d)``: the saturated throughput, checked.

    See the module docstring for the criterion and its confidence. ``seeds`` runs
    (seeds ``first_seed ...``), each measuring ``requests`` completions (default
    :func:`default_requests`) after ``requests * warmup_fraction / (1 -
    warmup_fraction)`` warm-up completions. A saturated run of one fixed request
    length with round-robin dispatch has no randomness, so it is run once whatever
    ``seeds`` says. ``check_margin=None`` skips the open-loop check; its runs measure
    ``check_requests`` arrivals per seed (default ``max(4000, requests // 2)``) or
    last ``check_duration_s``.
    """
    if seeds < 1:
        raise InputError("seeds", "must be >= 1")
    n_req = requests or default_requests(samples)
    deterministic = len(samples) == 1 and dispatch == "round_robin"
    runs = tuple(
        simulate(
            timing,
            samples,
            n_p,
            n_d,
            math.inf,
            requests=n_req,
            warmup_fraction=warmup_fraction,
            seed=first_seed + s,
            dispatch=dispatch,
        )
        for s in range(1 if deterministic else seeds)
    )
    capacity = sum(r.completed for r in runs) / sum(r.window_s for r in runs)
    ci = _batch_means_ci(runs)
    est = CapacityEstimate(n_p, n_d, capacity, ci, len(runs), n_req, runs)
    logger.debug("saturated throughput of %dP%dD: %.4g +- %.2g req/s", n_p, n_d, capacity, ci)
    if check_margin is None:
        return est
    return _check(
        est,
        timing,
        samples,
        dispatch,
        check_margin,
        check_requests or max(4000, n_req // 2),
        check_duration_s,
        seeds,
        first_seed,
    )


def _check(
    est: CapacityEstimate,
    timing: SimTiming,
    samples: Samples,
    dispatch: str,
    margin: float,
    requests: int,
    duration_s: float | None,
    seeds: int,
    first_seed: int,
) -> CapacityEstimate:
    """The open-loop check of :func:`find_capacity` (Poisson arrivals, ``seeds`` seeds)."""
    if not (0 < margin < 1):
        raise InputError("check_margin", "must be in (0, 1)")

    def open_loop(rate: float, tail: bool) -> tuple[SimResult, ...]:
        return tuple(
            simulate(
                timing,
                samples,
                est.n_p,
                est.n_d,
                rate,
                requests=requests,
                duration_s=duration_s,
                warmup_fraction=0.5,
                seed=first_seed + s,
                dispatch=dispatch,
                tail=tail,
            )
            for s in range(seeds)
        )

    lower = open_loop((1.0 - margin) * est.capacity_rps, tail=True)
    upper = open_loop((1.0 + margin) * est.capacity_rps, tail=False)
    return replace(est, check_margin=margin, lower=lower, upper=upper)


def _batch_means_ci(runs: Sequence[SimResult], batches: int = 10) -> float:
    """95% half-width of the throughput by batch means: each run's window is cut into
    ``batches`` runs of equal completion count; Student t over all batches."""
    rates: list[float] = []
    for r in runs:
        times = np.concatenate([[r.window_start_s], r.completion_times_s])
        if times.size <= batches:
            continue
        cuts = np.linspace(0, times.size - 1, batches + 1).round().astype(int)
        counts = np.diff(cuts)
        spans = np.diff(times[cuts])
        ok = spans > 0
        rates.extend((counts[ok] / spans[ok]).tolist())
    if len(rates) < 2:
        return math.nan
    sd = float(np.std(rates, ddof=1))
    return _t975(len(rates) - 1) * sd / math.sqrt(len(rates))


def default_requests(samples: Samples) -> int:
    """Measured requests per seed for a capacity search: twice the samples (so that the
    window holds their length mix twice over), at least 10,000 (fixed lengths make
    cohorts whose batch oscillates) and at most 40,000."""
    return int(min(40_000, max(10_000, 2 * len(samples))))
