"""Tests of the built-in catalog and of user overrides (SPEC 2.1, 2.5)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import model.catalog as model_catalog
from model.catalog import (
    Calibration,
    GpuSpec,
    ModelArch,
    ServingStack,
    apply_overrides,
    catalog_summary,
    find_release,
    list_gpus,
    list_models,
    load_calibration,
    load_gpu,
    load_model,
    load_override_file,
    parse_set_flags,
)
from model.errors import InputError, NotFoundError

# SPEC 2.1, calibration table (paper Tab. 3, H200 + SGLang 0.5.9, Qwen3-32B), in SI units.
PAPER_TAB3 = {
    "mfu": 0.67,
    "mbu": 0.77,
    "c_attn": 2.17,
    "t_iter_s": 1.00e-3,
    "t_req_s": 0.062e-3,
    "p0_prefill_w": 133.0,
    "gamma_prefill_w": 566.0,
    "psat_prefill_w": 692.0,
    "p0_decode_w": 448.0,
    "gamma_decode_w": 458.0,
    "psat_decode_w": 678.0,
    "p_idle_w": 120.0,
}
POWER_FIELDS = [name for name in PAPER_TAB3 if name.endswith("_w")]
RATE_FIELDS = [name for name in PAPER_TAB3 if not name.endswith("_w")]


# ---------------------------------------------------------------------------
# Models


def test_qwen3_32b_matches_spec_table():
    # SPEC 2.1: N = 32.8e9, L = 64, d = 64*128 = 8192, h_kv = 8, d_head = 128, bf16,
    # kappa = 2 * 2 * 64 * 8 * 128 = 262,144 B/token.
    arch = load_model("qwen3-32b")
    assert arch.params == 32.8e9
    assert (arch.layers, arch.n_heads, arch.n_kv_heads, arch.head_dim) == (64, 64, 8, 128)
    assert arch.attn_width == 8192
    assert arch.kv_bytes_per_token == 262_144
    assert arch.weight_bytes == pytest.approx(65.6e9, rel=1e-12)


# (num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, hidden_size)
# from each model's Hugging Face config.json; head_dim = hidden_size /
# num_attention_heads for Llama (4096/32, 8192/64, 16384/128);
# Mistral-Small-24B-Instruct-2501 gives head_dim = 128 itself.
HF_CONFIGS = {
    "qwen3-32b": (64, 64, 8, 128, 5120),
    "qwen3-14b": (40, 40, 8, 128, 5120),
    "qwen3-8b": (36, 32, 8, 128, 4096),
    "llama-3.1-8b": (32, 32, 8, 128, 4096),
    "llama-3.1-70b": (80, 64, 8, 128, 8192),
    "llama-3.3-70b": (80, 64, 8, 128, 8192),
    "llama-3.1-405b": (126, 128, 8, 128, 16384),
    "mistral-small-24b": (40, 32, 8, 128, 5120),
    "qwen3-30b-a3b": (48, 32, 4, 128, 2048),
    "qwen3-235b-a22b": (94, 64, 4, 128, 4096),
    "qwen3-coder-480b-a35b": (62, 96, 8, 128, 6144),
    # MLA: one latent per token shared by the heads (n_kv_heads 1); q/k head dim 192
    "deepseek-v3.1": (61, 128, 1, 192, 7168),
    "deepseek-v3.1-nvfp4": (61, 128, 1, 192, 7168),
    "kimi-k2.5": (61, 64, 1, 192, 7168),
    "kimi-k2.5-nvfp4": (61, 64, 1, 192, 7168),
    "glm-5": (78, 64, 1, 256, 6144),
    "glm-5-nvfp4": (78, 64, 1, 256, 6144),
    "minimax-m2.5": (62, 48, 8, 128, 3072),
    "minimax-m2.5-nvfp4": (62, 48, 8, 128, 3072),
    "qwen3.5-397b-a17b": (60, 32, 2, 256, 4096),
    "qwen3.5-397b-a17b-nvfp4": (60, 32, 2, 256, 4096),
    "llama-4-scout": (48, 40, 8, 128, 5120),
    "llama-4-maverick": (48, 40, 8, 128, 5120),
    # sliding-window attention (alternating 128 tokens / every sixth layer full)
    "gpt-oss-120b": (36, 64, 8, 64, 2880),
    "gpt-oss-20b": (24, 64, 8, 64, 2880),
    "gemma-3-12b": (48, 16, 8, 256, 3840),
    "gemma-3-27b": (62, 32, 16, 128, 5376),
}
# (experts, experts_per_token, MoE layers, moe_intermediate_size) from the same configs
MOE_CONFIGS = {
    "qwen3-30b-a3b": (128, 8, 48, 768),
    "qwen3-235b-a22b": (128, 8, 94, 1536),
    "qwen3-coder-480b-a35b": (160, 8, 62, 2560),
    "deepseek-v3.1": (256, 8, 58, 2048),
    "deepseek-v3.1-nvfp4": (256, 8, 58, 2048),
    "kimi-k2.5": (384, 8, 60, 2048),
    "kimi-k2.5-nvfp4": (384, 8, 60, 2048),
    "glm-5": (256, 8, 75, 2048),
    "glm-5-nvfp4": (256, 8, 75, 2048),
    "minimax-m2.5": (256, 8, 62, 1536),
    "minimax-m2.5-nvfp4": (256, 8, 62, 1536),
    "qwen3.5-397b-a17b": (512, 10, 60, 1024),
    "qwen3.5-397b-a17b-nvfp4": (512, 10, 60, 1024),
    "llama-4-scout": (16, 1, 48, 8192),
    "llama-4-maverick": (128, 1, 24, 8192),
    "gpt-oss-120b": (128, 4, 36, 2880),
    "gpt-oss-20b": (32, 4, 24, 2880),
}
#: gpt-oss's experts have biases: gate_up (2 x intermediate) and down (hidden)
EXPERT_BIASES = {"gpt-oss-120b": 2 * 2880 + 2880, "gpt-oss-20b": 2 * 2880 + 2880}


def test_catalog_lists_exactly_the_documented_models():
    assert list_models() == sorted(HF_CONFIGS)


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_model_architecture_matches_hf_config(name):
    arch = load_model(name)
    got = (arch.layers, arch.n_heads, arch.n_kv_heads, arch.head_dim, arch.hidden_size)
    assert got == HF_CONFIGS[name]
    # bf16, except DeepSeek's and MiniMax's weights, released in FP8
    assert arch.bytes_per_param == (1.0 if name in ("deepseek-v3.1", "minimax-m2.5") else 2.0)
    assert arch.kv_bytes_per_elem == 2.0
    assert "config" in arch.source
    if name in MOE_CONFIGS:
        experts, k, layers, width = MOE_CONFIGS[name]
        assert (arch.experts, arch.experts_per_token, arch.moe_layers) == (experts, k, layers)
        # SwiGLU: 3 matrices (and gpt-oss's biases)
        assert arch.expert_params == 3 * arch.hidden_size * width + EXPERT_BIASES.get(name, 0)
        assert arch.active_params < arch.params
    else:
        assert arch.experts == 0 and arch.active_params == arch.params


def test_attention_width_is_not_hidden_size_for_mistral_small():
    # Mistral-Small-24B config.json: hidden_size 5120, 32 heads of head_dim 128 -> d = 4096.
    arch = load_model("mistral-small-24b")
    assert arch.attn_width == 4096
    assert arch.kv_bytes_per_token == 2 * 2 * 40 * 8 * 128


def test_model_lookup_ignores_case_and_spaces():
    assert load_model(" Qwen3-32B ") == load_model("qwen3-32b")


def test_models_are_found_by_their_hugging_face_id():
    assert load_model("Qwen/Qwen3-8B").name == "qwen3-8b"
    assert load_model("meta-llama/Llama-3.1-70B-Instruct").name == "llama-3.1-70b"
    assert load_model("meta-llama/llama-3.3-70b-instruct").name == "llama-3.3-70b"
    with pytest.raises(NotFoundError):
        load_model("Qwen/Qwen3-8B-Base")


def test_unknown_model_lists_known_names():
    with pytest.raises(NotFoundError) as info:
        load_model("gpt-5")
    assert info.value.field == "model"
    assert info.value.known == list_models()
    assert "qwen3-32b" in str(info.value)


def test_unknown_gpu_lists_known_names():
    with pytest.raises(NotFoundError) as info:
        load_gpu("tpu-v5")
    assert info.value.field == "gpu"
    assert info.value.known == [
        "a100-80gb", "a100-pcie-80gb", "b200", "b300", "gb200", "gb300", "h100-sxm", "h200"
    ]  # fmt: skip


# ---------------------------------------------------------------------------
# GPUs


def test_h200_in_si_units():
    # SPEC 2.1: pi = 989e12 FLOP/s, beta = 4.8e12 B/s, M = 141e9 B; NVIDIA H200 SXM TDP 700 W.
    gpu = load_gpu("h200")
    assert gpu.flops_per_s == 989e12
    assert gpu.mem_bw_bytes_per_s == 4.8e12
    assert gpu.mem_bytes == 141e9
    assert gpu.tdp_w == 700.0


@pytest.mark.parametrize(
    ("name", "flops", "bandwidth", "memory", "tdp"),
    [
        # NVIDIA datasheets: A100 80GB SXM and PCIe, H100 SXM, HGX B200 (per GPU, 1,000 W).
        ("a100-80gb", 312e12, 2.039e12, 80e9, 400.0),
        ("a100-pcie-80gb", 312e12, 1.935e12, 80e9, 300.0),  # A100 80GB PCIe
        ("h100-sxm", 989e12, 3.35e12, 80e9, 700.0),
        ("b200", 2250e12, 8e12, 180e9, 1000.0),
        # Blackwell Ultra datasheet per-GPU table: HGX B300 2,250 TFLOPS BF16 dense,
        # 270 GB, 7.7 TB/s, 1,100 W; GB200 NVL72 (per GPU: 360 PF sparse / 72 / 2,
        # 13.4 TB / 72, 576 TB/s / 72), 1,200 W; GB300 NVL72 the same compute and
        # bandwidth, 279 GB, 1,400 W.
        ("b300", 2250e12, 7.7e12, 270e9, 1100.0),
        ("gb200", 2500e12, 8e12, 186e9, 1200.0),
        ("gb300", 2500e12, 8e12, 279e9, 1400.0),
    ],
)
def test_vendor_units_converted_once_to_si(name, flops, bandwidth, memory, tdp):
    gpu = load_gpu(name)
    assert (gpu.flops_per_s, gpu.mem_bw_bytes_per_s, gpu.mem_bytes, gpu.tdp_w) == (
        flops,
        bandwidth,
        memory,
        tdp,
    )
    assert "NVIDIA" in gpu.source


# ---------------------------------------------------------------------------
# Calibrations


def test_measured_calibration_equals_paper_table():
    cal = load_calibration("qwen3-32b", "h200")
    assert cal.measured is True
    for name, value in PAPER_TAB3.items():
        assert getattr(cal, name) == pytest.approx(value, rel=1e-12), name
    assert cal.source == "paper Tab. 3 (H200 + SGLang 0.5.9, Qwen3-32B)"


def test_estimated_calibration_scales_power_by_tdp_ratio():
    # Rule: rates copied from the measured set, power scaled by TDP(A100)/TDP(H200) = 400/700.
    cal = load_calibration("qwen3-8b", "a100-80gb")
    assert cal.measured is False
    for name in RATE_FIELDS:
        assert getattr(cal, name) == pytest.approx(PAPER_TAB3[name], rel=1e-12), name
    for name in POWER_FIELDS:
        assert getattr(cal, name) == pytest.approx(PAPER_TAB3[name] * 400 / 700), name
    assert cal.p0_prefill_w == pytest.approx(76.0)  # 133 * 4/7
    assert "ESTIMATED" in cal.source and "400 W / 700 W" in cal.source


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_shipped_measured_decode_calibration(gpu):
    """H100 and B200 take the decode parameters fitted to the ML.ENERGY measurements
    (model/data/measured_calibrations.json, scripts/fit_calibrations.py); what those
    measurements cannot give (prefill, idle) follows the estimation rule."""
    shipped = json.loads(
        (Path(model_catalog.__file__).parent / "data" / "measured_calibrations.json").read_text()
    )
    (entry,) = [e for e in shipped["calibrations"] if e["gpu"] == gpu]
    tdp = {"h100-sxm": 700, "b200": 1000}[gpu]
    for model in ("qwen3-8b", "llama-3.1-70b"):
        cal = load_calibration(model, gpu)
        assert cal.measured is True
        for name in entry["fitted"]:
            assert getattr(cal, name) == entry["calibration"][name], name
        assert cal.mfu == PAPER_TAB3["mfu"] and cal.c_attn == PAPER_TAB3["c_attn"]
        assert cal.p0_prefill_w == pytest.approx(PAPER_TAB3["p0_prefill_w"] * tdp / 700)
        assert "MEASURED decode" in cal.source and "ESTIMATED" in cal.source


def test_estimated_calibration_on_reference_gpu_keeps_power():
    cal = load_calibration("llama-3.1-70b", "h200")
    assert cal.measured is False
    assert dataclasses.replace(cal, measured=True, source="") == dataclasses.replace(
        load_calibration("qwen3-32b", "h200"), source=""
    )


def test_estimated_calibration_scales_down_for_a100():
    cal = load_calibration("qwen3-14b", "a100-80gb")
    assert cal.p_idle_w == pytest.approx(120.0 * 400 / 700)
    assert cal.psat_decode_w == pytest.approx(678.0 * 400 / 700)


def test_calibration_for_unknown_pair_names_the_unknown_part():
    with pytest.raises(NotFoundError) as info:
        load_calibration("qwen3-32b", "mi300x")
    assert info.value.field == "gpu"


def test_catalog_summary_is_json_and_covers_every_pair():
    summary = catalog_summary()
    json.dumps(summary)  # JSON-able
    assert sorted(summary["models"]) == list_models()
    assert sorted(summary["gpus"]) == list_gpus()
    assert summary["models"]["qwen3-32b"]["kv_bytes_per_token"] == 262_144
    assert summary["gpus"]["h200"]["mem_bytes"] == 141e9
    pairs = summary["calibrations"]
    assert len(pairs) == len(list_models()) * len(list_gpus())
    measured = [(p["model"], p["gpu"]) for p in pairs if p["measured"]]
    # the paper's pair, and every model on the GPUs with shipped measured decode sets
    shipped = [(m, g) for m in list_models() for g in ("b200", "h100-sxm")]
    assert sorted(measured) == sorted([("qwen3-32b", "h200"), *shipped])
    assert all(set(p) == {"model", "gpu", "measured", "source"} and p["source"] for p in pairs)


# ---------------------------------------------------------------------------
# Serving stack


def test_serving_stack_defaults_follow_spec():
    # SPEC 2.1 [fixed here]: f_mem = 0.90, R = 512, u = 0; SPEC 2.1 dispatch round-robin.
    stack = ServingStack()
    assert stack.mem_fraction == 0.90
    assert stack.reserved_tokens == 512
    assert stack.unused_fraction == 0.0
    assert stack.kv_pool_tokens is None
    assert stack.dispatch == "round_robin"
    assert stack.tensor_parallel == 1


# ---------------------------------------------------------------------------
# Validation of directly built inputs


def _arch(**changes):
    base = {
        "name": "m",
        "params": 1e9,
        "layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "head_dim": 8,
    }
    return ModelArch(**{**base, **changes})


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: _arch(params=0), "params"),
        (lambda: _arch(layers=0), "layers"),
        (lambda: _arch(n_kv_heads=3), "n_kv_heads"),
        (lambda: _arch(head_dim=2.5), "head_dim"),
        (lambda: _arch(params=math.inf), "params"),
        (lambda: GpuSpec("g", math.nan, 1.0, 1.0, 1.0), "flops_per_s"),
        (lambda: GpuSpec("g", 1.0, 1.0, -1.0, 1.0), "mem_bytes"),
        (lambda: dataclasses.replace(load_calibration("qwen3-32b", "h200"), mbu=0.0), "mbu"),
        (
            lambda: dataclasses.replace(load_calibration("qwen3-32b", "h200"), psat_decode_w=400.0),
            "psat_decode_w",
        ),
        (
            lambda: dataclasses.replace(load_calibration("qwen3-32b", "h200"), t_req_s=-1e-3),
            "t_req_s",
        ),
        (lambda: ServingStack(mem_fraction=1.5), "mem_fraction"),
        (lambda: ServingStack(unused_fraction=1.0), "unused_fraction"),
        (lambda: ServingStack(reserved_tokens=-1), "reserved_tokens"),
        (lambda: ServingStack(kv_pool_tokens=0), "kv_pool_tokens"),
        (lambda: ServingStack(dispatch="least_loaded"), "dispatch"),
        (lambda: ServingStack(tensor_parallel=0), "tensor_parallel"),
    ],
)
def test_invalid_input_raises_input_error_naming_field(build, field):
    with pytest.raises(InputError) as info:
        build()
    assert info.value.field == field


def test_calibration_rejects_non_bool_measured():
    with pytest.raises(InputError) as info:
        Calibration(**PAPER_TAB3, measured="yes")  # type: ignore[arg-type]
    assert info.value.field == "measured"


# ---------------------------------------------------------------------------
# Overrides


def test_apply_overrides_returns_validated_copy():
    cal = load_calibration("qwen3-32b", "h200")
    new = apply_overrides(cal, {"mfu": 0.6, "t_iter_s": 2e-3}, "calibration")
    assert (new.mfu, new.t_iter_s) == (0.6, 2e-3)
    assert new.mbu == cal.mbu
    assert cal.mfu == 0.67  # the catalog entry is untouched
    assert load_calibration("qwen3-32b", "h200").mfu == 0.67


def test_apply_overrides_converts_integral_float_to_int():
    stack = apply_overrides(ServingStack(), {"kv_pool_tokens": 2e5}, "serving")
    assert stack.kv_pool_tokens == 200_000 and isinstance(stack.kv_pool_tokens, int)
    assert apply_overrides(stack, {"kv_pool_tokens": None}, "serving").kv_pool_tokens is None


def test_overrides_from_toml_file(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text(
        "[calibration]\nmfu = 0.6\np_idle_w = 0\n\n"
        '[serving]\nkv_pool_tokens = 200000\ndispatch = "random"\n\n'
        "[gpu]\nmem_bytes = 144e9\n",
        encoding="utf-8",
    )
    overrides = load_override_file(str(path))
    assert overrides == {
        "calibration": {"mfu": 0.6, "p_idle_w": 0},
        "serving": {"kv_pool_tokens": 200000, "dispatch": "random"},
        "gpu": {"mem_bytes": 144e9},
    }
    cal = apply_overrides(
        load_calibration("qwen3-32b", "h200"), overrides["calibration"], "calibration"
    )
    stack = apply_overrides(ServingStack(), overrides["serving"], "serving")
    gpu = apply_overrides(load_gpu("h200"), overrides["gpu"], "gpu")
    assert (cal.mfu, cal.p_idle_w) == (0.6, 0.0)
    assert (stack.kv_pool_tokens, stack.dispatch) == (200000, "random")
    assert gpu.mem_bytes == 144e9


def test_overrides_from_json_file(tmp_path):
    path = tmp_path / "site.json"
    path.write_text(
        json.dumps(
            {"model": {"params": 33e9, "bytes_per_param": 1}, "serving": {"mem_fraction": 0.85}}
        ),
        encoding="utf-8",
    )
    overrides = load_override_file(str(path))
    arch = apply_overrides(load_model("qwen3-32b"), overrides["model"], "model")
    stack = apply_overrides(ServingStack(), overrides["serving"], "serving")
    assert arch.weight_bytes == 33e9  # fp8 weights: 1 byte per parameter
    assert arch.kv_bytes_per_token == 262_144  # KV dtype unchanged
    assert stack.mem_fraction == 0.85


def test_overrides_from_set_flags():
    overrides = parse_set_flags(
        [
            "calibration.mfu=0.6",
            "serving.kv_pool_tokens=200000",
            "serving.dispatch=random",
            "calibration.measured=false",
            "calibration.mfu=0.55",  # a later flag for the same field wins
        ]
    )
    assert overrides == {
        "calibration": {"mfu": 0.55, "measured": False},
        "serving": {"kv_pool_tokens": 200000, "dispatch": "random"},
    }
    stack = apply_overrides(ServingStack(), overrides["serving"], "serving")
    assert (stack.kv_pool_tokens, stack.dispatch) == (200000, "random")


@pytest.mark.parametrize(
    ("section", "values", "field"),
    [
        ("calibration", {"mfu": 1.5}, "calibration.mfu"),
        ("calibration", {"mfu": math.nan}, "calibration.mfu"),
        ("calibration", {"mfu": "nan"}, "calibration.mfu"),
        ("calibration", {"c_attn": math.inf}, "calibration.c_attn"),
        ("calibration", {"measured": 1}, "calibration.measured"),
        ("calibration", {"psat_prefill_w": 100.0}, "calibration.psat_prefill_w"),
        ("model", {"layers": 2.5}, "model.layers"),
        ("model", {"n_kv_heads": 7}, "model.n_kv_heads"),
        ("serving", {"kv_pool_tokens": 0}, "serving.kv_pool_tokens"),
        ("serving", {"dispatch": "fifo"}, "serving.dispatch"),
        ("serving", {"tensor_parallel": True}, "serving.tensor_parallel"),
    ],
)
def test_invalid_override_names_the_field(section, values, field):
    targets = {
        "calibration": load_calibration("qwen3-32b", "h200"),
        "model": load_model("qwen3-32b"),
        "serving": ServingStack(),
    }
    with pytest.raises(InputError) as info:
        apply_overrides(targets[section], values, section)
    assert info.value.field == field


def test_unknown_override_field_lists_known_fields():
    with pytest.raises(InputError) as info:
        apply_overrides(load_calibration("qwen3-32b", "h200"), {"mfu_prefill": 0.5}, "calibration")
    assert info.value.field == "calibration.mfu_prefill"
    assert "unknown field; known:" in info.value.reason and "mfu" in info.value.reason


def test_nan_from_set_flag_is_rejected_on_apply():
    for text in ("NaN", "nan", "Infinity"):
        overrides = parse_set_flags([f"calibration.mbu={text}"])
        with pytest.raises(InputError) as info:
            apply_overrides(
                load_calibration("qwen3-32b", "h200"), overrides["calibration"], "calibration"
            )
        assert info.value.field == "calibration.mbu"


@pytest.mark.parametrize(
    ("items", "field"),
    [
        (["calibration.mfu"], "set"),
        (["mfu=0.5"], "set"),
        (["calibration.mfu.x=0.5"], "set"),
        (["hardware.mfu=0.5"], "hardware"),
        (["serving.pool=1"], "serving.pool"),
    ],
)
def test_malformed_set_flags(items, field):
    with pytest.raises(InputError) as info:
        parse_set_flags(items)
    assert info.value.field == field


def test_override_file_with_unknown_section_or_field(tmp_path):
    bad_section = tmp_path / "a.toml"
    bad_section.write_text("[hardware]\nmfu = 0.5\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_override_file(str(bad_section))
    assert info.value.field == "hardware"
    assert "calibration" in info.value.reason

    bad_field = tmp_path / "b.json"
    bad_field.write_text('{"gpu": {"tflops": 1000}}', encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_override_file(str(bad_field))
    assert info.value.field == "gpu.tflops"


@pytest.mark.parametrize(
    ("name", "text"),
    [("a.yaml", "calibration: {}"), ("b.toml", "[calibration\n"), ("c.json", "[1, 2]")],
)
def test_override_file_bad_format(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_override_file(str(path))
    assert info.value.field == "override_file"


def test_override_file_missing(tmp_path):
    with pytest.raises(InputError) as info:
        load_override_file(str(tmp_path / "absent.toml"))
    assert info.value.field == "override_file"


def test_peak_flops_follow_the_models_precision():
    """Datasheet dense peaks (model/data/gpus.json): H100 SXM BF16 989, FP8 1,979
    TFLOPS; B200 FP8 4,500, FP4 9,000; the A100 has no FP8 Tensor Cores."""
    bf16 = load_model("llama-3.1-70b")
    fp8 = dataclasses.replace(bf16, bytes_per_param=1.0)
    nvfp4 = dataclasses.replace(bf16, bytes_per_param=4.5 / 8)
    h100, a100, b200 = load_gpu("h100-sxm"), load_gpu("a100-80gb"), load_gpu("b200")
    assert (bf16.compute_precision, fp8.compute_precision) == ("bf16", "fp8")
    assert h100.peak_flops(bf16) == 989e12 and h100.peak_flops(fp8) == 1979e12
    assert a100.peak_flops(fp8) == a100.flops_per_s == 312e12
    assert b200.peak_flops(fp8) == 4500e12 and b200.peak_flops(nvfp4) == 9000e12
    assert h100.peak_flops(nvfp4) == 1979e12  # no FP4 Tensor Cores: the FP8 peak
    # gpt-oss: MXFP4 experts, bf16 elsewhere -> the BF16 peak
    assert h100.peak_flops(load_model("gpt-oss-120b")) == 989e12


def test_blackwell_peaks_per_precision():
    """Dense peaks per GPU (model/data/gpus.json): HGX B300 FP8 4,500 and NVFP4 14,000
    TFLOPS; GB200 NVL72 per GPU FP8 5,000 and FP4 10,000 (720 and 1,440 PFLOPS with
    sparsity per rack of 72); GB300 NVL72 per GPU FP8 5,000 and FP4 15,000 (1,080
    PFLOPS dense per rack); each with NVLink 1.8 TB/s, 900 GB/s per direction."""
    nvfp4 = load_model("kimi-k2.5")
    fp8 = load_model("minimax-m2.5")
    dense_fp4 = dataclasses.replace(load_model("llama-3.1-70b"), bytes_per_param=4.5 / 8)
    for name, (f8, f4) in {
        "b300": (4500e12, 14000e12),
        "gb200": (5000e12, 10000e12),
        "gb300": (5000e12, 15000e12),
    }.items():
        gpu = load_gpu(name)
        assert (gpu.fp8_flops_per_s, gpu.fp4_flops_per_s) == (f8, f4)
        assert gpu.peak_flops(fp8) == f8 and gpu.peak_flops(dense_fp4) == f4
        # 4-bit experts alone compute at the activations' bf16 (as gpt-oss's)
        assert gpu.peak_flops(nvfp4) == gpu.flops_per_s
        assert gpu.link_bw_bytes_per_s == 900e9
        assert "datasheet" in gpu.source


# ---------------------------------------------------------------------------
# Entries against AIConfigurator's copies of the public configs and system specs
# (the aiconfigurator-core package; skipped without it)


def _aiconfigurator_folder() -> Path:
    pytest.importorskip("aiconfigurator_core")
    from model.performance.engine import installed_kernels

    data = installed_kernels()
    if data is None:
        pytest.skip("aiconfigurator-core ships no systems/data folder")
    return Path(data).parent.parent  # the package: systems/data -> the package


def _hf_config(name: str) -> dict:
    path = _aiconfigurator_folder() / "model_configs" / f"{name.replace('/', '--')}_config.json"
    if not path.exists():
        pytest.skip(f"{path.name} is not in this aiconfigurator-core")
    config = json.loads(path.read_text())
    return config.get("text_config", config)


def _params_from_config(c: dict) -> tuple[int, int]:
    """(all, active) parameters of a DeepSeek-V3-like (MLA, GLM-5's sparse-attention
    indexer) or GQA mixture-of-experts config: embeddings and LM head untied, SwiGLU
    MLPs, routers with a bias, RMSNorm weights; next-token modules left out."""
    h = c["hidden_size"]
    heads = c["num_attention_heads"]
    if "kv_lora_rank" in c:
        q, kv, rope = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"]
        nope, v = c["qk_nope_head_dim"], c["v_head_dim"]
        attn = h * q + q + q * heads * (nope + rope) + h * (kv + rope) + kv
        attn += kv * heads * (nope + v) + heads * v * h
        if "index_n_heads" in c:  # wq_b, wk, k_norm (weight and bias), weights_proj
            idx = c["index_head_dim"]
            attn += q * c["index_n_heads"] * idx + h * idx + 2 * idx + h * c["index_n_heads"]
    else:
        d, kvh = c["head_dim"], c["num_key_value_heads"]
        attn = 2 * h * heads * d + 2 * h * kvh * d
        if c.get("use_qk_norm"):
            attn += heads * d + kvh * d
    experts = c.get("n_routed_experts") or c["num_local_experts"]
    width = c.get("moe_intermediate_size") or c["intermediate_size"]
    shared = c.get("n_shared_experts", 0) * 3 * h * width
    dense_layers = c.get("first_k_dense_replace", 0)
    moe_layers = c["num_hidden_layers"] - dense_layers
    expert = 3 * h * width
    total = c["num_hidden_layers"] * (attn + 2 * h) + dense_layers * 3 * h * c["intermediate_size"]
    total += moe_layers * (h * experts + experts + shared + experts * expert)
    total += 2 * c["vocab_size"] * h + h
    unused = moe_layers * (experts - c["num_experts_per_tok"]) * expert
    return total, total - unused


#: catalog entry -> (its config.json, the model card's total parameters and the half
#: unit of its rounding: 229B, 1T, 744B, 671B)
CONFIG_MODELS = {
    "minimax-m2.5": ("MiniMaxAI/MiniMax-M2.5", 229e9, 0.5e9),
    "kimi-k2.5": ("moonshotai/Kimi-K2.5", 1e12, 0.05e12),
    "glm-5": ("zai-org/GLM-5", 744e9, 0.5e9),
    "deepseek-v3.1": ("deepseek-ai/DeepSeek-R1", 671e9, 0.5e9),
    "deepseek-v3.1-nvfp4": ("nvidia/DeepSeek-V3.1-NVFP4", 671e9, 0.5e9),
    "kimi-k2.5-nvfp4": ("nvidia/Kimi-K2.5-NVFP4", 1e12, 0.05e12),
    "glm-5-nvfp4": ("nvidia/GLM-5-NVFP4", 744e9, 0.5e9),
    "minimax-m2.5-nvfp4": ("nvidia/MiniMax-M2.5-NVFP4", 229e9, 0.5e9),
}


@pytest.mark.parametrize("name", sorted(CONFIG_MODELS))
def test_parameters_follow_from_the_config_shapes(name):
    hf_id, card, half_unit = CONFIG_MODELS[name]
    config = _hf_config(hf_id)
    arch = load_model(name)
    total, active = _params_from_config(config)
    assert arch.params == pytest.approx(total, rel=1e-5)
    assert arch.active_params == pytest.approx(active, rel=1e-4)
    assert abs(total - card) <= half_unit
    assert arch.layers == config["num_hidden_layers"]
    assert arch.vocab_size == config["vocab_size"]
    if "kv_lora_rank" in config:  # MLA: one latent and the rotary key per token
        assert arch.kv_latent == config["kv_lora_rank"] + config["qk_rope_head_dim"]
        assert arch.head_dim == config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
        mla = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim")
        assert [getattr(arch, f) for f in mla] == [config[f] for f in mla]


def test_release_precisions_follow_the_quantization_configs():
    """MiniMax-M2.5 ships block-FP8 weights; GLM-5's FP8 release uses 128 x 128 blocks;
    the NVFP4 releases store the routed experts at 4.5 bits per weight (NVFP4 group 16),
    Moonshot's Kimi-K2.5 in INT4 of group 32 with bf16 scales, the same size."""
    minimax = _hf_config("MiniMaxAI/MiniMax-M2.5")["quantization_config"]
    assert minimax["quant_method"] == "fp8" and load_model("minimax-m2.5").precision == "fp8"
    assert load_model("minimax-m2.5").fp8_block == minimax["weight_block_size"][0] == 128
    glm = _hf_config("zai-org/GLM-5-FP8")["quantization_config"]
    assert load_model("glm-5").fp8_block == glm["weight_block_size"][0] == 128
    kimi = _hf_config("moonshotai/Kimi-K2.5")["quantization_config"]["config_groups"]["group_0"]
    assert kimi["weights"]["num_bits"] + 16 / kimi["weights"]["group_size"] == 4.5
    assert kimi["weights"]["type"] == "int" and kimi["input_activations"] is None
    assert load_model("kimi-k2.5").precision == "int4"
    for name in ("kimi-k2.5", *NVFP4_RELEASES):
        arch = load_model(name)
        assert arch.expert_bytes_per_param == 4.5 / 8 and arch.fp4_experts
        assert arch.precision == ("int4" if name == "kimi-k2.5" else "nvfp4")


#: the catalog's NVFP4 releases -> (their Hugging Face id, the entry they quantise)
NVFP4_RELEASES = {
    "deepseek-v3.1-nvfp4": ("nvidia/DeepSeek-V3.1-NVFP4", "deepseek-v3.1"),
    "kimi-k2.5-nvfp4": ("nvidia/Kimi-K2.5-NVFP4", "kimi-k2.5"),
    "glm-5-nvfp4": ("nvidia/GLM-5-NVFP4", "glm-5"),
    "minimax-m2.5-nvfp4": ("nvidia/MiniMax-M2.5-NVFP4", "minimax-m2.5"),
}


def _excluded(hf_id: str) -> list[str]:
    """The modules an NVIDIA release leaves out of NVFP4: its hf_quant_config.json's
    exclude_modules, else its config.json's quantization_config ignore list."""
    path = _aiconfigurator_folder() / "model_configs" / f"{hf_id.replace('/', '--')}"
    quant = Path(f"{path}_hf_quant_config.json")
    if quant.exists():
        section = json.loads(quant.read_text())["quantization"]
        assert section["quant_algo"] == "NVFP4" and section["group_size"] == 16
        return section["exclude_modules"]
    config = json.loads(Path(f"{path}_config.json").read_text())["quantization_config"]
    assert config["quant_algo"] == "NVFP4"
    group = config["config_groups"]["group_0"]
    assert group["weights"]["group_size"] == 16 and group["targets"] == ["Linear"]
    return config["ignore"]


@pytest.mark.parametrize("name", sorted(NVFP4_RELEASES))
def test_nvfp4_releases_quantise_what_their_configs_say(name):
    """Each NVFP4 release is its base model's shapes with `fp4_weights` the linear layers
    its quantization config does not exclude: the attention's output projection where
    o_proj is not excluded (nor the whole self_attn), the shared experts and dense MLPs
    where the model has them; and the weight bytes count those at 4.5 bits."""
    hf_id, base = NVFP4_RELEASES[name]
    excluded = _excluded(hf_id)
    arch, base_arch = load_model(name), load_model(base)
    assert arch.base_model == base and hf_id in arch.aliases
    assert find_release(base_arch, "nvfp4") == arch
    attention_whole = any(e.endswith("self_attn*") for e in excluded)
    o_proj = any(e.endswith("self_attn.o_proj") for e in excluded)
    assert ("attention_out" in arch.fp4_weights) == (not attention_whole and not o_proj)
    assert not any("shared_expert" in e or ".mlp." in e and "gate" not in e for e in excluded)
    assert ("shared" in arch.fp4_weights) == bool(arch.shared_intermediate_size)
    assert ("mlp" in arch.fp4_weights) == (arch.layers > arch.moe_layers)
    groups = arch.weight_group_params()
    four = sum(groups[w] for w in arch.fp4_weights)
    assert arch.weight_bytes == pytest.approx(
        (arch.params - four) * 2.0 + four * 4.5 / 8, rel=1e-12
    )


def test_four_bit_fields_are_checked():
    kimi = load_model("kimi-k2.5")
    with pytest.raises(InputError) as info:
        dataclasses.replace(kimi, expert_format="int3")
    assert info.value.field == "expert_format"
    with pytest.raises(InputError) as info:  # INT4 experts are 4.5 bits
        dataclasses.replace(kimi, expert_bytes_per_param=4.25 / 8)
    assert info.value.field == "expert_format"
    for bad in (("shared",), ("experts", "lm_head"), ("experts", "mlp", "mlp")):
        with pytest.raises(InputError) as info:
            dataclasses.replace(kimi, fp4_weights=bad)
        assert info.value.field == "fp4_weights"
    with pytest.raises(InputError) as info:  # bf16 experts: nothing else is 4-bit
        dataclasses.replace(load_model("glm-5"), fp4_weights=("experts", "shared"))
    assert info.value.field == "fp4_weights"
    with pytest.raises(InputError) as info:
        dataclasses.replace(kimi, base_model="kimi-k2.5")
    assert info.value.field == "base_model"


def test_releases_are_checked_against_their_base(monkeypatch):
    entries = {
        "base": {"params": 1e9, "layers": 2, "n_heads": 4, "n_kv_heads": 4, "head_dim": 8},
        "rel": {"params": 2e9, "layers": 2, "n_heads": 4, "n_kv_heads": 4, "head_dim": 8,
                "bytes_per_param": 1.0, "base_model": "base"},
    }  # fmt: skip
    models = {n: model_catalog._model_entry(n, e) for n, e in entries.items()}
    with pytest.raises(InputError, match="params differ from base's"):
        model_catalog._check_releases(models)
    models["rel"] = dataclasses.replace(models["rel"], params=1e9, base_model="none")
    with pytest.raises(InputError, match="no entry 'none'"):
        model_catalog._check_releases(models)
    models["rel"] = dataclasses.replace(models["rel"], base_model="base")
    model_catalog._check_releases(models)


def test_a_precision_without_a_release_is_none():
    assert find_release(load_model("qwen3-32b"), "nvfp4") is None
    assert find_release(load_model("moonshotai/Kimi-K2.5"), "int4").name == "kimi-k2.5"
    assert find_release(load_model("nvidia/Kimi-K2.5-NVFP4"), "int4").name == "kimi-k2.5"
    assert find_release(load_model("deepseek-ai/DeepSeek-R1"), "int4") is None


@pytest.mark.parametrize("name", ["b300", "gb200", "gb300"])
def test_blackwell_gpus_agree_with_aiconfigurator_system_specs(name):
    """Dense BF16, FP8 and FP4 peaks and TDP as in AIConfigurator's system specs (which
    cite the same datasheets), bandwidth within 1%, and its kernel tables present."""
    yaml = pytest.importorskip("yaml")
    from model.performance.engine import GPU_FOLDERS

    path = _aiconfigurator_folder() / "systems" / f"{GPU_FOLDERS[name]}.yaml"
    spec = yaml.safe_load(path.read_text())["gpu"]
    gpu = load_gpu(name)
    assert (gpu.flops_per_s, gpu.fp8_flops_per_s, gpu.fp4_flops_per_s) == (
        spec["bfloat16_tc_flops"],
        spec["fp8_tc_flops"],
        spec["fp4_tc_flops"],
    )
    assert gpu.tdp_w == spec["power"]
    # HGX B300: 62 TB/s over 8 GPUs there, 7.7 TB/s in the per-GPU datasheet table
    assert gpu.mem_bw_bytes_per_s == pytest.approx(spec["mem_bw"], rel=0.01)
    # nvidia-smi's capacity there (MiB) against the datasheet's usable GB
    assert gpu.mem_bytes == pytest.approx(spec["mem_capacity"], rel=0.07)
    assert (_aiconfigurator_folder() / "systems" / "data" / GPU_FOLDERS[name]).is_dir()


#: AIConfigurator's measured serving results whose model the catalog leaves out, and why
SILICON_LEFT_OUT = {
    # NVFP4 releases whose quantization config is not among the copies read here
    "nvidia/DeepSeek-R1-NVFP4",
    "nvidia/Qwen3-32B-NVFP4",
}


def test_silicon_results_name_catalog_models_and_gpus():
    import csv

    from model.performance.engine import GPU_FOLDERS

    path = _aiconfigurator_folder() / "systems" / "silicon_sample.csv"
    if not path.exists():
        pytest.skip("this aiconfigurator-core ships no silicon_sample.csv")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for model_path in sorted({r["model_path"] for r in rows} - SILICON_LEFT_OUT):
        arch = load_model(model_path)  # by alias, spelled exactly as there
        assert any(a == model_path for a in arch.aliases), model_path
    for model_path in SILICON_LEFT_OUT:
        with pytest.raises(NotFoundError):
            load_model(model_path)
    assert {r["system"] for r in rows} <= set(GPU_FOLDERS.values())
