"""Collectives over more GPUs than any table measures, scaled by the GPU's fabric, and
DeepEP's low-latency all-to-all read from its table (docs/kernels.md, "Collectives
over more GPUs than measured"; model.performance.kernels.MOE_A2A)."""

from __future__ import annotations

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
