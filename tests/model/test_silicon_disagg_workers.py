"""The published worker configurations of the disaggregated silicon rows that leave
their worker counts empty (``model/data/silicon_disagg_workers.json``, read by
``model.measured.silicon.resolve``); the checks against the installed ``silicon_sample.csv``
are skipped when aiconfigurator-core is not installed."""

from __future__ import annotations

import dataclasses

from model.measured import silicon
from tests.conftest import installed_kernel_tables
from tests.model.rows import installed_silicon_rows

#: a row InferenceX ran on 1 prefill and 4 decode workers of 4 GB300 GPUs each
#: (dsr1-fp8-gb300-dynamo-sglang, recipe recipes/gb300-fp8/1k1k/stp/low-latency.yaml)
MATCHED = "2026_03_25_deepseek_r1_gb300_sglang_fp8_disagg_1024x1024_c32_tp4_0_ep1_0_833"
#: a row of a point InferenceX ran with MTP speculative decoding
MTP = "2026_03_25_deepseek_r1_b300_sxm_trtllm_fp8_disagg_1024x1024_c11264_tp4_0_ep1_0_760"
#: a row two InferenceX entries of its run match (1P1D with MTP, 1P2D without)
AMBIGUOUS = "2026_03_25_deepseek_r1_b300_sxm_trtllm_fp8_disagg_1024x1024_c3072_tp4_0_ep1_0_746"


_rows = installed_silicon_rows


def test_table_states_its_source_and_rule() -> None:
    table = silicon.published_workers()
    source = table["source"]
    assert source["inferencex"]["repository"] == "https://github.com/SemiAnalysisAI/InferenceX"
    assert source["inferencex"]["file"] == ".github/configs/nvidia-master.yaml"
    assert source["recipes"]["repository"] == "https://github.com/NVIDIA/srt-slurm"
    assert len(source["inferencex"]["snapshot"]) == 40 and source["rule"]
    assert sum(table["counts"].values()) == len(table["rows"]) + len(table["refused"])
    assert not set(table["rows"]) & set(table["refused"])
    for entry in table["rows"].values():
        rec = table["records"][entry["record"]]
        assert rec["speculative"] in ("none", "mtp")
        for phase in ("prefill", "decode"):
            p = rec[phase]
            assert p["workers"] >= 1 and p["gpus"] >= 1
            assert p["gpus"] % p["attention_dp"] == 0 and p["gpus"] % p["moe_ep"] == 0
        # every cited commit is listed in full
        assert all(c in table["commits"]["inferencex"] for c in entry["inferencex_commits"])
        assert all(c in table["commits"]["srt-slurm"] for c in rec["recipe_commits"])
    assert all(reason for reason in table["refused"].values())


def test_table_names_the_installed_files_rows() -> None:
    """Every id the table names is a disaggregated row of the installed file without
    worker counts, of the run its record states; and every such row is in it, either
    with a configuration or with the reason it has none."""
    rows = _rows()
    table = silicon.published_workers()
    named = set(table["rows"]) | set(table["refused"])
    missing = {
        r.id for r in rows.values()
        if r.mode == "disagg" and (r.prefill is None or r.prefill.workers is None)
    }  # fmt: skip
    assert named == missing
    assert len(missing) == 1328  # aiconfigurator-core 0.12.0's file
    for rid, entry in table["rows"].items():
        r = rows[rid]
        match = table["records"][entry["record"]]["match"]
        assert match == {"model_path": r.model_path, "system": r.system, "backend": r.backend,
                         "precision": r.precision, "isl": r.isl, "osl": r.osl}  # fmt: skip


def test_published_phase_as_the_columns_state_it() -> None:
    # 8 GPUs, attention DP over all, MoE EP 8: attention tp 1 x dp 8, MoE tp 1 x ep 8
    dep = {"workers": 2, "gpus": 8, "attention_dp": 8, "moe_ep": 8,
           "max_batch_size": 256, "max_num_tokens": 8192}  # fmt: skip
    assert silicon._published_phase(dep, 1024, False) == silicon.Phase(2, 256, 1, 1, 8, 1, 8)
    # prefill: the prompts one iteration holds, min(max_batch_size, max_num_tokens // isl)
    assert silicon._published_phase(dep, 1024, True).batch == 8
    assert silicon._published_phase(dep, 8192, True).batch == 1
    # TP 8 without attention DP, MoE TP 8; no batch stated
    tp = {"workers": 5, "gpus": 8, "attention_dp": 1, "moe_ep": 1,
          "max_batch_size": None, "max_num_tokens": None}  # fmt: skip
    assert silicon._published_phase(tp, 1024, True) == silicon.Phase(5, None, 8, 1, 1, 8, 1)


def test_row_resolves_with_the_tables_workers_and_note() -> None:
    row = _rows()[MATCHED]
    assert row.prefill is not None and row.prefill.workers is None
    case = silicon.resolve(row, str(installed_kernel_tables()))
    assert isinstance(case, silicon.Case), case
    assert (case.prefill.workers, case.decode.workers) == (1, 4)
    assert case.row.prefill is not None and case.row.decode is not None
    assert (case.row.prefill.workers, case.row.decode.workers) == (1, 4)
    assert (case.row.decode.tp, case.row.decode.dp, case.row.decode.moe_ep) == (4, 1, 1)
    assert case.row.ttft_ms == row.ttft_ms and case.row.tpot_ms == row.tpot_ms
    note = next(n for n in case.notes if n.startswith("workers from"))
    assert "InferenceX nvidia-master.yaml entry dsr1-fp8-gb300-dynamo-sglang" in note
    assert "recipes/gb300-fp8/1k1k/stp/low-latency.yaml" in note
    assert "decode 4 x (4 GPUs, tp 4" in note


def test_rows_without_a_configuration_stay_refused_with_the_reason() -> None:
    folder = str(installed_kernel_tables())
    rows = _rows()
    r = silicon.resolve(rows[AMBIGUOUS], folder)
    assert isinstance(r, silicon.Unpredicted)
    assert r.reason == (
        "disaggregated row without prefill_num_workers; "
        + silicon.published_workers()["refused"][AMBIGUOUS]
    )
    assert "ambiguous: 2 dsr1 fp8 b300 dynamo-trt entries" in r.reason
    # a row the table does not name, or names for another run, keeps the plain refusal
    for other in (dataclasses.replace(rows[MATCHED], id="example-row"),
                  dataclasses.replace(rows[MATCHED], isl=2048)):  # fmt: skip
        r = silicon.resolve(other, folder)
        assert isinstance(r, silicon.Unpredicted)
        assert r.reason == "disaggregated row without prefill_num_workers: not expressed"


def test_an_mtp_row_runs_its_recipes_draft_depth() -> None:
    """The decode worker of its recipe states ``num_nextn_predict_layers`` (srt-slurm,
    at the commits the record names); the row is composed with it and says where."""
    case = silicon.resolve(_rows()[MTP], str(installed_kernel_tables()))
    assert isinstance(case, silicon.Case), case
    table = silicon.published_workers()
    rec = table["records"][table["rows"][MTP]["record"]]
    assert rec["speculative"] == "mtp" and case.draft_tokens == rec["draft_tokens"] >= 1
    note = next(n for n in case.notes if n.startswith("MTP speculative decoding"))
    assert rec["recipe"] in note and "decode worker" in note
    assert any(n.startswith("workers from") for n in case.notes)


def test_every_mtp_record_states_its_depth_or_has_no_recipe() -> None:
    for rec in silicon.published_workers()["records"]:
        if rec["speculative"] == "none":
            assert "draft_tokens" not in rec
        elif rec["recipe"]:
            assert rec["draft_tokens"] in (1, 2, 3) and rec["recipe"] in rec["draft_source"]
        else:
            assert "draft_tokens" not in rec


#: a GB200 SGLang FP8 row whose prefill workers run attention DP 8 and EP 8 and state no
#: all-to-all backend
DEP_PREFILL = "dsr1_gb200_sglang_fp8_disagg_8192x1024_c1024_cfg533"


def test_an_fp8_dep_prefill_on_gb200_runs_deepep_normal_as_every_recipe_states() -> None:
    """Every published SGLang recipe of an FP8 prefill worker with data-parallel
    attention on GB200 or GB300 states DeepEP's normal mode (and every NVFP4 one none):
    the table says so, and such a row without a backend is read that way, with a note;
    its prefill's experts are then DeepEP's (SGLang's ``wideep_context_moe``)."""
    table = silicon.published_workers()
    stated = {(r["match"]["precision"], r["prefill"]["moe_a2a"])
              for r in table["records"]
              if r["match"]["backend"] == "sglang" and r["match"]["system"] in ("gb200", "gb300")
              and r["prefill"]["attention_dp"] > 1}  # fmt: skip
    assert stated == {("fp8", "deepep_normal"), ("fp4", "")}
    row = _rows()[DEP_PREFILL]
    assert row.prefill is not None and row.prefill.dp == 8 and not row.prefill.moe_a2a
    case = silicon.resolve(row, str(installed_kernel_tables()))
    assert isinstance(case, silicon.Case), case
    assert case.row.prefill is not None and case.row.prefill.moe_a2a == "deepep_normal"
    assert any(n.startswith("prefill: DeepEP's normal all-to-all") for n in case.notes)
    assert "wideep_context_moe: gb200 sglang 0.5.14 has no such table; 0.5.10's is read" in (
        case.notes
    )


#: a row InferenceX ran on recipes/gb200-fp8/8k1k/max_tpt.yaml: decode workers of 24
#: GPUs at EP 24, with 32 redundant experts (ep-num-redundant-experts: 32)
EPLB = "2026_03_25_deepseek_r1_gb200_sglang_fp8_disagg_8192x1024_c2048_tp8_0_ep8_0_"


def test_redundant_experts_the_recipes_state_are_composed() -> None:
    """The table carries each phase's redundant experts as its recipe states them
    (SGLang's ``ep-num-redundant-experts``, TensorRT-LLM's load balancer ``num_slots``);
    a decode worker of EP 24 with 32 of them, whose 256 experts alone do not split over
    24 ranks, is composed with 288 slots, and its notes say so."""
    table = silicon.published_workers()
    stated = {(r["match"]["backend"], r["decode"].get("redundant_experts"),
               r["decode"].get("expert_slots")) for r in table["records"]}  # fmt: skip
    assert ("sglang", 32, None) in stated and ("trtllm", None, 288) in stated
    rows = _rows()
    eplb = [rid for rid in rows if rid.startswith(EPLB)]
    assert eplb
    case = silicon.resolve(rows[eplb[0]], str(installed_kernel_tables()))
    assert isinstance(case, silicon.Case), case
    assert case.row.decode is not None and case.row.decode.moe_ep == 24
    assert case.row.decode.redundant == 32
    assert any("ep 24 + 32 redundant experts" in n for n in case.notes), case.notes
