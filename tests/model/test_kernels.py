"""Kernel performance source (model.kernels): the reader of AIConfigurator's layout on
small tables written here and on the published ones (skipped when absent), the
interpolation between measured shapes, the refusal outside them, and the composition
of one forward pass checked against a hand-summed one."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from model.catalog import ModelArch, load_calibration, load_gpu, load_model
from model.errors import InputError, OutsideTableError
from model.kernels import TABLE_SPECS, KernelDatabase, KernelModel, KernelSetup
from tests.conftest import shared_data_dir

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


def test_moe_layer_and_power_of_a_phase(tmp_path: Path) -> None:
    db = make_db(tmp_path, power=True)
    moe = toy(experts=32, experts_per_token=2, moe_layers=2, expert_params=3 * 64 * 32)
    km = KernelModel(db, moe, KernelSetup(GPU, FW, VER, tp=2, ep=2))
    B, c = 4, 16
    phase = km.decode(B, c)
    assert phase.by_name()["moe"] == pytest.approx(2 * moe_ms(B, 2) * MS)
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
    root = shared_data_dir() / "aiconfigurator"
    if not root.is_dir():
        pytest.skip("the AIConfigurator kernel tables are not in the data directory")
    return KernelDatabase(root)


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


def test_b200_phases_carry_their_kernels_power() -> None:
    db = published()
    km = KernelModel(db, load_model("qwen3-8b"), KernelSetup("b200_sxm", "sglang", "0.5.14"))
    for phase in (km.prefill(2048), km.decode(16, 2048)):
        assert phase.power_w is not None
        assert 100.0 < phase.power_w <= 1000.0  # the tables' power limit is 1,000 W
    h200 = KernelModel(db, load_model("qwen3-8b"), KernelSetup("h200_sxm", "sglang", "0.5.14"))
    assert h200.decode(16, 2048).power_w is None


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
