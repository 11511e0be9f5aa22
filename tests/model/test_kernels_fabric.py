"""Collectives over more GPUs than any table measures, scaled by the GPU's fabric, and
DeepEP's low-latency all-to-all read from its table (docs/kernels.md, "Collectives
over more GPUs than measured"; model.performance.kernels.MOE_A2A)."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from model.catalog import Fabric, load_gpu, load_model
from model.errors import InputError, OutsideTableError
from model.performance.engine import choose_version, open_database
from model.performance.kernels import KernelModel, KernelSetup
from tests.conftest import installed_kernel_tables


def test_the_bus_bandwidth_is_nvlinks_within_the_domain_and_the_nics_summed_beyond() -> None:
    f = Fabric(domain_gpus=8, link_bw_bytes_per_s=450e9, network_bw_bytes_per_s=50e9)
    assert f.bandwidth(2) == f.bandwidth(8) == 450e9
    assert f.bandwidth(9) == f.bandwidth(64) == 8 * 50e9
    # NICs summed above NVLink's: never faster than NVLink
    assert Fabric(4, 100e9, 50e9).bandwidth(8) == 100e9


def test_the_catalog_gives_each_gpus_fabric_from_its_datasheets() -> None:
    # DGX H200: 8 GPUs per NVSwitch domain, one ConnectX-7 400 Gb/s per GPU; NVLink
    # 900 GB/s both directions summed. GB200 NVL72: 72 GPUs in one NVLink domain.
    # B300: ConnectX-8 800 Gb/s.
    assert load_gpu("h200").fabric == Fabric(8, 450e9, 50e9)
    assert load_gpu("gb200").fabric == Fabric(72, 900e9, 50e9)
    assert load_gpu("b300").fabric == Fabric(8, 900e9, 100e9)


def _qwen_tp16(fabric: Fabric | None) -> KernelModel:
    folder = str(installed_kernel_tables())
    version, _ = choose_version(folder, "h200", "sglang", None, None)
    setup = KernelSetup("h200_sxm", "sglang", version, tp=16, fabric=fabric)
    return KernelModel(open_database(folder), load_model("qwen3-32b"), setup)


def test_a_collective_beyond_every_table_is_the_largest_count_scaled_by_ring_and_links() -> None:
    """Qwen3-32B at TP16 on H200: no table measures 16 GPUs (the 8-GPU HGX board is the
    largest measured group). Each all-reduce is the 8-GPU measurement of the same
    message times (15/16)/(7/8) (ring traffic) x 450/400 (NVLink against the node's
    eight 400 Gb/s NICs): 1.2054; without a fabric the composition is refused."""
    km = _qwen_tp16(load_gpu("h200").fabric)
    factor = ((15 / 16) / (7 / 8)) * (450e9 / 400e9)
    phase = km.decode(8, 1024)
    reduces = [c for c in phase.calls if c.name.endswith("all-reduce")]
    assert reduces
    db = open_database(str(installed_kernel_tables()))
    for c in reduces:
        shape = dict(c.shape)
        assert shape["num_gpus"] == 8
        table = db.table("h200_sxm", "custom_allreduce", "sglang", km.setup.version)
        assert c.time_s == pytest.approx(table.lookup(**shape).time_s * factor, rel=1e-12)
    said = [s for s in km.substitutions if s.startswith("all-reduce over 16 GPUs")]
    assert said and "beyond its NVLink domain of 8" in said[0] and "1.205" in said[0]
    with pytest.raises(OutsideTableError, match="num_gpus=16"):
        _qwen_tp16(None).decode(8, 1024)


def test_deepep_low_latency_reads_dispatch_and_combine_from_its_table() -> None:
    """DeepSeek NVFP4 on GB200 at attention DP 32, EP 32 under SGLang: with
    ``moe_a2a='deepep_ll'`` a decode iteration moves each rank's tokens by DeepEP's
    low-latency dispatch and combine, one call per MoE layer, timed as the table's
    ``dispatch_avg_t_us + combine_avg_t_us`` at the rank's tokens (a measured point,
    read here from the file itself); no gather or scatter collective is left. Prefill
    is the same either way."""
    folder = installed_kernel_tables()
    model = load_model("deepseek-v3.1-nvfp4")

    def km(a2a: str) -> KernelModel:
        setup = KernelSetup("gb200", "sglang", "0.5.14", tp=1, ep=32, attention_dp=32,
                            weight_dtype="nvfp4", kv_dtype="fp8",
                            fabric=load_gpu("gb200").fabric, moe_a2a=a2a)  # fmt: skip
        return KernelModel(open_database(str(folder)), model, setup)

    deepep, gather = km("deepep_ll"), km("")
    phase = deepep.decode(64 * 32, 1536)  # 64 requests on each of the 32 ranks
    a2a = [c for c in phase.calls if c.name.startswith("moe all-to-all")]
    assert [c.count for c in a2a] == [model.moe_layers]
    assert not [c for c in phase.calls if c.name in ("moe dispatch", "moe combine")]
    rows = pq.read_table(folder / "gb200/comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet")
    want = [
        (r["dispatch_avg_t_us"] + r["combine_avg_t_us"]) * 1e-6
        for r in rows.to_pylist()
        if (r["hidden_size"], r["num_token"], r["num_topk"], r["num_experts"], r["node_num"])
        == (model.hidden_size, 64, model.experts_per_token, model.experts, 1)
    ]
    assert len(want) == 1
    assert a2a[0].time_s == pytest.approx(want[0], rel=1e-9)
    assert any("0.5.12's is read" in s for s in deepep.substitutions)
    others = [c for c in phase.calls if not c.name.startswith("moe all-to-all")]
    kept = [c for c in gather.decode(64 * 32, 1536).calls
            if c.name not in ("moe dispatch", "moe combine")]  # fmt: skip
    assert others == kept
    assert deepep.prefill(2048).time_s == gather.prefill(2048).time_s


def test_an_unknown_all_to_all_is_refused_naming_the_field() -> None:
    with pytest.raises(InputError, match="moe_a2a"):
        KernelSetup("gb200", "sglang", "0.5.14", moe_a2a="deepep_fast")


def _dsr1_gb200(ep: int, a2a: str, dtype: str = "fp8", redundant: int = 0) -> KernelModel:
    folder = str(installed_kernel_tables())
    model = load_model("deepseek-v3.1" if dtype == "fp8" else "deepseek-v3.1-nvfp4")
    setup = KernelSetup("gb200", "sglang", "0.5.14", tp=1, ep=ep, attention_dp=ep,
                        weight_dtype=dtype, kv_dtype="fp8", fabric=load_gpu("gb200").fabric,
                        moe_a2a=a2a, redundant_experts=redundant)  # fmt: skip
    return KernelModel(open_database(folder), model, setup)


def _wideep(kind: str, ep: int, tokens: int) -> float:
    """The SGLang DeepEP experts' time of DeepSeek's block-FP8 MoE layer at `ep` and
    `tokens` (a measured point), read from the file itself (seconds)."""
    folder = installed_kernel_tables()
    rows = pq.read_table(folder / f"gb200/moe/sglang/0.5.10/{kind}_perf.parquet").to_pylist()
    want = [r["latency"] * 1e-3 for r in rows
            if (r["moe_dtype"], r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"],
                r["moe_ep_size"], r["distribution"], r["num_tokens"])
            == ("fp8_block", 7168, 2048, 8, 256, ep, "uniform", tokens)]  # fmt: skip
    assert len(want) == 1
    return want[0]


def test_sglang_behind_deepep_reads_its_deepgemm_experts_per_phase() -> None:
    """DeepSeek FP8 on GB200 under SGLang at attention DP 16, EP 16 with DeepEP's normal
    all-to-all: the experts of a prefill are the ``wideep_context_moe`` table's (SGLang's
    ``DeepEPMoE`` runner) at every rank's tokens, those of a decode the
    ``wideep_generation_moe`` table's, each a measured point read from the file; the
    dispatch and combine are DeepEP normal's, at 20 SMs, and no gather or scatter
    collective is left. Without DeepEP the fused table is read, as before."""
    folder = installed_kernel_tables()
    km = _dsr1_gb200(16, "deepep_normal")
    model = km.model
    prefill = km.prefill(1024)  # 1,024 tokens on each of 16 ranks: 16,384 at the experts
    moe = [c for c in prefill.calls if c.name == "moe"]
    assert [c.table for c in moe] == ["gb200/moe/sglang/0.5.10/wideep_context_moe_perf.parquet"]
    assert moe[0].count == model.moe_layers
    assert moe[0].time_s == pytest.approx(_wideep("wideep_context_moe", 16, 16384), rel=1e-9)
    decode = km.decode(16 * 32, 2048)  # 32 requests on each rank: 512 tokens
    moe = [c for c in decode.calls if c.name == "moe"]
    assert moe[0].time_s == pytest.approx(_wideep("wideep_generation_moe", 16, 512), rel=1e-9)
    a2a = [c for c in prefill.calls if c.name.startswith("moe all-to-all")]
    assert [c.name for c in a2a] == ["moe all-to-all (deepep normal)"]
    rows = pq.read_table(folder / "gb200/comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet")
    want = [
        (r["dispatch_transmit_us"] + r["dispatch_notify_us"] + r["combine_transmit_us"]
         + r["combine_notify_us"]) * 1e-6
        for r in rows.to_pylist()
        if (r["hidden_size"], r["num_token"], r["num_topk"], r["num_experts"], r["node_num"],
            r["dispatch_sms"]) == (7168, 1024, 8, 256, 1, 20)
    ]  # fmt: skip
    assert len(want) == 1
    assert a2a[0].time_s == pytest.approx(want[0], rel=1e-9)
    assert not [c for c in prefill.calls if c.name in ("moe dispatch", "moe combine")]
    said = "wideep_context_moe: gb200 sglang 0.5.14 has no such table; 0.5.10's is read"
    assert said in km.substitutions
    fused = [c for c in _dsr1_gb200(16, "").prefill(1024).calls if c.name == "moe"]
    assert fused[0].table == "gb200/moe/sglang/0.5.14/moe_perf.parquet"


def test_an_ep_between_the_measured_ones_is_read_at_equal_rows_per_rank() -> None:
    """EP 8, which the DeepEP expert tables do not measure, between EP 4 and EP 16: the
    time at each neighbour ``e`` at ``tokens e / 8`` tokens (the same ``tokens k / ep``
    expert rows per rank), interpolated in ``log ep``: halfway, the geometric mean.
    Prefill of 8,192 tokens on each of 8 ranks: EP 4 at 32,768 and EP 16 at 131,072."""
    km = _dsr1_gb200(8, "deepep_normal")
    moe = [c for c in km.prefill(8192).calls if c.name == "moe"]
    lo, hi = _wideep("wideep_context_moe", 4, 32768), _wideep("wideep_context_moe", 16, 131072)
    assert moe[0].time_s == pytest.approx((lo * hi) ** 0.5, rel=1e-9)


def test_redundant_experts_are_read_at_the_ep_of_as_many_experts_per_rank() -> None:
    """EP 36 with 32 redundant experts (EPLB): each rank holds 288 / 36 = 8 experts, as
    at EP 32 without, and ``tokens x 8 / 36`` expert rows. A decode of 16 requests on
    each rank: 576 tokens at the experts, read at EP 32 at 576 x 32 / 36 = 512 tokens,
    the measured point (the same rows per rank, the same experts per rank)."""
    km = _dsr1_gb200(36, "deepep_ll", redundant=32)
    moe = [c for c in km.decode(36 * 16, 2048).calls if c.name == "moe"]
    assert moe[0].time_s == pytest.approx(_wideep("wideep_generation_moe", 32, 512), rel=1e-9)
    # without the replicas, 256 experts do not split over 36 ranks
    with pytest.raises(InputError, match="ep") as err:
        _dsr1_gb200(36, "deepep_ll")
    assert "does not divide" in str(err.value)
    # EP 48 with 32 redundant: 6 experts per rank, between EP 32 (8) and EP 64 (4)
    km = _dsr1_gb200(48, "deepep_ll", redundant=32)
    moe = [c for c in km.decode(48 * 16, 2048).calls if c.name == "moe"]
    ep_x = 256 * 48 / 288
    w = math.log(ep_x / 32) / math.log(64 / 32)
    lo = _wideep_at("wideep_generation_moe", 32, 768 * 32 / 48)
    hi = _wideep_at("wideep_generation_moe", 64, 768 * 64 / 48)
    assert moe[0].time_s == pytest.approx(lo ** (1 - w) * hi**w, rel=1e-9)


def _wideep_at(kind: str, ep: int, tokens: float) -> float:
    """The DeepEP experts' time at `ep` and any `tokens`, as the table reads it."""
    folder = str(installed_kernel_tables())
    table = open_database(folder).table("gb200", kind, "sglang", "0.5.10")
    key = {"moe_dtype": "fp8_block", "hidden_size": 7168, "inter_size": 2048, "topk": 8,
           "num_experts": 256, "moe_tp_size": 1, "moe_ep_size": ep, "distribution": "uniform"}
    return table.lookup(**key, num_tokens=tokens).time_s


def test_redundant_experts_in_the_fused_table_are_read_by_the_same_rule() -> None:
    """NVFP4 experts (no DeepEP table measures them) at EP 48 with 32 redundant: the
    fused table, which measures EP 32 and 64, read at the EP of 6 experts a rank,
    each neighbour as the composition reads it without replicas at the same rows per
    rank (32- and 64-rank instances at this one's 24 requests a rank)."""
    km = _dsr1_gb200(48, "deepep_ll", "nvfp4", redundant=32)
    moe = [c for c in km.decode(48 * 24, 1536).calls if c.name == "moe"]
    assert moe and moe[0].table.endswith("sglang/0.5.14/moe_perf.parquet")

    def alone(ep: int, per_rank: int) -> float:
        calls = _dsr1_gb200(ep, "deepep_ll", "nvfp4").decode(ep * per_rank, 1536).calls
        return sum(c.count * c.time_s for c in calls if c.name == "moe")

    ep_x = 256 * 48 / 288
    w = math.log(ep_x / 32) / math.log(2)
    want = alone(32, 24) ** (1 - w) * alone(64, 24) ** w
    assert sum(c.count * c.time_s for c in moe) == pytest.approx(want, rel=1e-9)


def test_redundant_experts_are_a_whole_number_and_need_experts() -> None:
    with pytest.raises(InputError, match="redundant_experts"):
        KernelSetup("gb200", "sglang", "0.5.14", redundant_experts=-1)
    folder = str(installed_kernel_tables())
    setup = KernelSetup("gb200", "sglang", "0.5.14", redundant_experts=8)
    with pytest.raises(InputError, match="redundant_experts"):
        KernelModel(open_database(folder), load_model("qwen3-32b"), setup)


def test_experts_no_deepep_table_measures_are_read_from_the_fused_table_and_said() -> None:
    """NVFP4 experts: the DeepEP expert tables measure block-FP8 only, so the fused
    table is read, and the output says why."""
    km = _dsr1_gb200(32, "deepep_ll", "nvfp4")
    moe = [c for c in km.decode(32 * 16, 1536).calls if c.name == "moe"]
    assert moe and all(c.table.endswith("sglang/0.5.14/moe_perf.parquet") for c in moe)
    assert any(s.startswith("moe behind DeepEP (wideep_generation_moe)") and "nvfp4" in s
               and "the fused MoE table is read" in s for s in km.substitutions)  # fmt: skip


def _trtllm_dep(gpu: str, ep: int, dtype: str = "nvfp4") -> KernelModel:
    folder = str(installed_kernel_tables())
    model = load_model("deepseek-v3.1" if dtype == "fp8" else "deepseek-v3.1-nvfp4")
    setup = KernelSetup(gpu, "trtllm", "1.3.0rc20", tp=1, ep=ep, attention_dp=ep,
                        weight_dtype=dtype, kv_dtype="fp8", fabric=load_gpu(gpu.removesuffix(
                            "_sxm")).fabric)  # fmt: skip
    return KernelModel(open_database(folder), model, setup)


def _alltoall_ms(kernel: str, op: str, dtype: str, ep: int, tokens: int) -> float:
    """TensorRT-LLM's all-to-all of one DeepSeek MoE layer on GB200 (a measured point),
    read from the file itself (ms)."""
    folder = installed_kernel_tables()
    rows = pq.read_table(folder / "gb200/comm/trtllm/1.3.0rc10/trtllm_alltoall_perf.parquet")
    want = [r["latency"] for r in rows.to_pylist()
            if (r["kernel_source"], r["op_name"], r["moe_dtype"], r["moe_ep_size"],
                r["num_tokens"], r["hidden_size"], r["topk"], r["num_experts"])
            == (kernel, op, dtype, ep, tokens, 7168, 8, 256)]  # fmt: skip
    assert len(want) == 1
    return float(want[0])


def test_trtllm_moves_tokens_by_its_all_to_all_over_multi_node_nvlink() -> None:
    """TensorRT-LLM selects its all-to-all where attention is data-parallel, the EP
    exceeds the experts per token and the NVLink domain spans nodes
    (``select_alltoall_method_type``): DeepSeek NVFP4 at DEP 16 on GB200 (NVL72) moves
    each rank's tokens by NVLinkOneSided's dispatch and combine, one call each per MoE
    layer, each a measured point of the file at the rank's tokens; no gather or scatter
    is left. Block-FP8 experts move FP8 by NVLinkTwoSided's prepare, dispatch and
    combine (the one-sided kernel is measured in NVFP4 only)."""
    km = _trtllm_dep("gb200", 16)
    phase = km.decode(16 * 64, 2048)  # 64 requests on each rank
    a2a = [c for c in phase.calls if c.name.startswith("moe all-to-all")]
    assert [c.name for c in a2a] == ["moe all-to-all (NVLinkOneSided dispatch)",
                                     "moe all-to-all (NVLinkOneSided combine)"]  # fmt: skip
    assert all(c.count == km.model.moe_layers for c in a2a)
    for c, op in zip(a2a, ("alltoall_dispatch", "alltoall_combine"), strict=True):
        want = _alltoall_ms("NVLinkOneSided", op, "nvfp4", 16, 64) * 1e-3
        assert c.time_s == pytest.approx(want, rel=1e-9)
    assert not [c for c in phase.calls if c.name in ("moe dispatch", "moe combine")]
    fp8 = [c for c in _trtllm_dep("gb200", 32, "fp8").decode(32 * 16, 2048).calls
           if c.name.startswith("moe all-to-all")]  # fmt: skip
    assert [c.name for c in fp8] == [f"moe all-to-all (NVLinkTwoSided {op})"
                                     for op in ("prepare", "dispatch", "combine")]  # fmt: skip
    assert fp8[1].time_s == pytest.approx(
        _alltoall_ms("NVLinkTwoSided", "alltoall_dispatch", "fp8", 32, 16) * 1e-3, rel=1e-9
    )


def test_trtllm_gathers_where_it_runs_no_all_to_all() -> None:
    """An EP no larger than the experts per token (DEP 8, top-8) on GB200, and an 8-GPU
    NVLink domain (B200's HGX board) at any EP: the ranks' tokens are gathered and
    scattered as before. GB300, whose rack has GB200's NVLink fabric and no table of
    its own, reads GB200's, and says so."""
    for km in (_trtllm_dep("gb200", 8), _trtllm_dep("b200_sxm", 8)):
        calls = km.decode(8 * 64, 2048).calls
        assert not [c for c in calls if c.name.startswith("moe all-to-all")]
        assert [c for c in calls if c.name == "moe dispatch"]
    gb300 = _trtllm_dep("gb300", 16)
    a2a = [c for c in gb300.decode(16 * 64, 2048).calls if c.name.startswith("moe all-to-all")]
    assert a2a and all(c.table.startswith("gb200/comm/trtllm/") for c in a2a)
    assert any(s.startswith("trtllm_alltoall: no table of gb300; gb200's is read")
               for s in gb300.substitutions)  # fmt: skip
