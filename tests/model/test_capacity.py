"""Capacity and power of PD configurations (SPEC 2.1 to 2.6).

Reference values are computed here by hand from the SPEC numbers (typed in below), never
by calling the code under test.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from model.capacity import Coefficients, candidate_configs, evaluate, solve_batch
from model.errors import DoesNotFitError, InputError
from model.operations import SpecRequest, resolve_spec
from model.workload import Workload

# ---- SPEC 2.1 constants: Qwen3-32B on H200, paper Tab. 3 calibration ------------------

N_PARAMS = 32.8e9  # N
LAYERS = 64  # L
ATTN_WIDTH = 64 * 128  # d = n_heads * head_dim
KAPPA = 2 * 2 * 64 * 8 * 128  # KV bytes per token = 262,144
WEIGHT_BYTES = 2 * N_PARAMS  # bf16
PI = 989e12  # peak dense BF16, FLOP/s
BETA = 4.8e12  # HBM bandwidth, B/s
MEM = 141e9  # bytes
MFU, MBU, C_ATTN = 0.67, 0.77, 2.17
T_ITER_S, T_REQ_S = 1.00e-3, 0.062e-3
P0_P, GAMMA_P, PSAT_P = 133.0, 566.0, 692.0
P0_D, GAMMA_D, PSAT_D = 448.0, 458.0, 678.0
F_MEM = 0.90  # SPEC 2.1 serving-stack default
RESERVED = 512  # R
POOL = 233_840  # C_tok, SPEC 2.1

A_P = 2 * N_PARAMS / (PI * MFU)  # SPEC 2.2
B_P = C_ATTN * LAYERS * ATTN_WIDTH / (PI * MFU)  # SPEC 2.2
ALPHA = WEIGHT_BYTES / (BETA * MBU) + T_ITER_S  # SPEC 2.3

PRESETS = ("azure-conv-2023", "azure-code-2023", "mooncake")


def qwen_h200(workload: str = "fixed:4096:256", **overrides):
    # SPEC 2 to the letter: the paper variant (the admission one has tests of its own)
    return resolve_spec(SpecRequest(workload=workload, overrides=overrides, model_variant="paper"))


BASE_SPEC = qwen_h200()


def with_dispatch(spec, dispatch: str):
    return dataclasses.replace(spec, serving=dataclasses.replace(spec.serving, dispatch=dispatch))


# ---- SPEC 2.1-2.5 by hand, for a fixed (l_in, l_out) workload -------------------------


def hand_fixed(l_in: int, l_out: int, n_p: int, n_d: int, dispatch: str = "round_robin"):
    """Capacity figures of ``n_p``P``n_d``D for fixed lengths, written from SPEC 2.2-2.6."""
    t_p = A_P * l_in + B_P * l_in**2  # E[t_P]; c_s^2 = 0 for fixed lengths
    mu_p = 1.0 / t_p
    iters = l_out - 1  # E[l_out - 1]
    ctx = l_in + l_out / 2  # SPEC 2.4 with Var = Cov = 0
    g = KAPPA * ctx / (BETA * MBU) + T_REQ_S
    scv_arr = 1.0 / n_p if dispatch == "round_robin" else 1.0

    def lam_d(b):
        return b / (iters * (ALPHA + g * b))

    def f(b):
        lam = lam_d(b)
        rho = lam * n_d / (n_p * mu_p)
        wait = rho / (1 - rho) * (scv_arr + 0.0) / 2 * t_p
        return (
            b * (ctx + RESERVED) + lam * (wait * (l_in + RESERVED) + t_p * (l_in + RESERVED)) - POOL
        )

    b_max = POOL / (ctx + RESERVED)
    x = n_p * mu_p / n_d
    b_rho = x * iters * ALPHA / (1 - x * iters * g) if x * iters * g < 1 else math.inf
    hi = min(b_max, b_rho * (1 - 1e-12))
    assert f(hi) > 0 > f(0.0)
    b_star = brentq(f, 0.0, hi, xtol=1e-300, rtol=1e-15, maxiter=500)
    mu_d = lam_d(b_star)
    mu_d_max = lam_d(b_max)
    mu = min(n_p * mu_p, n_d * mu_d)
    power = n_p * min(P0_P + GAMMA_P * mu / (n_p * mu_p), PSAT_P) + n_d * min(
        P0_D + GAMMA_D * mu / (n_d * mu_d_max), PSAT_D
    )
    return {
        "capacity_rps": mu,
        "mu_p_rps": mu_p,
        "mu_d_rps": mu_d,
        "mu_d_max_rps": mu_d_max,
        "batch": b_star,
        "power_w": power,
    }


# ---- coefficients (SPEC 2.1-2.4) -----------------------------------------------------


def test_qwen3_32b_h200_coefficients_match_spec():
    c = Coefficients.of(BASE_SPEC)
    # SPEC 2.1: C_tok = floor((0.90 * 141e9 - 65.6e9) / 262,144) = 233,840 tokens.
    assert math.floor((F_MEM * MEM - WEIGHT_BYTES) / KAPPA) == POOL
    assert c.kv_pool_tokens == POOL
    assert c.kv_usable_tokens == POOL  # u = 0
    assert c.kv_bytes_per_token == KAPPA
    # SPEC 2.2
    assert c.a_p_s_per_token == pytest.approx(2 * 32.8e9 / (989e12 * 0.67), rel=1e-12)
    assert c.b_p_s_per_token2 == pytest.approx(2.17 * 64 * 8192 / (989e12 * 0.67), rel=1e-12)
    t_p = A_P * 4096 + B_P * 4096**2
    assert c.t_prefill_mean_s == pytest.approx(t_p, rel=1e-12)
    assert c.mu_prefill_rps == pytest.approx(1 / t_p, rel=1e-12)
    assert c.t_prefill_scv == pytest.approx(0.0, abs=1e-12)  # fixed workload
    assert c.t_prefill_reserve_token_s == pytest.approx(t_p * (4096 + 512), rel=1e-12)
    # SPEC 2.3, 2.4: ctx = 4096 + 256/2 = 4224 for fixed lengths.
    assert c.ctx_tokens == 4224.0
    assert c.alpha_s == pytest.approx(65.6e9 / (4.8e12 * 0.77) + 1e-3, rel=1e-12)
    assert c.g_s_per_request == pytest.approx(262144 * 4224 / (4.8e12 * 0.77) + 0.062e-3, rel=1e-12)
    assert c.out_iterations == 255.0
    # SPEC 2.5: B_max = C_tok / (ctx + R)
    assert c.batch_max == pytest.approx(POOL / (4224 + 512), rel=1e-12)


def test_prefill_scv_of_a_two_point_workload():
    # SPEC 2.2: c_s^2 = Var(t_P) / E[t_P]^2, here for l_in uniform on {1000, 3000}.
    w = Workload.from_samples([1000, 3000], [100, 100], name="two")
    c = Coefficients.of(dataclasses.replace(BASE_SPEC, workload=w))
    t = [A_P * x + B_P * x * x for x in (1000, 3000)]
    mean = (t[0] + t[1]) / 2
    var = ((t[0] - mean) ** 2 + (t[1] - mean) ** 2) / 2
    assert c.t_prefill_mean_s == pytest.approx(mean, rel=1e-12)
    assert c.t_prefill_scv == pytest.approx(var / mean**2, rel=1e-9)
    expected_reserve = (t[0] * (1000 + RESERVED) + t[1] * (3000 + RESERVED)) / 2
    assert c.t_prefill_reserve_token_s == pytest.approx(expected_reserve, rel=1e-12)


# ---- hand-computed full examples (SPEC 2.5, 2.6) ---------------------------------------


@pytest.mark.parametrize(
    ("n_p", "n_d", "dispatch"),
    [
        (1, 1, "round_robin"),
        (3, 1, "round_robin"),
        (2, 5, "round_robin"),
        (1, 1, "random"),
        (4, 2, "random"),
    ],
)
def test_hand_computed_example_fixed_4096_256(n_p, n_d, dispatch):
    # SPEC 2.5 (balance, Kingman wait, B_rho) and 2.6 (ramps 133/566/692, 448/458/678).
    ref = hand_fixed(4096, 256, n_p, n_d, dispatch)
    r = evaluate(with_dispatch(BASE_SPEC, dispatch), [n_p], [n_d])
    for key, value in ref.items():
        assert getattr(r, key)[0] == pytest.approx(value, rel=1e-9), key
    assert r.power_idle_w[0] == pytest.approx(n_p * P0_P + n_d * P0_D, rel=1e-12)
    assert r.power_sat_w[0] == pytest.approx(n_p * PSAT_P + n_d * PSAT_D, rel=1e-12)
    # SPEC 2.5: rho* = mu / (n_P mu_P)
    assert r.rho_star[0] == pytest.approx(ref["capacity_rps"] / (n_p * ref["mu_p_rps"]), rel=1e-9)


def test_hand_computed_1p1d_is_prefill_bound_uncoupled():
    # SPEC 2.5: bottleneck "prefill" iff n_P mu_P < n_D mu_D_max. For 1P1D of fixed:4096:256,
    # mu_P ~ 2.30 req/s and mu_D_max ~ 5.29 req/s.
    ref = hand_fixed(4096, 256, 1, 1)
    assert ref["mu_p_rps"] < ref["mu_d_max_rps"]
    r = evaluate(BASE_SPEC, [1, 1], [1, 8])
    assert bool(r.prefill_bound[0]) is True
    ref8 = hand_fixed(4096, 256, 1, 8)
    assert bool(r.prefill_bound[1]) is (ref8["mu_p_rps"] < 8 * ref8["mu_d_max_rps"])


# ---- properties (hypothesis) -----------------------------------------------------------

fixed_workloads = st.builds(Workload.fixed, st.integers(1, 32768), st.integers(1, 4096))
sample_workloads = st.lists(
    st.tuples(st.integers(1, 32768), st.integers(1, 4096)), min_size=1, max_size=6
).map(lambda rows: Workload.from_samples([a for a, _ in rows], [b for _, b in rows], name="s"))
workloads = st.one_of(fixed_workloads, sample_workloads)
counts = st.integers(1, 64)
dispatches = st.sampled_from(["round_robin", "random"])


def spec_for(workload: Workload, dispatch: str):
    return with_dispatch(dataclasses.replace(BASE_SPEC, workload=workload), dispatch)


def hand_batch_rho(c: Coefficients, n_p: int, n_d: int) -> float:
    # SPEC 2.5: x = n_P mu_P / n_D; B_rho = x E[l_out-1] alpha / (1 - x E[l_out-1] g)
    x = n_p / c.t_prefill_mean_s / n_d
    e = c.out_iterations
    den = 1 - x * e * c.g_s_per_request
    return x * e * c.alpha_s / den if den > 0 else math.inf


@settings(max_examples=80, deadline=None)
@given(workloads, counts, counts, dispatches)
def test_batch_is_the_bracketed_root_of_the_memory_balance(w, n_p, n_d, dispatch):
    c = Coefficients.of(spec_for(w, dispatch))
    r = evaluate(c, [n_p], [n_d])
    if not c.has_decode_work:  # every l_out = 1 (SPEC 2.5 edge case)
        assert r.capacity_rps[0] == pytest.approx(n_p / c.t_prefill_mean_s, rel=1e-12)
        return
    b = float(r.batch[0])
    b_max = c.kv_usable_tokens / (c.ctx_tokens + c.reserved_tokens)
    b_rho = hand_batch_rho(c, n_p, n_d)
    upper = min(b_max, b_rho)
    assert 0 < b < upper
    f = float(c.memory_balance(b, n_p, n_d))
    assert abs(f) <= 1e-6 * c.kv_usable_tokens
    # the root lies within 1e-9 relative: f changes sign around it
    assert float(c.memory_balance(b * (1 - 1e-9), n_p, n_d)) <= 0
    assert float(c.memory_balance(min(b * (1 + 1e-9), upper), n_p, n_d)) >= 0
    # scipy's brentq on the same balance
    hi = b_max if b_max < b_rho else b_rho * (1 - 1e-12)
    ref = brentq(
        lambda x: float(c.memory_balance(x, n_p, n_d)),
        0.0,
        hi,
        xtol=1e-300,
        rtol=1e-14,
        maxiter=500,
    )
    assert b == pytest.approx(ref, rel=1e-9)


@settings(max_examples=80, deadline=None)
@given(workloads, counts, counts, dispatches)
def test_capacity_bounds_and_monotonicity(w, n_p, n_d, dispatch):
    c = Coefficients.of(spec_for(w, dispatch))
    r = evaluate(c, [n_p, n_p + 1, n_p], [n_d, n_d, n_d + 1])
    mu = r.capacity_rps
    mu_p_total = n_p / c.t_prefill_mean_s
    # SPEC 2.5: mu = min(n_P mu_P, n_D mu_D) <= n_P mu_P
    assert mu[0] <= mu_p_total * (1 + 1e-12)
    if c.has_decode_work:
        # SPEC 2.5: since B* < B_rho, n_D mu_D < n_P mu_P always
        assert n_d * r.mu_d_rps[0] < mu_p_total
        assert mu[0] == pytest.approx(n_d * r.mu_d_rps[0], rel=1e-12)
        assert 0 < r.mu_d_rps[0] < r.mu_d_max_rps[0]
    # adding a prefill or a decode instance never lowers capacity (STYLE: tests and tooling)
    assert mu[1] >= mu[0] * (1 - 1e-9)
    assert mu[2] >= mu[0] * (1 - 1e-9)


@settings(max_examples=60, deadline=None)
@given(
    workloads,
    counts,
    counts,
    dispatches,
    st.lists(st.floats(0.0, 3.0, allow_nan=False), min_size=2, max_size=12),
)
def test_power_bounds_and_monotone_in_load(w, n_p, n_d, dispatch, fractions):
    c = Coefficients.of(spec_for(w, dispatch))
    at_cap = evaluate(c, [n_p], [n_d])
    mu = float(at_cap.capacity_rps[0])
    # SPEC 2.1, 2.6: idle = n_P p0_P + n_D p0_D, saturated = n_P psat_P + n_D psat_D
    assert at_cap.power_idle_w[0] == pytest.approx(n_p * P0_P + n_d * P0_D, rel=1e-12)
    assert at_cap.power_sat_w[0] == pytest.approx(n_p * PSAT_P + n_d * PSAT_D, rel=1e-12)
    assert at_cap.power_idle_w[0] <= at_cap.power_w[0] <= at_cap.power_sat_w[0]
    # load 0 draws idle power; a load above capacity is served at capacity (SPEC 2.6)
    zero = evaluate(c, [n_p], [n_d], load_rps=0.0)
    assert zero.power_w[0] == pytest.approx(n_p * P0_P + n_d * P0_D, rel=1e-12)
    over = evaluate(c, [n_p], [n_d], load_rps=2.0 * mu + 1.0)
    assert over.power_w[0] == at_cap.power_w[0]
    assert over.load_rps[0] == mu
    # P(lambda) is non-decreasing in the load
    loads = np.sort(np.asarray(fractions) * mu)
    k = loads.size
    r = evaluate(c, np.full(k, n_p), np.full(k, n_d), load_rps=loads)
    assert np.all(np.diff(r.power_w) >= 0)
    assert np.all(r.power_w >= r.power_idle_w) and np.all(r.power_w <= r.power_sat_w)
    # the ramp formula of SPEC 2.6 at every load (capped at mu)
    lam = np.minimum(loads, mu)
    xp = lam / (n_p / c.t_prefill_mean_s)
    xd = lam / (n_d * at_cap.mu_d_max_rps[0]) if c.has_decode_work else np.zeros(k)
    expected = n_p * np.minimum(P0_P + GAMMA_P * xp, PSAT_P) + n_d * np.minimum(
        P0_D + GAMMA_D * xd, PSAT_D
    )
    np.testing.assert_allclose(r.power_w, expected, rtol=1e-12)


# ---- edge cases (SPEC 2.5) -------------------------------------------------------------


@pytest.mark.parametrize(("n_p", "n_d"), [(0, 3), (2, 0), (0, 0)])
def test_absent_phase_gives_zero_capacity_and_p0_power(n_p, n_d):
    r = evaluate(BASE_SPEC, [n_p], [n_d])
    assert r.capacity_rps[0] == 0.0
    # SPEC 2.5: an absent phase contributes no power; the present one idles at p0.
    assert r.power_w[0] == pytest.approx(n_p * P0_P + n_d * P0_D, rel=1e-12)
    loaded = evaluate(BASE_SPEC, [n_p], [n_d], load_rps=5.0)
    assert loaded.power_w[0] == pytest.approx(n_p * P0_P + n_d * P0_D, rel=1e-12)


def test_zero_instances_mixed_with_real_configs():
    r = evaluate(BASE_SPEC, [0, 1, 3, 0], [1, 1, 0, 0])
    ref = hand_fixed(4096, 256, 1, 1)
    assert r.capacity_rps[1] == pytest.approx(ref["capacity_rps"], rel=1e-9)
    assert r.capacity_rps[[0, 2, 3]].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(("n_p", "n_d"), [(1, 1), (3, 2), (1, 5)])
def test_no_decode_work_when_every_output_is_one_token(n_p, n_d):
    # SPEC 2.5: every l_out = 1 -> mu_D = mu_D_max = inf, mu = n_P mu_P, decode draws p0_D.
    spec = qwen_h200("fixed:512:1")
    mu_p = 1 / (A_P * 512 + B_P * 512**2)
    r = evaluate(spec, [n_p], [n_d])
    assert r.capacity_rps[0] == pytest.approx(n_p * mu_p, rel=1e-12)
    assert math.isinf(r.mu_d_rps[0]) and math.isinf(r.mu_d_max_rps[0])
    # prefill at x = 1: min(133 + 566, 692) = 692 per instance
    assert r.power_w[0] == pytest.approx(n_p * PSAT_P + n_d * P0_D, rel=1e-12)
    half = evaluate(spec, [n_p], [n_d], load_rps=0.5 * n_p * mu_p)
    assert half.power_w[0] == pytest.approx(n_p * (P0_P + GAMMA_P * 0.5) + n_d * P0_D, rel=1e-12)


def test_mixed_workload_with_single_token_outputs():
    # SPEC 2.4/2.5: l_out = 1 requests weigh 0 in ctx but still hold their reservation.
    w = Workload.from_samples([1000, 2000], [1, 301], name="mixed")
    c = Coefficients.of(dataclasses.replace(BASE_SPEC, workload=w))
    assert c.out_iterations == 150.0  # E[l_out - 1] = (0 + 300) / 2
    assert c.ctx_tokens == pytest.approx(2000 + 301 / 2, rel=1e-12)
    t1, t2 = A_P * 1000 + B_P * 1000**2, A_P * 2000 + B_P * 2000**2
    assert c.t_prefill_reserve_token_s == pytest.approx(
        (t1 * (1000 + RESERVED) + t2 * (2000 + RESERVED)) / 2, rel=1e-12
    )
    r = evaluate(c, [1, 2, 4], [1, 3, 2])
    assert np.all(np.isfinite(r.capacity_rps)) and np.all(r.capacity_rps > 0)
    assert np.all(np.isfinite(r.mu_d_rps))
    for i in range(3):
        assert abs(float(c.memory_balance(r.batch[i], r.n_p[i], r.n_d[i]))) <= 1e-6 * POOL


def test_model_that_does_not_fit_raises():
    # llama-3.1-70b: 70.6e9 params * 2 B = 141.2 GB > 0.90 * 141 GB of one H200.
    spec = resolve_spec(SpecRequest(model="llama-3.1-70b", gpu="h200", workload="fixed:1024:256"))
    with pytest.raises(DoesNotFitError) as info:
        Coefficients.of(spec)
    assert info.value.field == "model"
    with pytest.raises(DoesNotFitError):
        evaluate(spec, [1], [1])


def test_model_fits_with_tensor_parallel_two():
    spec = resolve_spec(
        SpecRequest(
            model="llama-3.1-70b",
            gpu="h200",
            workload="fixed:1024:256",
            overrides={"serving": {"tensor_parallel": 2}},
        )
    )
    c = Coefficients.of(spec)
    # SPEC 2.1 pool with M doubled: kappa = 2 * 2 * 80 * 8 * 128 = 327,680 B/token
    assert c.kv_pool_tokens == math.floor((0.90 * 2 * 141e9 - 2 * 70.6e9) / 327_680)
    r = evaluate(spec, [2, 1], [1, 3])
    assert np.all(r.capacity_rps > 0)
    assert r.gpus.tolist() == [6, 8]


def test_workload_longer_than_the_pool_raises():
    # 300,000 + 10 + R = 300,522 tokens > 233,840 (SPEC 2.1 pool).
    spec = qwen_h200("fixed:300000:10")
    with pytest.raises(DoesNotFitError) as info:
        evaluate(spec, [1], [1])
    assert info.value.field == "workload"
    assert "workload" in str(info.value)


def test_workload_just_inside_the_pool_is_accepted():
    # l_in + l_out + R = 233,840 exactly fills the pool.
    spec = qwen_h200(f"fixed:{POOL - RESERVED - 100}:100")
    r = evaluate(spec, [1], [1])
    assert r.capacity_rps[0] > 0


@pytest.mark.parametrize(("n_p", "n_d", "field"), [(-1, 1, "n_p"), (1, -2, "n_d")])
def test_negative_counts_raise(n_p, n_d, field):
    with pytest.raises(InputError) as info:
        evaluate(BASE_SPEC, [n_p], [n_d])
    assert info.value.field == field


def test_negative_load_raises():
    with pytest.raises(InputError) as info:
        evaluate(BASE_SPEC, [1], [1], load_rps=-1.0)
    assert info.value.field == "load_rps"


# ---- candidate list and solver passes ------------------------------------------------


def test_candidate_configs_count_and_bounds():
    n_p, n_d = candidate_configs(256)
    assert n_p.size == 255 * 256 // 2 == 32_640  # SPEC 2.7: 1 <= n_P, n_D, n_P + n_D <= G
    assert n_p.min() >= 1 and n_d.min() >= 1 and (n_p + n_d).max() <= 256
    assert len(set(zip(n_p.tolist(), n_d.tolist(), strict=True))) == 32_640
    n_p16, _ = candidate_configs(16)
    assert n_p16.size == 15 * 16 // 2


@pytest.mark.parametrize("preset", PRESETS)
def test_solve_batch_passes_on_all_candidates(preset):
    c = Coefficients.of(qwen_h200(preset))
    n_p, n_d = candidate_configs(256)
    b, passes = solve_batch(c, n_p, n_d)
    assert passes <= 10  # a pass count, not a time
    assert b.shape == (32_640,)
    upper = np.minimum(
        c.batch_max, [hand_batch_rho(c, p, d) for p, d in zip(n_p, n_d, strict=True)]
    )
    assert np.all(b > 0) and np.all(b < upper)
    # spot check against brentq on a spread of configurations
    for i in np.linspace(0, n_p.size - 1, 7).astype(int):
        p, d = int(n_p[i]), int(n_d[i])
        hi = min(c.batch_max, hand_batch_rho(c, p, d) * (1 - 1e-12))
        ref = brentq(
            lambda x, p=p, d=d: float(c.memory_balance(x, p, d)),
            0.0,
            hi,
            xtol=1e-300,
            rtol=1e-14,
            maxiter=500,
        )
        assert b[i] == pytest.approx(ref, rel=1e-9)
