"""Capacity under latency targets: the highest rate at which a configuration meets a p99
TTFT and a p99 TPOT target (docs/admission.md, section 8).

Without targets a configuration's capacity is SPEC 2.5's (or the admission variant's):
the decode instances run at the batch ``B*`` that fills the KV pool and the prefill
instances at utilisation 1. With targets:

* **decode** runs at ``B_T``, the largest whole batch whose iteration ``t_D(B) = alpha
  + g B`` (the time per output token of a request in a batch of ``B``, SPEC 2.3) is
  within the TPOT target, when that is below ``B*`` (and below the engine's largest
  batch, ``serving.max_running_requests``, which :func:`model.capacity.evaluate`
  applies): ``lambda_D(min(B*, B_T))``;
* **prefill** runs at ``rho_T``, the largest utilisation at which the p99 TTFT of the
  queue model of :mod:`model.queueing.latency` (an FCFS prefill queue with the workload's own
  prefill times, its arrivals every ``n_P``-th request, and the wait for the decode
  instance's iteration boundary at the decode batch above) is within the TTFT target:
  ``n_P mu_P rho_T``.

The capacity is the smaller of the two. A TPOT target below one request's iteration
``alpha + g``, or a TTFT target below the p99 of the bare prefill time (with the boundary
wait), holds at no rate: capacity 0, and the configuration says why (``unmet``).

Nothing is computed here without a target: :func:`evaluate_targets` then returns
:func:`model.capacity.evaluate`'s result unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from model.capacity import (
    CapacityResult,
    Coefficients,
    FloatArray,
    evaluate,
    no_limits,
    phase_power_w,
)
from model.errors import InputError
from model.latency_targets import LatencyTargets
from model.queueing.latency import (
    boundary_mixture,
    prefill_wait_distribution,
    transfer_times,
    ttft_tail_at,
)
from model.simulator import resolve_samples
from model.spec import DeploymentSpec

#: ``B_T`` of a TPOT target that caps no batch (beyond any pool's: whole requests of
#: at least one token each)
NO_BATCH_CAP = 2**62
#: the quantile the targets are of
QUANTILE = 0.99
#: ``rho_T`` is found by bisection on the dyadic grid of this many levels: the largest
#: multiple of ``2**-RHO_LEVELS`` at which the TTFT target holds
RHO_LEVELS = 10


def tpot_batch(c: Coefficients, tpot_p99_s: float) -> int:
    """``B_T``: the largest whole batch ``B`` with ``alpha + g B <= tpot_p99_s`` (0 when
    even one request's iteration is longer)."""
    alpha, g = c.alpha_s, c.g_s_per_request
    if not c.has_decode_work or not g > 0:
        return 0 if alpha > tpot_p99_s else NO_BATCH_CAP
    ratio = (tpot_p99_s - alpha) / g
    if not ratio < NO_BATCH_CAP:  # a target no batch the engine can hold reaches
        return NO_BATCH_CAP
    b = max(math.floor(ratio), 0)
    while alpha + g * (b + 1) <= tpot_p99_s:  # the division's rounding, either way
        b += 1
    while b > 0 and alpha + g * b > tpot_p99_s:
        b -= 1
    return int(b)


@dataclass
class PrefillQueue:
    """The TTFT of one prefill instance's queue (docs/latency.md, sections 1-2) as a
    function of its utilisation, for one arrival process (``phases``: Erlang gaps, 1
    for Poisson): the prefill times ``t_u`` with probabilities ``t_w``; each utilisation's
    wait law is computed once."""

    t_u: FloatArray
    t_w: FloatArray
    phases: int
    #: each prefill time's KV transfer (:func:`model.queueing.latency.transfer_times`; None: none)
    t_x: FloatArray | None = None

    def __post_init__(self) -> None:
        self.mean_s = float(np.sum(self.t_u * self.t_w))
        self._waits: dict[float, Any] = {}

    def tail(self, rho: float, x: float, running_s: float, busy: float) -> float:
        """``P(TTFT > x)`` at utilisation ``rho`` (0: no wait)."""
        ahead, weight = boundary_mixture(self.t_u, self.t_w, running_s, busy, self.t_x)
        if rho <= 0.0:
            return float(np.sum(weight * (ahead > x)))
        dist = self._waits.get(rho)
        if dist is None:
            dist = prefill_wait_distribution(self.t_u, self.t_w, rho / self.mean_s, self.phases)
            self._waits[rho] = dist
        return ttft_tail_at(dist, ahead, weight, x)

    def meets(self, rho: float, target_s: float, running_s: float, busy: float) -> bool:
        return self.tail(rho, target_s, running_s, busy) <= 1.0 - QUANTILE

    def rho_limit(
        self, target_s: float, running_s: float, busy: float, start: float | None = None
    ) -> float:
        """``rho_T``: the largest multiple of ``2**-RHO_LEVELS`` below 1 at which the p99
        TTFT is within ``target_s``; -1 when even ``rho = 0`` misses the target. The p99
        increases with ``rho``, so a search on the dyadic grid finds it exactly: from
        ``start`` (a grid multiple, e.g. a neighbouring configuration's ``rho_T``) in
        steps doubling away from it until the answer is bracketed, then by bisection;
        the answer is the same from any start, only the number of wait laws computed
        differs (about ``2 log2`` of the distance instead of ``RHO_LEVELS``)."""
        unit = 2.0**-RHO_LEVELS
        if start is None or not 0.0 < start < 1.0:
            if not self.meets(0.0, target_s, running_s, busy):
                return -1.0
            lo, hi = 0.0, 1.0  # lo meets, hi (saturation) does not
        elif self.meets(start, target_s, running_s, busy):
            lo, step = start, unit
            while lo + step < 1.0 and self.meets(lo + step, target_s, running_s, busy):
                lo, step = lo + step, 2.0 * step
            hi = min(lo + step, 1.0)
        else:
            hi, step = start, unit
            while hi - step > 0.0 and not self.meets(hi - step, target_s, running_s, busy):
                hi, step = hi - step, 2.0 * step
            lo = max(hi - step, 0.0)
            if lo == 0.0 and not self.meets(0.0, target_s, running_s, busy):
                return -1.0
        while hi - lo > unit:
            mid = lo + math.floor((hi - lo) / unit / 2.0) * unit
            if self.meets(mid, target_s, running_s, busy):
                lo = mid
            else:
                hi = mid
        return lo


def prefill_times(c: Coefficients, l_in: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The workload's distinct prefill times ``t_P(l_in)`` and their probabilities (each
    sample equally likely)."""
    li = np.atleast_1d(np.asarray(l_in, dtype=float))
    if li.ndim != 1 or li.size == 0 or not np.all(np.isfinite(li)) or li.min() < 1:
        raise InputError("samples", "l_in must be a non-empty list of lengths >= 1")
    t_p = c.a_p_s_per_token * li + c.b_p_s_per_token2 * li * li
    t_u, count = np.unique(t_p, return_counts=True)
    return t_u, count / count.sum()


def evaluate_targets(
    spec: DeploymentSpec | Coefficients,
    n_p: ArrayLike,
    n_d: ArrayLike,
    targets: LatencyTargets,
    l_in: ArrayLike | None = None,
    load_rps: ArrayLike | None = None,
    groups: ArrayLike | None = None,
) -> CapacityResult:
    """:func:`model.capacity.evaluate` with capacities under ``targets``: each
    configuration's highest rate at which its p99 TTFT and TPOT are within them (see
    the module's docstring), ``batch`` the decode batch it runs at and ``limits`` what
    capped it. ``l_in``: the workload's per-request prompt lengths, which a TTFT target
    needs (the p99 of the prefill times is not in the moments). Power is SPEC 2.6's at
    the served load, capped at the new capacity. Without a target: ``evaluate``'s
    result itself."""
    c = spec if isinstance(spec, Coefficients) else Coefficients.of(spec)
    if not targets.given:
        return evaluate(c, n_p, n_d, load_rps=load_rps, groups=groups)
    if targets.ttft_p99_s is not None and l_in is None:
        raise InputError(
            "ttft_p99_s",
            "needs the workload's per-request lengths (a trace or fixed lengths): the p99 "
            "of the prefill times is not in its moments",
        )
    base = evaluate(c, n_p, n_d, groups=groups)
    n = len(base)
    limits = base.limits if base.limits is not None else no_limits(n)
    limits.pool_batch[:] = np.where(np.isnan(limits.pool_batch), base.batch, limits.pool_batch)
    both = (base.n_p > 0) & (base.n_d > 0)
    batch = base.batch.copy()
    npf, ndf = base.n_p.astype(float), base.n_d.astype(float)
    decode_total = np.where(base.n_d > 0, ndf * base.mu_d_rps, 0.0)
    if targets.tpot_p99_s is not None and c.has_decode_work:
        b_t = tpot_batch(c, targets.tpot_p99_s)
        if b_t < 1:
            one = c.alpha_s + c.g_s_per_request
            limits.unmet[both] = (
                f"tpot_p99_s {targets.tpot_p99_s:g} s is below one request's decode "
                f"iteration, alpha + g = {one:.4g} s"
            )
        # a batch whose own iteration is within the target stays (the pool's mean batch
        # may lie between B_T and B_T + 1); a longer one runs at B_T
        capped = both & (c.alpha_s + c.g_s_per_request * batch > targets.tpot_p99_s)
        limits.capped_by[capped] = "tpot_p99"
        batch = np.where(capped, np.minimum(batch, b_t), batch)
        with np.errstate(invalid="ignore", divide="ignore"):
            decode_total = np.where(both, ndf * c.decode_rate_rps(batch), decode_total)
    mu_d = np.where(base.n_d > 0, decode_total / np.maximum(ndf, 1.0), base.mu_d_rps)
    if targets.ttft_p99_s is not None:
        assert l_in is not None
        _ttft_limits(c, targets.ttft_p99_s, l_in, npf, batch, both, limits)
    prefill_total = npf * base.mu_p_rps
    capacity = np.minimum(np.minimum(prefill_total, decode_total), limits.prefill_limit_rps)
    if c.kv_link_charged:
        capacity = np.minimum(capacity, c.kv_link_rps(npf, ndf))
    ok = both & np.array([u is None for u in limits.unmet], dtype=bool)
    capacity = np.where(ok, capacity, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho_star = np.where(both, capacity / prefill_total, 0.0)
    load = capacity if load_rps is None else np.minimum(np.asarray(load_rps, float), capacity)
    load = np.broadcast_to(load, capacity.shape).astype(float)
    if np.any(load < 0) or not np.all(np.isfinite(load)):
        raise InputError("load_rps", "served load must be finite and >= 0")
    decode_max_total = np.where(base.n_d > 0, ndf * base.mu_d_max_rps, 0.0)
    pw, dw = phase_power_w(c, npf, ndf, prefill_total, decode_max_total, load)
    return replace(
        base,
        capacity_rps=capacity,
        mu_d_rps=mu_d,
        batch=batch,
        rho_star=rho_star,
        power_w=pw + dw,
        load_rps=load,
        limits=limits,
    )


def evaluate_spec(
    spec: DeploymentSpec,
    n_p: ArrayLike,
    n_d: ArrayLike,
    load_rps: ArrayLike | None = None,
    groups: ArrayLike | None = None,
) -> CapacityResult:
    """The capacities of ``spec`` under its own latency targets (``spec.targets``):
    :func:`evaluate_targets`, with the workload's per-request prompt lengths when a TTFT
    target needs them; without targets :func:`model.capacity.evaluate` itself."""
    goals = spec.targets
    if not goals.given:
        return evaluate(spec, n_p, n_d, load_rps=load_rps, groups=groups)
    l_in = None if goals.ttft_p99_s is None else resolve_samples(spec.workload).l_in
    return evaluate_targets(spec, n_p, n_d, goals, l_in=l_in, load_rps=load_rps, groups=groups)


def _ttft_limits(
    c: Coefficients,
    target_s: float,
    l_in: ArrayLike,
    npf: FloatArray,
    batch: FloatArray,
    both: NDArray[np.bool_],
    limits: Any,
) -> None:
    """Set ``limits.prefill_limit_rps`` (``n_P rho_T / E[t_P]``) and, where no
    utilisation meets ``target_s``, ``limits.unmet``. Each configuration's boundary
    wait is over its decode iteration at ``batch`` (its decode instances' batch at
    capacity, the most they carry at any rate below), busy with probability ``1 -
    exp(-B)`` (docs/latency.md, section 2). One queue per arrival process: its
    utilisations' wait laws are shared by every configuration with its ``n_P``."""
    t_u, t_w = prefill_times(c, l_in)
    t_x = transfer_times(c, l_in)
    queues: dict[int, PrefillQueue] = {}
    # the p99 grows with the batch (a longer iteration, busy more often): within one
    # queue, in increasing batch, the previous rho_T is the answer where it still meets
    # (the next multiple above fails already for the smaller batch)
    last: dict[int, float] = {}
    phases_of = np.ones(npf.shape, dtype=np.int64) if c.random_dispatch else npf.astype(np.int64)
    todo = [int(i) for i in np.flatnonzero(both) if limits.unmet[i] is None]
    todo.sort(key=lambda i: (int(phases_of[i]), float(batch[i])))
    nearby: float | None = None  # the last rho_T found: the next queue's is close by
    for i in todo:
        phases = int(phases_of[i])
        q = queues.get(phases)
        if q is None:
            q = queues[phases] = PrefillQueue(t_u, t_w, phases, t_x)
        b = float(batch[i])
        decoding = c.has_decode_work and b > 0
        running = c.alpha_s + c.g_s_per_request * b if decoding else 0.0
        busy = 1.0 - math.exp(-b) if decoding else 0.0
        prev = last.get(phases)
        if prev is not None and prev >= 0.0 and q.meets(prev, target_s, running, busy):
            rho = prev
        else:  # from this queue's last answer, else the previous queue's
            rho = q.rho_limit(target_s, running, busy, start=prev if prev else nearby)
        last[phases] = rho
        if rho > 0.0:
            nearby = rho
        if rho < 0.0:
            limits.unmet[i] = (
                f"ttft_p99_s {target_s:g} s is below the p99 of the bare prefill time "
                "(with the wait for the decode iteration boundary), reached with no "
                "prefill queue at all"
            )
            limits.prefill_limit_rps[i] = 0.0
        else:
            limits.prefill_limit_rps[i] = npf[i] * rho / q.mean_s
