"""Per-phase instance shapes (model/shapes.py, docs/shapes.md): parsing and refusals,
today's numbers at today's shape, each phase's quantities from its own shape, the KV
copies a tensor-parallel split keeps, and the configurations a GPU count allows."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from model.capacity import Coefficients, candidate_configs, evaluate, kv_memory_bytes
from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.shapes import InstanceShape, check_shape, parse_shape


def spec(model="qwen3-32b", gpu="h200", workload="fixed:1024:256", variant="admission", **serving):
    return resolve_spec(
        SpecRequest(model, gpu, workload, {"serving": serving} if serving else {},
                    model_variant=variant)
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("tp4", InstanceShape(4)),
        ("tp1,dp8,ep8", InstanceShape(1, 8, 8)),
        ("ep8, tp8", InstanceShape(8, 1, 8)),
        ("dp2,tp4", InstanceShape(4, 2)),
    ],
)
def test_shapes_parse_and_write_back(text, shape):
    assert parse_shape(text, "f") == shape
    assert parse_shape(shape.text, "f") == shape


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("tp4x", "not a part of a shape"),
        ("tensor4", "not a part of a shape"),
        ("tp0", "not a part of a shape"),
        ("tp4,tp2", "given twice"),
        ("dp2,ep2", "has no tp"),
        ("tp2,ep4", "does not divide the instance's 2 GPUs"),
        ("tp1024,dp2", "more than 1024"),
        ("", "not a part of a shape"),
    ],
)
def test_bad_shapes_name_the_field(text, words):
    with pytest.raises(InputError) as e:
        parse_shape(text, "decode_shape")
    assert e.value.field == "decode_shape" and words in e.value.reason


@pytest.mark.parametrize(
    ("model", "shape", "words"),
    [
        ("qwen3-32b", "tp3", "does not divide the model's 64 attention heads"),
        ("qwen3-32b", "tp2,ep2", "the model is dense"),
        ("qwen3-30b-a3b", "tp4,dp128,ep512", "more than the model's 128 routed experts"),
        ("deepseek-v3.1", "tp8,dp3,ep3", "does not divide the model's 256 routed experts"),
    ],
)
def test_a_shape_the_model_cannot_take_names_its_field(model, shape, words):
    with pytest.raises(InputError) as e:
        spec(model, decode_shape=shape)
    assert e.value.field == "decode_shape" and words in e.value.reason


def test_check_shape_accepts_the_split_the_model_allows():
    assert check_shape(InstanceShape(8, 1, 8), "f", 128, 256) == InstanceShape(8, 1, 8)


@pytest.mark.parametrize("variant", ["admission", "paper"])
@pytest.mark.parametrize(
    ("model", "gpu", "workload", "tp"),
    [
        ("qwen3-32b", "h200", "fixed:1024:256", 2),
        ("llama-3.1-70b", "h100-sxm", "azure-conv-2023", 4),
        ("qwen3-30b-a3b", "b200", "fixed:4096:512", 2),
        ("gemma-3-27b", "h200", "azure-code-2023", 2),
    ],
)
def test_both_shapes_at_the_tensor_parallel_are_todays_numbers(variant, model, gpu, workload, tp):
    """``tp<T>`` for both phases is ``tensor_parallel = T``, field for field."""
    today = spec(model, gpu, workload, variant, tensor_parallel=tp)
    shaped = spec(model, gpu, workload, variant, prefill_shape=f"tp{tp}", decode_shape=f"tp{tp}")
    assert dataclasses.asdict(Coefficients.of(shaped)) == dataclasses.asdict(Coefficients.of(today))
    n_p, n_d = candidate_configs(16 * tp, tp)
    a, b = evaluate(today, n_p, n_d), evaluate(shaped, n_p, n_d)
    for name in ("gpus", "capacity_rps", "power_w", "batch", "mu_p_rps", "mu_d_rps"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_each_phase_takes_its_quantities_from_its_own_shape():
    base = Coefficients.of(spec())
    two = Coefficients.of(spec(tensor_parallel=2))
    pre = Coefficients.of(spec(prefill_shape="tp2"))  # decode stays at tp1
    # prefill: twice the FLOP/s (SPEC 2.2's a_P, b_P halve) and twice the GPUs' power
    assert pre.a_p_s_per_token == two.a_p_s_per_token == base.a_p_s_per_token / 2
    assert pre.t_prefill_mean_s == two.t_prefill_mean_s
    for k in ("p0_prefill_w", "gamma_prefill_w", "psat_prefill_w"):
        assert getattr(pre, k) == getattr(two, k) == 2 * getattr(base, k)
    # decode: tp1's iteration, pool and power
    for k in ("alpha_s", "g_s_per_request", "kv_pool_tokens", "p0_decode_w", "psat_decode_w"):
        assert getattr(pre, k) == getattr(base, k), k
    assert (pre.prefill_gpus, pre.decode_gpus) == (2, 1)
    r = evaluate(spec(prefill_shape="tp2", decode_shape="tp4"), [1, 3], [2, 1])
    assert r.gpus.tolist() == [1 * 2 + 2 * 4, 3 * 2 + 1 * 4]


@pytest.mark.parametrize(
    ("model", "tp", "copies"),
    [
        ("llama-3.1-70b", 8, 1),  # 8 KV heads over 8 GPUs: one each, no copy
        ("llama-3.1-405b", 16, 2),  # 8 KV heads over 16 GPUs: each head on two
        ("deepseek-v3.1", 8, 8),  # MLA's one latent: on every GPU of the split
    ],
)
def test_the_pool_counts_the_kv_copies_of_a_tensor_parallel_split(model, tp, copies):
    s = spec(model, "h200", "fixed:2048:256", prefill_shape=f"tp{tp}", decode_shape=f"tp{tp}")
    c = Coefficients.of(s)
    free = kv_memory_bytes(s.model, s.gpu, tp, s.serving.mem_fraction)
    assert c.kv_pool_tokens == math.floor(free / (s.model.kv_bytes_per_token * copies))
    # data-parallel attention: each replica holds its own requests, no further copy
    if s.model.experts:
        dp = Coefficients.of(
            spec(model, "h200", "fixed:2048:256", prefill_shape="tp8", decode_shape="tp1,dp8,ep8")
        )
        free_dp = kv_memory_bytes(s.model, s.gpu, 1, s.serving.mem_fraction, 8)
        assert dp.kv_pool_tokens == math.floor(free_dp / s.model.kv_bytes_per_token)
        assert dp.kv_pool_tokens > c.kv_pool_tokens


@pytest.mark.parametrize(("gp", "gd", "max_gpus"), [(1, 1, 16), (2, 4, 24), (8, 4, 40), (4, 8, 12)])
def test_candidates_are_every_pair_the_gpu_count_allows(gp, gd, max_gpus):
    n_p, n_d = candidate_configs(max_gpus, gp, gd)
    want = [
        (p, d)
        for p in range(1, max_gpus + 1)
        for d in range(1, max_gpus + 1)
        if p * gp + d * gd <= max_gpus
    ]
    assert list(zip(n_p.tolist(), n_d.tolist(), strict=True)) == want


def test_shapes_whose_gpus_exceed_max_gpus_name_it():
    with pytest.raises(InputError) as e:
        candidate_configs(10, 4, 8)
    assert e.value.field == "max_gpus" and "at least 12" in e.value.reason


def test_kernel_path_composes_each_phase_at_its_shape():
    from tests.conftest import installed_kernel_tables

    installed_kernel_tables()
    kw = {"performance": "kernels", "framework": "vllm"}

    def kspec(**serving):
        over = {"serving": serving} if serving else {}
        return resolve_spec(SpecRequest("qwen3-32b", "h200", "fixed:1024:256", over, **kw))

    two, one = Coefficients.of(kspec(tensor_parallel=2)), Coefficients.of(kspec())
    mixed = Coefficients.of(kspec(prefill_shape="tp2"))
    assert (mixed.a_p_s_per_token, mixed.b_p_s_per_token2) == (
        two.a_p_s_per_token,
        two.b_p_s_per_token2,
    )
    assert (mixed.alpha_s, mixed.g_s_per_request) == (one.alpha_s, one.g_s_per_request)
    assert mixed.a_p_s_per_token < one.a_p_s_per_token  # TP2 prefills faster


# -- the front over shapes ---------------------------------------------------------------


class Question:
    """A front question (model.operations.FrontQuestion) with shapes."""

    def __init__(self, max_gpus=24, prefill_shapes=None, decode_shapes=None, **kw):
        self.max_gpus = max_gpus
        self.required_rps = kw.get("required_rps")
        self.headroom = kw.get("headroom", 1.0)
        self.budget_w = kw.get("budget_w")
        self.prefill_settings = self.decode_settings = None
        self.prefill_shapes, self.decode_shapes = prefill_shapes, decode_shapes


def test_the_front_over_shapes_is_the_front_of_every_pairs_configurations():
    from model.operations import front_of, front_over_shapes, with_shapes
    from model.pareto import front_indices

    s = spec("llama-3.1-70b", "h200", "azure-conv-2023")
    q = Question(32, ["tp2", "tp4", "tp8"], ["tp4", "tp8"], required_rps=20.0, budget_w=9e3)
    out = front_over_shapes(s, q, False)
    assert out["prefill_shapes"] == ["tp2", "tp4", "tp8"] and out["decode_shapes"] == ["tp4", "tp8"]
    # every pair's configurations, each named by its shapes, in pair order
    want = []
    for ps in ("tp2", "tp4", "tp8"):
        for ds in ("tp4", "tp8"):
            one = front_of(with_shapes(s, ps, ds), Question(32), False)
            want += [c | {"prefill_shape": ps, "decode_shape": ds} for c in one["configs"]]
    assert out["configs"] == want
    mu = np.array([c["capacity_rps"] for c in want])
    power = np.array([c["power_w"] for c in want])
    brute = [want[i] for i in front_indices(mu, power)]
    key = lambda c: (c["capacity_rps"], c["power_w"])  # noqa: E731
    assert sorted(map(key, out["front"])) == sorted(map(key, brute))
    assert {(c["prefill_shape"], c["decode_shape"]) for c in out["front"]} > {("tp2", "tp4")}
    # the selections over the whole front
    fit = [c for c in out["front"] if c["capacity_rps"] >= 20.0]
    assert out["min_power_for_rate"]["config"]["power_w"] == min(c["power_w"] for c in fit)
    within = [c for c in out["front"] if c["power_w"] <= 9e3]
    best = out["max_capacity_under_budget"]["config"]
    assert best["capacity_rps"] == max(c["capacity_rps"] for c in within)


def test_auto_shapes_are_the_splits_the_model_and_gpus_allow():
    from model.operations import auto_shapes

    assert auto_shapes(spec("llama-3.1-70b"), 64) == ["tp1", "tp2", "tp4", "tp8"]
    assert auto_shapes(spec("llama-3.1-70b"), 3) == ["tp1", "tp2"]  # one GPU left to decode
    moe = auto_shapes(spec("qwen3-30b-a3b"), 64)
    assert moe == [
        "tp1", "tp2", "tp2,ep2", "tp1,dp2,ep2", "tp4", "tp4,ep4", "tp1,dp4,ep4",
        "tp8", "tp8,ep8", "tp1,dp8,ep8",
    ]  # fmt: skip


def test_shape_pairs_that_do_not_fit_are_listed_and_bad_shapes_named():
    from model.operations import front_over_shapes

    s = spec("deepseek-v3.1", "h200", "fixed:8192:1024")
    out = front_over_shapes(s, Question(20, ["tp1", "tp8"], ["tp8", "tp16"]), False)
    assert {(c["prefill_shape"], c["decode_shape"]) for c in out["configs"]} == {("tp8", "tp8")}
    reasons = {(x["prefill_shape"], x["decode_shape"]): x["reason"] for x in out["shapes_skipped"]}
    assert "do not fit" in reasons[("tp1", "tp8")] or "short of" in reasons[("tp1", "tp8")]
    assert "max_gpus" in reasons[("tp8", "tp16")]  # 8 + 16 GPUs > 20
    with pytest.raises(InputError) as e:
        front_over_shapes(s, Question(24, ["tp8", "tp8x"], None), False)
    assert e.value.field == "prefill_shapes[1]"
    with pytest.raises(InputError) as e:
        front_over_shapes(s, Question(8, ["tp8"], ["tp8"]), False)
    assert e.value.field == "max_gpus"


def test_a_prefill_instance_of_its_own_shape_must_hold_its_weights():
    from model.errors import DoesNotFitError

    with pytest.raises(DoesNotFitError) as e:
        Coefficients.of(spec("llama-3.1-405b", "h200", "fixed:2048:256", decode_shape="tp8"))
    assert e.value.field == "prefill_shape" and "tp1 of h200" in e.value.reason
    fits = Coefficients.of(
        spec("llama-3.1-405b", "h200", "fixed:2048:256", prefill_shape="tp8", decode_shape="tp8")
    )
    assert fits.prefill_gpus == 8
