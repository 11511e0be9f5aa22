"""Kernel performance source (model.performance.kernels): the reader of AIConfigurator's layout on
small tables written here and on the published ones (skipped when absent), the
interpolation between measured shapes, the refusal outside them, and the composition
of one forward pass checked against a hand-summed one."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from model.catalog import ModelArch, load_calibration, load_gpu, load_model
from model.errors import InputError, OutsideTableError
from model.performance import kernels
from model.performance.kernels import (
    TABLE_SPECS,
    KernelCall,
    KernelDatabase,
    KernelModel,
    KernelSetup,
    PhaseTime,
    busiest_rank_experts,
    decode_in_graph,
    uniform_tokens,
)
from tests.conftest import kernel_tables

GPU, FW, VER = "toy_gpu", "sglang", "0.5.14"
MS = 1e-3

# Measured grids of the tables written here (latency in ms, as published).
M = (1, 4, 16, 64)
NK = (32, 64, 128, 256)
ISL = (4, 16, 64)
BATCH = (1, 2, 4)
STEP = (4, 16, 64)
MSG = (64, 256, 1024, 4096)
TOKENS = (1, 4, 16, 64)


def gemm_ms(m: int, n: int, k: int) -> float:
    """A launch floor plus a power law: what the interpolation is built for."""
    return 0.004 + 1e-7 * m * n * k


def ctx_ms(isl: int) -> float:
    return 0.003 + 2e-5 * isl**2


def gen_ms(batch: int, step: int) -> float:
    return 0.002 + 3e-5 * batch * step


def ar_ms(msg: int, graph: bool) -> float:
    return (0.002 if graph else 0.02) + 1e-6 * msg


def ag_ms(msg: int) -> float:
    return 0.005 + 2e-6 * msg


def moe_ms(tokens: int, ep: int) -> float:
    return 0.01 + 1e-3 * tokens / ep


def write(root: Path, folder: str, kind: str, rows: Sequence[Mapping[str, object]]) -> Path:
    path = root / GPU / folder / ("nccl" if kind == "nccl" else FW)
    path = path / ("2.29.2" if kind == "nccl" else VER) / f"{kind}_perf.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {c: [r[c] for r in rows] for c in rows[0]}
    pq.write_table(pa.table(columns), path)
    return path


def attn_row(**kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "framework": "SGLang",
        "kernel_source": "fa3",
        "num_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "beam_width": 1,
        "attn_dtype": "bfloat16",
        "kv_cache_dtype": "bfloat16",
        "window_size": 0,
    }
    row.update(kw)
    return row


def make_db(root: Path, power: bool = False) -> KernelDatabase:
    """A database of every table a forward pass of :func:`toy` reads, at TP 1 and 2."""
    gemm = [
        {"kernel_source": "torch", "gemm_dtype": "bfloat16", "m": m, "n": n, "k": k,
         "latency": gemm_ms(m, n, k)}
        for m in M for n in NK for k in NK
    ]  # fmt: skip
    if power:
        for r in gemm:
            r["power"] = 300.0 + float(r["m"])  # type: ignore[arg-type]
    write(root, "gemm", "gemm", gemm)
    ctx = []
    gen = []
    for heads, kv in ((4, 2), (2, 1)):
        ctx += [
            attn_row(num_heads=heads, num_key_value_heads=kv, batch_size=1, isl=s, step=0,
                     latency=ctx_ms(s))
            for s in ISL
        ]  # fmt: skip
        gen += [
            attn_row(num_heads=heads, num_key_value_heads=kv, batch_size=b, isl=1, step=s,
                     latency=gen_ms(b, s))
            for b in BATCH for s in STEP
        ]  # fmt: skip
    write(root, "attention", "context_attention", ctx)
    write(root, "attention", "generation_attention", gen)
    ar = [
        {"allreduce_dtype": "bfloat16", "num_gpus": 2, "message_size": s,
         "backend": f"sglang_{b}", "latency": ar_ms(s, b == "graph")}
        for s in MSG for b in ("graph", "eager")
    ]  # fmt: skip
    write(root, "comm", "custom_allreduce", ar)
    nccl = [
        {"op_name": op, "nccl_dtype": "half", "num_gpus": 2, "message_size": s,
         "latency": ag_ms(s) if op == "all_gather" else 1.0}
        for s in MSG for op in ("all_gather", "all_reduce")
    ]  # fmt: skip
    write(root, "comm", "nccl", nccl)
    moe = [
        {"moe_dtype": "bfloat16", "num_tokens": t, "hidden_size": 64, "inter_size": 32,
         "topk": 2, "num_experts": 32, "moe_tp_size": 2 // ep, "moe_ep_size": ep,
         "distribution": d, "latency": moe_ms(t, ep) * (1.0 if d == "balanced" else 1.5)}
        for t in TOKENS for ep in (1, 2) for d in ("balanced", "power_law_1.2")
    ]  # fmt: skip
    moe += [dict(r, moe_tp_size=1, moe_ep_size=1) for r in moe if r["moe_ep_size"] == 2]
    write(root, "moe", "moe", moe)
    return KernelDatabase(root)


def toy(**kw: object) -> ModelArch:
    """Two layers, 4 query heads and 2 KV heads of 16, hidden 64, MLP 128, vocab 256."""
    fields: dict[str, object] = {
        "name": "toy",
        "params": 1e6,
        "layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "head_dim": 16,
        "hidden_size": 64,
        "intermediate_size": 128,
        "vocab_size": 256,
    }
    fields.update(kw)
    return ModelArch(**fields)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Reader and lookups


def test_reader_indexes_the_layout_and_reads_a_table_written_here(tmp_path: Path) -> None:
    db = make_db(tmp_path)
    assert db.gpus() == [GPU]
    index = db.index()
    assert index[(GPU, "gemm", FW, VER)] == ["gemm"]
    assert sorted(index[(GPU, "attention", FW, VER)]) == [
        "context_attention",
        "generation_attention",
    ]
    assert index[(GPU, "comm", "nccl", "2.29.2")] == ["nccl"]
    assert db.versions(GPU, "gemm") == [(FW, VER)]
    table = db.table(GPU, "gemm", FW, VER)
    assert table.name == f"{GPU}/gemm/{FW}/{VER}/gemm_perf.parquet"
    assert table.measured_keys() == [{"gemm_dtype": "bfloat16"}]
    assert table.axis_values(gemm_dtype="bfloat16") == {
        "m": [float(m) for m in M],
        "n": [float(n) for n in NK],
        "k": [float(k) for k in NK],
    }
    assert not table.has_power


def test_lookup_is_the_measured_value_at_every_measured_shape(tmp_path: Path) -> None:
    db = make_db(tmp_path, power=True)
    gemm = db.table(GPU, "gemm", FW, VER)
    assert gemm.has_power
    for m in M:
        for n in NK:
            for k in NK:
                t = gemm.lookup(gemm_dtype="bfloat16", m=m, n=n, k=k)
                assert t.time_s == pytest.approx(gemm_ms(m, n, k) * MS, rel=1e-12)
                assert t.power_w == pytest.approx(300.0 + m, rel=1e-12)
    gen = db.table(GPU, "generation_attention", FW, VER)
    for b in BATCH:
        for s in STEP:
            t = gen.lookup(**attn_key(), batch_size=b, step=s)
            assert t.time_s == pytest.approx(gen_ms(b, s) * MS, rel=1e-12)
            assert t.power_w is None


def attn_key(heads: int = 4, kv: int = 2) -> dict[str, object]:
    return {
        "num_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 16,
        "attn_dtype": "bfloat16",
        "kv_cache_dtype": "bfloat16",
        "window_size": 0,
        "beam_width": 1,
    }


def test_between_measured_shapes_the_lookup_lies_between_the_neighbours(tmp_path: Path) -> None:
    gemm = make_db(tmp_path, power=True).table(GPU, "gemm", FW, VER)
    for m in (2, 3, 5, 10, 40):
        lo = max(v for v in M if v < m)
        hi = min(v for v in M if v > m)
        t = gemm.lookup(gemm_dtype="bfloat16", m=m, n=100, k=200).time_s
        t_lo = gemm.lookup(gemm_dtype="bfloat16", m=lo, n=100, k=200).time_s
        t_hi = gemm.lookup(gemm_dtype="bfloat16", m=hi, n=100, k=200).time_s
        assert t_lo < t < t_hi
    # power is interpolated linearly with the same weights: at the log-midpoint of 4 and
    # 16 (m = 8) it is the neighbours' mean
    p = gemm.lookup(gemm_dtype="bfloat16", m=8, n=64, k=64).power_w
    assert p == pytest.approx(300.0 + (4 + 16) / 2)


def test_a_power_law_is_interpolated_exactly_in_log_log(tmp_path: Path) -> None:
    """t = c m n k between measured shapes comes back exactly (a straight line in
    log-log); linear interpolation in the sizes would overstate it."""
    rows = [
        {"gemm_dtype": "fp8", "m": m, "n": n, "k": k, "latency": 1e-6 * m * n * k}
        for m in M
        for n in NK
        for k in NK
    ]
    write(tmp_path, "gemm", "gemm", rows)
    gemm = KernelDatabase(tmp_path).table(GPU, "gemm", FW, VER)
    for m, n, k in ((2, 40, 100), (10, 200, 33), (50, 255, 250)):
        t = gemm.lookup(gemm_dtype="fp8", m=m, n=n, k=k).time_s
        assert t == pytest.approx(1e-9 * m * n * k, rel=1e-9)


def test_a_shape_outside_the_table_is_refused_naming_the_table_and_the_shape(
    tmp_path: Path,
) -> None:
    gemm = make_db(tmp_path).table(GPU, "gemm", FW, VER)
    name = f"{GPU}/gemm/{FW}/{VER}/gemm_perf.parquet"
    with pytest.raises(OutsideTableError) as err:
        gemm.lookup(gemm_dtype="bfloat16", m=65, n=64, k=64)
    assert err.value.table == name
    assert err.value.shape == {"gemm_dtype": "bfloat16", "m": 65, "n": 64, "k": 64}
    assert name in str(err.value) and "m=65" in str(err.value)
    assert "outside the measured range [1, 64]" in str(err.value)
    with pytest.raises(OutsideTableError, match="k=16"):
        gemm.lookup(gemm_dtype="bfloat16", m=4, n=64, k=16)
    with pytest.raises(OutsideTableError, match="no measured rows with gemm_dtype='nvfp4'"):
        gemm.lookup(gemm_dtype="nvfp4", m=4, n=64, k=64)
    # a cell whose corner is not measured is refused too
    rows = [
        {"gemm_dtype": "bfloat16", "m": m, "n": n, "k": 64, "latency": gemm_ms(m, n, 64)}
        for m in M
        for n in NK
        if (m, n) != (16, 128)
    ]
    write(tmp_path / "holes", "gemm", "gemm", rows)
    holes = KernelDatabase(tmp_path / "holes").table(GPU, "gemm", FW, VER)
    assert holes.lookup(gemm_dtype="bfloat16", m=8, n=48, k=64).time_s > 0
    with pytest.raises(OutsideTableError, match="lacks the corner m=16, n=128, k=64"):
        holes.lookup(gemm_dtype="bfloat16", m=8, n=100, k=64)


def test_a_missing_table_names_what_the_database_has(tmp_path: Path) -> None:
    db = make_db(tmp_path)
    with pytest.raises(InputError, match=r"gemm for toy_gpu: sglang 0\.5\.14"):
        db.table(GPU, "gemm", "vllm", "0.24.0")


def test_duplicate_shapes_keep_the_main_kernel_and_average_its_repeats(tmp_path: Path) -> None:
    rows = [
        {"kernel_source": "a", "moe_dtype": "bf16", "num_tokens": t, "latency": 1.0 * t}
        for t in (1, 2, 4)
    ]
    rows += [{"kernel_source": "a", "moe_dtype": "bf16", "num_tokens": 2, "latency": 4.0}]
    rows += [{"kernel_source": "b", "moe_dtype": "bf16", "num_tokens": 4, "latency": 0.1}]
    keys = {c: 1 for c in TABLE_SPECS["moe"].keys if c != "moe_dtype"}
    write(tmp_path, "moe", "moe", [{**keys, **r} for r in rows])
    moe = KernelDatabase(tmp_path).table(GPU, "moe", FW, VER)
    key = {**keys, "moe_dtype": "bf16"}
    assert moe.lookup(**key, num_tokens=2).time_s == pytest.approx(3.0 * MS)  # (2 + 4) / 2
    assert moe.lookup(**key, num_tokens=4).time_s == pytest.approx(4.0 * MS)  # kernel a's


# --------------------------------------------------------------------------
# Composition


def test_prefill_equals_the_hand_summed_forward_pass(tmp_path: Path) -> None:
    km = KernelModel(make_db(tmp_path), toy(), KernelSetup(GPU, FW, VER))
    L = 16
    per_layer = (
        gemm_ms(L, (4 + 2 * 2) * 16, 64)  # QKV
        + ctx_ms(L)  # context attention, one prompt
        + gemm_ms(L, 64, 64)  # O
        + gemm_ms(L, 2 * 128, 64)  # gate-up
        + gemm_ms(L, 64, 128)  # down
    )
    hand = 2 * per_layer + gemm_ms(1, 256, 64)  # LM head on the last token
    assert km.t_prefill(L) == pytest.approx(hand * MS, rel=1e-12)


def test_decode_under_tp_equals_the_hand_summed_forward_pass(tmp_path: Path) -> None:
    km = KernelModel(make_db(tmp_path), toy(), KernelSetup(GPU, FW, VER, tp=2))
    B, c = 4, 16
    per_layer = (
        gemm_ms(B, (2 + 2 * 1) * 16, 64)  # QKV: 2 heads and 1 KV head per rank
        + gen_ms(B, c)
        + gemm_ms(B, 64, 32)  # O
        + ar_ms(B * 64, graph=True)
        + gemm_ms(B, 128, 64)  # gate-up, 64 of the MLP's 128 per rank
        + gemm_ms(B, 64, 64)  # down
        + ar_ms(B * 64, graph=True)
    )
    hand = (
        ar_ms(B * 64, graph=True)  # embedding
        + 2 * per_layer
        + gemm_ms(B, 128, 64)  # LM head, half the vocabulary per rank
        + ag_ms(B * 256)  # logits all-gather
    )
    phase = km.decode(B, c)
    assert phase.time_s == pytest.approx(hand * MS, rel=1e-12)
    assert phase.power_w is None
    assert phase.by_name()["attention"] == pytest.approx(2 * gen_ms(B, c) * MS)


def test_speculative_decode_equals_the_hand_summed_verify_and_draft_passes(
    tmp_path: Path,
) -> None:
    """Chained MTP drafting 3 tokens for one request (docs/kernels.md, "Speculative
    decoding"): the model verifies 4 tokens; the module's first pass runs over the 4
    verified positions, its other 2 over one token; a module pass is the mean layer of
    the decode pass at its tokens, the ``2 h -> h`` projection and the LM head with the
    embedding all-reduce and the logits all-gather."""
    km = KernelModel(make_db(tmp_path), toy(), KernelSetup(GPU, FW, VER, tp=2))
    c = 16

    def layer(b: int) -> float:  # one layer of the decode pass at b tokens, tp 2
        return (gemm_ms(b, (2 + 2 * 1) * 16, 64) + gen_ms(b, c) + gemm_ms(b, 64, 32)
                + ar_ms(b * 64, graph=True) + gemm_ms(b, 128, 64) + gemm_ms(b, 64, 64)
                + ar_ms(b * 64, graph=True))  # fmt: skip

    def ends(b: int) -> float:  # embedding all-reduce, LM head, logits all-gather
        return ar_ms(b * 64, graph=True) + gemm_ms(b, 128, 64) + ag_ms(b * 256)

    def module(b: int) -> float:
        return layer(b) + ends(b) + gemm_ms(b, 64, 128)

    hand = (2 * layer(4) + ends(4)) + module(4) + 2 * module(1)
    assert km.t_decode_speculative(1, c, 3) == pytest.approx(hand * MS, rel=1e-12)
    assert km.t_decode_speculative(1, c, 0) == km.t_decode(1, c)
    times = [km.t_decode_speculative(1, c, d) for d in range(4)]
    assert all(a < b for a, b in zip(times, times[1:], strict=False))  # each draft costs time
    with pytest.raises(InputError, match="draft"):
        km.t_decode_speculative(1, c, -1)


def test_decode_beyond_the_cuda_graphs_takes_the_eager_all_reduce(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM runs a decode batch above 512 requests without a CUDA graph (its default
    ``max_cudagraph_capture_size``), so its all-reduces are the eager ones; a framework
    without a known limit keeps the graph's at every batch."""
    assert decode_in_graph("vllm", 512) and not decode_in_graph("vllm", 513)
    assert decode_in_graph("sglang", 100_000)
    db = make_db(tmp_path)
    km = KernelModel(db, toy(), KernelSetup(GPU, FW, VER, tp=2))
    c = 16
    graph = {b: km.decode(b, c).by_name() for b in (1, 4)}  # messages of 64 and 256
    monkeypatch.setitem(kernels.CUDA_GRAPH_MAX_BATCH, FW, 1)  # the toy's framework: 1
    km = KernelModel(db, toy(), KernelSetup(GPU, FW, VER, tp=2))
    for b in (1, 4):
        got = km.decode(b, c).by_name()
        eager = b > 1
        for name in ("embedding all-reduce", "attention all-reduce", "mlp all-reduce"):
            n = 1 if name.startswith("embedding") else 2
            assert got[name] == pytest.approx(n * ar_ms(b * 64, graph=not eager) * MS)
        assert got["attention"] == graph[b]["attention"]  # nothing else changes


def test_decode_attention_takes_the_fastest_split_of_the_context(tmp_path: Path) -> None:
    """A split-KV kernel attends one request's context as ``s`` pieces in parallel: the
    table at ``batch x s`` requests of ``step / s`` tokens. With a table whose small
    batches leave the GPU idle (a cost in ``step / batch``), one request of 64 tokens is
    fastest as 4 of 16; 4 requests (the widest measured batch) cannot be split; a context
    beyond the table is refused, not split to fit."""
    make_db(tmp_path)  # every other table the toy reads

    def idle_ms(b: int, step: float) -> float:
        return 0.002 + 3e-5 * b * step + 4e-4 * step / b

    gen = [
        attn_row(num_heads=h, num_key_value_heads=kv, batch_size=b, isl=1, step=s,
                 latency=idle_ms(b, s))
        for h, kv in ((4, 2), (2, 1)) for b in BATCH for s in STEP
    ]  # fmt: skip
    write(tmp_path, "attention", "generation_attention", gen)
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER))
    assert idle_ms(4, 16) < idle_ms(1, 64)  # 4 x 16 is faster than 1 x 64
    got = km.decode(1, 64).by_name()["attention"]
    assert got == pytest.approx(2 * idle_ms(4, 16) * MS, rel=1e-12)  # two layers
    assert km.decode(4, 64).by_name()["attention"] == pytest.approx(2 * idle_ms(4, 64) * MS)
    with pytest.raises(OutsideTableError, match="step=100"):
        km.decode(1, 100)


def test_moe_layer_and_power_of_a_phase(tmp_path: Path) -> None:
    db = make_db(tmp_path, power=True)
    moe = toy(experts=32, experts_per_token=2, moe_layers=2, expert_params=3 * 64 * 32)
    km = KernelModel(db, moe, KernelSetup(GPU, FW, VER, tp=2, ep=2, distribution="balanced"))
    B, c = 4, 16
    phase = km.decode(B, c)
    assert phase.by_name()["moe"] == pytest.approx(2 * moe_ms(B, 2) * MS)
    # the default load: uniform routing, read off the balanced rows at the tokens that
    # make each rank read what the busier of the two ranks reads (4 tokens x top 2 of 32
    # experts read 7.3 on average, 3.6 per rank of 16; the busier reads 4.57)
    uniform = KernelModel(db, moe, KernelSetup(GPU, FW, VER, tp=2, ep=2)).decode(B, c)
    shape = {"moe_dtype": "bfloat16", "hidden_size": 64, "inter_size": 32, "topk": 2,
             "num_experts": 32, "moe_tp_size": 1, "moe_ep_size": 2}  # fmt: skip
    table = db.table(GPU, "moe", FW, VER)
    t_eff = uniform_tokens(B, 32, 2, 2)
    p = 1 - (30 / 32) ** 4  # an expert read by one of 4 tokens
    cdf = [sum(math.comb(16, i) * p**i * (1 - p) ** (16 - i) for i in range(j + 1))
           for j in range(16)]  # fmt: skip
    busier = sum(1 - cdf[j - 1] ** 2 for j in range(1, 17))  # E max of two ranks
    assert busier == pytest.approx(4.57, abs=0.01)
    assert t_eff == pytest.approx(2 * busier / 2)  # ep R / k while T k <= E
    at = table.lookup(**shape, distribution="balanced", num_tokens=t_eff).time_s
    assert uniform.by_name()["moe"] == pytest.approx(2 * at)
    # the busier rank reads 4.57 experts where the balanced load puts 4 on each
    assert uniform.by_name()["moe"] > phase.by_name()["moe"]
    assert phase.by_name()["router"] == pytest.approx(2 * gemm_ms(B, 32, 64) * MS)
    assert phase.power_w is None  # attention and collectives have no power here
    skewed = KernelModel(
        db, moe, KernelSetup(GPU, FW, VER, tp=2, ep=2, distribution="power_law_1.2")
    )
    assert skewed.decode(B, c).by_name()["moe"] == pytest.approx(1.5 * 2 * moe_ms(B, 2) * MS)
    with pytest.raises(OutsideTableError, match="distribution='zipf'"):
        KernelModel(db, moe, KernelSetup(GPU, FW, VER, tp=2, distribution="zipf")).decode(B, c)


def test_power_is_the_time_weighted_mean_of_the_kernels(tmp_path: Path) -> None:
    db = make_db(tmp_path, power=True)
    for kind in ("context_attention", "generation_attention"):
        table = pq.read_table(tmp_path / GPU / "attention" / FW / VER / f"{kind}_perf.parquet")
        table = table.append_column("power", pa.array([500.0] * table.num_rows))
        pq.write_table(table, tmp_path / GPU / "attention" / FW / VER / f"{kind}_perf.parquet")
    db = KernelDatabase(tmp_path)
    phase = KernelModel(db, toy(), KernelSetup(GPU, FW, VER)).prefill(16)
    energy = sum(
        c.count * c.time_s * (500.0 if c.name == "attention" else 300.0 + dict(c.shape)["m"])
        for c in phase.calls
    )
    assert phase.power_w == pytest.approx(energy / phase.time_s)
    assert 300.0 < phase.power_w < 500.0  # type: ignore[operator]


def test_decode_attention_beyond_the_measured_batch_is_a_sum_of_sub_batches(
    tmp_path: Path,
) -> None:
    make_db(tmp_path)
    path = tmp_path / GPU / "attention" / FW / VER / "generation_attention_perf.parquet"
    table = pq.read_table(path).to_pylist()
    # like the published tables: the largest batch is not measured at the longest context
    pq.write_table(
        pa.Table.from_pylist([r for r in table if (r["batch_size"], r["step"]) != (4, 64)]),
        path,
    )
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER))
    assert km.decode(4, 16).by_name()["attention"] == pytest.approx(2 * gen_ms(4, 16) * MS)
    # 4 requests at 64 tokens: two sub-batches of 2, in each of the 2 layers
    assert km.decode(4, 64).by_name()["attention"] == pytest.approx(4 * gen_ms(2, 64) * MS)
    # 3 requests at 40 tokens: the cell (2..4) x (16..64) lacks (4, 64): 2 + 1 requests
    got = km.decode(3, 40).by_name()["attention"]
    two = KernelDatabase(tmp_path).table(GPU, "generation_attention", FW, VER)
    hand = 2 * (
        two.lookup(**attn_key(), batch_size=2, step=40).time_s
        + two.lookup(**attn_key(), batch_size=1, step=40).time_s
    )
    assert got == pytest.approx(hand)


def test_composition_refuses_what_it_cannot_compose(tmp_path: Path) -> None:
    db = make_db(tmp_path)
    with pytest.raises(InputError, match="vocab_size"):
        KernelModel(db, toy(vocab_size=0), KernelSetup(GPU, FW, VER))
    with pytest.raises(InputError, match="tp"):
        KernelModel(db, toy(), KernelSetup(GPU, FW, VER, tp=3))
    with pytest.raises(InputError, match="ep"):
        KernelSetup(GPU, FW, VER, tp=2, ep=4)
    km = KernelModel(db, toy(), KernelSetup(GPU, FW, VER))
    with pytest.raises(OutsideTableError, match="context_attention_perf.parquet.*isl=2"):
        km.prefill(2)
    with pytest.raises(OutsideTableError, match="generation_attention_perf.parquet.*step=65"):
        km.decode(2, 65)


# --------------------------------------------------------------------------
# The published tables


def published() -> KernelDatabase:
    return KernelDatabase(kernel_tables())


@pytest.mark.slow  # 16 s on two cores
def test_reader_parses_the_published_tables() -> None:
    db = published()
    assert {"h100_sxm", "h200_sxm", "b200_sxm"} <= set(db.gpus())
    for gpu in ("h100_sxm", "h200_sxm", "b200_sxm"):
        assert ("sglang", "0.5.14") in db.versions(gpu, "gemm")
        for op in ("gemm", "moe", "attention", "comm"):
            assert (gpu, op, "sglang", "0.5.14") in db.index()
    gemm = db.table("h200_sxm", "gemm", "sglang", "0.5.14")
    # a row of the file: fp8, m=224, n=1536, k=2048, 0.010832889212502373 ms
    t = gemm.lookup(gemm_dtype="fp8", m=224, n=1536, k=2048)
    assert t.time_s == pytest.approx(0.010832889212502373e-3, rel=1e-12)
    assert t.power_w is None
    b200 = db.table("b200_sxm", "gemm", "sglang", "0.5.14")
    # a row of the file: bfloat16, m=32, n=2560, k=64, 0.0021582223061058256 ms, 978.524 W
    t = b200.lookup(gemm_dtype="bfloat16", m=32, n=2560, k=64)
    assert t.time_s == pytest.approx(0.0021582223061058256e-3, rel=1e-12)
    assert t.power_w == pytest.approx(978.524)


@pytest.mark.slow  # 8.6 s on two cores
def test_qwen3_32b_on_h200_against_the_spec_rooflines() -> None:
    """Qwen3-32B, TP1 on H200 under SGLang 0.5.14, against SPEC 2.2 and 2.3 with the
    paper's Tab. 3 calibration (H200 + SGLang, Qwen3-32B). The kernels alone cannot be
    faster than the weights' bytes over the HBM bandwidth (decode) or the FLOPs over the
    peak (prefill), and, having none of the engine's overheads, must stay below the
    calibrated times, which include them."""
    db = published()
    model, gpu, cal = (
        load_model("qwen3-32b"),
        load_gpu("h200"),
        load_calibration("qwen3-32b", "h200"),
    )
    km = KernelModel(db, model, KernelSetup("h200_sxm", "sglang", "0.5.14"))
    B, c = 1, 1024
    bandwidth_floor = model.weight_bytes / gpu.mem_bw_bytes_per_s
    q = model.weight_bytes + model.kv_bytes_per_token * B * c
    t_d_spec = q / (gpu.mem_bw_bytes_per_s * cal.mbu) + cal.t_iter_s + cal.t_req_s * B
    t_d = km.t_decode(B, c)
    # 13.7 ms <= about 17.7 ms <= 18.9 ms; the embedding table (1.6 GB) is not read
    assert 0.95 * bandwidth_floor < t_d < t_d_spec
    L = 1024
    flops = 2 * model.params * L + cal.c_attn * model.layers * model.attn_width * L**2
    t_p_spec = flops / (gpu.flops_per_s * cal.mfu)
    compute_floor = 2 * model.params * L / gpu.flops_per_s
    assert compute_floor < km.t_prefill(L) < t_p_spec  # 67.9 < about 89 < 103 ms
    # longer prompts cost more than proportionally (attention), batches amortise weights
    assert km.t_prefill(4096) > 4 * km.t_prefill(1024)
    assert km.t_decode(64, 1024) < 2 * km.t_decode(1, 1024)
    # the generation table measures batch x context up to about 130k tokens: 64 requests
    # at 6,000 tokens are two sub-batches of 32; beyond 32,767 tokens nothing is measured
    calls = [c for c in km.decode(64, 6000).calls if c.name == "attention"]
    assert [(dict(c.shape)["batch_size"], c.count) for c in calls] == [(32, 2 * 64)]
    with pytest.raises(OutsideTableError, match="generation_attention_perf.parquet.*step=40000"):
        km.t_decode(64, 40000)


@pytest.mark.slow  # 23.6 s on two cores
def test_b200_phases_carry_their_kernels_power() -> None:
    db = published()
    km = KernelModel(db, load_model("qwen3-8b"), KernelSetup("b200_sxm", "sglang", "0.5.14"))
    for phase in (km.prefill(2048), km.decode(16, 2048)):
        assert phase.power_w is not None
        assert 100.0 < phase.power_w <= 1000.0  # the tables' power limit is 1,000 W
    h200 = KernelModel(db, load_model("qwen3-8b"), KernelSetup("h200_sxm", "sglang", "0.5.14"))
    assert h200.decode(16, 2048).power_w is None


@pytest.mark.slow  # 29.7 s on two cores
def test_a_moe_model_composes_on_the_published_tables() -> None:
    db = published()
    model = load_model("qwen3-30b-a3b")
    base = KernelSetup("h200_sxm", "sglang", "0.5.14", tp=4, ep=4)
    km = KernelModel(db, model, base)
    phase = km.decode(32, 1024)
    assert phase.by_name()["moe"] > 0 and math.isfinite(phase.time_s)
    skew = KernelModel(db, model, KernelSetup("h200_sxm", "sglang", "0.5.14", tp=4, ep=4,
                                              distribution="power_law_1.2"))  # fmt: skip
    # the skewed load is another measured row (on the measured rank it may be lighter)
    assert skew.decode(32, 1024).by_name()["moe"] != phase.by_name()["moe"]


# --------------------------------------------------------------------------
# Fractional batches, mixed layers, sliding and chunked attention, FP8 and 4-bit weights


def add_rows(root: Path, folder: str, kind: str, rows: Sequence[Mapping[str, object]]) -> None:
    """Append rows to a table written by :func:`make_db` (missing columns take the first
    row's values)."""
    path = root / GPU / folder / ("nccl" if kind == "nccl" else FW)
    path = path / ("2.29.2" if kind == "nccl" else VER) / f"{kind}_perf.parquet"
    old = pq.read_table(path).to_pylist()
    pq.write_table(pa.Table.from_pylist(old + [{**old[0], **r} for r in rows]), path)


def decode_tp1_ms(B: int, c: int) -> float:
    """The toy's decode iteration at TP1, summed by hand (B and c measured everywhere)."""
    per_layer = (
        gemm_ms(B, (4 + 2 * 2) * 16, 64)  # QKV
        + gen_ms(B, c)
        + gemm_ms(B, 64, 64)  # O
        + gemm_ms(B, 2 * 128, 64)  # gate-up
        + gemm_ms(B, 64, 128)  # down
    )
    return 2 * per_layer + gemm_ms(B, 256, 64)  # LM head


def test_a_fractional_batch_is_the_interpolation_of_its_floor_and_ceiling(
    tmp_path: Path,
) -> None:
    make_db(tmp_path)
    # GEMMs measured at m = 1 and 2 too, so that both neighbours are measured shapes
    add_rows(tmp_path, "gemm", "gemm", [
        {"gemm_dtype": "bfloat16", "m": 2, "n": n, "k": k, "latency": gemm_ms(2, n, k)}
        for n in NK for k in NK
    ])  # fmt: skip
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER))
    c = 16
    assert km.t_decode(1, c) == pytest.approx(decode_tp1_ms(1, c) * MS, rel=1e-12)
    assert km.t_decode(2, c) == pytest.approx(decode_tp1_ms(2, c) * MS, rel=1e-12)
    # 1.25 requests on average: three quarters of the iteration at 1, a quarter at 2
    hand = 0.75 * decode_tp1_ms(1, c) + 0.25 * decode_tp1_ms(2, c)
    phase = km.decode(1.25, c)
    assert phase.time_s == pytest.approx(hand * MS, rel=1e-12)
    assert km.t_decode(1.25, c) == phase.time_s
    assert phase.by_name()["attention"] == pytest.approx(
        2 * (0.75 * gen_ms(1, c) + 0.25 * gen_ms(2, c)) * MS, rel=1e-12
    )
    assert sorted({call.weight for call in phase.calls}) == [0.25, 0.75]
    # an integral batch, int or float, is the composition at that batch (weight 1)
    assert km.decode(2.0, c) == km.decode(2, c)
    assert {call.weight for call in km.decode(2, c).calls} == {1.0}
    for bad in (0.5, float("nan"), float("inf"), True, "2"):
        with pytest.raises(InputError, match="batch"):
            km.decode(bad, c)  # type: ignore[arg-type]


def test_a_fractional_batch_interpolates_the_energy_not_the_power(tmp_path: Path) -> None:
    make_db(tmp_path, power=True)
    for kind in ("context_attention", "generation_attention"):
        path = tmp_path / GPU / "attention" / FW / VER / f"{kind}_perf.parquet"
        table = pq.read_table(path)
        pq.write_table(table.append_column("power", pa.array([500.0] * table.num_rows)), path)
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER))
    below, above, mid = km.decode(3, 16), km.decode(4, 16), km.decode(3.5, 16)
    assert below.power_w is not None and above.power_w is not None
    assert mid.time_s == pytest.approx(0.5 * below.time_s + 0.5 * above.time_s, rel=1e-12)
    # the mean power over the interpolated iteration: energies weighted, then / time
    energy = 0.5 * below.time_s * below.power_w + 0.5 * above.time_s * above.power_w
    assert mid.power_w == pytest.approx(energy / mid.time_s, rel=1e-12)


def moe_toy(**kw: object) -> ModelArch:
    """The toy with three layers: one dense, two MoE of 32 experts (top 2, width 32)."""
    fields: dict[str, object] = {
        "layers": 3,
        "experts": 32,
        "experts_per_token": 2,
        "moe_layers": 2,
        "expert_params": 3 * 64 * 32,
    }
    fields.update(kw)
    return toy(**fields)


def test_mixed_dense_and_moe_layers_with_a_shared_expert_equal_the_hand_summed_pass(
    tmp_path: Path,
) -> None:
    db = make_db(tmp_path)
    model = moe_toy(shared_intermediate_size=64)
    setup = KernelSetup(GPU, FW, VER, tp=2, ep=2, distribution="balanced")
    km = KernelModel(db, model, setup)
    B, c = 4, 16
    every_layer = (
        gemm_ms(B, (2 + 2 * 1) * 16, 64)  # QKV, 2 heads and 1 KV head per rank
        + gen_ms(B, c)
        + gemm_ms(B, 64, 32)  # O
        + 2 * ar_ms(B * 64, graph=True)  # after attention and after the MLP
    )
    dense_layer = gemm_ms(B, 128, 64) + gemm_ms(B, 64, 64)  # MLP 128 -> 64 per rank
    moe_layer = (
        gemm_ms(B, 32, 64)  # router over the 32 experts
        + moe_ms(B, 2)  # fused MoE, moe_tp 1, moe_ep 2
        + gemm_ms(B, 2 * 32, 64)  # shared expert gate-up, 64 -> 32 per rank
        + gemm_ms(B, 64, 32)  # shared expert down
    )
    hand = (
        ar_ms(B * 64, graph=True)  # embedding
        + 3 * every_layer
        + 1 * dense_layer
        + 2 * moe_layer
        + gemm_ms(B, 128, 64)  # LM head
        + ag_ms(B * 256)  # logits all-gather
    )
    phase = km.decode(B, c)
    assert phase.time_s == pytest.approx(hand * MS, rel=1e-12)
    counts = {c.name: c.count for c in phase.calls}
    assert counts["mlp gate-up"] == 1 and counts["mlp down"] == 1
    assert counts["router"] == 2 and counts["moe"] == 2
    assert counts["shared expert gate-up"] == 2 and counts["shared expert down"] == 2
    assert counts["qkv projection"] == 3 and counts["attention"] == 3
    # without the shared expert the MoE layers lose exactly its two GEMMs
    plain = KernelModel(db, moe_toy(), setup).decode(B, c)
    shared = 2 * (gemm_ms(B, 64, 64) + gemm_ms(B, 64, 32))
    assert phase.time_s - plain.time_s == pytest.approx(shared * MS, rel=1e-9)
    with pytest.raises(InputError, match="shared experts' width 50"):
        KernelModel(db, moe_toy(shared_intermediate_size=50), KernelSetup(GPU, FW, VER, tp=4))
    # the MLP width is required only when some layer is dense
    all_moe = moe_toy(layers=2, intermediate_size=0)
    assert KernelModel(db, all_moe, KernelSetup(GPU, FW, VER, tp=2, ep=2)).t_decode(B, c) > 0
    with pytest.raises(InputError, match="intermediate_size"):
        KernelModel(db, moe_toy(intermediate_size=0), KernelSetup(GPU, FW, VER, tp=2, ep=2))


def test_a_sliding_layer_attends_to_its_window(tmp_path: Path) -> None:
    make_db(tmp_path)
    model = toy(sliding_window=16, sliding_layers=1)
    km = KernelModel(KernelDatabase(tmp_path), model, KernelSetup(GPU, FW, VER))
    # decode beyond the window: the full layer at 64, the sliding one at min(64, 16)
    calls = [c for c in km.decode(2, 64).calls if c.name == "attention"]
    assert [(dict(c.shape)["step"], c.count) for c in calls] == [(64, 1), (16, 1)]
    assert km.decode(2, 64).by_name()["attention"] == pytest.approx(
        (gen_ms(2, 64) + gen_ms(2, 16)) * MS, rel=1e-12
    )
    # within the window the sliding layer masks nothing: both layers at the context
    assert km.decode(2, 4).by_name()["attention"] == pytest.approx(2 * gen_ms(2, 4) * MS)
    # a prompt within the window is full attention; beyond it, refused without the
    # table's rows of that window
    assert km.prefill(16).by_name()["attention"] == pytest.approx(2 * ctx_ms(16) * MS)
    with pytest.raises(OutsideTableError, match=r"window_size=16.*sliding layer of window 16"):
        km.prefill(64)
    # where the table measures the window, its rows are used (here half the full cost)
    add_rows(tmp_path, "attention", "generation_attention", [
        {"window_size": 16, "batch_size": b, "step": s, "latency": 0.5 * gen_ms(b, s)}
        for b in BATCH for s in STEP
    ])  # fmt: skip
    add_rows(tmp_path, "attention", "context_attention", [
        {"window_size": 16, "batch_size": 1, "isl": s, "latency": 0.5 * ctx_ms(s)} for s in ISL
    ])  # fmt: skip
    km = KernelModel(KernelDatabase(tmp_path), model, KernelSetup(GPU, FW, VER))
    assert km.decode(2, 64).by_name()["attention"] == pytest.approx(
        1.5 * gen_ms(2, 64) * MS, rel=1e-12
    )
    assert km.prefill(64).by_name()["attention"] == pytest.approx(1.5 * ctx_ms(64) * MS)


def test_a_chunked_layer_attends_within_its_chunk(tmp_path: Path) -> None:
    make_db(tmp_path)
    # the context table measures batches of prompts too
    add_rows(tmp_path, "attention", "context_attention", [
        {"batch_size": b, "isl": s, "latency": b * ctx_ms(s)} for b in (2, 4) for s in ISL
    ])  # fmt: skip
    model = toy(attention_chunk=16, chunked_layers=1)
    km = KernelModel(KernelDatabase(tmp_path), model, KernelSetup(GPU, FW, VER))
    # a prompt of 64 tokens: the full layer at 64, the chunked one as 4 prompts of 16
    calls = [c for c in km.prefill(64).calls if c.name == "attention"]
    assert [(dict(c.shape)["batch_size"], dict(c.shape)["isl"]) for c in calls] == [
        (1, 64),
        (4, 16),
    ]
    assert km.prefill(64).by_name()["attention"] == pytest.approx(
        (ctx_ms(64) + 4 * ctx_ms(16)) * MS, rel=1e-12
    )
    # within its first chunk a chunked layer is a full one; beyond it, refused
    assert km.decode(2, 16).by_name()["attention"] == pytest.approx(2 * gen_ms(2, 16) * MS)
    with pytest.raises(InputError, match="attention chunk of 16"):
        km.decode(2, 40)


def fp8_db(root: Path) -> KernelDatabase:
    """:func:`make_db` with FP8 GEMMs (``fp8`` at half, ``fp8_block`` at 0.6 of the bf16
    time) and FP8 MoE rows."""
    make_db(root)
    add_rows(root, "gemm", "gemm", [
        {"gemm_dtype": d, "m": m, "n": n, "k": k, "latency": f * gemm_ms(m, n, k)}
        for d, f in (("fp8", 0.5), ("fp8_block", 0.6)) for m in M for n in NK for k in NK
    ])  # fmt: skip
    moe = pq.read_table(root / GPU / "moe" / FW / VER / "moe_perf.parquet").to_pylist()
    add_rows(root, "moe", "moe", [
        {**r, "moe_dtype": d, "latency": f * r["latency"]}  # type: ignore[operator]
        for d, f in (("fp8", 0.5), ("fp8_block", 0.6), ("w4a16_mxfp4", 0.3)) for r in moe
    ])  # fmt: skip
    return KernelDatabase(root)


def gemm_dtypes(phase: PhaseTime) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = {}
    for c in phase.calls:
        shape = dict(c.shape)
        dtype = shape.get("gemm_dtype", shape.get("moe_dtype"))
        if dtype is not None:
            out.setdefault(c.name, []).append((str(dtype), c.count))
    return out


def test_fp8_weights_use_the_fp8_tables_of_the_release_format(tmp_path: Path) -> None:
    db = fp8_db(tmp_path)
    fp8 = KernelSetup(GPU, FW, VER, weight_dtype="fp8")
    # per-tensor FP8 release: every linear layer in the table's fp8, the LM head bf16
    got = gemm_dtypes(KernelModel(db, toy(), fp8).decode(4, 16))
    assert got == {
        "qkv projection": [("fp8", 2)],
        "o projection": [("fp8", 2)],
        "mlp gate-up": [("fp8", 2)],
        "mlp down": [("fp8", 2)],
        "lm head": [("bfloat16", 1)],
    }
    bf16 = KernelModel(db, toy(), KernelSetup(GPU, FW, VER)).decode(4, 16)
    phase = KernelModel(db, toy(), fp8).decode(4, 16)
    lm_head = gemm_ms(4, 256, 64) * MS
    assert phase.time_s - 0.5 * (bf16.time_s - lm_head - 2 * gen_ms(4, 16) * MS) == (
        pytest.approx(lm_head + 2 * gen_ms(4, 16) * MS, rel=1e-9)
    )
    # a block-scaled release (Qwen3, DeepSeek) reads fp8_block; fp8_tensor forces fp8
    block = toy(fp8_block=128)
    assert gemm_dtypes(KernelModel(db, block, fp8).decode(4, 16))["mlp down"] == [("fp8_block", 2)]
    tensor = KernelSetup(GPU, FW, VER, weight_dtype="fp8_tensor")
    assert gemm_dtypes(KernelModel(db, block, tensor).decode(4, 16))["mlp down"] == [("fp8", 2)]
    with pytest.raises(InputError, match="64 x 64 weight blocks"):
        KernelModel(db, toy(fp8_block=64), fp8)
    # Llama 3.1 405B's release: FP8 MLPs only, the first and last layer's kept in bf16
    llama = toy(layers=4, fp8_scope="mlp", fp8_bf16_layers=2)
    got = gemm_dtypes(KernelModel(db, llama, fp8).decode(4, 16))
    assert got["qkv projection"] == [("bfloat16", 4)]
    assert got["mlp gate-up"] == [("fp8", 2), ("bfloat16", 2)]
    assert got["mlp down"] == [("fp8", 2), ("bfloat16", 2)]
    # a block-scaled MoE: attention and experts in fp8_block, router and LM head bf16
    moe = moe_toy(layers=2, fp8_block=128, shared_intermediate_size=64)
    fp8_ep = KernelSetup(GPU, FW, VER, tp=2, ep=2, weight_dtype="fp8")
    got = gemm_dtypes(KernelModel(db, moe, fp8_ep).decode(4, 16))
    assert got["qkv projection"] == [("fp8_block", 2)]
    assert got["moe"] == [("fp8_block", 2)]
    assert got["shared expert down"] == [("fp8_block", 2)]
    assert got["router"] == [("bfloat16", 2)] and got["lm head"] == [("bfloat16", 1)]
    # Llama 4 Maverick's release: only the routed experts, one MoE layer's kept in bf16
    maverick = moe_toy(
        layers=2, fp8_scope="experts", fp8_bf16_layers=1, shared_intermediate_size=64
    )
    got = gemm_dtypes(KernelModel(db, maverick, fp8_ep).decode(4, 16))
    assert got["moe"] == [("fp8", 1), ("bfloat16", 1)]
    assert got["qkv projection"] == [("bfloat16", 2)]
    assert got["shared expert gate-up"] == [("bfloat16", 2)]


def test_mxfp4_experts_use_the_moe_tables_4_bit_dtype(tmp_path: Path) -> None:
    db = fp8_db(tmp_path)
    gpt_oss_like = moe_toy(layers=2, expert_bytes_per_param=4.25 / 8)
    km = KernelModel(
        db, gpt_oss_like, KernelSetup(GPU, FW, VER, tp=2, ep=2, distribution="balanced")
    )
    phase = km.decode(4, 16)
    got = gemm_dtypes(phase)
    assert got["moe"] == [("w4a16_mxfp4", 2)]
    assert got["qkv projection"] == [("bfloat16", 2)]  # attention and router stay bf16
    assert phase.by_name()["moe"] == pytest.approx(2 * 0.3 * moe_ms(4, 2) * MS, rel=1e-12)
    # an explicit MoE dtype wins
    explicit = KernelSetup(GPU, FW, VER, tp=2, ep=2, moe_dtype="bf16")
    assert gemm_dtypes(KernelModel(db, gpt_oss_like, explicit).decode(4, 16))["moe"] == [
        ("bfloat16", 2)
    ]


def test_a_collective_beyond_the_largest_measured_message_is_a_sum_of_pieces(
    tmp_path: Path,
) -> None:
    db = make_db(tmp_path)
    km = KernelModel(db, toy(vocab_size=128), KernelSetup(GPU, FW, VER, tp=2))
    # the logits all-gather of 64 requests over a 128-word vocabulary is 8,192 elements,
    # twice the table's largest message (4,096): two pieces of 4,096
    calls = [c for c in km.decode(64, 16).calls if c.name == "logits all-gather"]
    assert [(dict(c.shape)["message_size"], c.count) for c in calls] == [(4096, 2)]
    assert km.decode(64, 16).by_name()["logits all-gather"] == pytest.approx(
        2 * ag_ms(4096) * MS, rel=1e-12
    )
    # 63 requests: 8,064 elements, two equal pieces of 4,032
    calls = [c for c in km.decode(63, 16).calls if c.name == "logits all-gather"]
    assert [(dict(c.shape)["message_size"], c.count) for c in calls] == [(4032, 2)]
    # within the table, one call of the whole message
    calls = [c for c in km.decode(32, 16).calls if c.name == "logits all-gather"]
    assert [(dict(c.shape)["message_size"], c.count) for c in calls] == [(4096, 1)]


def _comm(root: Path, framework: str, version: str, kind: str, rows: list[dict]) -> None:
    """A collective table of the toy GPU under another framework or version."""
    path = root / GPU / "comm" / framework / version / f"{kind}_perf.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({c: [r[c] for r in rows] for c in rows[0]}), path)


def _allreduce_rows(framework: str, gpus: int, scale: float = 1.0) -> list[dict]:
    return [
        {"allreduce_dtype": "bfloat16", "num_gpus": gpus, "message_size": s,
         "backend": f"{framework}_{b}", "latency": scale * ar_ms(s, b == "graph")}
        for s in MSG for b in ("graph", "eager")
    ]  # fmt: skip


def _all_reduces(phase: PhaseTime) -> list[KernelCall]:
    return [c for c in phase.calls if c.name.endswith("all-reduce")]


def test_an_all_reduce_its_table_lacks_is_read_from_another_frameworks_and_said(
    tmp_path: Path,
) -> None:
    """SGLang's all-reduce table measures 8 GPUs only; a TP2 composition reads the 2-GPU
    all-reduce of vLLM's table of the same GPU (graph and eager backends alike), says so,
    and times exactly as when those rows sit in SGLang's own table."""
    ref = KernelModel(make_db(tmp_path / "ref"), toy(), KernelSetup(GPU, FW, VER, tp=2))
    db_root = tmp_path / "sub"
    make_db(db_root)
    _comm(db_root, FW, VER, "custom_allreduce", _allreduce_rows("sglang", 8, scale=9.0))
    _comm(db_root, "vllm", "0.24.0", "custom_allreduce", _allreduce_rows("vllm", 2))
    _comm(db_root, "vllm", "0.19.0", "custom_allreduce", _allreduce_rows("vllm", 2, 5.0))
    km = KernelModel(KernelDatabase(db_root), toy(), KernelSetup(GPU, FW, VER, tp=2))
    assert km.substitutions == []  # nothing read from elsewhere before it is needed
    for b, c in ((4, 16), (1, 64)):
        got, want = km.decode(b, c), ref.decode(b, c)
        assert got.time_s == want.time_s
        calls = _all_reduces(got)
        assert {x.table for x in calls} == {f"{GPU}/comm/vllm/0.24.0/custom_allreduce_perf.parquet"}
        assert {dict(x.shape)["backend"] for x in calls} == {"vllm_graph"}
    assert km.prefill(16).time_s == ref.prefill(16).time_s  # eager: vllm_eager
    assert {dict(x.shape)["backend"] for x in _all_reduces(km.prefill(16))} == {"vllm_eager"}
    assert km.substitutions == [
        f"custom_allreduce (allreduce_dtype='bfloat16', num_gpus=2): {GPU} sglang {VER} "
        f"measures no such all-reduce; vllm 0.24.0's custom_allreduce (vllm_{b}) is read"
        for b in ("graph", "eager")
    ]


def test_an_all_reduce_no_custom_table_measures_is_read_from_nccls_all_reduce(
    tmp_path: Path,
) -> None:
    """No custom all-reduce table of the GPU measures 2 GPUs: NCCL's ``all_reduce`` rows
    of 2 GPUs are read (fp16, the same two bytes an element as bf16), and said."""
    make_db(tmp_path)
    _comm(tmp_path, FW, VER, "custom_allreduce", _allreduce_rows("sglang", 8))
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER, tp=2))
    phase = km.decode(4, 16)
    calls = _all_reduces(phase)
    assert {x.table for x in calls} == {f"{GPU}/comm/nccl/2.29.2/nccl_perf.parquet"}
    assert {tuple(dict(x.shape).items())[:3] for x in calls} == {
        (("op_name", "all_reduce"), ("nccl_dtype", "half"), ("num_gpus", 2))
    }
    # the toy's NCCL all-reduce is 1 ms at every message: 1 + 2 x 2 calls
    assert sum(x.total_s for x in calls) == pytest.approx(5 * 1.0 * MS, rel=1e-12)
    (said,) = km.substitutions
    assert said.endswith("measures no such all-reduce; nccl 2.29.2's all_reduce (half) is read")


def test_a_collective_outside_every_table_of_the_gpu_is_refused_naming_table_and_shape(
    tmp_path: Path,
) -> None:
    make_db(tmp_path)
    _comm(tmp_path, FW, VER, "custom_allreduce", _allreduce_rows("sglang", 8))
    _comm(tmp_path, "vllm", "0.24.0", "custom_allreduce", _allreduce_rows("vllm", 4))
    nccl = [
        {"op_name": "all_gather", "nccl_dtype": "half", "num_gpus": 2, "message_size": s,
         "latency": ag_ms(s)}
        for s in MSG
    ]  # fmt: skip
    write(tmp_path, "comm", "nccl", nccl)  # no all_reduce rows
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER, tp=2))
    with pytest.raises(OutsideTableError) as err:
        km.decode(4, 16)
    name = f"{GPU}/comm/{FW}/{VER}/custom_allreduce_perf.parquet"
    assert err.value.table == name
    assert err.value.shape == {"allreduce_dtype": "bfloat16", "num_gpus": 2,
                               "backend": "sglang_graph", "message_size": 4 * 64}  # fmt: skip
    text = str(err.value)
    assert "no measured rows with num_gpus=2; measured: 8" in text
    assert "searched: custom_allreduce of vllm 0.24.0; all_reduce of nccl 2.29.2" in text
    assert km.substitutions == []
    # an NCCL collective: the GPU's other NCCL tables are searched, then refused
    write(tmp_path, "comm", "custom_allreduce", _allreduce_rows("sglang", 2))
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER, tp=2))
    assert km.decode(4, 16).time_s > 0
    other = tmp_path / GPU / "comm" / "nccl" / "2.27.3" / "nccl_perf.parquet"
    other.parent.mkdir(parents=True)
    pq.write_table(pa.table({c: [r[c] for r in nccl] for c in nccl[0]}), other)
    (tmp_path / GPU / "comm" / "nccl" / "2.29.2" / "nccl_perf.parquet").unlink()
    _comm(tmp_path, "nccl", "2.29.2", "nccl", [dict(r, num_gpus=8) for r in nccl])
    km = KernelModel(KernelDatabase(tmp_path), toy(), KernelSetup(GPU, FW, VER, tp=2))
    assert km.decode(4, 16).time_s > 0  # 2.27.3's 2-GPU all-gather
    assert km.substitutions == [
        f"nccl (op_name='all_gather', nccl_dtype='half', num_gpus=2): {GPU} nccl 2.29.2 "
        "measures no such all_gather; nccl 2.27.3's all_gather is read"
    ]


def test_pieces_beyond_the_largest_message_against_a_held_out_measurement(
    tmp_path: Path,
) -> None:
    """The B200's NCCL 2-GPU all-gather without its largest measured message (2^28
    elements in aiconfigurator-core 0.12.0): the logits all-gather of 64 requests over a
    vocabulary of that message / 64 words is that message, composed as two pieces of
    half of it; against the held-out measurement it is within 10% (not below it: one
    launch and one latency more)."""
    from tests.conftest import installed_kernel_tables

    measured = KernelDatabase(installed_kernel_tables()).table("b200_sxm", "nccl", "nccl", "2.29.2")
    key = {"op_name": "all_gather", "nccl_dtype": "half", "num_gpus": 2}
    sizes = [int(x) for x in measured.axis_values(**key).get("message_size", [])]
    if len(sizes) < 3 or sizes[-2] * 2 != sizes[-1] or sizes[-1] % 64:
        pytest.skip("the installed B200 NCCL table does not end in a doubling")
    top = sizes[-1]
    held_out = measured.lookup(**key, message_size=top).time_s
    rows = [
        {**key, "message_size": s, "latency": measured.lookup(**key, message_size=s).time_s / MS}
        for s in sizes[:-1]
    ]
    make_db(tmp_path)
    write(tmp_path, "comm", "nccl", rows)
    km = KernelModel(
        KernelDatabase(tmp_path), toy(vocab_size=top // 64), KernelSetup(GPU, FW, VER, tp=2)
    )
    calls = [c for c in km.decode(64, 16).calls if c.name == "logits all-gather"]
    assert [(dict(c.shape)["message_size"], c.count) for c in calls] == [(top // 2, 2)]
    pieces = sum(c.total_s for c in calls)
    assert held_out <= pieces <= 1.10 * held_out


# --------------------------------------------------------------------------
# The ML.ENERGY models on the published tables (vLLM 0.14.0 on H100, 0.19.0 on B200)


def fp8_release(name: str) -> ModelArch:
    """The catalog model with FP8 weights, as the FP8 rows of the measurements read it."""
    return dataclasses.replace(load_model(name), bytes_per_param=1.0)


@pytest.mark.slow  # 9.5 s on two cores
def test_fp8_releases_on_the_published_tables_use_their_fp8_gemm_and_moe_dtypes() -> None:
    db = published()
    h100 = ("h100_sxm", "vllm", "0.14.0")
    qwen = KernelModel(
        db, fp8_release("qwen3-235b-a22b"), KernelSetup(*h100, tp=4, ep=4, weight_dtype="fp8")
    )
    got = {name: set(parts) for name, parts in gemm_dtypes(qwen.decode(31.4, 1141)).items()}
    assert got["qkv projection"] == {("fp8_block", 94)}  # 128 x 128 blocks
    assert got["moe"] == {("fp8_block", 94)}
    assert got["router"] == {("bfloat16", 94)} and got["lm head"] == {("bfloat16", 1)}
    llama = KernelModel(
        db, fp8_release("llama-3.1-405b"), KernelSetup(*h100, tp=8, weight_dtype="fp8")
    )
    phase = llama.decode(64, 573)
    got_llama = gemm_dtypes(phase)
    assert got_llama["qkv projection"] == [("bfloat16", 126)]  # attention stays bf16
    assert got_llama["mlp gate-up"] == [("fp8", 124), ("bfloat16", 2)]  # first and last
    bf16 = KernelModel(db, load_model("llama-3.1-405b"), KernelSetup(*h100, tp=8))
    assert phase.by_name()["mlp gate-up"] < 0.8 * bf16.decode(64, 573).by_name()["mlp gate-up"]


@pytest.mark.slow  # 23.4 s on two cores
def test_the_logits_all_gather_beyond_the_nccl_table_is_composed_in_pieces() -> None:
    """Qwen3-235B at TP8 on B200, 2,045 running requests: the logits all-gather moves
    2,045 x 151,936 = 310.7M elements, beyond the NCCL table's largest message (2^28
    elements, 512 MiB of fp16); it was refused before, the error text cut at
    ``message_size=31``."""
    db = published()
    km = KernelModel(
        db, load_model("qwen3-235b-a22b"), KernelSetup("b200_sxm", "vllm", "0.19.0", tp=8, ep=8)
    )
    calls = [c for c in km.decode(2045, 1139).calls if c.name == "logits all-gather"]
    sizes = [(dict(c.shape)["message_size"], c.count) for c in calls]
    assert sum(size * count for size, count in sizes) == 2045 * 151936
    assert sum(count for _, count in sizes) == 2
    assert all(size <= 2**28 for size, _ in sizes)


@pytest.mark.slow  # 21.2 s on two cores
def test_sliding_window_models_on_the_published_tables() -> None:
    db = published()
    b200 = ("b200_sxm", "vllm", "0.19.0")
    gemma = KernelModel(db, load_model("gemma-3-12b"), KernelSetup(*b200))
    calls = [c for c in gemma.decode(32, 2000).calls if c.name == "attention"]
    # 8 full layers at 2,000 past tokens, 40 sliding ones at their window of 1,024
    assert [(dict(c.shape)["step"], c.count) for c in calls] == [(2000, 8), (1024, 40)]
    with pytest.raises(OutsideTableError, match=r"sliding layer of window 1024"):
        gemma.prefill(2048)
    assert gemma.t_prefill(1024) > 0
    # what the tables do not measure is refused, naming the table and the shape
    h100 = ("h100_sxm", "vllm", "0.14.0")
    with pytest.raises(OutsideTableError, match=r"h100_sxm/attention/vllm/0\.14\.0/generation.*"
                       r"no measured rows with head_dim=256"):  # fmt: skip
        KernelModel(db, load_model("gemma-3-12b"), KernelSetup(*h100)).decode(8, 864)
    with pytest.raises(OutsideTableError, match="no measured rows with num_key_value_heads=16"):
        KernelModel(db, load_model("gemma-3-27b"), KernelSetup(*b200)).decode(8, 856)
    assert KernelModel(db, load_model("gemma-3-27b"), KernelSetup(*h100, tp=2)).t_decode(8, 856)
    with pytest.raises(OutsideTableError, match="no measured rows with head_dim=64"):
        KernelModel(db, load_model("gpt-oss-20b"), KernelSetup(*b200)).decode(8, 2227)
    # gpt-oss's MXFP4 experts are measured on B200, in the MoE table's w4a16_mxfp4
    moe = db.table("b200_sxm", "moe", "vllm", "0.19.0")
    shape = {"hidden_size": 2880, "inter_size": 2880, "topk": 4, "num_experts": 32,
             "moe_tp_size": 1, "moe_ep_size": 1, "distribution": "balanced"}  # fmt: skip
    assert moe.lookup(moe_dtype="w4a16_mxfp4", **shape, num_tokens=64).time_s > 0


@pytest.mark.slow  # 4.4 s on two cores
def test_what_the_published_tables_cannot_compose_is_refused_with_the_reason() -> None:
    db = published()
    # DeepSeek's latent attention needs an MLA table, which this database does not hold
    with pytest.raises(InputError, match=r"no table b200_sxm/mla/vllm/0\.19\.0/context_mla_perf"):
        KernelModel(
            db, load_model("deepseek-v3.1"), KernelSetup("b200_sxm", "vllm", "0.19.0", tp=8, ep=8)
        )
    h100 = ("h100_sxm", "vllm", "0.14.0")
    scout = KernelModel(db, load_model("llama-4-scout"), KernelSetup(*h100, tp=4, ep=4))
    with pytest.raises(OutsideTableError, match="no measured rows with num_heads=10"):
        scout.decode(8, 593)
    moe = db.table("h100_sxm", "moe", "vllm", "0.14.0")
    with pytest.raises(OutsideTableError, match="no measured rows with hidden_size=5120"):
        moe.lookup(moe_dtype="bfloat16", hidden_size=5120, inter_size=8192, topk=1,
                   num_experts=16, moe_tp_size=1, moe_ep_size=4, distribution="balanced",
                   num_tokens=64)  # fmt: skip


def _routed(tokens: int, experts: int, top_k: int, ep: int, draws: int) -> np.ndarray:
    """Brute force: `draws` batches of 1..`tokens` tokens, each routed to `top_k` distinct
    experts drawn uniformly; per batch size, the mean over draws of the experts the
    busiest of `ep` ranks (consecutive experts, E / ep each) reads."""
    rng = np.random.default_rng(20261203)
    read = np.zeros((draws, experts), dtype=bool)
    out = []
    for _ in range(tokens):
        picks = np.argpartition(rng.random((draws, experts)), top_k, axis=1)[:, :top_k]
        np.put_along_axis(read, picks, True, axis=1)
        out.append(read.reshape(draws, ep, experts // ep).sum(axis=2).max(axis=1).mean())
    return np.array(out)


@pytest.mark.parametrize(
    ("experts", "top_k", "ep"), [(128, 8, 1), (128, 8, 2), (128, 8, 4), (128, 8, 8), (160, 8, 8)]
)
def test_busiest_rank_experts_against_brute_force_routing(
    experts: int, top_k: int, ep: int
) -> None:
    """The experts read under uniform routing, on one rank (``E (1 - (1 - k/E)^T)``) and
    on the busiest of several, against drawing the routing: 4,000 batches per size."""
    drawn = _routed(64, experts, top_k, ep, 4000)
    for t in (1, 2, 4, 8, 16, 32, 64):
        got = busiest_rank_experts(t, experts, top_k, ep)
        if ep == 1:
            assert got == pytest.approx(experts * (1 - (1 - top_k / experts) ** t), rel=1e-12)
            assert got == pytest.approx(drawn[t - 1], rel=0.01)
        else:  # the experts taken as independent: within 2%
            assert got == pytest.approx(drawn[t - 1], rel=0.02)
    # the busiest of several ranks reads more than their mean, and at most its experts
    if ep > 1:
        mean = busiest_rank_experts(8, experts, top_k) / ep
        assert mean < busiest_rank_experts(8, experts, top_k, ep) <= experts / ep


def test_uniform_tokens_on_expert_parallel_ranks() -> None:
    # 8 tokens, top 8 of 128 on 8 ranks of 16: the busiest reads R = 9.26 experts; the
    # balanced load reads 64 / 8 = 8 per rank at 8 tokens, R per rank at 8 R / 8 tokens
    r = busiest_rank_experts(8, 128, 8, 8)
    assert uniform_tokens(8, 128, 8, 8) == pytest.approx(8 * r / 8)
    assert uniform_tokens(8, 128, 8, 8) > uniform_tokens(8, 128, 8)  # more than one rank's mean
    assert r == pytest.approx(9.26, abs=0.01)
    assert uniform_tokens(1, 128, 8, 8) == pytest.approx(2.51, abs=0.01)  # above 1 token
    assert uniform_tokens(8192, 128, 8, 8) == pytest.approx(8192)  # every expert read
    last = 0.0
    for t in range(1, 400):
        v = uniform_tokens(t, 128, 8, 4)
        assert v >= last  # never falling
        last = v
    assert uniform_tokens(16 - 1e-9, 128, 8, 4) == pytest.approx(uniform_tokens(16, 128, 8, 4))


def test_uniform_tokens_reads_as_many_experts_as_uniform_routing() -> None:
    # 16 tokens, top 8 of 128: D = 128 (1 - (120/128)^16) = 82.42 experts read, the
    # balanced load reads min(128, 128) -> 16 * 82.42 / 128 = 10.30 tokens
    assert uniform_tokens(16, 128, 8) == pytest.approx(16 * 128 * (1 - (15 / 16) ** 16) / 128)
    assert uniform_tokens(16, 128, 8) == pytest.approx(10.30, abs=0.01)
    assert uniform_tokens(1, 128, 8) == 1.0  # one token reads its k experts either way
    assert uniform_tokens(8192, 128, 8) == pytest.approx(8192)  # every expert read
    last = 0.0
    for t in range(1, 400):
        v = uniform_tokens(t, 128, 8)
        assert 1.0 <= v <= t and v >= last  # never more than the tokens, never falling
        last = v
    # continuous where T k reaches E (16 tokens): both branches give D/k
    assert uniform_tokens(16 - 1e-9, 128, 8) == pytest.approx(uniform_tokens(16, 128, 8))
    assert uniform_tokens(4, 8, 8) == 4.0  # top-k of all experts: the load is balanced


def test_growth_is_the_median_ratio_of_times_along_one_size(tmp_path: Path) -> None:
    """:meth:`KernelTable.growth` on a table written here: at each (n, k) the time at
    4,096 rows over the time at one row, medianed over the shapes of at least
    ``min_rest`` weights; unmeasured sizes give NaN."""
    shapes = [(1024, 1024), (2048, 2048), (4096, 2048)]
    rows = [
        {"kernel_source": "x", "gemm_dtype": "fp8_block", "m": m, "n": n, "k": k,
         "latency": 0.01 * (n * k) / 2**20 + 1e-9 * m * n * k}
        for m in (1, 64, 4096) for n, k in shapes
    ]  # fmt: skip
    write(tmp_path, "gemm", "gemm", rows)
    table = KernelDatabase(tmp_path).table(GPU, "gemm", FW, VER)

    def ratio(n: int, k: int) -> float:
        return (0.01 * n * k / 2**20 + 1e-9 * 4096 * n * k) / (0.01 * n * k / 2**20 + 1e-9 * n * k)

    key = {"gemm_dtype": "fp8_block"}
    got, points = table.growth(key, "m", 1, 4096, 1 << 22)
    assert points == 2
    assert got == pytest.approx(float(np.median([ratio(2048, 2048), ratio(4096, 2048)])))
    assert table.growth(key, "m", 1, 4096)[1] == 3
    assert math.isnan(table.growth(key, "m", 1, 512)[0])
    assert math.isnan(table.growth({"gemm_dtype": "fp8"}, "m", 1, 4096)[0])
