"""Measured kernels in the capacity model (``performance: kernels``): the decode line and
the prefill curve through composed times (model.performance.engine) on tables written here, whose
compositions are computed by hand; Coefficients built from them; the default ``spec``
source unchanged; and the published tables (skipped when absent)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from model.capacity import Coefficients, clear_kernel_cache, evaluate, longest_prompt_tokens
from model.catalog import ModelArch, ServingStack, load_calibration, load_gpu, load_model
from model.errors import InputError
from model.operations import SpecRequest, capacity_report, resolve_spec
from model.performance.engine import (
    PREFILL_CHUNK,
    EngineCalibration,
    EngineOverheads,
    KernelSource,
    KernelTimes,
    choose_version,
    decode_line,
    prefill_curve,
)
from model.performance.kernels import KernelSetup
from model.spec import DeploymentSpec
from model.tables import table_key
from model.workload import parse_workload
from tests.conftest import installed_kernel_tables, kernel_tables
from tests.model.test_kernels import attn_row

MS = 1e-3
GPU, FOLDER, FW, VER = "h200", "h200_sxm", "vllm", "0.0.1"
LAYERS = 3
#: every GEMM takes this long whatever its shape (a power law of exponent 0: the
#: log-log interpolation reproduces it exactly)
GEMM_MS = 0.01
#: decode attention: GEN_MS x batch x past tokens; prefill attention: CTX_MS x tokens^2
#: (power laws, interpolated exactly)
GEN_MS = 3e-5
CTX_MS = 2e-7
OVERHEADS = EngineOverheads(t_iter_s=1e-3, t_req_s=2e-5, t_layer_s=1e-5)
GEMMS_PER_PASS = 4 * LAYERS + 1  # QKV, O, gate-up, down per layer; the LM head


def toy() -> ModelArch:
    """Three layers, 4 query heads and 2 KV heads of 16, hidden 64, MLP 128, vocab 256."""
    return ModelArch(
        name="toy",
        params=1e6,
        layers=LAYERS,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        hidden_size=64,
        intermediate_size=128,
        vocab_size=256,
    )


def _write(root: Path, op: str, kind: str, rows: Sequence[Mapping[str, object]]) -> None:
    path = root / FOLDER / op / FW / VER / f"{kind}_perf.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({c: [r[c] for r in rows] for c in rows[0]}), path)


def _attn(**kw: object) -> dict[str, object]:
    return attn_row(framework="vLLM", kernel_source="flash", **kw)


def make_tables(root: Path) -> Path:
    """The GEMM and attention tables a TP1 pass of :func:`toy` reads, in the published
    layout under ``h200_sxm/*/vllm/0.0.1``."""
    sizes = (64, 128, 256)
    _write(
        root,
        "gemm",
        "gemm",
        [
            {"kernel_source": "torch", "gemm_dtype": "bfloat16", "m": m, "n": n, "k": k,
             "latency": GEMM_MS}
            for m in (1, 64, 1024, 16384) for n in sizes for k in sizes
        ],
    )  # fmt: skip
    _write(
        root,
        "attention",
        "context_attention",
        [_attn(batch_size=1, isl=s, step=0, latency=CTX_MS * s * s)
         for s in (1, 16, 256, 4096, 16384)],
    )  # fmt: skip
    _write(
        root,
        "attention",
        "generation_attention",
        [
            _attn(batch_size=b, isl=1, step=s, latency=GEN_MS * b * s)
            for b in (1, 2, 4, 8, 16, 32, 64)
            for s in (1, 4, 16, 64, 256, 1024, 4096)
        ],
    )
    return root


def engine(version: str = VER) -> EngineCalibration:
    return EngineCalibration(GPU, FW, version, OVERHEADS, "fitted here")


def times(root: Path) -> KernelTimes:
    source = KernelSource(str(root), FW, ((GPU, VER),))
    return KernelTimes.of(source, toy(), GPU, 1, overheads=OVERHEADS)


# ---- by hand: every GEMM takes GEMM_MS, attention is a power law -----------------------


def hand_alpha() -> float:
    """The decode line's intercept: the GEMMs and the overheads independent of B."""
    o = OVERHEADS
    return GEMMS_PER_PASS * GEMM_MS * MS + o.t_iter_s + o.t_layer_s * LAYERS


def hand_g(context: float) -> float:
    """The decode line's slope: attention of one more request, and its own overhead."""
    return LAYERS * GEN_MS * MS * context + OVERHEADS.t_req_s


def hand_a0() -> float:
    """prefill_curve's a_0: a full chunk's GEMMs and overheads shared by its tokens."""
    o = OVERHEADS
    return (GEMMS_PER_PASS * GEMM_MS * MS + o.t_iter_s + o.t_layer_s * LAYERS) / PREFILL_CHUNK


def kernel_spec(root: Path, workload: str = "fixed:1024:8", pool: int = 51_400) -> DeploymentSpec:
    """The toy model on an H200 with the paper's calibration (its power ramps), a pool of
    ``pool`` tokens and no reserved output slots: at ``fixed:1024:8`` the active context
    is 1,028 tokens and the pool holds B_max = 50 of them."""
    return DeploymentSpec(
        toy(),
        load_gpu(GPU),
        load_calibration("qwen3-32b", GPU),
        parse_workload(workload),
        ServingStack(kv_pool_tokens=pool, reserved_tokens=0),
        "paper",
        performance="kernels",
        kernel_source=KernelSource(str(root), FW, ((GPU, VER),)),
        engine=engine(),
    )


@pytest.fixture(name="tables")
def _tables(tmp_path: Path) -> Path:
    clear_kernel_cache()
    return make_tables(tmp_path)


# ---- the forms ------------------------------------------------------------------------


def test_decode_line_recovers_alpha_and_g_of_exactly_linear_times(tables: Path) -> None:
    kt = times(tables)
    for context, batch_max in ((1.0, 64.0), (100.0, 50.5), (1028.0, 8.0)):
        # the composed times themselves are alpha + g B, term by term
        for b in (1, 3, 7):
            assert kt.decode_s(b, context) == pytest.approx(
                hand_alpha() + hand_g(context) * b, rel=1e-12
            )
        line = decode_line(kt, context, batch_max)
        alpha, g = line.coefficients
        assert alpha == pytest.approx(hand_alpha(), rel=1e-9)
        assert g == pytest.approx(hand_g(context), rel=1e-9)
        assert line.worst_deviation < 1e-9
        assert line.points >= 2


def test_decode_line_bends_where_the_times_do() -> None:
    """A deviation is reported where the times are not a line: here one GEMM whose time
    grows as B^2 (a stand-in composition, summed by hand)."""

    class Phase:
        def __init__(self, t: float) -> None:
            self.time_s, self.power_w = t, None

    class Kernels:
        model = toy()
        setup = KernelSetup("toy_gpu", "sglang", "0.5.14")  # no data-parallel attention

        def decode(self, batch: int, context: float) -> Phase:
            return Phase(1e-3 + 1e-6 * batch * batch)

    kt = KernelTimes(Kernels())  # type: ignore[arg-type]
    line = decode_line(kt, 10.0, 100.0)
    fit = line.coefficients[0] + line.coefficients[1] * np.array([1.0, 10.0, 100.0])
    composed = 1e-3 + 1e-6 * np.array([1.0, 10.0, 100.0]) ** 2
    assert np.max(np.abs(fit / composed - 1)) <= line.worst_deviation
    assert 0.1 < line.worst_deviation < 1.0


def test_prefill_curve_returns_the_hand_computed_a0_and_the_attention_term(tables: Path) -> None:
    curve = prefill_curve(times(tables), 4096)
    a_p, b_p = curve.coefficients
    # the prompt's attention is CTX_MS l^2 per layer, exactly quadratic: a_1 = 0
    assert a_p == pytest.approx(hand_a0(), rel=1e-9)
    assert b_p == pytest.approx(LAYERS * CTX_MS * MS, rel=1e-9)
    assert curve.worst_deviation < 1e-9


# ---- Coefficients with kernels --------------------------------------------------------


def test_coefficients_with_kernels_use_the_line_and_the_curve(tables: Path) -> None:
    spec = kernel_spec(tables)
    c = Coefficients.of(spec)
    assert c.ctx_tokens == 1028.0  # 1024 + 8/2 (SPEC 2.4)
    assert c.batch_max == pytest.approx(50.0, rel=1e-12)
    line = decode_line(times(tables), c.ctx_tokens, c.batch_max)
    assert (c.alpha_s, c.g_s_per_request) == line.coefficients
    assert c.alpha_s == pytest.approx(hand_alpha(), rel=1e-9)
    assert c.g_s_per_request == pytest.approx(hand_g(1028.0), rel=1e-9)
    # the context's share of g, from the line at one token: the attention per token
    assert c.g_context_s_per_token == pytest.approx(LAYERS * GEN_MS * MS, rel=1e-6)
    curve = prefill_curve(times(tables), 1024)
    assert (c.a_p_s_per_token, c.b_p_s_per_token2) == curve.coefficients
    t_p = hand_a0() * 1024 + LAYERS * CTX_MS * MS * 1024**2
    assert c.t_prefill_mean_s == pytest.approx(t_p, rel=1e-9)
    assert c.forms is not None
    assert c.forms.decode == line and c.forms.prefill == curve
    assert c.forms.longest_prompt_tokens == 1024.0
    # power: the calibration's ramps, as under spec
    cal = spec.calibration
    assert (c.p0_decode_w, c.psat_prefill_w) == (cal.p0_decode_w, cal.psat_prefill_w)
    # built once per process: the same forms again
    assert Coefficients.of(kernel_spec(tables)).forms is c.forms


def test_the_capacity_report_names_the_performance_source(tables: Path) -> None:
    rep = capacity_report(kernel_spec(tables), 2, 1)
    perf = rep["performance"]
    assert perf["source"] == "kernels"
    assert perf["kernels"] == {
        "folder": tables.name,
        "framework": FW,
        "gpu": GPU,
        "version": VER,
    }
    assert perf["engine_calibration"]["source"] == "fitted here"
    assert perf["engine_calibration"]["t_req_s"] == OVERHEADS.t_req_s
    assert perf["decode_line"]["worst_deviation"] < 1e-9
    assert perf["decode_line"]["batch_to"] == 50
    assert perf["prefill_curve"]["longest_prompt_tokens"] == 1024.0
    assert "ramps" in perf["power"]
    assert rep["capacity_rps"] > 0


def test_the_simulator_times_decode_by_the_line(tables: Path) -> None:
    from model.simulator import SimTiming

    spec = kernel_spec(tables)
    c = Coefficients.of(spec)
    tm = SimTiming.of(spec)
    assert (tm.a_p_s_per_token, tm.b_p_s_per_token2) == (c.a_p_s_per_token, c.b_p_s_per_token2)
    for n in (1, 7, 50):
        # n requests at the mean context: the line; the context's share per token
        assert tm.t_decode_s(n, n * c.ctx_tokens) == pytest.approx(
            c.alpha_s + c.g_s_per_request * n, rel=1e-12
        )
        assert tm.t_decode_s(n, n * (c.ctx_tokens + 10)) - tm.t_decode_s(
            n, n * c.ctx_tokens
        ) == pytest.approx(10 * n * c.g_context_s_per_token, rel=1e-6)
    # spec: the rooflines, as before
    roof = SimTiming.of(resolve_spec(SpecRequest(workload="fixed:4096:256")))
    assert roof.kernel_iteration_s is None and roof.kernel_token_s is None


def test_a_prompt_beyond_the_attention_table_is_carried_by_the_form_and_said(
    tables: Path,
) -> None:
    """The attention table stops short of the workload's longest prompt: the curve is
    fitted to the measured lengths, carries the quadratic beyond them, and says where
    the measurements stop (nothing is refused silently, nothing extrapolated unsaid)."""
    curve = prefill_curve(times(tables), 20_000)
    assert curve.extends_beyond is not None and curve.extends_beyond < 20_000
    assert curve.domain[1] == curve.extends_beyond
    measured = prefill_curve(times(tables), curve.extends_beyond)
    assert measured.extends_beyond is None
    assert measured.coefficients == pytest.approx(curve.coefficients, rel=1e-9)


def test_a_context_beyond_the_tables_is_an_error_naming_the_workload(tables: Path) -> None:
    spec = kernel_spec(tables, "fixed:2048:8192", pool=600_000)
    with pytest.raises(InputError) as err:
        Coefficients.of(spec)
    assert err.value.field == "workload"
    assert "generation_attention_perf.parquet" in err.value.reason


def test_longest_prompt_of_the_moments() -> None:
    assert longest_prompt_tokens(parse_workload("fixed:4096:256")) == 4096.0
    w = parse_workload("azure-conv-2023")
    assert longest_prompt_tokens(w) == w.max_tokens - 1


def test_a_deployment_says_what_kernels_need(tables: Path) -> None:
    spec = kernel_spec(tables)
    with pytest.raises(InputError) as err:
        dataclasses.replace(spec, kernel_source=None)
    assert err.value.field == "kernels"
    with pytest.raises(InputError) as err:
        dataclasses.replace(spec, engine=None)
    assert err.value.field == "performance"
    with pytest.raises(InputError) as err:
        dataclasses.replace(spec, performance="spec")
    assert err.value.field == "performance"
    with pytest.raises(InputError) as err:
        dataclasses.replace(spec, performance="roofline")
    assert err.value.field == "performance"
    other = KernelSource(str(tables), "tensorflow", ((GPU, VER),))
    with pytest.raises(InputError) as err:
        dataclasses.replace(spec, kernel_source=other)
    assert err.value.field == "framework"
    with pytest.raises(InputError, match="no vllm kernel tables chosen for h200"):
        dataclasses.replace(spec, kernel_source=KernelSource(str(tables), FW, ()))


def test_table_keys_hold_the_performance_choice_and_what_kernels_depend_on(tables: Path) -> None:
    spec = kernel_spec(tables)
    keys = {
        table_key(s, [1], [1])
        for s in (
            spec,
            dataclasses.replace(spec, performance="spec", kernel_source=None, engine=None),
            dataclasses.replace(
                spec, engine=dataclasses.replace(engine(), overheads=EngineOverheads(2e-3))
            ),
            dataclasses.replace(spec, kernel_source=KernelSource(str(tables), FW, ((GPU, "9"),))),
        )
    }
    assert len(keys) == 4


# ---- spec: unchanged ------------------------------------------------------------------


def test_spec_is_the_default_and_bit_identical_to_the_paper_tab3_numbers() -> None:
    """Qwen3-32B on H200, the paper's Tab. 3 calibration (SPEC 2.1-2.3), fixed 4096/256:
    the default performance source is ``spec`` and gives SPEC's coefficients; naming it
    changes no bit of any configuration."""
    default = resolve_spec(SpecRequest(workload="fixed:4096:256", model_variant="paper"))
    named = resolve_spec(
        SpecRequest(workload="fixed:4096:256", model_variant="paper", performance="spec")
    )
    assert default.performance == "spec" and default == named
    c = Coefficients.of(named)
    assert c.forms is None
    pi, beta, mfu, mbu = 989e12, 4.8e12, 0.67, 0.77
    assert c.a_p_s_per_token == pytest.approx(2 * 32.8e9 / (pi * mfu), rel=1e-12)
    assert c.b_p_s_per_token2 == pytest.approx(2.17 * 64 * 8192 / (pi * mfu), rel=1e-12)
    assert c.alpha_s == pytest.approx(65.6e9 / (beta * mbu) + 1e-3, rel=1e-12)
    assert c.g_s_per_request == pytest.approx(262144 * 4224 / (beta * mbu) + 0.062e-3, rel=1e-12)
    n_p, n_d = np.meshgrid(np.arange(1, 9), np.arange(1, 9))
    a = evaluate(default, n_p.ravel(), n_d.ravel())
    b = evaluate(named, n_p.ravel(), n_d.ravel())
    assert a.capacity_rps.tobytes() == b.capacity_rps.tobytes()
    assert a.power_w.tobytes() == b.power_w.tobytes()
    # the hand-computed 3P1D capacity of tests/model/test_capacity.py's SPEC example
    assert capacity_report(named, 3, 1)["performance"]["source"] == "spec"


def test_spec_refuses_kernel_options(no_kernel_package: None) -> None:
    for kw in ({"framework": "vllm"}, {"kernel_versions": {"h200": "0.24.0"}}):
        with pytest.raises(InputError, match="only used with performance 'kernels'"):
            resolve_spec(SpecRequest(**kw))  # type: ignore[arg-type]
    with pytest.raises(InputError) as err:
        resolve_spec(SpecRequest(performance="kernels"))  # no folder, no package
    assert err.value.field == "performance"
    assert "kernel database" in err.value.reason


# ---- the published tables -------------------------------------------------------------


def published() -> str:
    return str(kernel_tables())


def test_qwen3_32b_on_h100_with_the_shipped_engine_calibration() -> None:
    folder = published()
    spec = resolve_spec(
        SpecRequest(
            gpu="h100-sxm",
            workload="fixed:4096:256",
            performance="kernels",
            kernels=folder,
        )
    )
    assert spec.engine is not None and spec.kernel_source is not None
    assert spec.kernel_source.version("h100-sxm") == spec.engine.version
    c = Coefficients.of(spec)
    assert c.forms is not None
    # the decode line within a few per cent of the composed times over its batches
    assert c.forms.decode.worst_deviation < 0.05
    # a decode iteration reads 65.6 GB of weights: above the 3.35 TB/s floor, below twice
    floor = 65.6e9 / 3.35e12
    assert floor < c.alpha_s < 2 * floor
    assert c.g_s_per_request > 0 and c.a_p_s_per_token > 0 and c.b_p_s_per_token2 >= 0
    rep = capacity_report(spec, 3, 1)
    assert rep["performance"]["kernels"]["folder"] == "aiconfigurator"
    assert rep["performance"]["kernels"]["framework"] == "vllm"
    assert math.isfinite(rep["capacity_rps"]) and rep["capacity_rps"] > 0


@pytest.mark.slow
def test_a_mixture_of_experts_line_starts_where_every_expert_is_read() -> None:
    """Qwen3-30B-A3B (8 of 128 experts): (1 - 8/128)^B < 1% from B = 72; the line over
    72..B_max follows the composed times far closer than one from a single request,
    where the batch leaves experts unread."""
    from model.catalog import load_model
    from model.performance.engine import KernelSource, KernelTimes, all_experts_batch

    folder = published()
    model = load_model("qwen3-30b-a3b")
    assert all_experts_batch(model) == pytest.approx(math.log(0.01) / math.log(1 - 8 / 128))
    assert math.ceil(all_experts_batch(model)) == 72
    kt = KernelTimes.of(KernelSource(folder, "vllm", (("b200", "0.19.0"),)), model, "b200", 1)
    line = decode_line(kt, 1024.0, 512.0)
    assert line.domain == (72.0, 512.0)
    # every batch from 72 on is within the reported deviation, which is small
    for b in (72, 100, 200, 512):
        alpha, g = line.coefficients
        assert abs((alpha + g * b) / kt.decode_s(b, 1024.0) - 1) <= line.worst_deviation + 1e-12
    assert line.worst_deviation < 0.1
    # the same fit from one request strays much further
    assert kt.decode_s(16, 1024.0) / kt.decode_s(1, 1024.0) > 1.5


def test_the_per_request_overhead_is_on_each_data_parallel_ranks_share() -> None:
    """``t_D = K_D + t_iter + t_req B / D`` (model/performance/engine.py): each of the ``D``
    data-parallel attention ranks schedules and samples its own share of the batch, all
    at once; without data-parallel attention ``D`` is 1."""
    folder = str(installed_kernel_tables())
    version, _ = choose_version(folder, "b200", "sglang", None, None)
    source = KernelSource(folder, "sglang", (("b200", version),))
    o = EngineOverheads(t_iter_s=1e-3, t_req_s=20e-6)
    m = load_model("deepseek-v3.1")
    for tp, dp in ((8, 1), (1, 8)):
        t = KernelTimes.of(source, m, "b200", tp, 8, overheads=o, attention_dp=dp)
        for b in (8.0, 256.0):
            extra = t.decode_s(b, 2048.0) - t.decode_kernels_s(b, 2048.0)
            assert extra == pytest.approx(1e-3 + 20e-6 * b / dp, rel=1e-9)
