"""The aggregated silicon rows measured with speculative decoding
(``model/data/silicon_speculative.json``, derived by
``scripts/derive_silicon_speculative.py``, read by ``model.measured.silicon.resolve``); the
checks against the installed ``silicon_sample.csv`` are skipped when aiconfigurator-core
is not installed."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from model.measured import silicon
from tests.conftest import installed_kernel_tables
from tests.model.rows import installed_silicon_rows, script

#: DeepSeek-R1 FP8 on 8 B200, TensorRT-LLM 1.2.0rc6.post3, 1k/1k, 4 clients: a point of
#: InferenceX's dsr1-fp8-b200-trt-mtp entry (spec-decoding: mtp)
MTP = "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x1024_c4_tp8_0_ep1_0_1021"


_rows = installed_silicon_rows


def _agg_row(**kw: object) -> silicon.SiliconRow:
    """An aggregated DeepSeek-R1 row on B200 under TensorRT-LLM, 8 GPUs, 1k/1k, 4 clients."""
    base = silicon.SiliconRow(
        id="r1", line=2, backend="trtllm", backend_version="1.2",
        model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", precision="fp4",
        gemm_quant="nvfp4", moe_quant="nvfp4", mode="agg", isl=1024, osl=1024,
        concurrency=4, agg=silicon.Phase(1, 4, 8, 1, 1, 8, 1), prefill=None, decode=None,
        ttft_ms=200.0, tpot_ms=5.0,
        source="model=DeepSeek-R1; image=nvcr.io#nvidia/tensorrt-llm/release:1.2",
    )  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def _doc(*points: Mapping[str, object], image: str = "nvcr.io#nvidia/tensorrt-llm/release:1.2",
         name: str = "dsr1-fp4-b200-trt") -> dict[str, object]:  # fmt: skip
    return {name: {"image": image, "model-prefix": "dsr1", "runner": "b200-trt",
                   "precision": "fp4", "framework": "trt",
                   "seq-len-configs": [{"isl": 1024, "osl": 1024,
                                        "search-space": [dict(p) for p in points]}]}}  # fmt: skip


def test_the_rule_matches_image_configuration_and_concurrency() -> None:
    mod = script("derive_silicon_speculative")
    row = _agg_row()
    mtp = {"tp": 8, "conc-start": 4, "conc-end": 8, "spec-decoding": "mtp"}
    plain = {"tp": 8, "conc-start": 4, "conc-end": 8}
    pts = mod.points(_doc(mtp), "c1")
    assert mod.classify(row, pts)[0] == "speculative"
    assert mod.classify(row, mod.points(_doc(plain), "c1"))[0] == "none"
    both = mod.points(_doc(mtp), "c1") + mod.points(_doc(plain, name="other"), "c2")
    kind, found = mod.classify(row, both)
    assert kind == "ambiguous" and {p.key for p in found} == {"dsr1-fp4-b200-trt", "other"}
    assert "with and without MTP" in mod.reason(kind, found)
    # each part of the configuration must be the row's
    for other in (
        {**mtp, "tp": 4},  # the instance's GPUs
        {**mtp, "ep": 8},  # expert parallelism (1 when absent)
        {**mtp, "dp-attn": True},  # attention data parallelism
        {**mtp, "conc-start": 8},  # the concurrency range
    ):
        assert mod.classify(row, mod.points(_doc(other), "c1"))[0] == "unmatched", other
    assert mod.classify(row, mod.points(_doc(mtp, image="other:1"), "c1"))[0] == "unmatched"
    listed = {"tp": 8, "conc-list": [2, 4], "spec-decoding": "mtp"}
    assert mod.classify(row, mod.points(_doc(listed), "c1"))[0] == "speculative"
    # attention DP: tp is the instance's GPUs, ep the row's MoE EP
    dp = _agg_row(agg=silicon.Phase(1, 4, 1, 1, 8, 1, 8))
    dp_point = {"tp": 8, "ep": 8, "dp-attn": True, "conc-list": [4], "spec-decoding": "mtp"}
    assert mod.classify(dp, mod.points(_doc(dp_point), "c1"))[0] == "speculative"
    assert mod.classify(row, mod.points(_doc(dp_point), "c1"))[0] == "unmatched"
    # a row that names no image matches nothing
    bare = _agg_row(source="model=DeepSeek-R1")
    assert mod.classify(bare, pts)[0] == "unmatched"


def test_the_table_states_its_source_and_counts_every_aggregated_row() -> None:
    table = silicon.published_speculative()
    src = table["source"]["inferencex"]
    assert src["repository"] == "https://github.com/SemiAnalysisAI/InferenceX"
    assert len(src["snapshot"]) == 40 and src["states_read"] > 0
    counts = table["counts"]
    assert counts["speculative"] + counts["ambiguous"] == len(table["rows"])
    for entry in table["rows"].values():
        assert entry["kind"] in ("speculative", "ambiguous") and entry["entries"]
        assert ("not expressed" in entry["reason"]) == (entry["kind"] == "speculative")
    rows = _rows()
    agg = [r for r in rows.values() if r.mode == "agg"]
    assert sum(counts.values()) == len(agg)  # every aggregated row of the file is counted
    for rid, entry in table["rows"].items():
        r = rows[rid]
        assert entry["match"] == {"model_path": r.model_path, "system": r.system,
                                  "backend": r.backend, "precision": r.precision,
                                  "isl": r.isl, "osl": r.osl}  # fmt: skip


def test_an_mtp_row_measures_a_shorter_tpot_than_its_twin_without() -> None:
    """The MTP row and the row of the same configuration and concurrency under the
    image InferenceX ran without MTP (1.2.0rc6.post2): 5.38 ms against 10.30 ms in
    aiconfigurator-core 0.12.0's file."""
    rows = _rows()
    table = silicon.published_speculative()["rows"]
    mtp = rows[MTP]
    assert table[MTP]["kind"] == "speculative"
    assert table[MTP]["entries"] == ["dsr1-fp8-b200-trt-mtp"]
    twins = [
        r for r in rows.values()
        if r.id not in table and r.mode == "agg" and r.agg == mtp.agg
        and (r.model_path, r.system, r.backend, r.precision, r.isl, r.osl, r.concurrency)
        == (mtp.model_path, mtp.system, mtp.backend, mtp.precision, mtp.isl, mtp.osl,
            mtp.concurrency)
        and "1.2.0rc6.post2" in r.source
    ]  # fmt: skip
    assert twins and all(t.tpot_ms > 1.5 * mtp.tpot_ms for t in twins)


def test_a_listed_row_runs_its_published_draft_depth_and_another_run_of_its_id_does_not() -> None:
    """The row's script, dsr1_fp8_b200_trt_mtp.sh at its run, sets ``MTP=3`` without
    data-parallel attention (InferenceX, benchmarks/single_node/)."""
    folder = str(installed_kernel_tables())
    row = _rows()[MTP]
    assert silicon.speculative_reason(row) is None  # its depth is stated: expressed
    out = silicon.resolve(row, folder)
    assert isinstance(out, silicon.Case), out
    assert out.draft_tokens == 3
    note = next(n for n in out.notes if n.startswith("MTP speculative decoding"))
    assert "dsr1_fp8_b200_trt_mtp.sh" in note and "3 drafted token(s)" in note
    other = dataclasses.replace(row, isl=8192)  # same id, another run: not listed
    assert silicon.draft_of(other) is None
    plain = silicon.resolve(other, folder)
    assert isinstance(plain, silicon.Case) and plain.draft_tokens == 0


def test_a_listed_row_without_a_stated_depth_stays_refused(monkeypatch) -> None:
    table = silicon.published_speculative()
    entry = {k: v for k, v in table["rows"][MTP].items() if not k.startswith("draft_")}
    patched = {**table, "rows": {**table["rows"], MTP: entry}}
    monkeypatch.setattr(silicon, "published_speculative", lambda: patched)
    row = _rows()[MTP]
    assert silicon.draft_of(row) is None
    out = silicon.resolve(row, str(installed_kernel_tables()))
    assert isinstance(out, silicon.Unpredicted)
    assert out.reason.startswith("the run used MTP speculative decoding")


def test_every_row_that_ran_mtp_states_its_depth_and_where_it_was_read() -> None:
    """Every listed MTP row of the file (115 in aiconfigurator-core 0.12.0) has a depth
    of 1 to 3 read from its entry's launch script; the ambiguous rows have none."""
    for entry in silicon.published_speculative()["rows"].values():
        if entry["kind"] == "ambiguous":
            assert "draft_tokens" not in entry
            continue
        assert entry["draft_tokens"] in (1, 2, 3)
        assert entry["draft_source"].startswith("benchmarks/")
        assert ".sh at " in entry["draft_source"]


#: the two forms of InferenceX's TensorRT-LLM MTP launch scripts (benchmarks/single_node/
#: dsr1_fp8_b200_trt_mtp.sh and dsr1_fp8_h200_trt_mtp.sh at 009f11de68e1), abridged
TRT_DEFAULT_THEN_OVERRIDE = """MAX_BATCH_SIZE=$CONC
MTP=3

# DP ATTENTION requires different optimizations
if [[ "$DP_ATTENTION" == "true" ]]; then
    MOE_BACKEND="DEEPGEMM"
    MTP=1
fi
echo "MOE_BACKEND='$MOE_BACKEND', MTP='$MTP'"
"""
TRT_IF_ELSE = """MOE_BACKEND="CUTLASS"

if [[ "$DP_ATTENTION" == "true" ]]; then
    MTP=1
else
    MTP=3
fi
"""
#: InferenceX's SGLang MTP launch script (dsr1_fp8_b200_mtp.sh), abridged
SGLANG = """SPECULATIVE_NUM_STEPS=2
SPECULATIVE_DRAFT_TOKENS=3
SPECULATIVE_EAGLE_TOPK=1
"""


def test_the_depth_is_read_from_the_scripts_branch_and_the_recipes_decode_worker() -> None:
    mod = script("derive_silicon_draft_tokens")
    for text in (TRT_DEFAULT_THEN_OVERRIDE, TRT_IF_ELSE):
        assert mod.trt_depth(text, dp_attention=False) == 3
        assert mod.trt_depth(text, dp_attention=True) == 1
    assert mod.trt_depth("echo no speculative decoding\n", False) is None
    assert mod.sglang_depth(SGLANG) == 2
    assert mod.sglang_depth(SGLANG.replace("TOPK=1", "TOPK=4")) is None  # a tree, not a chain
    assert mod.sglang_depth(SGLANG.replace("TOKENS=3", "TOKENS=4")) is None
    trt = {"backend": {"trtllm_config": {
        "prefill": {"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 2}},
        "decode": {"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 2}},
    }}}  # fmt: skip
    assert mod.recipe_depth(trt) == 2
    sgl = {"backend": {"sglang_config": {"decode": {
        "speculative-algorithm": "EAGLE", "speculative-num-steps": 2,
        "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 3}}}}  # fmt: skip
    assert mod.recipe_depth(sgl) == 2
    assert mod.recipe_depth({"backend": {"decode": {"tensor-parallel-size": 8}}}) is None
    assert mod.script_paths("dsr1-fp8-b200-sglang-mtp")[4:6] == [
        "benchmarks/single_node/dsr1_fp8_b200_mtp.sh", "benchmarks/dsr1_fp8_b200_mtp.sh"]


def test_the_report_says_a_row_ran_mtp_and_its_tokens_per_iteration() -> None:
    case = silicon.resolve(_rows()[MTP], str(installed_kernel_tables()))
    assert isinstance(case, silicon.Case)
    plain = dataclasses.replace(case, draft_tokens=0)
    solved = silicon.solve([case, plain], silicon.Overheads())
    doc = silicon.report([case, plain], [], solved, solved, [None, None])
    mtp, without = doc["rows"]
    assert mtp["speculative"] == {"method": "mtp", "draft_tokens": 3,
                                  "tokens_per_iteration": case.gained}  # fmt: skip
    assert "speculative" not in without
    # the same composed iterations, 2.745 tokens gained per iteration: a shorter TPOT
    assert mtp["tpot_ms"]["kernels_alone"] < without["tpot_ms"]["kernels_alone"]
