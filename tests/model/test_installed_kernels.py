"""The kernel tables of the installed aiconfigurator-core package as the default
database, the version chosen when the engine calibration's is not there, and a table a
framework lacks taken from another framework's tables of the same GPU, each said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from model.capacity import clear_kernel_cache
from model.errors import InputError
from model.operations import SpecRequest, capacity_report, resolve_spec
from model.performance.engine import (
    KERNEL_PACKAGE,
    KernelTimes,
    choose_version,
    database_label,
    installed_kernels,
    open_database,
    shipped_calibration,
)
from model.performance.engine import KernelSource as Source
from model.performance.kernels import version_key
from tests.conftest import installed_kernel_tables
from tests.service.test_cli_core import CAPACITY_3P1D, run_json

B200_KERNELS = [*CAPACITY_3P1D, "--gpu", "b200", "--performance", "kernels", "--json"]


def test_versions_sort_by_their_numbers() -> None:
    got = sorted(["1.3.0rc23", "0.5.9", "1.3.0rc20", "0.24.0", "0.5.14", "0.19.0"], key=version_key)
    assert got == ["0.5.9", "0.5.14", "0.19.0", "0.24.0", "1.3.0rc20", "1.3.0rc23"]


def test_the_installed_package_is_the_default_database(capsys, monkeypatch) -> None:
    root = installed_kernel_tables()
    assert (root / "b200_sxm" / "gemm").is_dir()
    monkeypatch.delenv("PDWATT_KERNELS", raising=False)
    rep = run_json(capsys, B200_KERNELS)  # no --kernels, no PDWATT_KERNELS
    perf = rep["performance"]["kernels"]
    assert perf["folder"].startswith(f"{KERNEL_PACKAGE} ")  # named with its version
    assert str(root) not in str(rep)  # never a machine path
    assert rep["capacity_rps"] > 0
    # the B200 vLLM calibration was fitted on 0.19.0 tables, which the package lacks:
    # its newest vLLM tables are read, and the report says so
    cal = shipped_calibration("b200", "vllm")
    have = [v for f, v in open_database(str(root)).versions("b200_sxm", "gemm") if f == "vllm"]
    if cal.version in have:
        pytest.skip(f"the package has the calibration's {cal.version} tables")
    assert perf["version"] == max(have, key=version_key)
    (note,) = perf["notes"]
    assert f"b200 vllm {cal.version} tables" in note and perf["version"] in note


def test_a_version_asked_for_is_kept_and_a_calibrated_one_present_is_read() -> None:
    root = str(installed_kernel_tables())
    assert choose_version(root, "b200", "vllm", "9.9", "0.24.0") == ("9.9", ())
    have = [v for f, v in open_database(root).versions("b200_sxm", "gemm") if f == "sglang"]
    assert choose_version(root, "b200", "sglang", None, have[0]) == (have[0], ())
    assert database_label(root).startswith(KERNEL_PACKAGE)
    assert database_label("/somewhere/tables") == "tables"


def test_without_the_package_kernels_are_refused_naming_it(no_kernel_package) -> None:
    assert installed_kernels() is None
    with pytest.raises(InputError) as e:
        resolve_spec(SpecRequest(model="qwen3-32b", gpu="b200", performance="kernels"))
    assert e.value.field == "performance" and KERNEL_PACKAGE in e.value.reason


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.symlink_to(src)


def test_a_missing_table_is_taken_from_another_framework_and_said(tmp_path: Path) -> None:
    """A database whose vLLM folder of the B200 has no all-reduce table: a TP2
    composition reads SGLang's, says so, and times exactly as when that same table
    sits in vLLM's folder."""
    root = installed_kernel_tables()
    db = open_database(str(root))
    vllm = max((v for f, v in db.versions("b200_sxm", "gemm") if f == "vllm"), key=version_key)
    sgl = [v for f, v in db.versions("b200_sxm", "custom_allreduce") if f == "sglang"]
    if not sgl:
        pytest.skip("no SGLang all-reduce table for the B200")
    sgl_v = max(sgl, key=version_key)
    nccl = [v for f, v in db.versions("b200_sxm", "nccl") if f == "nccl"]

    def build(folder: Path, allreduce_under_vllm: bool) -> None:
        for op, kind in (
            ("gemm", "gemm"),
            ("attention", "context_attention"),
            ("attention", "generation_attention"),
        ):
            name = f"b200_sxm/{op}/vllm/{vllm}/{kind}_perf.parquet"
            _link(root / name, folder / name)
        ar = f"b200_sxm/comm/sglang/{sgl_v}/custom_allreduce_perf.parquet"
        fw = "vllm" if allreduce_under_vllm else "sglang"
        version = vllm if allreduce_under_vllm else sgl_v
        _link(root / ar, folder / f"b200_sxm/comm/{fw}/{version}/custom_allreduce_perf.parquet")
        for v in nccl:
            name = f"b200_sxm/comm/nccl/{v}/nccl_perf.parquet"
            _link(root / name, folder / name)

    build(tmp_path / "a", allreduce_under_vllm=False)
    build(tmp_path / "b", allreduce_under_vllm=True)
    from model.catalog import load_model

    model = load_model("qwen3-32b")
    a = KernelTimes.of(Source(str(tmp_path / "a"), "vllm", (("b200", vllm),)), model, "b200", 2)
    b = KernelTimes.of(Source(str(tmp_path / "b"), "vllm", (("b200", vllm),)), model, "b200", 2)
    (said,) = a.kernels.substitutions
    assert said.startswith("custom_allreduce:") and f"sglang {sgl_v}" in said
    assert b.kernels.substitutions == []
    assert a.decode_kernels_s(8, 2048) == b.decode_kernels_s(8, 2048)
    assert a.prefill_phase(1024).time_s == b.prefill_phase(1024).time_s
    # and the capacity report names it
    clear_kernel_cache()
    spec = resolve_spec(
        SpecRequest(
            model="qwen3-32b",
            gpu="b200",
            workload="fixed:1024:128",
            overrides={"serving": {"tensor_parallel": 2}},
            performance="kernels",
            kernels=str(tmp_path / "a"),
            kernel_versions={"b200": vllm},
        )
    )
    notes = capacity_report(spec, 1, 1)["performance"]["kernels"]["notes"]
    assert any(n.startswith("custom_allreduce:") for n in notes)
    clear_kernel_cache()


def test_trtllm_all_reduce_is_read_from_its_own_table() -> None:
    """TensorRT-LLM's all-reduce files name the implementation column `implementation`
    where the others name it `backend`; it was refused and SGLang's table substituted."""
    from model.catalog import load_model
    from model.performance.engine import open_database
    from model.performance.kernels import KernelModel, KernelSetup

    db = open_database(str(installed_kernel_tables()))
    km = KernelModel(
        db, load_model("qwen3-32b"), KernelSetup("h200_sxm", "trtllm", "1.3.0rc20", tp=4)
    )
    times = km.decode(32, 2048).by_name()
    assert times["attention all-reduce"] > 0
    assert not any("custom_allreduce" in s for s in km.substitutions)


def test_a_gemm_table_that_does_not_grow_with_its_rows_is_read_from_another_framework() -> None:
    """The screen of GEMM tables (docs/kernels.md, "Screened tables"): the installed B200
    vLLM 0.24.0 ``fp8_block`` GEMMs take less time at 4,096 rows than at one (median
    0.75 over 279 weight shapes, measured in this package), so MiniMax-M2.5's
    block-FP8 projections are read from SGLang's table of the GPU, and the composition
    says so; H200's vLLM table grows (about 4.6x) and is kept."""
    from model.catalog import load_model
    from model.performance.kernels import SCREEN_ROWS, SCREEN_WEIGHTS, KernelModel, KernelSetup

    db = open_database(str(installed_kernel_tables()))
    m = load_model("minimax-m2.5")
    own = db.table("b200_sxm", "gemm", "vllm", "0.24.0")
    growth, _ = own.growth({"gemm_dtype": "fp8_block"}, "m", 1, SCREEN_ROWS, SCREEN_WEIGHTS)
    if not growth < 1.0:
        pytest.skip("this package's B200 vLLM fp8_block table passes the screen")
    km = KernelModel(db, m, KernelSetup("b200_sxm", "vllm", "0.24.0", tp=2, weight_dtype="fp8"))
    (said,) = [s for s in km.substitutions if s.startswith("gemm fp8_block")]
    assert "fixed cost" in said and "sglang" in said
    calls = {c.name: c for c in km.decode(8, 8704).calls}
    qkv = calls["qkv projection"]
    assert qkv.table.startswith("b200_sxm/gemm/sglang/")
    sg = db.table("b200_sxm", "gemm", "sglang", qkv.table.split("/")[3])
    assert qkv.time_s == sg.lookup(**dict(qkv.shape)).time_s
    assert calls["lm head"].table.startswith("b200_sxm/gemm/vllm/")  # bf16 passes: kept
    h200 = KernelModel(db, m, KernelSetup("h200_sxm", "vllm", "0.24.0", tp=2, weight_dtype="fp8"))
    assert not [s for s in h200.substitutions if s.startswith("gemm")]
    assert {c.name: c for c in h200.decode(8, 8704).calls}["qkv projection"].table.startswith(
        "h200_sxm/gemm/vllm/"
    )


def test_mxfp4_experts_under_tensorrt_llm_on_blackwell_take_mxfp8_activations() -> None:
    """TensorRT-LLM's default MoE backend runs MXFP4 experts with MXFP8 activations on
    Blackwell and bf16 ones on Hopper (its gpt-oss deployment guide): gpt-oss-120b's
    experts read ``w4a8_mxfp4_mxfp8`` under TensorRT-LLM on B200, ``w4a16_mxfp4`` under
    TensorRT-LLM on H200 and under vLLM on B200."""
    from model.catalog import load_model
    from model.performance.kernels import KernelModel, KernelSetup

    db = open_database(str(installed_kernel_tables()))
    m = load_model("gpt-oss-120b")

    def experts(gpu: str, framework: str) -> str:
        version = max((v for f, v in db.versions(gpu, "moe") if f == framework), key=version_key)
        if framework == "trtllm":
            version = "1.3.0rc20"  # the version measuring gpt-oss's shapes
        km = KernelModel(db, m, KernelSetup(gpu, framework, version, tp=1))
        (moe,) = [c for c in km.decode(8, 2048).calls if c.name == "moe"]
        return dict(moe.shape)["moe_dtype"]

    assert experts("b200_sxm", "trtllm") == "w4a8_mxfp4_mxfp8"
    assert experts("h200_sxm", "trtllm") == "w4a16_mxfp4"
    assert experts("b200_sxm", "vllm") == "w4a16_mxfp4"


def test_an_all_reduce_beyond_every_table_of_the_gpu_is_refused_naming_what_was_searched() -> None:
    """No table of the H200 measures an all-reduce of 16 GPUs (its custom all-reduce and
    NCCL tables measure 2, 4 and 8, one NVLink domain): a TP16 composition is refused,
    naming its own table, the shape and every table searched, and nothing is said read
    from elsewhere."""
    from model.catalog import load_model
    from model.errors import OutsideTableError
    from model.performance.kernels import KernelModel, KernelSetup

    db = open_database(str(installed_kernel_tables()))
    trtllm = [v for f, v in db.versions("h200_sxm", "custom_allreduce") if f == "trtllm"]
    if "1.3.0rc20" not in trtllm:
        pytest.skip("the package has no TensorRT-LLM 1.3.0rc20 all-reduce table of the H200")
    km = KernelModel(
        db, load_model("qwen3-32b"), KernelSetup("h200_sxm", "trtllm", "1.3.0rc20", tp=16)
    )
    with pytest.raises(OutsideTableError) as err:
        km.decode(8, 1024)
    assert err.value.table == "h200_sxm/comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet"
    assert err.value.shape["num_gpus"] == 16 and err.value.shape["message_size"] == 8 * 5120
    text = str(err.value)
    assert "no measured rows with num_gpus=16" in text
    assert "searched: custom_allreduce of trtllm " in text and "; all_reduce of nccl " in text
    for f, v in db.versions("h200_sxm", "custom_allreduce"):
        if (f, v) != ("trtllm", "1.3.0rc20"):
            assert f"{f} {v}" in text
    assert km.substitutions == []


def test_a_moe_shape_a_framework_lacks_is_read_from_another_frameworks_table() -> None:
    """TensorRT-LLM 1.3.0rc20's B200 MoE table measures gpt-oss's MXFP4 experts (MXFP8
    activations) at MoE TP 1 only; at TP 4 the layer is read from SGLang's table of
    the GPU, which measures it, and the composition says so."""
    from model.catalog import load_model
    from model.performance.kernels import KernelModel, KernelSetup

    db = open_database(str(installed_kernel_tables()))
    km = KernelModel(db, load_model("gpt-oss-120b"), KernelSetup("b200_sxm", "trtllm",
                                                                  "1.3.0rc20", tp=4))  # fmt: skip
    (moe,) = [c for c in km.decode(16, 2048).calls if c.name == "moe"]
    assert moe.table.startswith("b200_sxm/moe/sglang/")
    shape = dict(moe.shape)
    assert (shape["moe_dtype"], shape["moe_tp_size"]) == ("w4a8_mxfp4_mxfp8", 4)
    other = db.table("b200_sxm", "moe", "sglang", moe.table.split("/")[3])
    assert moe.time_s == other.lookup(**shape).time_s
    (said,) = [s for s in km.substitutions if s.startswith("moe (")]
    assert "trtllm 1.3.0rc20 measures no such shape" in said and "sglang" in said
    own = KernelModel(db, load_model("gpt-oss-120b"), KernelSetup("b200_sxm", "trtllm",
                                                                   "1.3.0rc20", tp=1))  # fmt: skip
    assert not [s for s in own.substitutions if s.startswith("moe (")]


def test_tensorrt_llm_experts_on_blackwell_are_read_where_its_moe_backend_is_measured() -> None:
    """DeepSeek's block-FP8 experts under TensorRT-LLM on B200 (TRTLLM MoE backend,
    TensorRT-LLM-gen kernels, without data-parallel attention; model.performance.kernels.
    TRTLLM_GEN_MOE) are read from SGLang's table of the GPU, which measures those kernels;
    with data-parallel attention (DeepGEMM) and on Hopper, from TensorRT-LLM's own."""
    from model.catalog import load_model
    from model.performance.kernels import KernelModel, KernelSetup

    db = open_database(str(installed_kernel_tables()))
    ds = load_model("deepseek-v3.1")

    def moe_of(gpu: str, tp: int, dp: int = 1, ep: int = 1) -> tuple[KernelModel, list[Any]]:
        km = KernelModel(db, ds, KernelSetup(gpu, "trtllm", "1.3.0rc20", tp=tp, ep=ep,
                                             weight_dtype="fp8", kv_dtype="fp8",
                                             attention_dp=dp))  # fmt: skip
        return km, [c for c in km.decode(4, 1500).calls if c.name == "moe"]

    km, calls = moe_of("b200_sxm", tp=8)
    assert {c.table.split("/")[2] for c in calls} == {"sglang"}
    shape = dict(calls[0].shape)
    assert shape["moe_dtype"] == "fp8_block"
    sglang = db.table("b200_sxm", "moe", "sglang", calls[0].table.split("/")[3])
    assert calls[0].time_s == sglang.lookup(**shape).time_s
    own = db.table("b200_sxm", "moe", "trtllm", "1.3.0rc20").lookup(**shape).time_s
    assert calls[0].time_s < own  # DeepGEMM's table: about 3x at 4 tokens
    assert any("TRTLLM MoE backend" in s for s in km.substitutions)
    km, calls = moe_of("b200_sxm", tp=1, dp=8, ep=8)
    assert {c.table.split("/")[2] for c in calls} == {"trtllm"}
    assert not any("TRTLLM MoE backend" in s for s in km.substitutions)
    km, calls = moe_of("h200_sxm", tp=8)
    assert {c.table.split("/")[2] for c in calls} == {"trtllm"}
