"""The TensorRT-LLM engine calibrations fitted to AIConfigurator's measured serving runs
(``scripts/fit_engine_silicon.py``, ``model/data/engine_calibrations_silicon.json``):
read after the ML.ENERGY file's, which wins for a pair both calibrate (files written
here); the shipped file's form; and, with the installed aiconfigurator-core package
(skipped when absent), that the shipped file is a fresh run of the script."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model.errors import InputError
from model.performance import engine
from model.performance.engine import (
    SHIPPED_FORMAT,
    SHIPPED_SILICON_FILE,
    EngineOverheads,
    shipped_calibration,
    shipped_document,
)
from tests.model.rows import script


def _entry(gpu: str, framework: str, t_iter_s: float, source: str) -> dict[str, Any]:
    return {
        "gpu": gpu,
        "framework": framework,
        "version": "1.0",
        "overheads": {"t_iter_s": t_iter_s, "t_req_s": 1e-5, "t_layer_s": 0.0},
        "rows": 40,
        "models": ["qwen3-8b", "qwen3-32b"],
        "source": source,
    }


def _write(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"format": SHIPPED_FORMAT, "calibrations": list(entries)}))
    return path


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """The two shipped files as files of this test (the loader's cache cleared around)."""
    first, second = tmp_path / "engine_calibrations.json", tmp_path / "silicon.json"
    monkeypatch.setattr(engine, "SHIPPED_FILE", first)
    monkeypatch.setattr(engine, "SHIPPED_SILICON_FILE", second)
    engine._shipped.cache_clear()
    yield first, second
    engine._shipped.cache_clear()


def test_the_silicon_entries_are_read_and_the_ml_energy_one_wins_a_clash(
    files: tuple[Path, Path],
) -> None:
    first, second = files
    _write(first, _entry("h100-sxm", "vllm", 1e-3, "ML.ENERGY"))
    _write(
        second,
        _entry("h100-sxm", "trtllm", 2e-3, "silicon h100"),
        _entry("h100-sxm", "vllm", 3e-3, "silicon clash"),
        _entry("b200", "trtllm", 4e-3, "silicon b200"),
    )
    cal = shipped_calibration("h100-sxm", "trtllm")
    assert cal.overheads == EngineOverheads(2e-3, 1e-5, 0.0)
    assert cal.source == "silicon h100" and cal.transferred_from is None
    assert cal.describe()["source"] == "silicon h100"
    assert shipped_calibration("b200", "trtllm").source == "silicon b200"
    # a pair in both files: the ML.ENERGY entry, the silicon one unread
    clash = shipped_calibration("h100-sxm", "vllm")
    assert clash.source == "ML.ENERGY" and clash.overheads.t_iter_s == 1e-3
    doc = shipped_document()
    assert [(e["gpu"], e["framework"], e["source"]) for e in doc["calibrations"]] == [
        ("h100-sxm", "vllm", "ML.ENERGY"),
        ("h100-sxm", "trtllm", "silicon h100"),
        ("b200", "trtllm", "silicon b200"),
    ]
    with pytest.raises(InputError, match="no engine calibration shipped for gb200") as e:
        shipped_calibration("gb200", "trtllm")
    assert e.value.field == "performance"
    assert "h100-sxm/trtllm" in e.value.reason and "b200/trtllm" in e.value.reason


def test_a_missing_silicon_file_adds_nothing(files: tuple[Path, Path]) -> None:
    first, second = files
    _write(first, _entry("h100-sxm", "vllm", 1e-3, "ML.ENERGY"))
    assert not second.exists()
    assert [e["gpu"] for e in shipped_document()["calibrations"]] == ["h100-sxm"]
    with pytest.raises(InputError, match="shipped: h100-sxm/vllm\\)"):
        shipped_calibration("h100-sxm", "trtllm")


def test_a_malformed_silicon_entry_is_named(files: tuple[Path, Path]) -> None:
    first, second = files
    _write(first, _entry("h100-sxm", "vllm", 1e-3, "ML.ENERGY"))
    bad = _entry("h100-sxm", "trtllm", -1.0, "silicon")
    _write(second, bad)
    with pytest.raises(InputError) as e:
        shipped_calibration("h100-sxm", "trtllm")
    assert e.value.field == "silicon.json: calibrations[0].overheads.t_iter_s"
    del bad["source"]
    bad["overheads"]["t_iter_s"] = 1e-3
    _write(second, bad)
    engine._shipped.cache_clear()
    with pytest.raises(InputError) as e:
        shipped_calibration("h100-sxm", "trtllm")
    assert e.value.field == "silicon.json: calibrations[0].source"
    second.write_text(json.dumps({"format": "other", "calibrations": []}))
    engine._shipped.cache_clear()
    with pytest.raises(InputError) as e:
        shipped_calibration("h100-sxm", "trtllm")
    assert e.value.field == "silicon.json"


# ---- the shipped file -------------------------------------------------------------------


def _shipped_silicon() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(SHIPPED_SILICON_FILE.read_text())
    return doc


def test_the_shipped_silicon_file_calibrates_tensorrt_llm_on_fitted_pairs_only() -> None:
    mod = script("fit_engine_silicon")
    doc = _shipped_silicon()
    assert doc["format"] == SHIPPED_FORMAT
    entries = {(e["gpu"], e["framework"]): e for e in doc["calibrations"]}
    assert set(entries) == {
        ("h100-sxm", "trtllm"),
        ("h200", "trtllm"),
        ("b200", "trtllm"),
        ("gb200", "trtllm"),
    }
    for (gpu, framework), e in entries.items():
        assert e["rows"] >= mod.MIN_ROWS and len(e["models"]) >= mod.MIN_MODELS
        assert e["overheads"]["t_iter_s"] == 0.0  # not fitted
        assert set(e["std"]) == {"t_layer_s", "t_req_s"}
        assert e["source"].startswith("AIConfigurator silicon_sample.csv (aiconfigurator-core ")
        assert f"{e['rows']} TensorRT-LLM rows of {', '.join(e['models'])} on {gpu}" in e["source"]
        assert e["source"].endswith("t_iter not fitted (0)")
        assert "transferred_from" not in e
        cal = shipped_calibration(gpu, framework)  # the product reads it as written
        assert cal.source == e["source"] and cal.version == e["version"]
        assert cal.overheads == EngineOverheads(**e["overheads"])
        fig = doc["figures"][f"{gpu} {framework}"]
        assert fig["rows"] == e["rows"] and fig["models"] == e["models"]
        for what in ("ttft_ms", "tpot_ms"):
            assert 0 <= fig[what]["leave_one_model_out"]["median_abs_error"] < 1
    # the pairs of one model or of fewer than MIN_ROWS rows are left out by the rule, and said
    left_out = {(x["gpu"], x["framework"]): x for x in doc["not_fitted"]}
    assert set(left_out) == {("b300", "trtllm"), ("gb300", "trtllm")}
    for pair in left_out:  # DeepSeek's rows only, on each
        assert "1 model(s), fewer than 2" in left_out[pair]["reason"], left_out[pair]
    # every row of the framework is counted: fitted, in a pair not fitted, composed with
    # MTP speculative decoding (not fitted), or not composed
    n = doc["rows"]
    assert n["composed"] + n["not_composed"] == n["frameworks"]
    assert n["speculative_not_fitted"] > 0
    assert (n["fitted"] + sum(x["rows"] for x in doc["not_fitted"])
            + n["speculative_not_fitted"]) == n["composed"]  # fmt: skip
    assert sum(r["rows"] for r in doc["rows_not_composed"]) == n["not_composed"]
    assert "/" not in json.dumps(doc["source"])  # named, never a machine path


@pytest.mark.slow  # about a minute on one core
def test_the_shipped_silicon_file_is_a_fresh_run_of_the_script(tmp_path: Path) -> None:
    """model/data/engine_calibrations_silicon.json is what scripts/fit_engine_silicon.py
    makes from the installed package's silicon file and kernel tables (to the
    optimiser's tolerance)."""
    pytest.importorskip("aiconfigurator_core")
    from model.measured.silicon import installed_silicon

    path = installed_silicon()
    if path is None:
        pytest.skip("the installed aiconfigurator-core package ships no silicon file")
    shipped = _shipped_silicon()
    origin = script("fit_engine_silicon").silicon_label(path)
    assert shipped["source"]["silicon"]["origin"] == origin, (
        "the shipped file was fitted from another package: rerun scripts/fit_engine_silicon.py"
    )
    mod = script("fit_engine_silicon")
    out = tmp_path / "silicon.json"
    assert mod.main(["--out", str(out)]) == 0
    fresh = json.loads(out.read_text())

    def close(x: object, y: object, where: str = "") -> None:
        if isinstance(x, dict):
            assert isinstance(y, dict) and set(x) == set(y), where
            for k in x:
                close(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, list):
            assert isinstance(y, list) and len(x) == len(y), where
            for i, (a, b) in enumerate(zip(x, y, strict=True)):
                close(a, b, f"{where}[{i}]")
        elif isinstance(x, float):
            assert x == pytest.approx(y, rel=1e-6, abs=1e-9), where
        else:
            assert x == y, where

    close(shipped, fresh)
