"""``pdwatt predict`` on a silicon file (AIConfigurator's measured serving runs): the
JSON's structure and the errors of a bad file. Skipped without aiconfigurator-core."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from model.measured import silicon
from service.cli.app import main
from tests.conftest import installed_kernel_tables


def _subset(path: Path) -> list[str]:
    """A silicon file of a few rows of the installed one: two models of one (GPU,
    framework), and rows the tables cannot compose."""
    src = silicon.installed_silicon()
    if src is None:
        pytest.skip("the aiconfigurator-core package is not installed")
    installed_kernel_tables()
    with open(src, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    keep = []
    for name in ("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct"):
        sel = [r for r in rows if r["model_path"] == name and r["system"] == "h100_sxm"
               and r["backend"] == "trtllm"]  # fmt: skip
        keep += sel[::30][:4]
    keep += [r for r in rows if r["model_path"] == "nvidia/DeepSeek-R1-NVFP4"][:2]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    return [r["id"] for r in keep]


def test_predict_silicon_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "silicon_sample.csv"
    ids = _subset(path)
    chart = tmp_path / "s.png"
    assert main(["predict", str(path), "--json", "--chart", str(chart)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert chart.stat().st_size > 0
    got = [r["id"] for r in doc["rows"]] + [u["id"] for u in doc["unpredicted"]]
    assert sorted(got) == sorted(ids)
    assert len(doc["rows"]) == 8
    for r in doc["rows"]:
        for key in ("ttft_ms", "tpot_ms"):
            assert set(r[key]) >= {"measured", "predicted", "kernels_alone"}
            assert r[key]["measured"] > 0 and r[key]["predicted"] > 0
        assert r["config"]["mode"] == "agg" and r["config"]["concurrency"] >= 1
        assert r["catalog"]["model"] not in r["fit"]["models"]  # leave one model out
    assert {u["reason"] for u in doc["unpredicted"]} == {
        "model nvidia/DeepSeek-R1-NVFP4 not in the catalog"
    }
    assert doc["summary"]["all"]["rows"] == len(ids)


def test_predict_silicon_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.csv"
    cols = list(silicon.REQUIRED)
    row = dict.fromkeys(cols, "")
    row.update(id="r1", mode="agg", isl="1024", osl="x", silicon_ttft_ms="1", silicon_tpot_ms="1")
    path.write_text(",".join(cols) + "\n" + ",".join(row[c] for c in cols) + "\n")
    assert main(["predict", str(path)]) == 2
    err = capsys.readouterr().err
    assert "osl" in err and "r1" in err and "Traceback" not in err


def test_predict_needs_a_file_or_silicon(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict"]) == 2
    assert "--silicon" in capsys.readouterr().err
