"""TTFT and TPOT of AIConfigurator's measured serving runs (``model/measured/silicon.py``) on a
50-row sample of the installed package's ``silicon_sample.csv``; skipped when
aiconfigurator-core is not installed."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest

from model.catalog import load_gpu, load_model
from model.errors import InputError
from model.measured import silicon
from model.performance.engine import GPU_FOLDERS, open_database
from model.performance.kernels import KernelModel, KernelSetup
from tests.conftest import installed_kernel_tables


@cache
def _rows() -> tuple[silicon.SiliconRow, ...]:
    path = silicon.installed_silicon()
    if path is None:
        pytest.skip("the aiconfigurator-core package is not installed")
    return tuple(silicon.read_silicon(path))


def sample() -> list[silicon.SiliconRow]:
    """50 rows: every 44th of the file's rows but those of H200 and B200 (whose tables
    would take most of the test's time to load), rows the tables cannot compose among
    them."""
    return [r for r in _rows() if r.system not in ("h200_sxm", "b200_sxm")][::44][:50]


@cache
def _dense(per_model: int = 8) -> tuple[silicon.Case, ...]:
    """Composed rows of two models in one (GPU, framework): H100 under TensorRT-LLM."""
    folder = str(installed_kernel_tables())
    out: list[silicon.Case] = []
    for path in ("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct"):
        sel = [
            r
            for r in _rows()
            if r.model_path == path and r.system == "h100_sxm" and r.backend == "trtllm"
        ]
        for r in sel[:: max(1, len(sel) // per_model)][:per_model]:
            c = silicon.resolve(r, folder)
            assert isinstance(c, silicon.Case), c
            out.append(c)
    return tuple(out)


def test_file_read_whole() -> None:
    rows = _rows()
    assert len(rows) == 5221  # the rows of aiconfigurator-core 0.12.0's file
    assert len({r.id for r in rows}) == len(rows)


def test_every_sampled_row_predicted_or_given_a_reason() -> None:
    rows = sample()
    assert len(rows) == 50
    cases, skipped = silicon.resolve_all(rows, str(installed_kernel_tables()))
    ids = [c.row.id for c in cases] + [s.row.id for s in skipped]
    assert sorted(ids) == sorted(r.id for r in rows)
    assert cases and skipped
    assert all(s.reason for s in skipped)
    solved = silicon.solve(cases, silicon.Overheads())
    assert np.all(np.isfinite(solved.ttft)) and np.all(solved.ttft > 0)
    assert np.all(np.isfinite(solved.tpot)) and np.all(solved.tpot > 0)
    doc = silicon.report(cases, skipped, solved, solved, [None] * len(cases))
    assert doc["summary"]["all"]["rows"] == 50
    assert doc["summary"]["all"]["composed"] == len(cases)


def test_reasons_name_what_is_missing() -> None:
    folder = str(installed_kernel_tables())
    qwen = next(r for r in _rows() if r.model_path == "Qwen/Qwen3-32B")
    r = silicon.resolve(dataclasses.replace(qwen, model_path="example/NoSuchModel"), folder)
    assert isinstance(r, silicon.Unpredicted)
    assert r.reason == "model example/NoSuchModel not in the catalog"
    r = silicon.resolve(dataclasses.replace(qwen, system="no_such_gpu"), folder)
    assert isinstance(r, silicon.Unpredicted) and "gpu no_such_gpu not in the catalog" in r.reason
    # DeepSeek-R1 in FP8 (its block-scaled release) is composed: MLA and MoE tables
    row = next(
        r for r in _rows() if r.model_path == "deepseek-ai/DeepSeek-R1" and r.precision == "fp8"
        and r.system == "h200_sxm" and r.mode == "agg"
    )  # fmt: skip
    r = silicon.resolve(row, folder)
    assert not isinstance(r, silicon.Unpredicted), r.reason


#: rows of each 4-bit release of a mixture of experts: (model_path, precision, system,
#: framework, mode) -> (the model measured, the release composed, GEMM dtype, MoE
#: dtype, the GEMM dtype of each weight group, what the notes must say)
FOUR_BIT_ROWS = {
    ("deepseek-ai/DeepSeek-V3", "fp4", "gb300", "sglang", "disagg"): (
        "deepseek-v3.1", "deepseek-v3.1-nvfp4", "nvfp4", "nvfp4",
        {"attention": "bfloat16", "attention_out": "nvfp4", "mlp": "nvfp4",
         "shared": "nvfp4"},
        "attention output projection",
    ),
    ("deepseek-ai/DeepSeek-V3", "fp4", "gb300", "trtllm", "disagg"): (
        "deepseek-v3.1", "deepseek-v3.1-nvfp4", "nvfp4", "nvfp4",
        {"attention": "bfloat16", "attention_out": "nvfp4", "mlp": "nvfp4",
         "shared": "nvfp4"},
        "at one GEMM dtype",  # the MLA module tables are left for the kernels
    ),
    ("MiniMaxAI/MiniMax-M2.5", "fp4", "b300_sxm", "vllm", "agg"): (
        "minimax-m2.5", "minimax-m2.5-nvfp4", "nvfp4", "nvfp4",
        {"attention": "bfloat16", "attention_out": "bfloat16"},
        "NVFP4 routed experts, every other weight bf16",
    ),
    ("zhipuai/GLM-5", "fp4", "b200_sxm", "sglang", "agg"): (
        "glm-5", "glm-5-nvfp4", "nvfp4", "nvfp4",
        {"attention": "bfloat16", "attention_out": "bfloat16", "mlp": "nvfp4",
         "shared": "nvfp4"},
        "shared experts, dense layers' MLPs, every other weight bf16",
    ),
    ("moonshotai/Kimi-K2.5", "fp4", "gb200", "vllm", "disagg"): (
        "kimi-k2.5", "kimi-k2.5-nvfp4", "nvfp4", "nvfp4",
        {"attention": "bfloat16", "attention_out": "bfloat16", "mlp": "nvfp4",
         "shared": "nvfp4"},
        "has deepseek-ai/DeepSeek-V3's shapes",  # its MLA module rows
    ),
    ("moonshotai/Kimi-K2.5", "int4", "h200_sxm", "vllm", "agg"): (
        "kimi-k2.5", "", "bfloat16", "int4_wo",
        {"attention": "bfloat16", "attention_out": "bfloat16", "mlp": "bfloat16",
         "shared": "bfloat16"},
        "weight-only int4_wo",
    ),
}  # fmt: skip


@cache
def _four_bit(key: tuple[str, str, str, str, str]) -> silicon.Case:
    """The first row of ``key`` the tables compose."""
    folder = str(installed_kernel_tables())
    path, precision, system, backend, mode = key
    for r in _rows():
        if (r.model_path, r.precision, r.system, r.backend, r.mode) == key:
            c = silicon.resolve(r, folder)
            if isinstance(c, silicon.Case):
                return c
    raise AssertionError(f"no row of {key} composed")


def _kernel_model(case: silicon.Case, phase: silicon.Phase) -> KernelModel:
    """The kernel composition of one of the case's workers, set up anew."""
    setup = KernelSetup(
        GPU_FOLDERS[case.gpu], case.framework, case.version, tp=phase.tp, ep=phase.moe_ep,
        weight_dtype=case.weight_dtype, kv_dtype=silicon.kv_dtype(case.framework,
                                                                   case.weight_dtype),
        attention_dp=phase.dp, fabric=load_gpu(case.gpu).fabric,
    )  # fmt: skip
    db = open_database(str(installed_kernel_tables()))
    return KernelModel(db, load_model(case.release or case.model), setup)


@pytest.mark.parametrize("key", sorted(FOUR_BIT_ROWS), ids="-".join)
def test_four_bit_releases_are_composed_from_their_catalog_entry(key) -> None:
    """A mixture of experts measured in NVFP4 (or Moonshot's INT4) is the catalog's
    release of it: the row's model is the one left out in the fits, the release's entry
    composed, with its weights in the release's dtypes, and the composed times are the
    kernel composition's of that setup."""
    model, release, gemm, moe, groups, said = FOUR_BIT_ROWS[key]
    case = _four_bit(key)
    assert (case.model, case.release) == (model, release)
    assert (case.weight_dtype, case.expert_dtype) == (gemm, moe)
    assert any(said in n for n in case.notes), case.notes
    row = case.row
    if row.mode == "agg":
        assert row.agg is not None
        workers = [(row.agg, case.prefill), (row.agg, case.decode)]
    else:
        assert row.prefill is not None and row.decode is not None
        workers = [(row.prefill, case.prefill), (row.decode, case.decode)]
    (p_phase, p_inst), (d_phase, d_inst) = workers
    km = _kernel_model(case, p_phase)
    dtypes = km.weight_dtypes
    assert dtypes["experts"] == ((km.model.moe_layers, moe),)
    for group, dtype in groups.items():
        assert {d for _, d in dtypes[group]} == {dtype}, group
    assert p_inst.prefill_s == km.t_prefill(row.isl)
    km = km if d_phase == p_phase else _kernel_model(case, d_phase)
    context = row.isl + row.osl / 2.0
    for b, t in zip(d_inst.batches, d_inst.decode_s, strict=True):
        assert t == km.t_decode(float(b), context)


def test_a_four_bit_precision_without_a_release_is_refused() -> None:
    folder = str(installed_kernel_tables())
    cases = [  # (model path, precision, GEMM and MoE quantisation, catalog model)
        ("Qwen/Qwen3-235B-A22B-FP8", "fp4", "nvfp4", "qwen3-235b-a22b"),
        ("deepseek-ai/DeepSeek-R1", "int4", "int4_wo", "deepseek-v3.1"),
        ("moonshotai/Kimi-K2.5", "fp8", "fp8", "kimi-k2.5"),  # Moonshot's INT4: no FP8 release
    ]
    for path, precision, quant, name in cases:
        first = next(r for r in _rows() if r.model_path == path)
        row = dataclasses.replace(first, precision=precision, gemm_quant=quant, moe_quant=quant)
        r = silicon.resolve(row, folder)
        assert isinstance(r, silicon.Unpredicted)
        assert r.reason == (f"precision {precision} (GEMM {quant}, MoE {quant}): the catalog "
                            f"has no such release of {name}")  # fmt: skip


def _simulate_waves(
    clients: int, isl: int, osl: int, budget: int, token_s: float, step_s: float,
    t_iter: float, t_first: float, rounds: int = 6,
) -> tuple[float, float]:  # fmt: skip
    """Brute force: ``clients`` closed-loop clients against a prefill-first engine that
    does not mix (one iteration at a time: a prefill iteration of up to ``budget``
    waiting prompt tokens, in arrival order, while any wait; else a decode iteration of
    every running request). Each client sends its next request when its answer ends
    (after ``t_first``, the time outside the engine). Mean TTFT and (e2e - TTFT) / (osl
    - 1) over the rounds after the first."""
    t = 0.0
    arrive = [0.0] * clients
    left = [isl] * clients  # prompt tokens still to prefill
    first = [0.0] * clients
    tokens = [0] * clients
    ttft: list[float] = []
    tpot: list[float] = []
    done = [0] * clients
    while min(done) < rounds:
        waiting = [i for i in range(clients) if left[i] > 0 and arrive[i] <= t]
        waiting.sort(key=lambda i: (arrive[i], i))
        if waiting:
            room, took = budget, []
            for i in waiting:
                n = min(room, left[i])
                left[i] -= n
                room -= n
                took.append(i)
                if room == 0:
                    break
            t += t_iter + token_s * (budget - room)
            for i in took:
                if left[i] == 0:
                    first[i] = t
                    tokens[i] = 1
            continue
        running = [i for i in range(clients) if left[i] == 0 and tokens[i] > 0]
        if not running:
            t = min(a for a in arrive if a > t)
            continue
        t += step_s
        for i in running:
            tokens[i] += 1
            if tokens[i] == osl:
                if done[i] >= 1:
                    ttft.append(first[i] - arrive[i] + t_first)
                    tpot.append((t - first[i]) / (osl - 1))
                done[i] += 1
                tokens[i] = 0
                left[i] = isl
                arrive[i] = t + t_first
    return float(np.mean(ttft)), float(np.mean(tpot))


@pytest.mark.parametrize(
    ("clients", "isl", "budget"), [(1, 1024, 8192), (16, 1024, 8192), (40, 1000, 2524),
                                   (7, 3000, 2048), (128, 2048, 16384)]
)  # fmt: skip
def test_wave_formula_against_a_simulated_loop(clients: int, isl: int, budget: int) -> None:
    """The closed form of a synchronised wave (``wave_times``) is the mean of a brute-
    force iteration-by-iteration run of the closed loop, on toy iteration times."""
    osl, token_s, step_s, t_iter, t_first = 64, 2e-5, 7e-3, 3e-3, 0.02
    ttft, tpot = silicon.wave_times(clients, isl, osl, budget, token_s, step_s, t_iter, t_first)
    sim_ttft, sim_tpot = _simulate_waves(clients, isl, osl, budget, token_s, step_s, t_iter,
                                         t_first)  # fmt: skip
    assert ttft == pytest.approx(sim_ttft, rel=1e-9)
    assert tpot == pytest.approx(sim_tpot, rel=1e-9)
    # the mean TTFT grows with the wave: the last prompt waits for every other one
    if clients * isl > budget:
        assert ttft > t_first + t_iter + token_s * isl


def test_schedule_follows_the_rows_engine_and_date() -> None:
    row = silicon.parse_silicon("x.csv", HEADER + "\n" + _line() + "\n")[0]
    dated = dataclasses.replace(row, source="measured=2026-03-01T00:00:00Z")
    vllm_default = silicon.schedule(row, 8)
    assert (vllm_default.budget, vllm_default.mixed) == (8192 - 8, True)
    assert silicon.schedule(dated, 8).budget == 512 + 1024 + 1500 - 8
    sg = dataclasses.replace(row, backend="sglang")
    assert not silicon.schedule(sg, 8).mixed and silicon.schedule(sg, 8).budget == 8192
    sg_dated = silicon.schedule(dataclasses.replace(dated, backend="sglang"), 8)
    assert sg_dated.mixed and sg_dated.budget == 1024 + 1500 - 8
    trt = silicon.schedule(dataclasses.replace(dated, backend="trtllm"), 8)
    assert not trt.chunked and trt.budget == 1024  # one whole prompt per iteration


@pytest.mark.parametrize("draft", [0, 2])
def test_closed_loop_fixed_point(draft: int) -> None:
    """The solved state holds the row's clients: ``r (TTFT + (osl - 1) TPOT) = C`` and,
    aggregated, the decode batch is the requests in their decode phase. Under MTP
    (``draft`` tokens per iteration) a request gains ``g`` tokens per iteration: TPOT is
    the iteration, stretched by the prefills' share, over ``g``."""
    deepseek = load_model("deepseek-v3.1")  # the published MTP acceptance
    accept = (deepseek.mtp_accept_first, deepseek.mtp_accept_next)
    cases = [dataclasses.replace(c, draft_tokens=draft, accept=accept) for c in _dense()]
    o = silicon.Overheads(1e-3, 1e-5, 0.05, t_layer_s=2e-5)
    s = silicon.solve(cases, o)
    c = np.array([float(x.row.concurrency or 0) for x in cases])
    osl = np.array([float(x.row.osl) for x in cases])
    held = s.rate * (s.ttft + (osl - 1.0) * s.tpot)
    assert np.allclose(held, c, rtol=1e-6)
    free = s.capped == 0
    assert free.any()
    assert np.allclose(s.batch[free], (s.rate * (osl - 1.0) * s.tpot)[free], rtol=1e-5)
    # TPOT: the decode iteration stretched by the prefills' share of the time
    assert np.all(s.tpot > 0) and np.all((s.rho >= 0) & (s.rho < 1))
    mixed = free & np.array([x.schedule.mixed for x in cases])
    assert mixed.any()
    step = np.array([np.interp(b, x.decode.batches, x.decode.decode_s)
                     for b, x in zip(s.batch, cases, strict=True)])  # fmt: skip
    layers = np.array([float(x.layers) for x in cases])
    step += o.t_iter_s + o.t_layer_s * layers + o.t_req_s * s.batch
    g = cases[0].gained
    assert g == (1.0 if draft == 0 else pytest.approx(2.414, abs=1e-3))
    assert np.allclose((s.tpot * g * (1.0 - s.rho))[mixed], step[mixed], rtol=1e-6)


def test_a_fit_is_its_four_overheads_with_no_fixed_time_per_iteration() -> None:
    """The fits (:data:`model.measured.silicon.OVERHEADS`) take the engine's fixed time
    per iteration per layer (docs/validation-silicon.md, section 4): ``overheads_of``
    maps the fitted values by name and leaves ``t_iter_s`` at 0, and a time per layer
    adds ``t_layer`` times the model's layers to every decode step."""
    o = silicon.overheads_of([2e-5, 1e-5, 0.05, 0.2])
    assert o == silicon.Overheads(0.0, 1e-5, 0.05, 0.2, 2e-5)
    assert list(o.as_dict()) == list(silicon.OVERHEADS)
    cases = [c for c in _dense() if c.schedule.mixed]
    per_layer = silicon.solve(cases, o)
    most = max(x.layers for x in cases)  # Qwen3-32B's 64 layers; Llama 3.1 8B has 32
    fixed = silicon.solve(cases, dataclasses.replace(o, t_layer_s=0.0, t_iter_s=2e-5 * most))
    same = np.array([x.layers == most for x in cases])  # the same time per iteration
    assert same.any() and not same.all()
    assert np.allclose(per_layer.tpot[same], fixed.tpot[same], rtol=1e-9)
    assert np.all(per_layer.tpot[~same] < fixed.tpot[~same])


def test_bunching_adds_a_share_of_the_waves_wait() -> None:
    """A bunched staggered loop (docs/validation-silicon.md, section 2): at bunching
    ``beta`` a request's TTFT is the staggered one plus ``beta`` of a synchronised
    wave's mean wait, ``(C / ranks - 1) / 2`` prompts of ``P`` on its rank, at the
    rate that still holds the clients; TTFT grows with ``beta`` and the loop keeps
    its clients."""
    cases = [c for c in _dense() if c.schedule.mixed]
    assert cases
    base = silicon.Overheads(1e-3, 1e-5, 0.05)
    solved = [silicon.solve(cases, dataclasses.replace(base, bunching=b))
              for b in (0.0, 0.3, 1.0)]  # fmt: skip
    c = np.array([float(x.row.concurrency or 0) for x in cases])
    osl = np.array([float(x.row.osl) for x in cases])
    free = np.ones(len(cases), dtype=bool)
    for s in solved:
        assert np.allclose(s.rate * (s.ttft + (osl - 1.0) * s.tpot), c, rtol=1e-6)
        free &= s.capped == 0
    assert np.all(solved[1].ttft[free] > solved[0].ttft[free])
    assert np.all(solved[2].ttft[free] > solved[1].ttft[free])
    # the added wait, at the bunched state's own rate and batch, is beta's share of
    # the wave's: the staggered TTFT of that state plus the wait
    one = silicon.solve(cases, dataclasses.replace(base, bunching=1.0))
    ranks = np.array([float(x.prefill.ranks * x.prefill.workers) for x in cases])
    prompt = np.array([x.prefill.token_s * x.row.isl for x in cases])
    wait = np.maximum(0.0, c / ranks - 1.0) / 2.0 * prompt
    assert np.all(wait[free] > 0)
    steps = one.tpot * (1.0 - one.rho)  # the decode step under the prefills' share
    chunks = np.array([np.ceil(x.row.isl / x.schedule.budget) for x in cases])
    staggered = base.t_first_s + one.tpot + chunks * steps + prompt
    assert np.allclose(one.ttft[free], (staggered + wait)[free], rtol=1e-9)


def test_leave_one_model_out_ignores_the_models_rows() -> None:
    """Changing one model's measurements leaves its own predictions unchanged (its
    overheads come from the other model's rows) and changes the other's."""
    cases = list(_dense())
    first, fits = silicon.leave_one_model_out(cases)
    assert all(f is not None for f in fits)
    for c, f in zip(cases, fits, strict=True):
        assert f is not None and c.model not in f.models

    def scaled(c: silicon.Case) -> silicon.Case:
        row = dataclasses.replace(c.row, ttft_ms=c.row.ttft_ms * 1.7, tpot_ms=c.row.tpot_ms * 1.3)
        return dataclasses.replace(c, row=row)

    moved = [scaled(c) if c.model == "qwen3-32b" else c for c in cases]
    second, _ = silicon.leave_one_model_out(moved)
    own = np.array([c.model == "qwen3-32b" for c in cases])
    assert np.array_equal(first.ttft[own], second.ttft[own])
    assert np.array_equal(first.tpot[own], second.tpot[own])
    assert not np.allclose(first.ttft[~own], second.ttft[~own])


HEADER = ",".join(silicon.REQUIRED)


def _line(**values: str) -> str:
    base = {c: "" for c in silicon.REQUIRED}
    base.update(id="r1", backend="vllm", model_path="Qwen/Qwen3-32B", system="h100_sxm",
                mode="agg", isl="1024", osl="128", batch_size="8", tp_size="2",
                silicon_ttft_ms="100", silicon_tpot_ms="10")  # fmt: skip
    base.update(values)
    return ",".join(base[c] for c in silicon.REQUIRED)


def test_bad_files_name_the_column() -> None:
    with pytest.raises(InputError, match="missing the column.*silicon_tpot_ms"):
        silicon.parse_silicon("x.csv", HEADER.replace(",silicon_tpot_ms", "") + "\n")
    with pytest.raises(InputError, match=r"line 2 \(r1\): isl") as e:
        silicon.parse_silicon("x.csv", HEADER + "\n" + _line(isl="long") + "\n")
    assert "x.csv" in e.value.field
    with pytest.raises(InputError, match="silicon_ttft_ms.*> 0"):
        silicon.parse_silicon("x.csv", HEADER + "\n" + _line(silicon_ttft_ms="-3") + "\n")
    with pytest.raises(InputError, match="mode"):
        silicon.parse_silicon("x.csv", HEADER + "\n" + _line(mode="mixed") + "\n")
    rows = silicon.parse_silicon("x.csv", HEADER + "\n" + _line() + "\n")
    assert rows[0].concurrency == 8 and rows[0].agg is not None and rows[0].agg.tp == 2
    assert silicon.is_silicon_header(HEADER)
    assert not silicon.is_silicon_header("model,gpu,tp,batch,itl_ms")


def test_a_single_node_recipes_tp_times_ep_recorded_as_tp_is_read_as_the_recipe() -> None:
    """InferenceX's single-node ``dsr1-fp4-b200-sglang`` ``{ tp: 8, ep: 8 }`` is recorded
    as tp_size 64 with MoE tp 8 x ep 8; it is read as attention TP 8 with the experts
    EP 8 (MoE tp 1) on 8 GPUs, said in the notes. A row that fits its node, or a
    system whose NVLink rack spans more GPUs (GB200), is read as it states."""
    rows = _rows()
    big = [r for r in rows if r.system == "b200_sxm" and r.mode == "agg" and r.agg is not None
           and (r.agg.tp, r.agg.moe_tp, r.agg.moe_ep) == (64, 8, 8)]  # fmt: skip
    assert big
    for r in big:
        read = silicon.recipe_parallelism(r)
        assert read is not None
        row, note = read
        assert row.agg is not None
        assert (row.agg.tp, row.agg.dp, row.agg.moe_tp, row.agg.moe_ep) == (8, 1, 1, 8)
        assert (row.id, row.concurrency, row.ttft_ms) == (r.id, r.concurrency, r.ttft_ms)
        assert "tp_size 64 = MoE tp 8 x ep 8" in note
    folder = str(installed_kernel_tables())
    case = next(c for r in big if isinstance(c := silicon.resolve(r, folder), silicon.Case))
    assert any("read as the recipe tp 8, ep 8" in n for n in case.notes)
    fits = next(r for r in rows if r.mode == "agg" and r.agg is not None and r.agg.tp == 8)
    assert silicon.recipe_parallelism(fits) is None
    rack = [r for r in rows if r.system == "gb200" and r.agg is not None and r.agg.tp > 8]
    assert rack and all(silicon.recipe_parallelism(r) is None for r in rack)


def test_records_of_one_run_share_what_either_states() -> None:
    """Rows with the same system, framework, lengths, TTFT and TPOT to the last digit are
    one run recorded twice (the file holds such pairs from its two sources). A twin the
    published configurations identify as an MTP run refuses the other record too; a
    disaggregated record without worker counts, that no published configuration
    completes, takes its twin's stated workers."""
    rows = _rows()
    folder = str(installed_kernel_tables())
    runs = silicon.records_by_run(rows)
    flagged = [(r, t) for group in runs.values() for r in group for t in group
               if t is not r and silicon.speculative_of(r) is None
               and silicon.speculative_of(t) is not None]  # fmt: skip
    assert flagged
    row, twin = flagged[0]
    alone = silicon.resolve(row, folder)
    assert not (isinstance(alone, silicon.Unpredicted) and "same measurement" in alone.reason)
    got = silicon.resolve(row, folder, [twin])
    assert isinstance(got, silicon.Unpredicted)
    assert got.reason.startswith(f"the same measurement as row {twin.id}")
    assert str(silicon.speculative_of(twin)) in got.reason
    told = [(r, t) for group in runs.values() for r in group for t in group
            if t is not r and r.mode == "disagg" and r.prefill is not None
            and r.prefill.workers is None and t.prefill is not None
            and t.prefill.workers is not None
            and not isinstance(silicon.published_config(r), tuple)
            and all(silicon.speculative_of(x) is None for x in group)]  # fmt: skip
    assert told
    row, twin = told[0]
    assert isinstance(silicon.resolve(row, folder), silicon.Unpredicted)
    case = silicon.resolve(row, folder, [twin])
    if isinstance(case, silicon.Case):
        assert any(n.startswith(f"workers from row {twin.id}") for n in case.notes)
        assert (case.row.prefill, case.row.decode) == (twin.prefill, twin.decode)
    else:  # the twin's workers are read, and the tables refuse them as they refuse the twin's
        assert not case.reason.startswith("disaggregated row without")


def test_a_record_saying_it_ran_mtp_is_refused_whatever_its_twin_states() -> None:
    """A disaggregated record without worker counts whose own published configuration
    says it ran MTP stays refused although its twin (the same run) states its workers;
    the twin, whose record does not say so, is refused by the first record's."""
    rows = _rows()
    folder = str(installed_kernel_tables())
    runs = silicon.records_by_run(rows)
    pairs = [(r, t) for group in runs.values() for r in group for t in group
             if t is not r and r.mode == "disagg" and r.prefill is not None
             and r.prefill.workers is None and silicon.speculative_of(r) is not None
             and t.prefill is not None and t.prefill.workers is not None]  # fmt: skip
    assert pairs
    row, twin = pairs[0]
    got = silicon.resolve(row, folder, [twin])
    assert isinstance(got, silicon.Unpredicted) and "MTP" in got.reason, got
    back = silicon.resolve(twin, folder, [row])
    assert isinstance(back, silicon.Unpredicted)
    assert back.reason.startswith(f"the same measurement as row {row.id}")


def test_closed_loop_holds_its_clients_where_the_step_rises_steeply() -> None:
    """The loop is solved by its decode batch (docs/validation-silicon.md, section 2):
    a worker whose composed step rises steeply between two composed batches still runs
    every client its stated batch admits. 16 clients and a stated batch of 16 under a
    step that rises 10% from 15 to 16 (as MiniMax-M2.5's on H200 under vLLM does): all
    16 run, none waits for a place, and the state holds (1) and (3). A rate has no
    decode batch there (``B = r (osl - 1) D(B)`` crosses no piece), a batch always has
    its rate."""
    base = next(c for c in _dense() if c.schedule.mixed)
    batches = np.arange(1.0, 17.0)
    step = 0.015 + 1e-5 * batches
    step[-1] = step[-2] * 1.10
    decode = dataclasses.replace(base.decode, batches=batches, decode_s=step, batch_cap=16.0,
                                 kv_batch=1e4)  # fmt: skip
    row = dataclasses.replace(base.row, concurrency=16)
    case = dataclasses.replace(base, row=row, prefill=decode, decode=decode)
    s = silicon.solve([case], silicon.Overheads(3e-4, 0.0, 0.03))
    assert s.capped[0] == 0
    osl = float(row.osl)
    assert s.rate[0] * (s.ttft[0] + (osl - 1.0) * s.tpot[0]) == pytest.approx(16.0, rel=1e-6)
    assert s.batch[0] == pytest.approx(s.rate[0] * (osl - 1.0) * s.tpot[0], rel=1e-6)
    assert 15.0 < s.batch[0] < 16.0  # past the steep piece's foot: no client held back
    # TTFT stays a prompt's time, not a waiting client's round (about 16 x 16 ms x osl)
    assert s.ttft[0] < 0.1 * (osl - 1.0) * s.tpot[0]


def test_kv_cache_in_the_memory_the_driver_reports() -> None:
    """The engines divide the memory the driver reports, not the datasheet's GB read as
    1e9 bytes (SPEC's M, kept for the paper's model): Kimi-K2.5 NVFP4 at TP 4 on B200
    (8,192 / 1,024 tokens, 32 clients, stated batch 32; aiconfigurator-core's
    ``silicon_sample.csv``) holds 32 requests in 180 GiB per GPU, where 180e9 bytes left
    room for 23; every client runs (measured TPOT 21 ms, TTFT 0.57 s)."""
    b200 = load_gpu("b200")
    assert b200.mem_bytes == 180e9 and b200.engine_mem_bytes == 180 * 2**30
    assert load_gpu("h200").engine_mem_bytes == 141 * 2**30
    row = next(r for r in _rows() if r.id == "kimik2_5_b200_vllm_fp4_agg_8192x1024_c32_cfg811")
    c = silicon.resolve(row, str(installed_kernel_tables()))
    assert isinstance(c, silicon.Case), c
    model = load_model("kimi-k2.5-nvfp4") if c.release else load_model(c.model)
    per_request = model.kv_bytes_at(row.isl + row.osl / 2.0) * 4  # MLA: on every rank
    weights = model.weight_bytes
    assert c.decode.kv_batch == pytest.approx(
        (4 * b200.engine_mem_bytes * silicon.MEMORY_FRACTION - weights) / per_request, rel=1e-9
    )
    assert (4 * b200.mem_bytes * silicon.MEMORY_FRACTION - weights) / per_request < 32
    assert c.decode.batch_cap == 32.0
    s = silicon.solve([c], silicon.Overheads(3e-4, 0.0, 0.03))
    assert s.capped[0] == 0
