"""Analytic latency at a load: time to first token (TTFT) and time per output token
(TPOT), mean and a high quantile, from the queue model of SPEC 2.2-2.5 without
simulation. Derivation and validation against :mod:`model.simulator`:
``docs/latency.md``.

One configuration ``(n_P, n_D)`` at an arrival rate ``lambda`` below its capacity:

* **Prefill queue** (per instance, FCFS, utilisation ``rho = lambda E[t_P] / n_P``): a
  GI/G/1 queue with Erlang-``n_P`` gaps (round robin; Poisson for random dispatch) and
  the workload's own prefill times; its wait's law is the fixed point of Lindley's
  recursion ``W' = max(0, W + S - A)`` on a grid (:func:`prefill_wait_distribution`).
* **TTFT** ``= J_a + W + t_P(l_in)``: ``J_a``, the wait for the decode instance's next
  iteration boundary, where admission happens (uniform over an iteration while the
  instance is busy); FCFS makes ``W`` independent of the request's own prompt, so the
  distribution is the mixture over the workload's requests.
* **Decode** (per instance, ``lambda_D = lambda / n_D``): a request sees itself and the
  others present, ``1 + N``; by Little's law the time-average ``B = E[N]`` solves
  ``B = lambda_D E[l_out - 1] (alpha + g (B + 1))`` (SPEC 2.3's ``t_D``).
* **TPOT** ``= (J + sum of its iterations) / (l_out - 1)``: ``J``, the wait from the end of
  its prefill to the next iteration boundary, uniform over an iteration while the
  instance is busy; the iterations at ``alpha + g (1 + N_avg)`` with ``N_avg`` the
  others' count averaged over the request's own residence: normal, of variance from
  the GI/G/infinity peakedness (Whitt) and the residence-time autocorrelation.

The decode admission queue (requests waiting for pool memory) is not modelled: it is
empty while the pool does not bind, and ``docs/latency.md`` shows where that fails
(heavy-tailed prompts near capacity, where a long head blocks the FIFO queue).
Pure numerics on plain arrays; the simulator never imports it. ``scipy.optimize`` and
``scipy.stats`` (which loads ``scipy.optimize`` and with it SciPy's HiGHS) are imported
in the functions that use them, so that importing this module, as the API process
does, loads neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import solve, toeplitz
from scipy.special import logsumexp, ndtr

from model.capacity import Coefficients
from model.errors import InputError
from model.pareto import CheckMap, SettingPair

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: quadrature points for the join wait ``J`` (uniform over one iteration)
JOIN_POINTS = 16
#: points per residence for the variance of the time-averaged batch
RESIDENCE_POINTS = 64
#: grid points of the prefill wait (Lindley's recursion), its convergence test (largest
#: change of the distribution function over ten iterations) and the iterations tried
WAIT_POINTS = 2048
WAIT_TOL = 1e-13  # the Krylov solve's relative residual
WAIT_ITERATIONS = 2000  # products of the chain's step; then the equations are solved directly
#: the grid's largest share of the variance of S - A (prefill_wait_distribution)
WAIT_GRID_VARIANCE = 0.01


@dataclass(frozen=True)
class Latency:
    """Latency of one configuration at ``rate_rps`` (seconds; inf when unstable)."""

    rate_rps: float
    quantile: float
    prefill_utilisation: float
    prefill_wait_mean_s: float
    decode_batch: float  # time-average requests in a decode instance
    ttft_mean_s: float
    ttft_quantile_s: float
    tpot_mean_s: float
    tpot_quantile_s: float
    # the share of requests whose admission would find the pool too full for them
    # (normal occupancy of an infinite-server pool); above 1 - quantile the decode
    # admission queue, not modelled here, shapes TTFT: see admission_bound
    pool_block_probability: float = 0.0

    @property
    def admission_bound(self) -> bool:
        """Whether admission waits for pool memory matter at this quantile, so that
        the TTFT figures here are optimistic (docs/latency.md: simulate instead)."""
        return self.pool_block_probability > 1.0 - self.quantile

    def record(self) -> dict[str, Any]:
        """As a JSON document: an infinite (unstable) or undefined (no decode work)
        latency is null."""
        out: dict[str, Any] = {k: _finite_or_none(v) for k, v in asdict(self).items()}
        return out | {"admission_bound": self.admission_bound}


def _finite_or_none(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _lengths(l_in: ArrayLike, l_out: ArrayLike) -> tuple[FloatArray, FloatArray]:
    li = np.atleast_1d(np.asarray(l_in, dtype=float))
    lo = np.atleast_1d(np.asarray(l_out, dtype=float))
    if li.ndim != 1 or li.size == 0 or li.shape != lo.shape:
        raise InputError("samples", "l_in and l_out must be non-empty 1-D arrays of one length")
    if li.min() < 1 or lo.min() < 1 or not (np.all(np.isfinite(li)) and np.all(np.isfinite(lo))):
        raise InputError("samples", "every l_in and l_out must be >= 1 (SPEC 2.5)")
    return li, lo


def _quantile(tail: Any, q: float, hi: float) -> float:
    """Least ``x`` with ``tail(x) <= 1 - q`` (``tail`` non-increasing), to a relative
    1e-9: the bracket doubles until it holds the quantile, then Brent's method (a few
    evaluations of ``tail`` where bisection needs thirty)."""
    lo = 0.0
    target = 1.0 - q
    while tail(hi) > target:
        lo, hi = hi, 2.0 * hi
    if tail(lo) <= target:
        return lo
    from scipy.optimize import brentq  # here, not at the top (see the module docstring)

    x = float(brentq(lambda v: tail(v) - target, lo, hi, xtol=1e-12, rtol=1e-9))
    # a tail with jumps (TTFT's own prefill times) may leave x just below the jump
    step = 1e-9 * max(abs(x), 1e-12)
    while tail(x) > target:
        x = min(x + step, hi)
        step *= 2.0
    return x


def lundberg_exponent(
    service_s: FloatArray, rate_rps: float, phases: int, weights: FloatArray | None = None
) -> float:
    """The decay rate ``eta > 0`` of a GI/G/1 wait: the root of
    ``E[exp(eta S)] E[exp(-eta A)] = 1`` with ``S`` the service times (the samples
    given, equally likely unless ``weights`` are given) and ``A`` Erlang-``phases``
    gaps of mean ``1/rate_rps``."""
    k = float(phases)
    w = np.full(service_s.size, 1.0 / service_s.size) if weights is None else weights

    def f(eta: float) -> float:
        mgf = float(logsumexp(eta * service_s, b=w))
        return mgf + k * math.log(k * rate_rps / (k * rate_rps + eta))

    mean = float(np.sum(w * service_s))
    if rate_rps * mean >= 1.0:
        raise InputError("rate_rps", "the prefill queue is unstable at this rate")
    hi = 1.0 / mean
    while f(hi) < 0.0:
        hi *= 2.0
    # f(0) = 0 with a negative slope (1 - rho) / rate: the root is beyond a tiny eta
    lo = hi
    while f(lo) >= 0.0:
        lo *= 0.5
    from scipy.optimize import brentq

    return float(brentq(f, lo, hi, xtol=1e-14 * hi, rtol=1e-12))


@dataclass(frozen=True)
class WaitDistribution:
    """The stationary wait before service of a GI/G/1 queue.

    On a grid of step ``step_s``, ``cdf[j] = P(W <= j step_s)`` (``iterations``: the
    steps of Lindley's recursion the Krylov solve took; the balance equations solved
    directly if it had not converged within :data:`WAIT_ITERATIONS`).
    Where the grid would be too coarse for the queue (near saturation), the
    heavy-traffic law instead (``cdf`` empty): an atom at 0 and the tail
    ``atom exp(-eta x)``, whose mean is Kingman's ``kingman_s``."""

    step_s: float
    cdf: FloatArray
    iterations: int
    eta: float = math.nan
    kingman_s: float = math.nan
    rho: float = math.nan

    @property
    def exact(self) -> bool:
        return self.cdf.size > 0

    @property
    def mean_s(self) -> float:
        if not self.exact:
            return self.kingman_s
        pmf = np.diff(self.cdf, prepend=0.0)
        return float(np.sum(pmf * np.arange(self.cdf.size)) * self.step_s)

    @property
    def reach_s(self) -> float:
        """Beyond this the tail is negligible (below 1e-9 on the grid)."""
        return self.step_s * (self.cdf.size - 1) if self.exact else 25.0 / self.eta

    def tail(self, x: FloatArray) -> FloatArray:
        """``P(W > x)`` (1 for ``x < 0``), linear between grid points."""
        if not self.exact:
            atom = min(self.rho, self.eta * self.kingman_s)  # at most P(wait) = rho
            return np.where(x < 0.0, 1.0, atom * np.exp(-self.eta * np.maximum(x, 0.0)))
        grid = np.arange(self.cdf.size) * self.step_s
        inside = np.interp(x, grid, self.cdf, right=1.0)
        return np.where(x < 0.0, 1.0, 1.0 - inside)


def prefill_wait_distribution(
    service_s: FloatArray,
    weights: FloatArray,
    rate_rps: float,
    phases: int,
    points: int = WAIT_POINTS,
) -> WaitDistribution:
    """The wait of a FCFS server with Erlang-``phases`` gaps of mean ``1/rate_rps`` and
    service times ``service_s`` (probabilities ``weights``): the fixed point of Lindley's
    recursion ``W' = max(0, W + S - A)`` on a grid, the stationary law of the grid chain
    it makes, solved by a Krylov method whose products are the recursion's steps
    (:func:`_fixed_point`; ``docs/latency.md``, section 1).

    Exact up to the grid: ``S`` and ``A`` are put on the grid by splitting each value's
    probability between its two neighbouring points in proportion to its position, which
    keeps ``E[S]``, ``E[A]`` and so the utilisation exact. The grid reaches where
    ``rho exp(-eta x)`` (Cramer-Lundberg) is 1e-9."""
    e_s = float(np.sum(weights * service_s))
    rho = rate_rps * e_s
    if not rho < 1.0:
        raise InputError("rate_rps", "the prefill queue is unstable at this rate")
    from scipy.stats import gamma as gamma_dist

    k = float(phases)
    scale = 1.0 / (k * rate_rps)
    eta = lundberg_exponent(service_s, rate_rps, phases, weights)
    extent = max(math.log(max(rho, 1e-300) * 1e9) / eta, 0.0) + float(service_s.max())
    # a gap beyond extent + max S empties the queue whatever W and S are: the Erlang's
    # mass beyond that point acts as if it were at it
    a_max = min(float(gamma_dist.ppf(1.0 - 1e-12, k, scale=scale)), extent + service_s.max())
    step = max(extent, a_max) / points
    # splitting a value between two grid points adds at most step^2/4 to the variance of
    # S and of A; where that would exceed WAIT_GRID_VARIANCE of Var(S - A) the grid is
    # too coarse for the queue (near saturation, where the wait spans thousands of
    # services) and the heavy-traffic law takes over: Kingman's mean, which is exact as
    # rho -> 1, and the Cramer-Lundberg tail
    var_s = float(np.sum(weights * service_s**2)) - e_s * e_s
    var_u = var_s + k * scale * scale
    if step * step / 2.0 > WAIT_GRID_VARIANCE * var_u:
        kingman = rho / (1.0 - rho) * (1.0 / k + var_s / (e_s * e_s)) / 2.0 * e_s
        return WaitDistribution(step, np.zeros(0), 0, eta, kingman, rho)
    n = int(math.ceil(extent / step))
    pos = service_s / step
    low = np.floor(pos).astype(np.int64)
    frac = pos - low
    width = int(low.max()) + 2
    p_s = np.bincount(low, weights=weights * (1.0 - frac), minlength=width)
    p_s += np.bincount(low + 1, weights=weights * frac, minlength=width)
    n_a = int(math.ceil(a_max / step)) + 1
    x = np.arange(n_a + 1) * step
    mass = np.diff(gamma_dist.cdf(x, k, scale=scale))
    # E[A 1{x_j < A <= x_j+1}], from the Erlang's size-biased law (shape k + 1)
    part = np.diff(k * scale * gamma_dist.cdf(x, k + 1.0, scale=scale))
    up = np.clip((part - x[:-1] * mass) / step, 0.0, mass)
    p_a = np.zeros(n_a + 1)
    p_a[:-1] += mass - up
    p_a[1:] += up
    p_a[-1] += max(1.0 - float(p_a.sum()), 0.0)  # the rest of the gaps (see above)
    p_u = np.convolve(p_s, p_a[::-1])  # index i: S - A = (i - n_a) step
    size = n + p_u.size
    fft_n = 1 << int(math.ceil(math.log2(size)))
    u_hat = np.fft.rfft(p_u, fft_n)

    def lindley(pmf: FloatArray) -> FloatArray:
        """One step of the grid chain ``j -> min(max(j + u, 0), n)`` (linear in ``pmf``):
        the convolution with ``S - A`` by FFT, the mass at or below 0 and beyond the
        grid (probability < 1e-9) folded onto its ends."""
        g = np.fft.irfft(np.fft.rfft(pmf, fft_n) * u_hat, fft_n)[:size]
        out = g[n_a : n_a + n + 1].copy()
        out[0] = g[: n_a + 1].sum()  # W + S - A <= 0: no wait
        out[n] += g[n_a + n + 1 :].sum()
        return out

    pmf, products = _fixed_point(lindley, n)
    if pmf is None:  # the Krylov solve did not converge: the balance equations directly
        pmf = _stationary(p_u, n_a, n)
    return WaitDistribution(step, np.minimum(np.cumsum(pmf), 1.0), products)


def _fixed_point(
    lindley: Callable[[FloatArray], FloatArray], n: int
) -> tuple[FloatArray | None, int]:
    """The stationary law of the grid chain whose step is ``lindley``: its balance
    equations ``(P - I) pi = 0``, one replaced by ``sum(pi) = 1``, solved by BiCGSTAB,
    each product one step of the chain (an FFT convolution, as Lindley's recursion
    iterates it), to a relative residual of :data:`WAIT_TOL`; within
    :data:`WAIT_ITERATIONS` products, else None. The same fixed point as the
    recursion's, reached in far fewer steps where the recursion converges slowly (about
    ``1 / (1 - rho)^2`` of them). (GMRES takes as few products, but its orthogonalisation
    costs three times the products' time at this size.)"""
    from scipy.sparse.linalg import LinearOperator, bicgstab

    products = 0

    def balance(x: FloatArray) -> FloatArray:
        nonlocal products
        products += 1
        y = lindley(x) - x
        y[0] = x.sum()
        return y

    if WAIT_ITERATIONS < 1:
        return None, 0
    a = LinearOperator((n + 1, n + 1), matvec=balance, dtype=float)
    b = np.zeros(n + 1)
    b[0] = 1.0
    x, info = bicgstab(a, b, x0=b.copy(), rtol=WAIT_TOL, atol=0.0,
                       maxiter=max(1, WAIT_ITERATIONS // 2))  # two products an iteration
    if info != 0 or not np.all(np.isfinite(x)):
        return None, products
    pmf = np.maximum(x, 0.0)
    return pmf / pmf.sum(), products


def _stationary(p_u: FloatArray, n_a: int, n: int) -> FloatArray:
    """Stationary law of the grid chain ``j -> min(max(j + u, 0), n)``, ``u = i - n_a``
    with probability ``p_u[i]``: its balance equations solved directly."""
    cum = np.concatenate([[0.0], np.cumsum(p_u)])  # cum[i] = P(index < i)

    def prob(lo: IntArray, hi: IntArray) -> FloatArray:
        """P(lo <= index < hi) with the indices clipped to the support."""
        return cum[np.clip(hi, 0, p_u.size)] - cum[np.clip(lo, 0, p_u.size)]

    j = np.arange(n + 1)
    col = np.zeros(n + 1)  # T[k, 0] = p_u[k + n_a]
    inside = np.arange(n + 1) + n_a
    ok = inside < p_u.size
    col[ok] = p_u[inside[ok]]
    row = np.zeros(n + 1)  # T[0, j] = p_u[n_a - j]
    back = n_a - j
    ok = back >= 0
    row[ok] = p_u[back[ok]]
    t = toeplitz(col, row)  # T[k, j] = P(j -> k) for 0 < k < n
    t[0, :] = prob(np.zeros_like(j), n_a - j + 1)  # j + u <= 0
    t[n, :] = prob(n + n_a - j, np.full_like(j, p_u.size))  # j + u >= n
    t -= np.eye(n + 1)
    t[0, :] = 1.0  # one balance equation is redundant: normalise instead
    rhs = np.zeros(n + 1)
    rhs[0] = 1.0
    pmf = np.maximum(solve(t, rhs, check_finite=False), 0.0)
    return np.asarray(pmf / pmf.sum(), dtype=float)


def _stationary_excess(residence: FloatArray, weight: FloatArray) -> Any:
    """``s -> E[(R - s)^+] / E[R]``: the autocorrelation of the number in an infinite-
    server queue whose residence times are ``residence`` with probabilities ``weight``
    (sorted ascending)."""
    mass = np.concatenate([np.cumsum((weight * residence)[::-1])[::-1], [0.0]])
    prob = np.concatenate([np.cumsum(weight[::-1])[::-1], [0.0]])
    mean = float(mass[0])

    def rho(s: FloatArray) -> FloatArray:
        i = np.searchsorted(residence, s, side="right")
        return np.asarray((mass[i] - s * prob[i]) / mean, dtype=float)

    return rho


def peakedness(residence: FloatArray, weight: FloatArray, arrival_scv: float) -> float:
    """Variance over mean of the number in a GI/G/infinity queue (Whitt's
    approximation): ``1 + (c_a^2 - 1) int P(R > u)^2 du / E[R]``, 1 for Poisson input;
    residence times ``residence`` (ascending) with probabilities ``weight``."""
    survival = np.concatenate([[1.0], 1.0 - np.cumsum(weight)[:-1]])  # on (r[i-1], r[i])
    widths = np.diff(np.concatenate([[0.0], residence]))
    eta = float(np.sum(widths * survival**2) / np.sum(weight * residence))
    return 1.0 + (arrival_scv - 1.0) * eta


def boundary_mixture(
    t_u: FloatArray,
    t_w: FloatArray,
    running_s: float,
    busy: float,
    t_x: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """``(ahead, weight)``: what a request has ahead of its prefill wait, ``J_a +
    t_P(l_in)``, as a discrete law (section 2): ``J_a`` none while its decode instance
    is idle (probability ``1 - busy``), else uniform on an iteration of ``running_s``
    (a ``JOIN_POINTS``-point midpoint rule); ``t_P`` the prefill times ``t_u`` with
    probabilities ``t_w``, each followed by its KV transfer ``t_x`` where one is charged
    (docs/mixed-gpus.md, section 3)."""
    edge = running_s * (np.arange(JOIN_POINTS) + 0.5) / JOIN_POINTS
    delay = np.concatenate([[0.0], edge])
    d_w = np.concatenate([[1.0 - busy], np.full(JOIN_POINTS, busy / JOIN_POINTS)])
    own = t_u if t_x is None else t_u + t_x
    ahead = (own[None, :] + delay[:, None]).ravel()
    weight = (d_w[:, None] * t_w[None, :]).ravel()
    return ahead, weight


def transfer_times(c: Coefficients, l_in: ArrayLike) -> FloatArray | None:
    """The KV transfer ``t_X(l_in)`` of each distinct prompt length, in increasing
    length: the order of the distinct prefill times (``t_P`` increases with ``l_in``);
    None when no link is charged (docs/mixed-gpus.md, section 3)."""
    if not c.kv_link_charged:
        return None
    return np.asarray(c.kv_transfer_s_per_token * np.unique(np.asarray(l_in, dtype=float)))


def ttft_tail_at(dist: WaitDistribution, ahead: FloatArray, weight: FloatArray, x: float) -> float:
    """``P(TTFT > x)`` with ``TTFT = W + (J_a + t_P)``, ``W`` of law ``dist`` independent
    of the rest (FCFS, section 2), ``(ahead, weight)`` from :func:`boundary_mixture`."""
    return float(np.sum(weight * dist.tail(x - ahead)))


def latency_at(
    c: Coefficients,
    n_p: int,
    n_d: int,
    rate_rps: float,
    l_in: ArrayLike,
    l_out: ArrayLike,
    quantile: float = 0.99,
) -> Latency:
    """TTFT and TPOT (mean and ``quantile``) of ``(n_p, n_d)`` at ``rate_rps``, for
    requests whose lengths are the samples ``(l_in, l_out)`` (equally likely)."""
    if not (isinstance(n_p, int | np.integer) and isinstance(n_d, int | np.integer)):
        raise InputError("n_p", "instance counts must be integers")
    if n_p < 1 or n_d < 1:
        raise InputError("n_p" if n_p < 1 else "n_d", "must be >= 1")
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise InputError("rate_rps", "must be a positive number")
    if not 0.5 <= quantile < 1.0:
        raise InputError("quantile", "must be in [0.5, 1)")
    li, lo = _lengths(l_in, l_out)
    inf = math.inf

    # decode: the batch an instance carries at this rate (needed by TTFT as well)
    n_it = lo - 1.0
    multi = n_it > 0
    e_n = float(n_it.mean())
    lam_d = rate_rps / n_d
    alpha, g = c.alpha_s, c.g_s_per_request
    if multi.any():
        load = lam_d * e_n * g
        batch = lam_d * e_n * (alpha + g) / (1.0 - load) if load < 1.0 else inf
    else:  # every request ends at prefill: the decode instances never iterate
        load, batch = 0.0, 0.0
    busy = 1.0 - math.exp(-batch)  # an idle instance starts a joining request at once

    # prefill
    t_p = c.a_p_s_per_token * li + c.b_p_s_per_token2 * li * li
    e_t = float(t_p.mean())
    lam_p = rate_rps / n_p
    rho = lam_p * e_t
    phases = 1 if c.random_dispatch else int(n_p)
    # admission waits for the decode scheduler's next iteration boundary (SPEC 2.1): a
    # request arriving while its instance is busy waits out the running iteration,
    # uniform over it (mean length alpha + g B, the others' batch)
    running = alpha + g * batch if multi.any() else 0.0  # inf when decode is overloaded
    if rho >= 1.0 or not math.isfinite(running):
        wait, ttft_mean, ttft_q = inf, inf, inf
    else:
        t_u, t_count = np.unique(t_p, return_counts=True)
        t_w = t_count / t_count.sum()
        dist = prefill_wait_distribution(t_u, t_w, lam_p, phases)
        wait = dist.mean_s
        t_x = transfer_times(c, li)
        mixture = boundary_mixture(t_u, t_w, running, busy, t_x)
        ttft_tail = partial(ttft_tail_at, dist, *mixture)
        ttft_mean = wait + e_t + busy * running / 2.0
        top = float(t_p.max()) + running + dist.reach_s
        if t_x is not None:  # each prompt's KV transfer follows its prefill
            ttft_mean += c.kv_transfer_s_per_token * float(li.mean())
            top += float(t_x.max())
        ttft_q = _quantile(ttft_tail, quantile, top)

    if not multi.any():  # every request ends at prefill
        return Latency(rate_rps, quantile, rho, wait, 0.0, ttft_mean, ttft_q, math.nan, math.nan)
    if load >= 1.0:
        return Latency(rate_rps, quantile, rho, wait, inf, ttft_mean, ttft_q, inf, inf, 1.0)
    tau = alpha + g * (batch + 1.0)  # the mean iteration a request takes part in
    # a request's own context (l_in + l_out/2 over its iterations, SPEC 2.4) against the
    # mean of the others' (ctx): its own share of each iteration it takes part in
    own = c.g_context_s_per_token * (li + lo / 2.0 - c.ctx_tokens)
    step = 1e-3 * g  # a thousandth of a request's share: finer differences do not matter
    own = np.round(own / step) * step
    # requests with the same iterations and context share their TPOT distribution
    pairs, counts = np.unique(np.stack([n_it[multi], own[multi]]), axis=1, return_counts=True)
    n, own = pairs[0], pairs[1]
    weight = counts / counts.sum()
    residence, order = np.unique(n * tau, return_inverse=True)
    r_weight = np.asarray(np.bincount(order, weights=weight), dtype=float)
    z = peakedness(residence, r_weight, 1.0 if c.random_dispatch else 1.0 / n_d)
    var_n = max(batch * z, 0.0)
    acf = _stationary_excess(residence, r_weight)
    u = (np.arange(RESIDENCE_POINTS) + 0.5) / RESIDENCE_POINTS  # s = u r on (0, r)
    # Var of the average over a window r: (2/r^2) int_0^r (r - s) C(s) ds, s = u r
    grid = np.outer(residence, u)
    var_avg = 2.0 * var_n * np.mean((1.0 - u) * acf(grid.ravel()).reshape(grid.shape), axis=1)
    sd = np.sqrt(np.maximum(var_avg, 0.0))[order]
    joins = busy * tau * (np.arange(JOIN_POINTS) + 0.5) / JOIN_POINTS
    base = alpha + g + own  # the request itself

    def tpot_tail(x: float) -> float:
        excess = (x - base[None, :] - joins[:, None] / n[None, :]) / g - batch  # others above
        with np.errstate(divide="ignore", invalid="ignore"):
            zed = np.where(sd > 0, excess / np.where(sd > 0, sd, 1.0), np.sign(excess) * inf)
        return float(np.sum(ndtr(-zed).mean(axis=0) * weight))

    tpot_mean = float(np.sum(weight * (tau + own + busy * tau / 2.0 / n)))
    tpot_q = _quantile(tpot_tail, quantile, 2.0 * tau)
    blocked = (
        pool_block_probability(c, li, lo, lam_d, t_p + wait, n_it * tau)
        if math.isfinite(wait)
        else 1.0  # an unbounded prefill queue fills any pool
    )
    return Latency(
        rate_rps, quantile, rho, wait, batch, ttft_mean, ttft_q, tpot_mean, tpot_q, blocked
    )


def pool_block_probability(
    c: Coefficients,
    l_in: FloatArray,
    l_out: FloatArray,
    rate_rps: float,
    prefill_s: FloatArray,
    decode_s: FloatArray,
) -> float:
    """``P(O + S > C)``: the chance that a request's ``S = l_in + R`` does not fit beside
    the pool's occupancy ``O`` (tokens held by the requests admitted to one decode
    instance: ``l_in + R`` through prefill (``prefill_s``, its wait included), then
    ``l_in + l_out/2 + R`` on average through decode (``decode_s``); Poisson arrivals at
    ``rate_rps`` make ``O`` compound Poisson, taken as normal with its exact mean
    ``rate E[sum h dt]`` and variance ``rate E[sum h^2 dt]``); ``C`` the packable pool."""
    r = float(c.reserved_tokens)
    held_p, held_d = l_in + r, l_in + l_out / 2.0 + r
    mean = rate_rps * float(np.mean(held_p * prefill_s + held_d * decode_s))
    var = rate_rps * float(np.mean(held_p**2 * prefill_s + held_d**2 * decode_s))
    room = c.kv_usable_tokens - c.fragment_tokens - mean - (l_in + r)
    if var <= 0.0:
        return float(np.mean(room < 0.0))
    return float(np.mean(ndtr(-room / math.sqrt(var))))


def analytic_slo_check(
    cfg: dict[str, Any],
    c: Coefficients | Mapping[SettingPair, Coefficients],
    l_in: FloatArray,
    l_out: FloatArray,
    targets: tuple[float | None, float | None],
    at_load: float,
    fallback: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The verdict of :func:`analytic_slo_front` on one configuration of a front report
    (a module-level function, so that a process pool can run it), with ``c`` or, given
    per setting pair, the configuration's pair's coefficients."""
    from model.pareto import at_setting, within_targets

    load = at_load * float(cfg["capacity_rps"])
    lat = latency_at(at_setting(c, cfg), int(cfg["n_p"]), int(cfg["n_d"]), load, l_in, l_out)
    analytic = {
        "simulated": False,
        "load_rps": load,
        "ttft_p99_s": _finite_or_none(lat.ttft_quantile_s),
        "tpot_p99_s": _finite_or_none(lat.tpot_quantile_s),
        "admission_bound": lat.admission_bound,
        "meets": within_targets((lat.ttft_quantile_s, lat.tpot_quantile_s), targets),
    }
    if lat.admission_bound and fallback is not None:
        return fallback(cfg) | {"analytic": analytic}
    return analytic


def analytic_slo_front(
    report: dict[str, Any],
    c: Coefficients | Mapping[SettingPair, Coefficients],
    l_in: ArrayLike,
    l_out: ArrayLike,
    *,
    ttft_p99_s: float | None,
    tpot_p99_s: float | None,
    at_load: float,
    fallback: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    map_checks: CheckMap = map,
) -> dict[str, Any]:
    """A front report restricted to the configurations whose analytic p99 TTFT and TPOT
    at ``at_load`` times their capacity meet the targets (see
    :func:`model.pareto.restrict_front`, which runs the checks through ``map_checks``).
    A front over GPU settings (docs/clocks.md) gives ``c`` per setting pair: each
    configuration is checked with its own pair's coefficients.
    Where admission waits for pool memory matter (:attr:`Latency.admission_bound`) the
    analytic TTFT is optimistic: ``fallback`` (a simulation, given by the caller)
    decides those configurations instead, and the analytic figures stay beside its
    verdict."""
    from model.pareto import check_slo_targets, restrict_to_slo

    check_slo_targets(ttft_p99_s, tpot_p99_s, at_load)
    li, lo = _lengths(l_in, l_out)

    def fields(checked: int, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
        simulated = sum(1 for v in verdicts if v["simulated"])
        return {"method": "analytic", "checked": checked, "simulated": simulated}

    rule = (
        "analytic p99 TTFT and TPOT at at_load x capacity (docs/latency.md); where "
        "admission waits for KV pool memory matter (admission_bound) the analytic "
        "TTFT is optimistic and "
        + ("a simulation decides" if fallback is not None else "it is used anyway")
        + "; configurations never checked are dominated by ones that meet the targets"
    )
    return restrict_to_slo(
        report,
        analytic_slo_check,
        map_checks,
        (ttft_p99_s, tpot_p99_s),
        at_load,
        fields,
        rule,
        c=c,
        l_in=li,
        l_out=lo,
        fallback=fallback,
    )
