"""Hybrid linear attention (Qwen3.5's Gated DeltaNet): the catalog entry against its
config, the memory a request holds, the composed pass against the tables' lookups and
against AIConfigurator's step estimator, and the silicon rows of the model resolved."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from model.catalog import CONV_STATE_BYTES, ModelArch, load_gpu, load_model
from model.errors import InputError
from model.measured import silicon
from model.performance.kernels import KernelDatabase, KernelModel, KernelSetup, uniform_tokens
from tests.conftest import installed_kernel_tables

NAME = "qwen3.5-397b-a17b"
#: the model card's totals: 397B parameters, 17B active
PUBLISHED_TOTAL, PUBLISHED_ACTIVE = 397e9, 17e9


@cache
def database() -> KernelDatabase:
    return KernelDatabase(installed_kernel_tables())


def package_config(name: str) -> dict[str, Any]:
    """A config the installed aiconfigurator-core package ships (its text_config)."""
    folder = installed_kernel_tables().parent.parent / "model_configs"
    raw = json.loads((folder / name).read_text())
    return dict(raw.get("text_config", raw))


def parameters(m: ModelArch) -> tuple[float, float]:
    """Total and active parameters from the entry's shapes, by hand: embedding and LM head
    (untied), the gated full-attention layers (queries and their gate, keys, values,
    output), the linear-attention layers (qkvz, ba, convolution, out), the MoE layers
    (router, routed and shared experts with the shared expert's gate), the norms, and the
    small per-head parameters (decay, bias, head norms)."""
    h, v = m.hidden_size, m.vocab_size
    full = m.layers - m.linear_layers
    keys = m.linear_key_heads * m.linear_key_head_dim
    values = m.linear_value_heads * m.linear_value_head_dim
    attention = (h * 2 * m.n_heads * m.head_dim + 2 * h * m.n_kv_heads * m.head_dim
                 + m.n_heads * m.head_dim * h + 2 * m.head_dim)  # fmt: skip
    linear = (h * (2 * keys + 2 * values) + h * 2 * m.linear_value_heads
              + (2 * keys + values) * m.linear_conv_kernel + 2 * m.linear_value_heads
              + m.linear_value_head_dim + values * h)  # fmt: skip
    moe = m.experts * m.expert_params + 3 * h * m.shared_intermediate_size + h + m.experts * h
    total = 2 * v * h + full * attention + m.linear_layers * linear + m.layers * (moe + 2 * h) + h
    active = total - m.layers * (m.experts - m.experts_per_token) * m.expert_params
    return float(total), float(active)


def test_entry_matches_the_config_and_the_published_size() -> None:
    m = load_model("Qwen/Qwen3.5-397B-A17B")
    assert m.name == NAME
    total, active = parameters(m)
    assert m.params == total and m.active_params == active
    # the language model alone (no vision encoder, no MTP layer): within 0.5% of 397B and
    # 3% of 17B (measured -0.16% and +2.05%)
    assert abs(total / PUBLISHED_TOTAL - 1) < 0.005
    assert abs(active / PUBLISHED_ACTIVE - 1) < 0.03
    cfg = package_config("Qwen--Qwen3.5-397B-A17B_config.json")
    types = cfg["layer_types"]
    assert m.linear_layers == types.count("linear_attention") == 45
    assert m.kv_layers == types.count("full_attention") == 15
    for ours, theirs in (("hidden_size", "hidden_size"), ("n_heads", "num_attention_heads"),
                         ("n_kv_heads", "num_key_value_heads"), ("head_dim", "head_dim"),
                         ("experts", "num_experts"), ("experts_per_token", "num_experts_per_tok"),
                         ("moe_intermediate_size", "moe_intermediate_size"),
                         ("shared_intermediate_size", "shared_expert_intermediate_size"),
                         ("vocab_size", "vocab_size"), ("linear_key_heads", "linear_num_key_heads"),
                         ("linear_value_heads", "linear_num_value_heads"),
                         ("linear_key_head_dim", "linear_key_head_dim"),
                         ("linear_value_head_dim", "linear_value_head_dim"),
                         ("linear_conv_kernel", "linear_conv_kernel_dim"),
                         ("attention_output_gate", "attn_output_gate")):  # fmt: skip
        assert getattr(m, ours) == cfg[theirs], ours
    assert m.linear_state_bytes_per_elem == {"float32": 4.0}[cfg["mamba_ssm_dtype"]]
    nv = load_model("qwen3.5-397b-a17b-nvfp4")
    assert nv.base_model == NAME and nv.precision == "nvfp4" and nv.fp4_weights == ("experts",)
    quant = json.loads((installed_kernel_tables().parent.parent / "model_configs"
                        / "nvidia--Qwen3.5-397B-A17B-NVFP4_hf_quant_config.json").read_text())
    excluded = quant["quantization"]["exclude_modules"]
    # attention, linear attention and the shared experts of every layer stay bf16
    assert "*.mlp.shared_expert.*" in excluded
    assert sum(e.endswith(".linear_attn*") for e in excluded) == 45
    assert sum(e.endswith(".self_attn*") for e in excluded) == 15


def silicon_rows() -> list[silicon.SiliconRow]:
    """The installed package's silicon rows of Qwen3.5-397B-A17B."""
    path = silicon.installed_silicon()
    if path is None:
        pytest.skip("the aiconfigurator-core package is not installed")
    return [r for r in silicon.read_silicon(Path(path))
            if r.model_path == "Qwen/Qwen3.5-397B-A17B"]  # fmt: skip


def test_memory_per_request_is_the_hand_computation() -> None:
    m = load_model(NAME)
    # KV: 15 full-attention layers x (K, V) x 2 heads x 256 x 2 bytes per token
    assert m.kv_bytes_per_token == 15 * 2 * 2 * 256 * 2 == 30720
    assert m.kv_bytes_at(1000) == 30720 * 1000
    # state: per linear layer 64 value heads x 128 x 128 float32, and the convolution's
    # last 3 inputs of 2 x 16 x 128 + 64 x 128 channels in bf16
    state = 45 * (64 * 128 * 128 * 4 + (2 * 16 * 128 + 64 * 128) * 3 * CONV_STATE_BYTES)
    assert m.linear_state_bytes == state == 192_061_440
    # the decode worker of a silicon row: 8 B200 with bf16 weights at the row's mean
    # context, 2 KV heads replicated over 8 ranks (x4), one state per request, in the
    # memory the driver reports (180 GiB per GPU)
    row = next(r for r in silicon_rows() if r.system == "b200_sxm" and r.precision == "bf16")
    case = silicon.resolve(row, str(installed_kernel_tables()))
    assert isinstance(case, silicon.Case) and case.decode.tp == 8
    ctx = row.isl + row.osl / 2.0
    assert load_gpu("B200").engine_mem_bytes == 180 * 2**30
    free = 8 * load_gpu("B200").engine_mem_bytes * silicon.MEMORY_FRACTION - m.params * 2.0
    assert case.decode.kv_batch == pytest.approx(free / (30720 * ctx * 4 + state), rel=1e-12)
    # a model without linear layers keeps its numbers: no state
    assert load_model("qwen3-235b-a22b").linear_state_bytes == 0.0


def test_bad_linear_fields_name_the_field() -> None:
    m = load_model(NAME)
    fields = {f: getattr(m, f) for f in m.__dataclass_fields__}
    with pytest.raises(InputError) as e:
        ModelArch(**{**fields, "linear_key_heads": 0})
    assert e.value.field == "linear_key_heads"
    with pytest.raises(InputError) as e:
        ModelArch(**{**fields, "linear_value_heads": 24})
    assert e.value.field == "linear_value_heads"
    with pytest.raises(InputError) as e:
        ModelArch(**{**fields, "attention_output_gate": 1})
    assert e.value.field == "attention_output_gate"
    with pytest.raises(InputError) as e:
        KernelModel(database(), m, KernelSetup("b200_sxm", "sglang", "0.5.14", tp=32))
    assert e.value.field == "tp" and "16 linear_key_heads" in str(e.value)


def composed(tp: int = 8, **setup: Any) -> KernelModel:
    return KernelModel(database(), load_model(NAME),
                       KernelSetup("b200_sxm", "sglang", "0.5.14", tp=tp, **setup))  # fmt: skip


def lookup(kind: str, **shape: Any) -> float:
    framework, version = ("nccl", "2.29.2") if kind == "nccl" else ("sglang", "0.5.14")
    return database().table("b200_sxm", kind, framework, version).lookup(**shape).time_s


def test_decode_is_the_sum_of_the_tables_lookups() -> None:
    """One decode of 8 requests at 2,048 past tokens at TP8 in bf16, summed by hand from
    the tables: every kernel of the pass, its count and its shape."""
    km, b, c, h = composed(), 8, 2048.0, 4096

    def gemm(count: int, n: int, k: int) -> float:
        return count * lookup("gemm", gemm_dtype="bfloat16", m=b, n=n, k=k)

    def ar(count: int) -> float:
        return count * lookup("custom_allreduce", allreduce_dtype="bfloat16", num_gpus=8,
                              backend="sglang_graph", message_size=b * h)  # fmt: skip

    gdn_key = {"phase": "generation", "d_model": h, "d_conv": 4, "num_k_heads": 2,
               "head_k_dim": 128, "num_v_heads": 8, "head_v_dim": 128, "batch_size": b,
               "seq_len": 1}  # fmt: skip
    hand = {
        "qkv projection": gemm(15, (2 * 4 + 2 * 1) * 256, h),
        "o projection": gemm(15, h, 4 * 256),
        "linear qkvz projection": gemm(45, (2 * 2048 + 2 * 8192) // 8, h),
        "linear ba projection": gemm(45, 32, h),  # 16 columns, read at the narrowest 32
        "linear out projection": gemm(45, h, 8192 // 8),
        "linear attention": 45 * (
            lookup("gdn", kernel_source="causal_conv1d_update", **gdn_key)
            + lookup("gdn", kernel_source="fused_recurrent_gated_delta_rule_packed_decode",
                     **gdn_key)),  # fmt: skip
        "router": gemm(60, 512, h),
        "moe": 60 * lookup("moe", moe_dtype="bfloat16", hidden_size=h, inter_size=1024, topk=10,
                           num_experts=512, moe_tp_size=8, moe_ep_size=1,
                           distribution="balanced",
                           num_tokens=uniform_tokens(b, 512, 10)),  # fmt: skip
        "shared expert gate-up": gemm(60, 2 * 1024 // 8, h),
        "shared expert down": gemm(60, h, 1024 // 8),
        "embedding all-reduce": ar(1),
        "attention all-reduce": ar(60),
        "mlp all-reduce": ar(60),
        "lm head": gemm(1, 248320 // 8, h),
        "logits all-gather": lookup("nccl", op_name="all_gather", nccl_dtype="half", num_gpus=8,
                                    message_size=b * 248320),
    }  # fmt: skip
    phase = km.decode(b, c)
    got = phase.by_name()
    attention = got.pop("attention")
    assert attention > 0
    assert sorted(got) == sorted(hand)
    for name, t in hand.items():
        assert got[name] == pytest.approx(t, rel=1e-9), name
    counts = {(k.name, k.count) for k in phase.calls if k.name == "attention"}
    assert {n for _, n in counts} <= {15 * s for s in range(1, 65)}  # 15 layers, split-KV
    assert phase.time_s == pytest.approx(sum(hand.values()) + attention, rel=1e-12)


def test_prefill_linear_kernels_and_the_full_layers_attention() -> None:
    km, n = composed(tp=4, weight_dtype="fp8"), 4096
    key = {"phase": "context", "d_model": 4096, "d_conv": 4, "num_k_heads": 4,
           "head_k_dim": 128, "num_v_heads": 16, "head_v_dim": 128, "batch_size": 1,
           "seq_len": n}  # fmt: skip
    linear = 45 * (lookup("gdn", kernel_source="causal_conv1d_fn", **key)
                   + lookup("gdn", kernel_source="chunk_gated_delta_rule", **key))  # fmt: skip
    attention = 15 * lookup("context_attention", num_heads=8, num_key_value_heads=1,
                            head_dim=256, attn_dtype="bfloat16", kv_cache_dtype="bfloat16",
                            window_size=0, beam_width=1, batch_size=1, isl=n)  # fmt: skip
    got = km.prefill(n).by_name()
    assert got["linear attention"] == pytest.approx(linear, rel=1e-9)
    assert got["attention"] == pytest.approx(attention, rel=1e-9)
    alone = km.prefill_attention(n)
    assert alone.time_s == pytest.approx(linear + attention, rel=1e-9)
    # the FP8 release: every projection in 128-block FP8 (the router and LM head bf16)
    assert km.weight_dtypes["attention"] == ((60, "fp8_block"),)


#: the SDK's kernels no table measures and the composition does not count (norms,
#: activations, the shared expert's merge, the embedding's gather)
UNCOUNTED = ("norm", "act_gate", "embedding", "p2p", "merge")


@cache
def sdk(gpu: str) -> Any:
    engine = pytest.importorskip("aiconfigurator_core.sdk.engine")
    return engine.EngineHandle.compile(
        "Qwen/Qwen3.5-397B-A17B", gpu, "sglang", backend_version="0.5.14", tp_size=8,
        attention_dp_size=1, moe_tp_size=8, moe_ep_size=1, gemm_quant_mode="fp8_block",
        moe_quant_mode="fp8_block", kvcache_quant_mode="bfloat16", fmha_quant_mode="bfloat16",
    )  # fmt: skip


def sdk_ms(ops: list[tuple[Any, ...]], keep: Callable[[str], bool]) -> float:
    return sum(op[1] for op in ops if keep(op[0]) and not any(w in op[0] for w in UNCOUNTED))


@pytest.mark.parametrize("gpu", ["b200_sxm", "h200_sxm"])
def test_agrees_with_the_sdk_step_estimator(gpu: str) -> None:
    """TP8, FP8-block weights, the SDK's default MoE load, SGLang 0.5.14's own tables; the
    SDK runs the shared expert beside the routed ones (a second stream) and times the
    16-column ``in_proj_ba`` GEMM below the tables' grid at its speed of light, where the
    composition adds both after the routed experts and reads the GEMM at 32 columns: the
    comparison leaves the shared experts and that GEMM out of both, and the decode's
    full attention, which the composition reads at the fastest split of the context
    (docs/kernels.md, "Split-KV decode attention") and the SDK unsplit (on B200 at 8,192
    past tokens, 0.16 ms against 1.22 ms for one request). Measured: prefill (1,024 and
    8,192 tokens) within 9.0%, decode (1, 16 and 64 requests at 1,024 and 8,192 past
    tokens) within 10.7% (H200, 16 requests), the median +2%."""
    km = KernelModel(database(), load_model(NAME),
                     KernelSetup(gpu, "sglang", "0.5.14", tp=8, weight_dtype="fp8",
                                 distribution="power_law_1.01", moe_kernels="own"))  # fmt: skip
    handle = sdk(gpu)
    left = ("shared expert", "linear ba projection")

    def ours(phase: Any, decode: bool = False) -> float:
        kept = (v for k, v in phase.by_name().items()
                if not k.startswith(left) and not (decode and k == "attention"))  # fmt: skip
        return sum(kept) * 1e3

    def theirs(op: str) -> bool:
        return not any(w in op for w in ("shared", "in_proj_ba", "moe_overlap",
                                         "generation_attention"))  # fmt: skip

    diffs: dict[str, list[float]] = {"prefill": [], "decode": []}
    for n in (1024, 8192):
        context, _ = handle.run_static_per_op(batch_size=1, isl=n, osl=2)
        diffs["prefill"].append(ours(km.prefill(n)) / sdk_ms(context, theirs) - 1)
    for c in (1024, 8192):
        for b in (1, 16, 64):
            _, generation = handle.run_static_per_op(batch_size=b, isl=c, osl=2)
            # the SDK's overlap of the routed and the shared experts is its longer branch,
            # the routed experts' (router and fused MoE)
            routed = sum(op[1] for op in generation if "moe_overlap" in op[0])
            sdk_t = sdk_ms(generation, theirs) + routed
            diffs["decode"].append(ours(km.decode(b, c), True) / sdk_t - 1)
    print(gpu, {k: [round(100 * d, 1) for d in v] for k, v in diffs.items()})
    assert max(abs(d) for d in diffs["prefill"]) < 0.12
    assert max(abs(d) for d in diffs["decode"]) < 0.15
    assert abs(statistics.median(diffs["prefill"] + diffs["decode"])) < 0.05


def test_every_silicon_row_of_the_model_resolves() -> None:
    rows = silicon_rows()
    assert len(rows) == 351
    folder = str(installed_kernel_tables())
    # one row of each (GPU, precision, layout)
    seen: dict[tuple[str, str, int, int], silicon.SiliconRow] = {}
    for r in rows:
        assert r.agg is not None
        seen.setdefault((r.system, r.precision, r.agg.tp, r.agg.moe_ep), r)
    for key, row in sorted(seen.items()):
        case = silicon.resolve(row, folder)
        assert isinstance(case, silicon.Case), (key, getattr(case, "reason", ""))
        assert case.model == NAME
        expected = "qwen3.5-397b-a17b-nvfp4" if row.precision == "fp4" else ""
        assert case.release == expected
