"""`pdwatt capacity --performance kernels --framework trtllm`: the TensorRT-LLM engine
calibrations fitted to AIConfigurator's measured serving runs
(``model/data/engine_calibrations_silicon.json``), named in the report; refused, naming
the field, on a GPU without one. Needs the installed aiconfigurator-core package's kernel
tables (skipped when absent)."""

from __future__ import annotations

import pytest

from model.performance.engine import shipped_calibration
from tests.conftest import installed_kernel_tables
from tests.service.test_cli_core import run, run_json

TRTLLM = ["capacity", "--model", "qwen3-32b", "--np", "1", "--nd", "1",
          "--performance", "kernels", "--framework", "trtllm"]  # fmt: skip


def test_trtllm_capacity_on_h100_uses_the_silicon_calibration(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    installed_kernel_tables()
    monkeypatch.delenv("PDWATT_KERNELS", raising=False)  # the installed package's tables
    rep = run_json(capsys, [*TRTLLM, "--gpu", "h100-sxm", "--json"])
    assert rep["capacity_rps"] > 0
    perf = rep["performance"]
    assert perf["kernels"]["framework"] == "trtllm" and perf["kernels"]["gpu"] == "h100-sxm"
    cal = shipped_calibration("h100-sxm", "trtllm")
    eng = perf["engine_calibration"]
    assert eng["source"] == cal.source
    assert eng["source"].startswith("AIConfigurator silicon_sample.csv (aiconfigurator-core ")
    assert "TensorRT-LLM rows of" in eng["source"] and "t_iter not fitted (0)" in eng["source"]
    assert eng["transferred_from"] is None and eng["fitted_version"] == cal.version
    assert eng["t_iter_s"] == 0.0 and eng["t_layer_s"] == cal.overheads.t_layer_s
    # the text output names it too
    code, out, err = run(capsys, [*TRTLLM, "--gpu", "h100-sxm"])
    assert code == 0, err
    assert f"engine calibration: {cal.source}" in out


def test_trtllm_capacity_without_a_calibration_is_refused_naming_the_field(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    installed_kernel_tables()
    monkeypatch.delenv("PDWATT_KERNELS", raising=False)
    code, _, err = run(capsys, [*TRTLLM, "--gpu", "b300"])
    assert code == 2
    assert "error: performance: no engine calibration shipped for b300 under trtllm" in err
    assert "h100-sxm/trtllm" in err  # what is shipped
