"""scripts/silicon_aic_compare.py: AIConfigurator's estimate of a few rows of the
installed package's silicon file (skipped when aiconfigurator-core is not installed),
and the side-by-side arithmetic on a made-up pdwatt JSON, medians computed by hand."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module, registered (its dataclasses look it up)."""
    path = Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_script", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


cmp = _script("silicon_aic_compare")

#: H100 under TensorRT-LLM (one table set to load): estimated rows, then rows AIC
#: refuses, with the kind of reason expected
ESTIMATED = (
    "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_trtllm_agg_1024x128_c8_tp1_epnone_1",
    # model configuration read as Meta-Llama-3.1-8B's
    "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg"
    "_1024x128_c8_tp1_epnone_1",
    "dsr1_h100_trtllm_fp8_disagg_8192x1024_c6_cfg494",  # disaggregated, batches stated
)
REFUSED = {
    "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_trtllm_agg_4096x128_c64_tp1_epnone_34": (
        "does not fit in memory"
    ),
    "2026_03_25_deepseek_r1_h100_sxm_trtllm_fp8_disagg_8192x1024_c154_tp16_0_ep16_0_851": (
        "disaggregated row without per-phase batch and worker counts"
    ),
}


def test_rows_are_estimated_or_given_the_reason(tmp_path: Path) -> None:
    if importlib.util.find_spec("aiconfigurator_core") is None:
        pytest.skip("the aiconfigurator-core package is not installed")
    out = tmp_path / "aic.csv"
    assert cmp.main(["--ids", ",".join([*ESTIMATED, *REFUSED]), "--output", str(out)]) == 0
    with out.open(newline="") as f:
        lines = {r["id"]: r for r in csv.DictReader(f)}
    assert set(lines) == {*ESTIMATED, *REFUSED}
    for rid in ESTIMATED:
        r = lines[rid]
        assert r["reason"] == "", r
        assert float(r["aic_ttft_ms"]) > 0 and float(r["aic_tpot_ms"]) > 0
        assert float(r["measured_ttft_ms"]) > 0 and r["system"] == "h100_sxm"
    assert "Meta-Llama-3.1-8B" in lines[ESTIMATED[1]]["aic_note"]
    for rid, kind in REFUSED.items():
        r = lines[rid]
        assert r["aic_ttft_ms"] == r["aic_tpot_ms"] == ""
        assert cmp.reason_kind(r["reason"]) == kind, r["reason"]
        assert "site-packages" not in r["reason"]


def _aic_line(rid: str, group: str, measured: tuple[float, float], aic: tuple[float, float] | None):
    system, backend, mode = group.split()
    return {
        "id": rid,
        "backend": backend,
        "system": system,
        "mode": mode,
        "model_path": "m/x",
        "measured_ttft_ms": str(measured[0]),
        "measured_tpot_ms": str(measured[1]),
        "aic_ttft_ms": str(aic[0]) if aic else "",
        "aic_tpot_ms": str(aic[1]) if aic else "",
        "aic_tables": "1.0",
        "aic_note": "",
        "reason": "" if aic else "ValueError: no",
    }


def _pdwatt_row(rid: str, measured: tuple[float, float], predicted: tuple[float, float] | None):
    return {
        "id": rid,
        "ttft_ms": {"measured": measured[0], "predicted": predicted and predicted[0]},
        "tpot_ms": {"measured": measured[1], "predicted": predicted and predicted[1]},
    }


A, B = "h100_sxm vllm agg", "b200_sxm sglang disagg"
#: id, group, measured, AIC's (None: not estimated), pdwatt's (None: not predicted,
#: "absent": not in the JSON)
Pair = tuple[float, float]
ROWS: list[tuple[str, str, Pair, Pair | None, Pair | str | None]] = [
    ("r1", A, (100.0, 10.0), (150.0, 11.0), (90.0, 13.0)),  # |err| AIC .5 .1, pdwatt .1 .3
    ("r2", A, (100.0, 10.0), (120.0, 10.0), (130.0, 12.0)),  # AIC .2 0, pdwatt .3 .2
    ("r3", A, (100.0, 10.0), (40.0, 8.0), (100.0, 15.0)),  # AIC .6 .2, pdwatt 0 .5
    ("r4", A, (100.0, 10.0), (100.0, 10.0), "absent"),
    ("r5", B, (200.0, 20.0), (300.0, 25.0), (100.0, 30.0)),  # AIC .5 .25, pdwatt .5 .5
    ("r6", B, (200.0, 20.0), None, (200.0, 20.0)),
    ("r7", B, (200.0, 20.0), (200.0, 20.0), None),
]


def _made_up(tmp_path: Path) -> tuple[Path, Path]:
    aic = tmp_path / "aic.csv"
    with aic.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cmp.COLUMNS)
        w.writeheader()
        for rid, group, measured, est, _ in ROWS:
            w.writerow(_aic_line(rid, group, measured, est))
    doc = {"rows": [_pdwatt_row(rid, m, p) for rid, _, m, _, p in ROWS if not isinstance(p, str)]}
    pdwatt = tmp_path / "pdwatt.json"
    pdwatt.write_text(json.dumps(doc))
    return aic, pdwatt


def test_the_join_counts_and_medians(tmp_path: Path) -> None:
    aic, pdwatt = _made_up(tmp_path)
    sides = cmp.compare(cmp.read_aic(aic), cmp.read_pdwatt(pdwatt))
    assert list(sides) == [B, A, "all"]
    a, b, total = sides[A], sides[B], sides["all"]
    assert (a.rows, a.aic, a.pdwatt, a.both) == (4, 4, 3, 3)
    assert (b.rows, b.aic, b.pdwatt, b.both) == (3, 2, 2, 1)
    assert (total.rows, total.aic, total.pdwatt, total.both) == (7, 6, 5, 4)
    approx = pytest.approx
    # group A, rows r1-r3: TTFT AIC {.5, .2, .6}, pdwatt {.1, .3, 0}; TPOT AIC {.1, 0, .2},
    # pdwatt {.3, .2, .5}
    assert a.median("aic", "ttft") == approx(0.5) and a.median("pdwatt", "ttft") == approx(0.1)
    assert a.median("aic", "tpot") == approx(0.1) and a.median("pdwatt", "tpot") == approx(0.3)
    assert a.p90("aic", "ttft") == approx(0.58)  # .5 + .8 (.6 - .5)
    assert (a.better("ttft"), a.better("tpot")) == ("pdwatt", "AIC")
    # group B, row r5 alone: TTFT both .5 (a tie), TPOT AIC .25, pdwatt .5
    assert b.median("aic", "ttft") == approx(0.5) == b.median("pdwatt", "ttft")
    assert (b.better("ttft"), b.better("tpot")) == ("tie", "AIC")
    # all four: TTFT AIC {.5, .2, .6, .5} -> .5, pdwatt {.1, .3, 0, .5} -> .2;
    # TPOT AIC {.1, 0, .2, .25} -> .15, pdwatt {.3, .2, .5, .5} -> .4
    assert total.median("aic", "ttft") == approx(0.5)
    assert total.median("pdwatt", "ttft") == approx(0.2)
    assert total.median("aic", "tpot") == approx(0.15)
    assert total.median("pdwatt", "tpot") == approx(0.4)


def test_the_markdown_keeps_groups_of_enough_rows(tmp_path: Path) -> None:
    aic, pdwatt = _made_up(tmp_path)
    md, png = tmp_path / "side.md", tmp_path / "side.png"
    argv = ["--aic", str(aic), "--pdwatt", str(pdwatt), "--min-rows", "2"]
    assert cmp.main([*argv, "--markdown", str(md), "--chart", str(png)]) == 0
    table = md.read_text().splitlines()
    assert len(table) == 4  # header, rule, group A (3 rows both predict), all
    assert table[2].startswith("| h100_sxm | vllm | agg | 4 | 4 | 3 | 3 | 10.0% ")
    assert table[3].startswith("| **all** |  |  | 7 | 6 | 5 | 4 | 20.0% ")
    assert png.stat().st_size > 0
