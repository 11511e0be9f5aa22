"""Sliding-window attention (docs/sliding_window.md): what a request keeps in the KV
pool and reads per decode iteration, the prefill bound, and the models that have it
(gpt-oss, Gemma 3), whose facts come from their published config.json."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from model.capacity import Coefficients, kv_bytes_per_pool_token
from model.catalog import PRECISION_BYTES, ServingStack, load_calibration, load_gpu, load_model
from model.errors import InputError
from model.measured.calibrate import usable_rows
from model.measured.measurements import Measurement
from model.performance.roofline import DecodeTerms, prefill_coefficients
from model.simulator import SimTiming
from model.spec import DeploymentSpec
from model.workload import Workload
from tests.model.rows import measurement


def test_gpt_oss_shapes_and_kv_cache() -> None:
    """gpt-oss-120b (config.json): 36 layers alternating 128-token sliding and full
    attention, 8 KV heads of 64 in bf16 (2 x 2 x 8 x 64 = 2,048 bytes per token and
    layer); 128 experts of 24,891,840 parameters, 4 per token, in MXFP4 (4.25 bits)."""
    m = load_model("openai/gpt-oss-120b")
    assert (m.name, m.sliding_window, m.sliding_layers) == ("gpt-oss-120b", 128, 18)
    assert m.kv_bytes_per_token == 36 * 2048
    assert m.kv_bytes_at(100) == 36 * 2048 * 100  # inside the window: every layer
    assert m.kv_bytes_at(1000) == 2048 * (18 * 1000 + 18 * 128)
    assert m.attended_layers(1000) == pytest.approx(18 + 18 * 0.128)
    assert m.attended_layers(64) == 36
    assert m.precision == "mxfp4" and PRECISION_BYTES["mxfp4"] == 4.25 / 8
    experts = 36 * 128 * 24_891_840
    assert m.params == pytest.approx(116.83e9, rel=1e-4)  # model card: 117B
    assert m.weight_bytes == pytest.approx((m.params - experts) * 2 + experts * 4.25 / 8)
    assert load_model("gpt-oss-20b").params == pytest.approx(20.91e9, rel=1e-3)


def test_gemma_3_layers_follow_the_pattern_of_six() -> None:
    """Gemma 3 (config.json): every sixth layer full attention, the rest a 1,024-token
    window; 12B 48 layers (8 full), 27B 62 layers (10 full)."""
    g12, g27 = load_model("google/gemma-3-12b-it"), load_model("google/gemma-3-27b-it")
    assert (g12.layers - g12.sliding_layers, g27.layers - g27.sliding_layers) == (8, 10)
    assert g12.sliding_window == g27.sliding_window == 1024
    # language-model parameters from the shapes; model cards 12.2B and 27.4B include
    # a 0.4B vision tower that text decoding never reads
    assert g12.params == pytest.approx(11.77e9, rel=1e-3)
    assert g27.params == pytest.approx(27.01e9, rel=1e-3)
    assert g12.precision == "bf16" and not g12.experts


def test_the_pool_token_bytes_bound_the_mean_from_above() -> None:
    """At the mean context the bytes per token are an upper bound on the mean bytes per
    token of requests whose contexts vary (E[min(c, W)] <= min(E[c], W)), and equal to
    kappa without sliding layers."""
    m = load_model("gpt-oss-120b")
    rng = np.random.default_rng(0)
    ctx = rng.exponential(800.0, 20_000) + 1
    mean_bytes = np.mean([m.kv_bytes_at(c) for c in ctx]) / ctx.mean()
    assert kv_bytes_per_pool_token(m, float(ctx.mean())) >= mean_bytes
    dense = load_model("qwen3-8b")
    assert kv_bytes_per_pool_token(dense, 1234.0) == dense.kv_bytes_per_token


def test_decode_reads_the_window_only() -> None:
    m, gpu = load_model("gemma-3-27b"), load_gpu("h100-sxm")
    full = dataclasses.replace(m, sliding_window=0, sliding_layers=0)
    for ctx in (500.0, 5000.0):
        t, f = DecodeTerms.of(m, gpu, 1, ctx), DecodeTerms.of(full, gpu, 1, ctx)
        share = (10 * ctx + 52 * min(ctx, 1024)) / (62 * ctx)
        assert t.kv_read_s == pytest.approx(f.kv_read_s * share)
        assert t.weight_read_s == f.weight_read_s


@pytest.mark.parametrize("model", ["gpt-oss-120b", "gemma-3-12b"])
def test_prefill_time_bounds_the_exact_sliding_cost(model: str) -> None:
    """t_P(l) = a_P l + b_P l^2 is never below the exact cost of a prompt of l tokens,
    c_a d (L_full l^2 + L_slide g(l)) + 2 N_active l over the peak, with g(l) = l^2 up
    to the window and 2 l W - W^2 beyond, whichever bound the workload picks."""
    m = load_model(model)
    cal = load_calibration(model, "h100-sxm")
    flops = 989.4e12 * cal.mfu
    W, full = m.sliding_window, m.layers - m.sliding_layers
    ls = np.arange(1, 20_000, 7, dtype=float)
    g = np.where(ls <= W, ls**2, 2 * ls * W - W**2)
    exact = (
        2 * m.active_params * ls + cal.c_attn * m.attn_width * (full * ls**2 + m.sliding_layers * g)
    ) / flops
    for mean_in, e2 in ((100.0, 100.0**2), (4000.0, 4000.0**2 * 1.5)):
        a_p, b_p = prefill_coefficients(m, cal, flops, mean_in, e2)
        assert np.all(a_p * ls + b_p * ls**2 >= exact * (1 - 1e-12))
    # short prompts: the quadratic form, exact within the window
    a_p, b_p = prefill_coefficients(m, cal, flops, 100.0, 100.0**2)
    assert a_p * 100 + b_p * 100**2 == pytest.approx(exact[ls == 99][0] * 100**2 / 99**2, rel=0.03)
    # long prompts: the linear form, within W / (2 l) of the exact sliding cost
    a_p, b_p = prefill_coefficients(m, cal, flops, 4000.0, 4000.0**2 * 1.5)
    i = np.searchsorted(ls, 8000)
    assert a_p * ls[i] + b_p * ls[i] ** 2 == pytest.approx(exact[i], rel=W / (2 * ls[i]))


def test_capacity_of_a_sliding_window_model_uses_the_larger_pool() -> None:
    m = load_model("gpt-oss-120b")
    spec = DeploymentSpec(
        model=m,
        gpu=load_gpu("h100-sxm"),
        calibration=load_calibration("gpt-oss-120b", "h100-sxm"),
        workload=Workload.fixed(2000, 500),
        serving=ServingStack(),
    )
    c = Coefficients.of(spec)
    flat = Coefficients.of(
        dataclasses.replace(spec, model=dataclasses.replace(m, sliding_window=0, sliding_layers=0))
    )
    ratio = m.kv_bytes_per_token / kv_bytes_per_pool_token(m, c.ctx_tokens)
    assert c.kv_pool_tokens == pytest.approx(flat.kv_pool_tokens * ratio, rel=1e-4)
    assert c.kv_pool_tokens > 1.7 * flat.kv_pool_tokens


def test_the_simulator_refuses_sliding_window_models() -> None:
    spec = DeploymentSpec(
        model=load_model("gemma-3-12b"),
        gpu=load_gpu("h100-sxm"),
        calibration=load_calibration("gemma-3-12b", "h100-sxm"),
        workload=Workload.fixed(1000, 200),
        serving=ServingStack(),
    )
    with pytest.raises(InputError) as e:
        SimTiming.of(spec)
    assert e.value.field == "model" and "sliding-window" in e.value.reason


def _row(model: str, precision: str) -> Measurement:
    return measurement(
        model,
        8.0,
        file="f.csv",
        task="chat",
        precision=precision,
        architecture="",
        output_tokens=500.0,
        output_weighted_tokens=500.0,
        prompt_tokens=100.0,
    )


def test_mxfp4_rows_describe_the_release_the_catalog_holds() -> None:
    ok, skipped = usable_rows([_row("openai/gpt-oss-20b", "mxfp4"), _row("qwen3-8b", "mxfp4")])
    assert [u.model.name for u in ok] == ["gpt-oss-20b"]
    assert ok[0].model.expert_bytes_per_param == 4.25 / 8
    (s,) = skipped
    assert "mxfp4 weights of qwen3-8b are not in the catalog" in s.reason


def test_four_bit_experts_read_at_their_own_efficiency() -> None:
    """gpt-oss's MXFP4 experts read at mbu_expert_fp4 when it is set, else at
    mbu_expert, else at mbu; bf16 experts never at mbu_expert_fp4."""
    gpu = load_gpu("b200")
    base = load_calibration("qwen3-8b", "b200")
    cal = dataclasses.replace(base, mbu=0.7, mbu_expert=0.5, mbu_expert_fp4=0.9)
    oss = DecodeTerms.of(load_model("gpt-oss-120b"), gpu, 1, 1000.0)
    qwen = DecodeTerms.of(load_model("qwen3-30b-a3b"), gpu, 1, 1000.0)
    assert oss.fp4_experts and not qwen.fp4_experts
    for terms, expected in ((oss, 0.9), (qwen, 0.5)):
        a = terms.alpha_g(cal)[0]
        b = terms.alpha_g(dataclasses.replace(cal, mbu_expert=1.0, mbu_expert_fp4=1.0))[0]
        assert a - b == pytest.approx(terms.expert_read_s * (1 / expected - 1))
    unset = dataclasses.replace(cal, mbu_expert_fp4=0.0)
    assert oss.alpha_g(unset)[0] == pytest.approx(
        oss.alpha_g(dataclasses.replace(cal, mbu_expert_fp4=0.5))[0]
    )
