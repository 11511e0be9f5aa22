"""Admission-aware memory balance: the ``admission`` model variant (docs/admission.md).

SPEC 2.5 (the ``paper`` variant) charges the KV pool for every request dispatched to a
decode instance from the moment it is dispatched, through a Kingman wait in an open
prefill queue. In SGLang's PD mode (and in :mod:`model.simulator`) a request holds no
pool memory until its decode instance admits it; requests that do not fit wait in the
decode admission queue at no memory cost. At capacity that queue is never empty, so the
pool is always full and the admitted requests form a *closed* loop: a decode instance's
tokens circulate through the prefill queue, prefill, and decode. This module solves
that loop. Four changes to SPEC 2.5, each derived in docs/admission.md:

1. **Finite-source prefill queue.** Round-robin pairs request ``k`` with prefill
   ``k mod n_P`` and decode ``k mod n_D``, so the instances split into ``g =
   gcd(n_P, n_D)`` independent components of ``a = n_P/g`` prefill servers and ``b =
   n_D/g`` decode pools (random dispatch: one component, ``a = n_P``, ``b = n_D``). A
   component is a closed network: ``n`` admitted requests, the prefill servers (FCFS,
   mean service ``E[t_P]``, each visited by a request with probability ``1/a``) and the
   decode stage, where a request spends ``Z = E[l_out - 1] t_D(B)`` (a delay station).
   The population ``n`` whose throughput is the decode throughput ``b lambda_D(B)``
   gives the prefill wait ``W = n/X - Z - E[t_P]`` (Little's law over the cycle).
   Mean value analysis solves the network; here with the Linearizer (Chandy and Neuse
   1982) in closed form, inverted for ``n`` (:func:`population_for_throughput`).
2. **General service and arrivals.** As Kingman does for the open queue, the
   exponential-service wait is scaled by ``(c_a^2 + c_s^2)/2``: ``c_s^2`` of ``t_P``, and
   ``c_a^2`` the loop's own (:func:`arrival_scv`): at capacity a pool's admissions are
   its completions, its prefill departures displaced by the decode residences, which
   keep the share :func:`order_kept` of their variability. Outputs that vary reorder
   them completely and ``c_a^2 = 1/a`` (each pool sends every ``a``-th admission to a
   given server); deterministic lengths keep a deterministic cycle without waiting. 1
   for random dispatch. With an unbounded population and varied outputs this is SPEC
   2.5's Kingman wait.
3. **Fragmentation.** FIFO admission needs the head's whole ``S = l_in + R``: after the
   admissions a completion allows, the uncommitted rest is the age of the renewal
   process of admitted sizes, ``E[S^2]/(2 E[S])`` on average; between completions the
   running contexts grow, one token per request per iteration, ``E[l_out - 1]`` tokens
   per completion. The pool that admitted requests can fill is
   ``C_tok - U - (E[S^2]/(2 E[S]) - E[l_out - 1])``.
4. **One prefill server per component** (``a = 1``). All the component's admitted
   requests that are not decoding wait for that one server, so at capacity it is idle
   only when none is admitted: when the decoding requests leave no room in any of the
   ``b`` pools for the head of its queue. Its throughput is then ``mu_P`` times the
   probability that this does not happen (:func:`idle_probability`), whatever the
   waiting requests hold; the batch is the root of :func:`idle_gap`, capped by the
   balance without waiting (the pool must still hold the decoding requests, the
   request in prefill and the fragmentation on average). Needs the workload's third
   moments; without them the loop of 1-3 serves here too.

The balance in the batch ``B`` (decode requests per pool) is then SPEC 2.5's with the
wait above and the packable pool; it increases in ``B`` (docs/admission.md, section 5:
checked numerically, with the Linearizer's correction continuous in the population), so
it has one root in ``(0, min(B_max, B_rho))``, which is
solved by bracketed false position, vectorised over configurations.

This module is pure numerics on plain arrays: :mod:`model.capacity` calls it with the
per-deployment scalars; the simulator never imports it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import gammaincc

FloatArray = NDArray[np.float64]

#: Linearizer refinement passes (Chandy and Neuse use three).
LINEARIZER_PASSES = 3


@dataclass(frozen=True)
class LoopTerms:
    """Per-deployment scalars of the closed admission loop (all per decode pool)."""

    out_iterations: float  # E[l_out - 1]
    alpha_s: float  # t_D(B) = alpha + g B
    g_s_per_request: float
    ctx_tokens: float  # residence-corrected active context
    reserved_tokens: float  # R
    mean_in_tokens: float  # E[l_in]
    prefill_reserve_token_s: float  # E[t_P (l_in + R)]
    t_prefill_mean_s: float  # E[t_P]
    t_prefill_scv: float  # c_s^2 of t_P
    usable_tokens: float  # C_tok - U
    fragment_tokens: float  # FIFO admission's uncommitted pool (section 4)
    random_dispatch: bool
    # squared coefficient of variation of l_out - 1 (of the decode residence): how far
    # the decode stage reorders the stream that returns to prefill (section 3)
    out_scv: float = math.inf
    # E[(c + R)^2] over a decoding request's iterations and E[(l_in + R)^2] (section 6;
    # nan without the workload's third moments)
    decode_held_e2_tokens2: float = math.nan
    head_e2_tokens2: float = math.nan

    @property
    def one_server_form(self) -> bool:
        """Whether components with one prefill server take section 6's form."""
        return math.isfinite(self.decode_held_e2_tokens2) and math.isfinite(self.head_e2_tokens2)

    @property
    def active_tokens(self) -> float:
        """``ctx + R``, held by a decoding request."""
        return self.ctx_tokens + self.reserved_tokens

    @property
    def in_reserve_tokens(self) -> float:
        """``E[S] = E[l_in] + R``, held while waiting for or in prefill."""
        return self.mean_in_tokens + self.reserved_tokens

    @property
    def packable_tokens(self) -> float:
        """``C_tok - U - F``: what admitted requests can fill."""
        return self.usable_tokens - self.fragment_tokens


def fragmentation_tokens(mean_in: float, e_in2: float, reserved: float, out_iter: float) -> float:
    """Time-average uncommitted pool under FIFO admission: ``E[S^2]/(2E[S]) - E[l_out-1]``
    with ``S = l_in + R`` (docs/admission.md, section 4)."""
    e_s = mean_in + reserved
    e_s2 = e_in2 + 2.0 * reserved * mean_in + reserved * reserved
    return e_s2 / (2.0 * e_s) - out_iter


def components(
    n_p: ArrayLike, n_d: ArrayLike, random_dispatch: bool
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``(g, a, b)``: independent components, prefill servers and decode pools in each."""
    npi = np.asarray(n_p, dtype=np.int64)
    ndi = np.asarray(n_d, dtype=np.int64)
    g = np.ones_like(npi) if random_dispatch else np.gcd(npi, ndi)
    return g.astype(float), (npi // g).astype(float), (ndi // g).astype(float)


def _positive_root(p2: FloatArray, p1: FloatArray, p0: FloatArray) -> FloatArray:
    """Positive root of ``p2 x^2 + p1 x + p0`` with ``p0 <= 0 < p2`` (nan otherwise),
    in the form that avoids cancellation."""
    with np.errstate(invalid="ignore", divide="ignore"):
        disc = np.sqrt(p1 * p1 - 4.0 * p2 * p0)
        root = np.where(p1 >= 0.0, -2.0 * p0 / (p1 + disc), (disc - p1) / (2.0 * p2))
    return np.where((p2 > 0.0) & (p0 <= 0.0), root, np.nan)


def _core_queue(
    e: float, a: FloatArray, z: FloatArray, m: FloatArray, delta: FloatArray
) -> FloatArray:
    """Linearizer core: mean number ``y`` at one prefill server with population ``m``.

    The arrival theorem with ``Q(m-1) = (m-1)(y/m + delta)``, per-visit response
    ``Rq = E (1 + Q(m-1))``, throughput ``X = m/(Z + Rq)`` and ``y = X Rq / a`` give
    ``a c1 y^2 + (a (Z + c0) - m c1) y - m c0 = 0`` with ``c0 = E (1 + (m-1) delta)``
    and ``c1 = E (m-1)/m``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        c0 = e * (1.0 + (m - 1.0) * delta)
        c1 = np.where(m > 0, e * (m - 1.0) / m, 0.0)
        p2 = a * c1
        p1 = a * (z + c0) - m * c1
        p0 = -m * c0
        linear = -p0 / p1
    return np.where(p2 > 0.0, _positive_root(p2, p1, p0), linear)


def population_for_throughput(
    x: FloatArray, z: FloatArray, e: float, a: FloatArray, passes: int = LINEARIZER_PASSES
) -> FloatArray:
    """Population ``n`` of the closed loop (``a`` FCFS servers of mean service ``e``,
    each visited with probability ``1/a``, and a delay ``z``) whose throughput is ``x``.

    Exponential service. For a given Linearizer deviation ``delta`` the core equations
    with ``X = x`` fixed are a quadratic in ``n``:
    ``n^2 (1/x - e/a - e delta) + n (e/a (1 + x z) + e delta - z - e) - e/a x z = 0``;
    ``delta = Q(n-1)/(n-1) - Q(n)/n`` is refined ``passes`` times from the core at
    ``n - 1`` (Linearizer). nan where ``x`` is at or beyond the servers' capacity."""
    delta = np.zeros_like(x)
    ea = e / a
    n = np.full_like(x, np.nan)
    for step in range(passes + 1):
        with np.errstate(invalid="ignore", divide="ignore"):
            n = _positive_root(
                1.0 / x - ea - e * delta, ea * (1.0 + x * z) + e * delta - z - e, -ea * x * z
            )
        if step == passes:
            break
        y_n = (n - x * z) / a
        m = n - 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            # per-customer queue at population m: the core's for m >= 1; below, a lone
            # customer's share E/(a (Z + E)), its exact value at m = 1, so that delta is
            # continuous in n and vanishes at n = 1 (where the core is exact)
            per_m = np.where(m >= 1.0, _core_queue(e, a, z, m, delta) / m, ea / (z + e))
            delta = np.where(m > 0.0, per_m - y_n / n, 0.0)
        delta = np.where(np.isfinite(delta), delta, 0.0)
    return n


def order_kept(batch: FloatArray, out_scv: float) -> FloatArray:
    """``phi = exp(-4 pi^2 B^2 c_out^2)``: the share of the admission stream's
    structure that survives the decode stage (docs/admission.md, section 3).

    A request's decode residence is ``R = (l_out - 1) t_D(B)``, and a pool admits at
    ``lambda_D = B / (E[l_out - 1] t_D(B))``. Displacing the points of a stream by
    independent delays ``R`` multiplies its spectrum at frequency ``w`` by
    ``|chi_R(w)|^2`` and fills the rest with a Poisson stream's; at the admissions'
    own frequency ``w = 2 pi lambda_D``, with ``R`` taken as normal,
    ``|chi_R|^2 = exp(-w^2 Var R) = exp(-4 pi^2 B^2 Var(l_out) / E[l_out - 1]^2)``.
    1 for deterministic outputs, 0 once the spread of ``R`` exceeds the gap between
    admissions."""
    if math.isinf(out_scv):
        return np.zeros_like(batch)
    return np.exp(-4.0 * math.pi**2 * out_scv * batch * batch)


def arrival_scv(
    rho: FloatArray, phi: FloatArray, scv: float, a: FloatArray, b: FloatArray
) -> FloatArray:
    """Squared coefficient of variation ``c_a^2`` of the admissions reaching one prefill
    server of a round-robin component at capacity (docs/admission.md, section 3).

    At capacity each completion admits the next request, so a pool's admissions are its
    completions: its stream of prefill departures, displaced by the decode stage, which
    keeps the share ``phi`` of its variability and makes the rest Poisson's. A server's
    departures have ``c_d^2 = rho^2 c_s^2 + (1 - rho^2) c_a^2`` (Whitt's linking
    equation); each of its ``b`` pools takes every ``b``-th of them and merges ``a`` such
    streams; each pool sends every ``a``-th admission to a server, which merges ``b``
    such streams. The loop's fixed point is

        c_a^2 = (phi rho^2 c_s^2 + (1 - phi) b) / (a b - phi (1 - rho^2)),

    ``1/a`` when the decode stage reorders completely (``phi = 0``), ``c_s^2`` for one
    server and one pool that keep the order, 0 for deterministic prefill times too."""
    num = phi * rho * rho * scv + (1.0 - phi) * b
    den = a * b - phi * (1.0 - rho * rho)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0.0, num / den, scv)


def decode_residence_s(t: LoopTerms, batch: FloatArray) -> FloatArray:
    """``Z = E[l_out - 1] t_D(B)``: a request's mean time in decode at batch ``B`` (SPEC
    2.3); ``lambda_D(B) = B / Z``."""
    return t.out_iterations * (t.alpha_s + t.g_s_per_request * batch)


def prefill_wait_s(
    t: LoopTerms, batch: FloatArray, a: FloatArray, b: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """``(lambda_D(B), W)``: decode rate per pool and the admitted requests' prefill wait."""
    z = decode_residence_s(t, batch)
    lam = batch / z
    x = b * lam
    n = population_for_throughput(x, z, t.t_prefill_mean_s, a)
    if t.random_dispatch:
        ca2 = np.ones_like(a)
    else:
        rho = x * t.t_prefill_mean_s / a
        ca2 = arrival_scv(rho, order_kept(batch, t.out_scv), t.t_prefill_scv, a, b)
    kappa = (ca2 + t.t_prefill_scv) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        w_exp = np.maximum(n / x - z - t.t_prefill_mean_s, 0.0)
    w = np.where(batch > 0, kappa * w_exp, 0.0)
    return lam, np.where(np.isnan(w), np.inf, w)


def idle_probability(t: LoopTerms, batch: FloatArray) -> FloatArray:
    """``P(D + S > C_tok - U)``: the chance that a pool's decoding requests leave no room
    for the next request (docs/admission.md, section 6).

    ``D`` sums ``c + R`` over the requests decoding in the pool: their number is Poisson
    with mean ``B`` and each holds its active context ``c`` at an iteration chosen at
    random, so ``D`` is compound Poisson with mean ``B E[c + R]`` and variance
    ``B E[(c + R)^2]`` (Campbell). ``S = l_in + R`` is the next request's. The sum of
    these positive terms is taken as the gamma law with its mean and variance."""
    mean = batch * t.active_tokens + t.in_reserve_tokens
    var = batch * t.decode_held_e2_tokens2 + (t.head_e2_tokens2 - t.in_reserve_tokens**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        shape = mean * mean / var
        p = gammaincc(shape, t.usable_tokens * mean / var)
    # no spread at all (every request alike, no batch): the sum is its mean
    return np.where(var > 0.0, p, (mean > t.usable_tokens).astype(float))


def idle_gap(t: LoopTerms, batch: FloatArray, b: FloatArray) -> FloatArray:
    """``b lambda_D(B) - mu_P (1 - p(B)^b)``: the component's decode throughput at batch
    ``B`` per pool less what its one prefill server serves when it idles only while
    every pool is full of decoding requests (``p`` from :func:`idle_probability`, the
    pools taken as independent). Increasing in ``B``; its root is the batch at
    capacity (section 6)."""
    lam = batch / decode_residence_s(t, batch)
    idle = idle_probability(t, batch) ** b
    return b * lam - (1.0 - idle) / t.t_prefill_mean_s


def balance(t: LoopTerms, batch: FloatArray, a: FloatArray, b: FloatArray) -> FloatArray:
    """Pool tokens committed at batch ``B`` minus the packable pool (inf where the
    prefill servers cannot carry the decode throughput)."""
    lam, w = prefill_wait_s(t, batch, a, b)
    with np.errstate(invalid="ignore"):
        held = lam * (w * t.in_reserve_tokens + t.prefill_reserve_token_s)
    return batch * t.active_tokens + np.where(batch > 0, held, 0.0) - t.packable_tokens


def solve_batch(
    t: LoopTerms,
    n_p: ArrayLike,
    n_d: ArrayLike,
    b_max: float,
    b_rho: FloatArray,
    rtol: float = 1e-9,
    max_iter: int = 200,
    groups: ArrayLike | None = None,
) -> tuple[FloatArray, int]:
    """Batch ``B*`` at capacity, in ``(0, min(B_max, B0, B_rho))``.

    Components with one prefill server (section 6, when the workload has its third
    moments): the root of :func:`idle_gap`. Otherwise the root of :func:`balance`: it
    increases from ``-packable`` at 0 to ``+inf`` at ``B_rho`` (where the prefill servers
    saturate); times ``1 - B/B_rho`` (positive inside the bracket) it keeps its root and
    loses its pole. The bracket's end is also at most the root ``B0`` without prefill
    waiting (the wait only adds reservations). Vectorised false position with the
    Illinois modification, safeguarded by bisection. Round-robin configurations with the
    same components ``(a, b)`` share their ``B*``, so each component shape is solved
    once (with ``groups``, one label per configuration: once per group, so that each
    group's ``B*`` are those it gets alone). Returns ``(B*, passes)``."""
    _, a, b = components(np.atleast_1d(n_p), np.atleast_1d(n_d), t.random_dispatch)
    if np.any(a <= 0) or np.any(b <= 0):
        raise ValueError("every configuration needs n_P >= 1 and n_D >= 1")
    rho_end = np.broadcast_to(np.asarray(b_rho, dtype=float), a.shape)
    if t.random_dispatch or a.size < 2:
        return _solve_shapes(t, a, b, b_max, rho_end, rtol, max_iter)
    key = a * (b.max() + 1.0) + b
    if groups is not None:
        key = key + np.asarray(groups, dtype=float) * (a.max() + 1.0) * (b.max() + 1.0)
    _, first, back = np.unique(key, return_index=True, return_inverse=True)
    out, passes = _solve_shapes(t, a[first], b[first], b_max, rho_end[first], rtol, max_iter)
    return out[back.ravel()], passes


def no_wait_batch(t: LoopTerms) -> float:
    """``B0``: the root of the balance without prefill waiting (``W = 0``), a quadratic:
    ``(m1 B - C') E(B) + T B = 0`` with ``E(B) = E[l_out-1] t_D(B)``."""
    e0, ee = t.out_iterations * t.alpha_s, t.out_iterations * t.g_s_per_request
    m1, m0 = t.active_tokens, -t.packable_tokens
    qa, qb, qc = m1 * ee, m1 * e0 + m0 * ee + t.prefill_reserve_token_s, m0 * e0
    return (2.0 * -qc) / (qb + math.sqrt(qb * qb - 4.0 * qa * qc))


def _solve_shapes(
    t: LoopTerms,
    a: FloatArray,
    b: FloatArray,
    b_max: float,
    rho_end: FloatArray,
    rtol: float,
    max_iter: int,
) -> tuple[FloatArray, int]:
    """``B*`` of each component shape ``(a[i], b[i])``: section 6's root where ``a = 1``,
    the balance's elsewhere."""
    hi = np.minimum(np.minimum(b_max, no_wait_batch(t)), rho_end) * (1.0 - 1e-12)
    one = (a == 1.0) if t.one_server_form else np.zeros(a.shape, dtype=bool)
    out = np.empty(a.shape)
    passes = 0
    if (~one).any():

        def loop(x: FloatArray, i: NDArray[np.intp]) -> FloatArray:
            pole = rho_end[i]
            scale = np.where(np.isfinite(pole), 1.0 - x / pole, 1.0)
            return balance(t, x, a[i], b[i]) * scale

        idx = np.flatnonzero(~one)
        f_lo = np.full(idx.size, -t.packable_tokens)
        out[idx], passes = _illinois(loop, idx, hi[idx], f_lo, rtol, max_iter)
    if one.any():

        def gap(x: FloatArray, i: NDArray[np.intp]) -> FloatArray:
            return idle_gap(t, x, b[i])

        idx = np.flatnonzero(one)
        f_lo = gap(np.zeros(idx.size), idx)
        out[idx], more = _illinois(gap, idx, hi[idx], f_lo, rtol, max_iter)
        passes = max(passes, more)
    return out, passes


def _illinois(
    fn: Callable[[FloatArray, NDArray[np.intp]], FloatArray],
    idx: NDArray[np.intp],
    hi: FloatArray,
    f_lo: FloatArray,
    rtol: float,
    max_iter: int,
) -> tuple[FloatArray, int]:
    """Roots in ``(0, hi)`` of the increasing ``fn(x, idx)`` (negative at 0: ``f_lo``),
    each row ``idx[i]`` its own function; ``hi`` itself where ``fn(hi) <= 0``."""
    lo = np.zeros_like(hi)
    f_hi = fn(hi, idx)
    # where the pool is not full even at the bracket's end the root is the end itself
    out = np.where(f_hi <= 0.0, hi, np.nan)
    pos = np.flatnonzero(f_hi > 0.0)
    lo, hi, f_lo, f_hi, rows = lo[pos], hi[pos], f_lo[pos], f_hi[pos], idx[pos]
    side = np.zeros(pos.size, dtype=np.int8)
    passes = 0
    while pos.size and passes < max_iter:
        passes += 1
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            cand = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        mid = 0.5 * (lo + hi)
        bad = ~np.isfinite(cand) | (cand <= lo) | (cand >= hi) | (passes <= 2)
        x = np.where(bad, mid, cand)
        fx = fn(x, rows)
        neg = fx < 0.0
        # Illinois: halve the retained end's value when the same end is kept twice
        keep_hi = neg & (side == 1)
        keep_lo = ~neg & (side == -1)
        f_hi = np.where(keep_hi, 0.5 * f_hi, f_hi)
        f_lo = np.where(keep_lo, 0.5 * f_lo, f_lo)
        lo = np.where(neg, x, lo)
        f_lo = np.where(neg, fx, f_lo)
        hi = np.where(neg, hi, x)
        f_hi = np.where(neg, f_hi, fx)
        side = np.where(neg, 1, -1).astype(np.int8)
        done = (hi - lo <= rtol * hi) | (fx == 0.0)
        if done.any():
            out[pos[done]] = np.where(fx[done] == 0.0, x[done], 0.5 * (lo[done] + hi[done]))
            keep = ~done
            pos, lo, hi, f_lo, f_hi = pos[keep], lo[keep], hi[keep], f_lo[keep], f_hi[keep]
            rows, side = rows[keep], side[keep]
    if pos.size:
        out[pos] = 0.5 * (lo + hi)
    return out, passes
