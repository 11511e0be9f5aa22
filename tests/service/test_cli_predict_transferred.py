"""`pdwatt predict FILE --kernels DIR`: measured kernels plus the shipped engine
calibration of each row's GPU and framework, transferred ones included and named
(``docs/calibration.md``, section 8, "Pairs without measurements"). Needs the published
kernel tables (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.catalog import load_model
from model.performance.engine import SHIPPED_FILE, KernelSource, KernelTimes, shipped_calibration
from service.cli.app import main
from tests.service.test_cli_core import kernel_tables

#: (model, gpu, stack, batch, measured ITL ms); the context is stated (1,250 tokens)
ROWS = (
    ("qwen3-8b", "h200", "vllm", 8, 9.0),
    ("qwen3-8b", "h200", "vllm", 64, 20.0),
    ("qwen3-8b", "h100", "vllm", 8, 9.0),
    ("qwen3-8b", "b200", "sglang", 64, 20.0),
)
CONTEXT = 1250.0


def _csv(path: Path) -> Path:
    lines = ["model,gpu,tp,batch,itl_ms,prompt_tokens,output_tokens,stack,task,context_tokens"]
    lines += [f"{m},{g},1,{b},{itl},1000,500,{s},chat,{CONTEXT:g}" for m, g, s, b, itl in ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_predict_with_kernels_uses_the_shipped_engine_calibrations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = kernel_tables()
    data = _csv(tmp_path / "runs.csv")
    assert main(["predict", str(data), "--kernels", str(root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["gpu"], r["batch"]) for r in rows] == [
        ("h200", 8.0),
        ("h200", 64.0),
        ("h100-sxm", 8.0),
        ("b200", 64.0),
    ]
    model = load_model("qwen3-8b")
    for r, (_, _, stack, batch, itl) in zip(rows, ROWS, strict=True):
        cal = shipped_calibration(r["gpu"], stack)
        assert r["performance"] == "kernels"
        assert r["kernels"] == f"{stack} {cal.version}"
        t = cal.transferred_from
        if t is None:
            assert "transferred_from" not in r
        else:
            assert r["transferred_from"] == {
                "gpu": t.gpu,
                "framework": t.framework,
                "version": t.version,
            }
        # the row's own GPU's tables plus the calibration's (carried) overheads
        kt = KernelTimes.of(
            KernelSource(str(root), stack, ((r["gpu"], cal.version),)),
            model,
            r["gpu"],
            1,
            overheads=cal.overheads,
        )
        assert r["itl_ms"]["measured"] == itl
        assert r["itl_ms"]["predicted"] == pytest.approx(
            kt.decode_s(batch, CONTEXT) * 1e3, rel=1e-9
        )
    assert rows[0]["transferred_from"]["gpu"] == "h100-sxm"
    assert rows[3]["transferred_from"]["gpu"] == "h200"
    # the text output names each calibration and the transfers
    assert main(["predict", str(data), "--kernels", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "engine calibration h200 / vllm: the shipped engine calibrations (0.24.0 tables, "
        "overheads transferred from h100-sxm / vllm 0.14.0)" in out
    )
    assert (
        "engine calibration h100-sxm / vllm: the shipped engine calibrations (0.14.0 tables)" in out
    )
    assert "b200 / sglang" in out and "transferred from h200 / sglang 0.5.14" in out


def test_the_shipped_file_given_without_kernels_is_an_error_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _csv(tmp_path / "runs.csv")
    assert main(["predict", str(data), "--calibration", str(SHIPPED_FILE)]) == 2
    err = capsys.readouterr().err
    assert "kernels: engine_calibrations.json names no kernel folder: give --kernels DIR" in err
