"""The ``admission`` variant of the memory balance (model/admission.py).

Reference values are computed here from textbook queueing results (exact mean value
analysis, the M/M/1 and Kingman waits) or written from the three changes to SPEC 2.5
that docs/admission.md derives, never by calling the function under test for the
expected value.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import admission
from model.admission import fragmentation_tokens, population_for_throughput
from model.capacity import ROOT_RTOL, Coefficients, evaluate
from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.simulator import Samples, SimTiming, find_capacity
from model.spec import DEFAULT_VARIANT, DeploymentSpec
from model.workload import Workload
from tests.source import parse

RESERVED = 512  # R, the ServingStack default (model/catalog.py, SPEC 2.1)
WORKLOADS = ("fixed:1024:256", "fixed:8192:256", "azure-conv-2023", "azure-code-2023", "mooncake")
DISPATCHES = ("round_robin", "random")

# every (n_P, n_D) in 1..8 x 1..8
_GRID_P, _GRID_D = np.meshgrid(np.arange(1, 9), np.arange(1, 9), indexing="ij")
GRID_P, GRID_D = _GRID_P.ravel(), _GRID_D.ravel()


def make_spec(
    workload: str,
    variant: str | None = "admission",
    dispatch: str = "round_robin",
    pool: int | None = None,
) -> DeploymentSpec:
    """The catalog's Qwen3-32B on H200 with ``workload``; ``variant=None`` keeps the
    default variant."""
    spec = resolve_spec(SpecRequest(workload=workload))
    serving = dataclasses.replace(spec.serving, dispatch=dispatch)
    if pool is not None:
        serving = dataclasses.replace(serving, kv_pool_tokens=pool)
    spec = dataclasses.replace(spec, serving=serving)
    return spec if variant is None else dataclasses.replace(spec, variant=variant)


# ---- 1, 2: the Linearizer inverse against exact MVA and the open queue ------------------


def exact_mva_throughput(a: int, e: float, z: float, n_max: int) -> np.ndarray:
    """``X(0..n_max)`` of a closed network of ``a`` identical FCFS exponential servers
    (each visited with probability ``1/a``, mean service ``e``) and a delay ``z``.

    Exact mean value analysis (Reiser and Lavenberg, JACM 27(2), 1980): by the arrival
    theorem ``R(n) = e (1 + Q(n-1))``; Little's law over the cycle ``X(n) = n/(z + R(n))``
    and at one server ``Q(n) = X(n) R(n)/a``."""
    x = np.zeros(n_max + 1)
    q = 0.0
    for n in range(1, n_max + 1):
        r = e * (1.0 + q)
        x[n] = n / (z + r)
        q = x[n] * r / a
    return x


MVA_SERVERS = (1, 2, 3, 5, 8)
MVA_Z_OVER_E = (0.1, 1.0, 5.0, 20.0, 100.0)
MVA_POPULATIONS = (1, 2, 3, 5, 10, 20, 50, 100, 200, 400)
MVA_N_MAX = 3000


def test_linearizer_inverse_matches_exact_mva() -> None:
    e = 1.0
    pop_err: list[float] = []
    thr_err: list[float] = []
    for a in MVA_SERVERS:
        for z_over_e in MVA_Z_OVER_E:
            z = z_over_e * e
            x_exact = exact_mva_throughput(a, e, z, MVA_N_MAX)
            for n in MVA_POPULATIONS:
                x = x_exact[n]
                util = x * e / a
                n_lin = population_for_throughput(
                    np.array([x]), np.array([z]), e, np.array([float(a)])
                )[0]
                if util <= 0.95:
                    # the Linearizer's error is about 1% (Chandy and Neuse, CACM 25(2), 1982);
                    # measured worst over this grid: 1.1%
                    pop_err.append(abs(n_lin / n - 1.0))
                if util < 0.999999:
                    # near saturation n is ill-conditioned in X, so compare throughputs:
                    # exact X at the Linearizer's population (measured worst 1.1%)
                    assert math.isfinite(n_lin) and n_lin < MVA_N_MAX, (a, z, n, n_lin)
                    x_at = np.interp(n_lin, np.arange(1, MVA_N_MAX + 1), x_exact[1:])
                    thr_err.append(abs(x_at / x - 1.0))
    assert len(pop_err) > 100 and len(thr_err) > 200  # the grid is really exercised
    assert max(pop_err) <= 0.015
    assert max(thr_err) <= 0.015


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.7, 0.9])
def test_population_inverse_open_queue_limit(rho):
    """An unbounded population at fixed utilisation is an open M/M/1 queue: the wait
    before service is ``rho/(1-rho) E[S]`` (Kleinrock, Queueing Systems I, 1975, ch. 3).
    Measured: within 1.2e-4 relative."""
    a, e, z = 1.0, 1.0, 1e6
    x = rho / e
    n = population_for_throughput(np.array([x]), np.array([z]), e, np.array([a]))[0]
    wait = n / x - z - e  # Little's law over the cycle
    assert wait == pytest.approx(rho / (1.0 - rho) * e, rel=1e-3)


@pytest.mark.parametrize("random_dispatch", [False, True])
@pytest.mark.parametrize("rho", [0.4, 0.8])
def test_prefill_wait_unbounded_population_is_kingman(rho, random_dispatch):
    """A decode stage of huge delay ``Z`` makes the loop's population unbounded: the
    wait tends to SPEC 2.5's Kingman wait ``rho/(1-rho) (c_a^2 + c_s^2)/2 E[t_P]`` per
    prefill server, with ``c_a^2 = 1/a`` for round-robin and 1 for random dispatch
    (model/admission.py docstring, change 2). Measured within 5.2e-6."""
    e, scv, a, b = 0.5, 0.4, 3.0, 2.0
    iters, alpha = 1e6, 1.0  # Z = iters * alpha (g = 0)
    terms = admission.LoopTerms(
        out_iterations=iters,
        alpha_s=alpha,
        g_s_per_request=0.0,
        ctx_tokens=1000.0,
        reserved_tokens=RESERVED,
        mean_in_tokens=1000.0,
        prefill_reserve_token_s=e * (1000.0 + RESERVED),
        t_prefill_mean_s=e,
        t_prefill_scv=scv,
        usable_tokens=1e12,
        fragment_tokens=0.0,
        random_dispatch=random_dispatch,
    )
    x = rho * a / e  # the component's throughput at per-server utilisation rho
    batch = x * iters * alpha / b  # lambda_D = B/Z per pool, b pools
    lam, wait = admission.prefill_wait_s(terms, np.array([batch]), np.array([a]), np.array([b]))
    assert lam[0] * b == pytest.approx(x, rel=1e-12)
    ca2 = 1.0 if random_dispatch else 1.0 / a
    kingman = rho / (1.0 - rho) * (ca2 + scv) / 2.0 * e
    assert wait[0] == pytest.approx(kingman, rel=1e-4)


# ---- 2b: the admissions' variability around the closed loop ------------------------------


def test_order_kept_is_the_displacement_attenuation_of_normal_residences():
    """``phi`` is ``|E exp(i w R)|^2`` at the admissions' frequency ``w = 2 pi lambda_D``
    for a normal decode residence ``R = (l_out - 1) t_D`` (docs/admission.md, section 3).
    Reference: the empirical characteristic function of 400,000 normal residences with
    ``lambda_D = B / (E[l_out - 1] t_D)``; its sampling error is about 2e-3."""
    iters, t_d, out_scv, batch = 255.0, 0.03, 4e-4, 10.0
    lam = batch / (iters * t_d)
    rng = np.random.default_rng(7)
    r = rng.normal(iters * t_d, math.sqrt(out_scv) * iters * t_d, 400_000)
    reference = abs(np.mean(np.exp(2j * math.pi * lam * r))) ** 2
    got = float(admission.order_kept(np.array([batch]), out_scv)[0])
    assert 0.1 < got < 0.3  # the case is neither limit
    assert got == pytest.approx(reference, abs=6e-3)
    # deterministic outputs keep the order at every batch; infinite spread keeps none
    assert np.all(admission.order_kept(np.array([0.5, 8.0, 300.0]), 0.0) == 1.0)
    assert np.all(admission.order_kept(np.array([0.5, 8.0]), math.inf) == 0.0)


@settings(max_examples=200, deadline=None)
@given(
    rho=st.floats(0.01, 0.99),
    phi=st.floats(0.0, 1.0),
    scv=st.floats(0.0, 10.0),
    a=st.integers(1, 8),
    b=st.integers(1, 8),
)
def test_arrival_scv_is_the_fixed_point_of_the_loop(rho, phi, scv, a, b):
    """The loop of docs/admission.md, section 3, written out link by link: a server's
    departures ``c_d^2 = rho^2 c_s^2 + (1 - rho^2) c_a^2`` (Whitt's linking equation),
    every ``b``-th of them for a pool, merged over ``a`` servers (``c_d^2 / b``), kept
    through decode with weight ``phi`` (``v = phi c_d^2 / b + 1 - phi``), every
    ``a``-th admission for a server, merged over ``b`` pools (``c_a^2 = v / a``)."""
    ca2 = float(admission.arrival_scv(np.array(rho), np.array(phi), scv, np.array(a), np.array(b)))
    cd2 = rho * rho * scv + (1.0 - rho * rho) * ca2
    v = phi * cd2 / b + 1.0 - phi
    assert ca2 >= 0.0
    assert ca2 == pytest.approx(v / a, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("rho", [0.2, 0.6, 0.95])
def test_arrival_scv_limits(rho):
    """Complete reordering gives round robin's Erlang-``a`` gaps, ``1/a`` (the wait of
    docs/admission.md before section 3 took the loop into account); one server and one
    pool that keep the order see their own departures, ``c_s^2``; deterministic prefill
    times in a loop that keeps the order give regular arrivals, 0."""
    a = np.array([1.0, 2.0, 5.0])
    b = np.array([1.0, 3.0, 2.0])
    r = np.full(3, rho)
    assert np.allclose(admission.arrival_scv(r, np.zeros(3), 4.0, a, b), 1.0 / a, rtol=1e-12)
    one = admission.arrival_scv(np.array([rho]), np.ones(1), 2.5, np.ones(1), np.ones(1))
    assert one[0] == pytest.approx(2.5, rel=1e-12)
    assert np.all(admission.arrival_scv(r, np.ones(3), 0.0, a, b) == 0.0)


def test_fixed_lengths_round_robin_closed_form():
    """Fixed lengths under round robin: outputs are deterministic (``phi = 1``) and so
    are prefill times (``c_s^2 = 0``), so nobody waits for prefill, and the balance is
    the quadratic without waiting (``admission.no_wait_batch``): capacity
    ``min(n_P mu_P, n_D lambda_D(B0))`` with ``B0`` that root, clipped at the packable
    pool's batch, for every configuration."""
    spec = make_spec("fixed:4096:256")
    c = Coefficients.of(spec)
    b0 = min(admission.no_wait_batch(c.loop_terms()), c.batch_max)
    res = evaluate(spec, GRID_P, GRID_D)
    expected = np.minimum(GRID_P * c.mu_prefill_rps, GRID_D * c.decode_rate_rps(b0))
    assert np.allclose(res.capacity_rps, expected, rtol=1e-8)
    # both sides of the minimum occur on the grid
    assert np.any(GRID_P * c.mu_prefill_rps < GRID_D * c.decode_rate_rps(b0))
    assert np.any(GRID_P * c.mu_prefill_rps > GRID_D * c.decode_rate_rps(b0))
    # random dispatch scatters the admissions: they wait, and capacity is lower, except
    # with one prefill server, which every pool feeds however requests are dispatched
    # (it idles only when the decoding requests fill every pool: section 6)
    rnd = evaluate(make_spec("fixed:4096:256", dispatch="random"), GRID_P, GRID_D)
    one = GRID_P == 1
    assert np.all(rnd.capacity_rps[~one] < res.capacity_rps[~one])
    np.testing.assert_allclose(rnd.capacity_rps[one], res.capacity_rps[one], rtol=1e-9)


# ---- 3: fragmentation --------------------------------------------------------------------


def test_fragmentation_closed_form_fixed_workload():
    # S = l_in + R = 4608 is deterministic: E[S^2]/(2 E[S]) = S/2; E[l_out - 1] = 255
    # (model/admission.py docstring, change 3)
    expected = (4096 + RESERVED) / 2 - 255
    c = Coefficients.of(make_spec("fixed:4096:256"))
    assert c.fragment_tokens == expected
    # B_max of the admission variant fills the packable pool (capacity.py, batch_max)
    ctx = 4096 + 256 / 2  # SPEC 2.4 for fixed lengths
    assert c.batch_max == pytest.approx((c.kv_usable_tokens - expected) / (ctx + RESERVED))
    paper = Coefficients.of(make_spec("fixed:4096:256", variant="paper"))
    assert paper.fragment_tokens == 0.0
    assert paper.batch_max == pytest.approx(paper.kv_usable_tokens / (ctx + RESERVED))


def test_fragmentation_tokens_two_point_inputs():
    # l_in is 1000 or 3000 with probability 1/2: S = l_in + R is 1512 or 3512, so
    # E[S] = 2512, E[S^2] = (1512^2 + 3512^2)/2 (the renewal age E[S^2]/(2 E[S]),
    # model/admission.py docstring, change 3), less E[l_out - 1] = 100
    e_s = (1512 + 3512) / 2
    e_s2 = (1512**2 + 3512**2) / 2
    expected = e_s2 / (2 * e_s) - 100
    got = fragmentation_tokens(2000.0, (1000**2 + 3000**2) / 2, RESERVED, 100.0)
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("workload", ["azure-conv-2023", "mooncake"])
def test_fragmentation_of_preset_moments(workload):
    c = Coefficients.of(make_spec(workload))
    w = make_spec(workload).workload
    r = RESERVED
    e_s = w.mean_in + r
    e_s2 = w.e_in2 + 2 * r * w.mean_in + r * r  # E[(l_in + R)^2]
    assert c.fragment_tokens == pytest.approx(e_s2 / (2 * e_s) - w.e_out_m1, rel=1e-12)
    assert c.fragment_tokens > 0  # a spread of sizes: the pool cannot be packed full


# ---- 4: the returned batch is the root of the balance ------------------------------------


@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_batch_is_root_of_admission_balance(workload, dispatch):
    spec = make_spec(workload, dispatch=dispatch)
    c = Coefficients.of(spec)
    terms = c.loop_terms()
    res = evaluate(spec, GRID_P, GRID_D)
    _, a, b = admission.components(GRID_P, GRID_D, terms.random_dispatch)
    # components with one prefill server take section 6's form (the next test)
    loop = a > 1
    assert terms.one_server_form and (~loop).any() and loop.any()
    # where the admissions keep their order and prefill times are deterministic (fixed
    # lengths, round robin) nobody waits for prefill (docs/admission.md, section 3): the
    # pool may then still have room when the prefill servers saturate, and the batch is
    # the one that saturates them
    end = np.asarray(c.batch_rho(GRID_P.astype(float), GRID_D.astype(float)))
    saturated = loop & (res.batch >= end * (1 - 1e-9))
    assert np.all(admission.balance(terms, res.batch[saturated], a[saturated], b[saturated]) <= 0)
    assert np.allclose(res.capacity_rps[saturated], GRID_P[saturated] * c.mu_prefill_rps, rtol=1e-9)
    if dispatch == "random" or "fixed" not in workload:
        assert not saturated.any()
    else:
        assert saturated.any()
    rest = loop & ~saturated
    batch, a, b = res.batch[rest], a[rest], b[rest]
    f = admission.balance(terms, batch, a, b)
    f_lo = admission.balance(terms, batch * (1 - 1e-6), a, b)
    f_hi = admission.balance(terms, batch * (1 + 1e-6), a, b)
    # a sign change within 1e-6 of B* on either side
    assert np.all(f_lo < 0.0)
    assert np.all(f_hi > 0.0)
    # the residual is what a root within rtol = 1e-9 of B* leaves: |f| <= f' * 1e-9 B*
    # (the solver returns the middle of a bracket of width <= 1e-9 B), i.e. at most
    # 5e-4 of f(B(1+1e-6)) - f(B(1-1e-6)); measured worst 2.5e-4
    assert np.all(np.abs(f) <= ROOT_RTOL / 2e-6 * (f_hi - f_lo))
    # and small against the pool (measured worst 5.3e-7 on this grid; near the prefill
    # pole the balance is steep, so this is looser than rtol)
    assert np.all(np.abs(f) <= 1e-5 * terms.packable_tokens)


@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize("workload", [*WORKLOADS, "fixed:128:2048"])
def test_one_prefill_server_batch_is_root_of_idle_gap(workload, dispatch):
    """Components with one prefill server (docs/admission.md, section 6): the batch is
    the root of ``b lambda_D(B) - mu_P (1 - p(B)^b)``, unless the balance without
    prefill waiting (or prefill saturation) stops it first."""
    spec = make_spec(workload, dispatch=dispatch)
    c = Coefficients.of(spec)
    terms = c.loop_terms()
    res = evaluate(spec, GRID_P, GRID_D)
    _, a, b = admission.components(GRID_P, GRID_D, terms.random_dispatch)
    one = a == 1
    batch, b = res.batch[one], b[one]
    # the pool must still hold the decoding requests, the prefill and the fragmentation
    cap = min(admission.no_wait_batch(terms), c.batch_max)
    assert np.all(batch <= cap * (1 + 1e-12))
    # n_D lambda_D(B*) is the capacity (n_P mu_P is never below it)
    rate = GRID_D[one] * c.decode_rate_rps(batch)
    np.testing.assert_allclose(res.capacity_rps[one], rate, rtol=1e-12)
    capped = batch >= cap * (1 - 1e-9)
    assert np.all(admission.idle_gap(terms, batch[capped], b[capped]) <= 0.0)
    free = ~capped
    g_lo = admission.idle_gap(terms, batch[free] * (1 - 1e-6), b[free])
    g_hi = admission.idle_gap(terms, batch[free] * (1 + 1e-6), b[free])
    assert np.all(g_lo < 0.0) and np.all(g_hi > 0.0)
    # long outputs fill the pool with decoding requests: the cap binds there
    assert capped.any() == (workload == "fixed:128:2048")


# ---- 5: round-robin splits into gcd(n_P, n_D) identical components -----------------------


@pytest.mark.parametrize("workload", [*WORKLOADS, "fixed:4096:256"])
def test_round_robin_component_decomposition(workload):
    spec = make_spec(workload)
    pairs = [(p, d) for p in range(1, 8) for d in range(1, 8) if math.gcd(p, d) == 1]
    n_p = np.array([p for p, _ in pairs])
    n_d = np.array([d for _, d in pairs])
    one = evaluate(spec, n_p, n_d).capacity_rps
    for g in (2, 3, 4):
        many = evaluate(spec, g * n_p, g * n_d).capacity_rps
        # measured worst 2.5e-11
        np.testing.assert_allclose(many, g * one, rtol=1e-9, atol=0)


# ---- 6: bounds ---------------------------------------------------------------------------


@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize("workload", [*WORKLOADS, "fixed:4096:256", "fixed:128:2048"])
def test_capacity_bounds(workload, dispatch):
    spec = make_spec(workload, dispatch=dispatch)
    c = Coefficients.of(spec)
    cap = evaluate(spec, GRID_P, GRID_D).capacity_rps
    assert np.all(cap > 0)
    # prefill cannot serve more than n_P mu_P (SPEC 2.2), and B* < B_rho keeps it strictly below
    assert np.all(cap < GRID_P * c.mu_prefill_rps)
    # decode cannot exceed its rate at the pool-filling batch (SPEC 2.3, capacity.batch_max)
    assert np.all(cap <= GRID_D * c.decode_rate_rps(c.batch_max) * (1 + 1e-9))


# ---- 7: an unbounded pool leaves only the throughput limits ------------------------------


@pytest.mark.parametrize("n_p, n_d", [(1, 1), (2, 3), (4, 1), (1, 4), (3, 2)])
def test_huge_pool_is_prefill_bound(n_p, n_d):
    # with fixed:4096:256 prefill is the bottleneck of each of these configurations
    # once memory is free: capacity -> n_P mu_P (measured within 2e-6)
    spec = make_spec("fixed:4096:256", pool=10**9)
    c = Coefficients.of(spec)
    cap = evaluate(spec, n_p, n_d).capacity_rps[0]
    assert cap == pytest.approx(n_p * c.mu_prefill_rps, rel=0.01)


@pytest.mark.parametrize("n_p, n_d", [(1, 1), (2, 3), (4, 1), (8, 1)])
def test_huge_pool_limit_includes_decode_ceiling(n_p, n_d):
    """With a free pool the decode rate ``B/(E[l_out-1](alpha + g B))`` still tends to
    ``1/(E[l_out-1] g)`` (SPEC 2.3), so the limit is ``min(n_P mu_P, n_D/(E[l_out-1] g))``:
    with fixed:1024:256 one decode instance cannot carry four prefill instances
    (4P1D reaches 70% of ``n_P mu_P``, the paper variant too)."""
    spec = make_spec("fixed:1024:256", pool=10**9)
    c = Coefficients.of(spec)
    cap = evaluate(spec, n_p, n_d).capacity_rps[0]
    ceiling = n_d / (c.out_iterations * c.g_s_per_request)
    # measured within 2.2e-4 (the batch stops at B_max, short of the asymptote)
    assert cap == pytest.approx(min(n_p * c.mu_prefill_rps, ceiling), rel=0.01)


# ---- 8: a larger pool never lowers capacity ----------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["fixed:1024:256", "fixed:4096:256", "azure-conv-2023", "mooncake"]),
    st.sampled_from(DISPATCHES),
    st.floats(min_value=0.0, max_value=math.log(1e4)),
    st.floats(min_value=0.0, max_value=math.log(100.0)),
)
def test_capacity_monotone_in_pool(workload, dispatch, log_pool, log_growth):
    # the smallest pool that holds the longest request (capacity.py, Coefficients.of)
    fits = make_spec(workload).workload.max_tokens + RESERVED
    small = math.ceil(fits * math.exp(log_pool))
    large = max(small + 1, math.ceil(fits * math.exp(log_pool + log_growth)))
    cap_small = evaluate(make_spec(workload, dispatch=dispatch, pool=small), GRID_P, GRID_D)
    cap_large = evaluate(make_spec(workload, dispatch=dispatch, pool=large), GRID_P, GRID_D)
    # slack: each B* is within rtol/2 of its root and capacity moves less than B does
    # (measured worst decrease 1.9e-10 over a sweep of 400 pools)
    assert np.all(cap_large.capacity_rps >= cap_small.capacity_rps * (1 - 1e-9))


# ---- 9: the simulator does not use the analytic balance ----------------------------------

FORBIDDEN = {
    "solve_batch",
    "memory_balance",
    "balance",
    "population_for_throughput",
    "prefill_wait_s",
    "idle_probability",
    "idle_gap",
}


def borrowed_from_admission(source: str) -> list[str]:
    """What in ``source`` imports model.admission or refers to the balance's functions.

    A name the module declares as a field of its own class (``SimResult.prefill_wait_s``,
    the simulator's *measured* prefill wait) may be read and set as an attribute or a
    keyword of that class; it is not taken from the analytic model."""
    tree = parse(source)
    fields = [
        node
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]
    own = {f.target.id for f in fields if isinstance(f.target, ast.Name)}
    declarations = {id(f.target) for f in fields}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [al.name for al in node.names if al.name.startswith("model.admission")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("model.admission"):
                found.append(module)
            names = [al.name for al in node.names]
            if module in ("model", "") and "admission" in names:
                found.append(f"{module}.admission")
            found += [n for n in names if n in FORBIDDEN]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "model.admission" in node.value:  # importlib.import_module("model.admission")
                found.append(node.value)
        elif isinstance(node, ast.Name) and id(node) not in declarations:
            if node.id in FORBIDDEN:
                found.append(node.id)
        elif isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN - own:
                found.append(node.attr)
        elif isinstance(node, ast.keyword) and node.arg is not None:
            if node.arg in FORBIDDEN - own:
                found.append(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in FORBIDDEN:
            found.append(node.name)
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "import model.admission",
        "import model.admission as adm",
        "from model import admission",
        "from model import admission as adm",
        "from model.admission import LoopTerms",
        "from model.capacity import solve_batch",
        "from . import admission",
        "import importlib\nm = importlib.import_module('model.admission')",
        "b = solve_batch(c, 1, 1)",
        "f = c.memory_balance(b, 1, 1)",
        "x = adm.population_for_throughput(x, z, e, a)",
        "lam, w = adm.prefill_wait_s(t, b, a, b)",
        "g = balance",
        "w = r.prefill_wait_s",  # not a field of a class declared here
    ],
)
def test_simulator_check_catches(snippet):
    assert borrowed_from_admission(snippet)


def test_simulator_check_allows_own_field():
    source = "class SimResult:\n    prefill_wait_s: float\n\nr = SimResult(prefill_wait_s=1.0)\n"
    assert borrowed_from_admission(source + "w = r.prefill_wait_s\n") == []


def test_simulator_does_not_use_admission():
    # the package read as one source: its modules use the fields of each other's classes
    package = Path(__file__).resolve().parents[2] / "model" / "simulator"
    sources = [path.read_text(encoding="utf-8") for path in sorted(package.glob("*.py"))]
    assert len(sources) > 1
    assert borrowed_from_admission("\n".join(sources)) == []


# ---- 10, 11: variants --------------------------------------------------------------------


def test_unknown_variant_is_refused():
    spec = make_spec("fixed:4096:256", variant="paper")
    with pytest.raises(InputError) as err:
        dataclasses.replace(spec, variant="bogus")
    assert err.value.field == "model_variant"


@pytest.mark.parametrize("dispatch", DISPATCHES)
@pytest.mark.parametrize("workload", ["fixed:4096:256", "azure-conv-2023", "mooncake"])
def test_admission_is_the_default_and_paper_stays_selectable(workload, dispatch):
    # docs/validation.md: admission has the smaller worst-case error (4.7% vs 14.7%)
    assert DEFAULT_VARIANT == "admission"
    default = make_spec(workload, variant=None, dispatch=dispatch)
    explicit = dataclasses.replace(default, variant="admission")
    n_p, n_d = GRID_P, GRID_D
    got, ref = evaluate(default, n_p, n_d), evaluate(explicit, n_p, n_d)
    for name in ("capacity_rps", "batch", "mu_d_rps", "rho_star", "power_w"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    assert got.coefficients == ref.coefficients
    # the switch is live: the paper variant gives other numbers on the same grid
    paper = evaluate(dataclasses.replace(default, variant="paper"), n_p, n_d)
    assert not np.array_equal(paper.capacity_rps, ref.capacity_rps)
    assert paper.coefficients.fragment_tokens == 0.0


def _erlang_b(servers: int, load: float) -> float:
    # Erlang's loss formula by its stable recursion B(k) = a B(k-1) / (k + a B(k-1))
    b = 1.0
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    return b


@pytest.mark.parametrize("population", [2, 5, 18, 60])
@pytest.mark.parametrize("think_over_service", [0.5, 4.0, 17.0, 80.0])
def test_one_server_per_pool_reduces_to_the_finite_source_queue(population, think_over_service):
    # One prefill server per decode pool (n_P = n_D, round robin) with exponential service
    # is the machine-repairman queue M/M/1//N: its idle probability is Erlang's loss
    # formula B(N, Z/E) (Kleinrock, Queueing Systems I, 1975, section 3.8), so
    # X = (1 - B)/E. The Linearizer's population at that throughput must be N.
    e, z = 1.0, think_over_service
    x = (1.0 - _erlang_b(population, z / e)) / e
    if x * e > 0.95:
        pytest.skip("beyond the utilisation where the population is well conditioned")
    n = population_for_throughput(np.array([x]), np.array([z]), e, np.array([1.0]))[0]
    assert n == pytest.approx(population, rel=0.015)


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "workload"),
    [
        ("qwen3-32b", "h100-sxm", 1, "fixed:12000:8"),
        ("llama-3.1-70b", "h100-sxm", 2, "fixed:3000:8"),
        ("qwen3-32b", "h200", 1, "fixed:8192:16"),
    ],
)
def test_balance_increases_for_long_prompts_and_short_outputs(model, gpu, tp, workload):
    # Long prompts with few output tokens keep the admitted population near one or two
    # requests, where the Linearizer's correction used to switch on abruptly at n = 2:
    # the balance then had several roots (three within 5% for llama-3.1-70b, tp 2,
    # fixed:3000:8, 1P1D). It must increase over the whole bracket, so the root is unique.
    spec = resolve_spec(
        SpecRequest(
            model=model,
            gpu=gpu,
            workload=workload,
            overrides={"serving": {"tensor_parallel": tp}},
            model_variant="admission",
        )
    )
    c = Coefficients.of(spec)
    t = c.loop_terms()
    for n_p, n_d in [(1, 1), (1, 2), (2, 1), (2, 3), (4, 1)]:
        _, a, b = admission.components([n_p], [n_d], False)
        hi = min(c.batch_max, float(c.batch_rho(n_p, n_d)[()]), admission.no_wait_batch(t))
        xs = np.linspace(hi * 1e-6, hi * (1 - 1e-9), 20_001)
        f = admission.balance(t, xs, np.full_like(xs, a[0]), np.full_like(xs, b[0]))
        assert np.all(np.diff(f) > 0), (n_p, n_d)


@pytest.mark.parametrize("out_spread", [1, 3, 10])
def test_balance_increases_when_outputs_vary_a_little(out_spread):
    """Outputs that vary a little keep part of the admissions' order through decode
    (``phi`` between 0 and 1 over the bracket) while prompts vary a lot (``c_s^2`` far
    from ``1/a``): ``c_a^2`` then moves with ``B`` through ``phi`` and ``rho`` in
    opposite directions. The balance must still increase, so the root stays unique."""
    l_in = [200, 500, 1500, 6000, 12000]
    l_out = [256 - out_spread, 256 + out_spread]
    w = Workload.from_samples(
        [x for x in l_in for _ in l_out], [y for _ in l_in for y in l_out], name="mixed"
    )
    spec = dataclasses.replace(make_spec("fixed:1024:256"), workload=w)
    c = Coefficients.of(spec)
    t = c.loop_terms()
    assert c.t_prefill_scv > 1.0
    phis = []
    for n_p, n_d in [(1, 1), (1, 2), (2, 1), (3, 2), (5, 1), (2, 5)]:
        _, a, b = admission.components([n_p], [n_d], False)
        hi = min(c.batch_max, float(c.batch_rho(n_p, n_d)[()]), admission.no_wait_batch(t))
        xs = np.linspace(hi * 1e-6, hi * (1 - 1e-9), 20_001)
        f = admission.balance(t, xs, np.full_like(xs, a[0]), np.full_like(xs, b[0]))
        assert np.all(np.diff(f) > 0), (n_p, n_d)
        phis.append(admission.order_kept(xs, t.out_scv))
    phi = np.concatenate(phis)
    assert phi.max() - phi.min() > 0.5  # phi really moves over the bracket


def test_capacity_grows_with_the_pool_through_small_populations():
    # fixed:8192:16 1P2D: the pool sweep 10,764 -> 10,768 tokens used to lower the
    # capacity by 3.0% (the jump of the correction at a population of two)
    pools = np.arange(9_000, 14_000, 4)
    caps = [
        float(evaluate(make_spec("fixed:8192:16", pool=int(p)), 1, 2).capacity_rps[0])
        for p in pools
    ]
    assert np.all(np.diff(caps) >= -1e-9 * np.array(caps[:-1]))


# ---- 14: one prefill server per component (docs/admission.md, section 6) -----------------


def heavy_tailed_samples(seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Log-normal prompts of median 6,000 tokens (sigma 1.1, at most 120,000) and
    geometric outputs of mean about 300: a heavy-tailed mix like Mooncake's."""
    rng = np.random.default_rng(seed)
    l_in = np.minimum(np.ceil(rng.lognormal(math.log(6000.0), 1.1, 4000)), 120_000).astype(int)
    l_out = 1 + rng.geometric(1.0 / 300.0, 4000)
    return l_in, l_out


def heavy_tailed_spec() -> DeploymentSpec:
    """Qwen3-32B on H200 with :func:`heavy_tailed_samples`' workload."""
    w = Workload.from_samples(*heavy_tailed_samples(), name="heavy")
    return dataclasses.replace(make_spec("fixed:1024:256"), workload=w)


def exact_idle_probability(c: Coefficients, batch: float, step: int = 64) -> float:
    """``P(D + S > C_tok - U)`` for :func:`heavy_tailed_samples` with ``D`` exactly
    compound Poisson: a Poisson(``batch``) number of decoding requests, each holding
    ``l_in + k + R`` at an iteration ``k`` drawn uniformly over every request's
    iterations, and ``S = l_in + R`` of a random request; by FFT on a grid of ``step``
    tokens (sizes rounded up: a slight overestimate)."""
    l_in, l_out = heavy_tailed_samples()
    r = c.reserved_tokens
    size = int(c.kv_usable_tokens // step) + 2
    held = np.zeros(size)
    for i, o in zip(l_in, l_out, strict=True):
        k = np.arange(1, o)
        np.add.at(held, np.minimum(-(-(i + k + r) // step), size - 1), 1.0)
    held /= held.sum()
    n = 2 * size
    d = np.maximum(np.fft.irfft(np.exp(batch * (np.fft.rfft(held, n) - 1.0)), n)[:size], 0.0)
    cdf = np.cumsum(d)
    room = (c.kv_usable_tokens - (l_in + r)) // step  # D fits beside S up to this many steps
    fits = np.where(room >= 0, cdf[np.clip(room, 0, size - 1).astype(int)], 0.0)
    return float(1.0 - fits.mean())


@pytest.mark.parametrize("batch", [5.0, 8.0, 12.0, 16.0])
def test_idle_probability_against_exact_compound_poisson(batch):
    """The gamma law with the compound Poisson sum's first two moments against the sum's
    exact law (measured: within 4.3% where the exact probability is 0.4% to 28%; +15%
    at 0.07%, a batch of 3)."""
    c = Coefficients.of(heavy_tailed_spec())
    exact = exact_idle_probability(c, batch)
    approx = float(admission.idle_probability(c.loop_terms(), np.array([batch]))[0])
    assert 1e-3 < exact < 0.5
    assert approx == pytest.approx(exact, rel=0.1)


def test_one_server_form_needs_the_third_moments():
    """Without the third moments (explicit moments may leave them out) components with
    one prefill server take the loop's balance like the others; with them, section 6."""
    spec = heavy_tailed_spec()
    w = spec.workload
    bare = dataclasses.replace(w, e_in2_out=None, e_in_out2=None, e_out3=None)
    spec_bare = dataclasses.replace(spec, workload=bare)
    terms = Coefficients.of(spec_bare).loop_terms()
    assert not terms.one_server_form and Coefficients.of(spec).loop_terms().one_server_form
    n_p, n_d = np.array([1, 1, 2, 3]), np.array([1, 3, 2, 1])
    full = evaluate(spec, n_p, n_d)
    loop = evaluate(spec_bare, n_p, n_d)
    _, a, b = admission.components(n_p, n_d, False)
    f = admission.balance(terms, loop.batch, a, b)
    assert np.all(np.abs(f) <= 1e-5 * terms.packable_tokens)
    # components of several prefill servers do not use the third moments
    np.testing.assert_allclose(full.capacity_rps[a > 1], loop.capacity_rps[a > 1], rtol=1e-12)
    # one server: the loop's population-limited wait idles it more than section 6's
    # pools full of decoding requests do
    assert np.all(full.capacity_rps[a == 1] > loop.capacity_rps[a == 1])


@settings(max_examples=60, deadline=None)
@given(
    st.floats(min_value=math.log(50.0), max_value=math.log(30_000.0)),  # median prompt
    st.floats(min_value=0.0, max_value=1.6),  # log-normal sigma of the prompts
    st.floats(min_value=2.0, max_value=2000.0),  # mean output
    st.floats(min_value=1.2, max_value=40.0),  # pool in units of the longest request
)
def test_idle_gap_increases_so_its_root_is_unique(log_median, sigma, mean_out, room):
    """Section 6's root is unique because ``p(B)`` does not decrease with the batch (a
    larger batch adds mean and spread to the decoding requests' tokens) and so
    ``b lambda_D(B) - mu_P (1 - p(B)^b)`` increases, for any workload and pool."""
    rng = np.random.default_rng(1)
    l_in = np.maximum(1, np.ceil(rng.lognormal(log_median, sigma, 500))).astype(int)
    l_out = 1 + rng.geometric(1.0 / mean_out, 500)
    w = Workload.from_samples(l_in, l_out, name="any")
    pool = math.ceil(room * (w.max_tokens + RESERVED))
    spec = dataclasses.replace(make_spec("fixed:1024:256", pool=pool), workload=w)
    terms = Coefficients.of(spec).loop_terms()
    batch = np.geomspace(1e-3, 4.0 * pool / terms.active_tokens, 400)
    p = admission.idle_probability(terms, batch)
    assert np.all((p >= 0.0) & (p <= 1.0))
    # non-decreasing up to rounding: sums of a few hundred terms in [0, 1] carry
    # errors of order 1e-13 (a dip of 1.4e-12 was seen where p is flat)
    assert np.all(np.diff(p) >= -1e-10)
    for b in (1.0, 3.0):
        gap = admission.idle_gap(terms, batch, np.full(batch.shape, b))
        assert np.all(np.diff(gap) > 0.0)


@pytest.mark.slow  # 2.1 s on two cores
def test_one_prefill_server_capacity_against_the_simulator():
    """1P1D on the heavy-tailed mix: section 6's capacity within the simulated capacity's
    95% interval (measured +0.07% against a half-width of 0.5%; the loop's form of
    sections 2-3 is 2.0% short). The simulator shares only the timing primitives."""
    spec = heavy_tailed_spec()
    l_in, l_out = heavy_tailed_samples()
    samples = Samples(l_in=np.asarray(l_in), l_out=np.asarray(l_out), name="heavy")
    est = find_capacity(
        SimTiming.of(spec), samples, 1, 1, seeds=3, requests=30_000, check_margin=None
    )
    new = float(evaluate(spec, [1], [1]).capacity_rps[0])
    w = spec.workload
    bare = dataclasses.replace(w, e_in2_out=None, e_in_out2=None, e_out3=None)
    loop = float(evaluate(dataclasses.replace(spec, workload=bare), [1], [1]).capacity_rps[0])
    assert abs(new - est.capacity_rps) <= est.ci95_rps
    assert abs(new - est.capacity_rps) < abs(loop - est.capacity_rps)
