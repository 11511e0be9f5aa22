"""The decisions check (model/measured/decisions.py): measured throughput of a closed loop, the
TPOT target a group is judged at, and the pick against the best, on rows made here."""

from __future__ import annotations

import pytest

from model.errors import InputError
from model.measured.decisions import Config, config_of, groups_of, judge, measured_rps_per_gpu
from model.measured.silicon import Phase, SiliconRow
from model.shapes import InstanceShape


def row(i, n_p, n_d, conc, ttft_ms, tpot_ms, p_tp=8, d_tp=8, d_dp=1, pp=1):
    return SiliconRow(
        id=f"r{i}", line=i, backend="sglang", backend_version="0.5.14",
        model_path="deepseek-ai/DeepSeek-V3", system="h200_sxm", precision="fp8",
        gemm_quant="fp8", moe_quant="fp8", mode="disagg", isl=8192, osl=1024,
        concurrency=conc, agg=None,
        prefill=Phase(n_p, None, p_tp, pp, 1, p_tp, 1),
        decode=Phase(n_d, None, d_tp, 1, d_dp, d_tp, d_dp * d_tp if d_dp > 1 else 1),
        ttft_ms=ttft_ms, tpot_ms=tpot_ms,
    )  # fmt: skip


def test_measured_throughput_is_the_closed_loops():
    r = row(0, 2, 1, 64, 1000.0, 20.0)
    c = config_of(r)
    assert c == Config(2, InstanceShape(8), 1, InstanceShape(8))
    # 64 clients, each request 1 s + 1023 x 20 ms = 21.46 s, over 24 GPUs
    assert measured_rps_per_gpu(r, c) == pytest.approx(64 / 21.46 / 24)
    assert (
        config_of(row(1, 1, 1, 8, 1.0, 1.0, pp=2))
        == "prefill pipeline parallelism 2: not expressed"
    )


def test_groups_need_five_configurations():
    rows = [row(i, 1 + i % 4, 1, 16, 900.0, 20.0) for i in range(8)]  # 4 configurations
    assert groups_of(rows) == []
    rows.append(row(9, 1, 2, 16, 900.0, 20.0))
    ((key, members),) = groups_of(rows)
    assert key == ("deepseek-ai/DeepSeek-V3", "h200_sxm", "sglang", "fp8", 8192, 1024)
    assert len(members) == 9


def test_the_pick_is_judged_by_its_measured_throughput_within_the_best_rows_tpot():
    rows = [
        row(0, 1, 1, 64, 2000.0, 30.0),
        row(1, 2, 1, 128, 2000.0, 25.0),
        row(2, 1, 2, 64, 2000.0, 20.0),
        row(3, 3, 1, 320, 2000.0, 40.0),  # the best per GPU: its TPOT is the target
        row(4, 1, 3, 32, 2000.0, 15.0),
        row(5, 1, 3, 64, 2000.0, 45.0),  # above the target: not counted
    ]
    per_gpu = {r.id: measured_rps_per_gpu(r, config_of(r)) for r in rows}  # type: ignore[arg-type]
    assert max(per_gpu, key=per_gpu.__getitem__) == "r3"
    ((key, members),) = groups_of(rows)
    guess = {(1, 1): 1.0, (2, 1): 2.0, (1, 2): 3.0, (1, 3): 0.5}  # made-up predictions
    seen = []

    def predict(c, goals):
        seen.append(goals.tpot_p99_s)
        if (c.n_p, c.n_d) == (3, 1):
            raise InputError("decode_shape", "made-up refusal")
        return guess[(c.n_p, c.n_d)]

    g = judge(key, members, predict)
    assert g.tpot_target_s == pytest.approx(0.040)
    assert seen and all(t == g.tpot_target_s for t in seen)
    assert g.best.config.text == "3P1D (tp8 / tp8)"
    assert g.pick is not None and g.pick.config.text == "1P2D (tp8 / tp8)"
    assert g.ratio == pytest.approx(per_gpu["r2"] / per_gpu["r3"])
    (three,) = [c for c in g.choices if c.config.n_d == 3]
    assert three.measured_best == pytest.approx(per_gpu["r4"])  # r5 misses the target
    assert [c.config.text for c in g.choices if c.reason] == ["3P1D (tp8 / tp8)"]


def test_capacity_per_gpu_is_the_capacity_under_the_target_over_the_gpus():
    from model.capacity import evaluate
    from model.latency_targets import LatencyTargets
    from model.measured.decisions import capacity_per_gpu
    from model.operations import SpecRequest, resolve_spec
    from model.queueing.targets import evaluate_targets

    c = Config(2, InstanceShape(2), 1, InstanceShape(4))
    over = {"serving": {"prefill_shape": "tp2", "decode_shape": "tp4"}}
    s = resolve_spec(SpecRequest("llama-3.1-70b", "h200", "fixed:2048:256", over))
    free = evaluate(s, [2], [1]).capacity_rps[0]
    got = capacity_per_gpu(s, c, LatencyTargets(tpot_p99_s=0.012))
    capped = evaluate_targets(s, [2], [1], LatencyTargets(tpot_p99_s=0.012)).capacity_rps[0]
    assert got == capped / 8  # 2 x 2 + 1 x 4 GPUs
    assert 0 < capped < free  # the 12 ms target caps the batch (B_T = 12, below 33)


def test_a_row_without_worker_counts_takes_the_published_configuration():
    """A disaggregated row of the installed file that states no worker counts is judged
    at the configuration its run published (model/data/silicon_disagg_workers.json), as
    the validation reads it; a row the table refuses carries the table's reason."""
    from model.measured import silicon
    from tests.model.rows import installed_silicon_rows

    rows = installed_silicon_rows()
    table = silicon.published_workers()
    rid, entry = next(iter(sorted(table["rows"].items())))
    rec = table["records"][entry["record"]]
    if rec["speculative"] != "none":  # the first listed may be an MTP run
        rid = next(k for k, e in sorted(table["rows"].items())
                   if table["records"][e["record"]]["speculative"] == "none")  # fmt: skip
        rec = table["records"][table["rows"][rid]["record"]]
    r = rows[rid]
    assert r.prefill is not None and r.prefill.workers is None
    c = config_of(r)
    assert isinstance(c, Config)
    assert (c.n_p, c.n_d) == (rec["prefill"]["workers"], rec["decode"]["workers"])
    assert c.prefill.gpus == rec["prefill"]["gpus"] and c.decode.gpus == rec["decode"]["gpus"]
    refused_id, reason = next(iter(sorted(table["refused"].items())))
    assert config_of(rows[refused_id]) == reason


def test_a_run_that_drafted_is_a_configuration_of_its_own_with_its_depth():
    """Rows of runs with MTP speculative decoding are configurations with their draft
    depth (:func:`model.measured.decisions.drafts_of`: their published record's, or their twin
    record's, the same run recorded twice); the same instances without drafting are
    another configuration, and the text says the depth."""
    from model.measured import silicon
    from model.measured.decisions import drafts_of
    from tests.model.rows import installed_silicon_rows

    rows = installed_silicon_rows()
    drafts = drafts_of(list(rows.values()))
    table = silicon.published_workers()
    rid = next(k for k, e in sorted(table["rows"].items())
               if "draft_tokens" in table["records"][e["record"]])  # fmt: skip
    depth = table["records"][table["rows"][rid]["record"]]["draft_tokens"]
    assert drafts[rid] == depth
    c = config_of(rows[rid], drafts[rid])
    assert isinstance(c, Config) and c.draft == depth
    assert c.text.endswith(f", MTP {depth})")
    assert c != config_of(rows[rid])  # the same instances without drafting
    # a twin stating its workers takes the depth of the record of its run
    runs = silicon.records_by_run(list(rows.values()))
    twins = [t for t in runs[silicon.twin_key(rows[rid])] if t.id != rid]
    for t in twins:
        assert drafts[t.id] == depth
    # a run without MTP is not listed
    plain = next(k for k, e in sorted(table["rows"].items())
                 if table["records"][e["record"]]["speculative"] == "none")  # fmt: skip
    assert plain not in drafts
