"""Engine calibrations for (GPU, framework) pairs no whole-server measurement covers:
the overheads of a fitted pair carried over to another pair's own kernel tables
(``docs/calibration.md``, section 8, "Pairs without measurements").

The transfer check (:func:`model.measured.engine_fit.transfer_check`) on rows written here with
known overheads; the shipped file's six pairs; and, with the published kernel tables
(skipped when absent), that each transferred pair reads its own GPU's tables and that a
capacity report names the transferred calibration."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from model.catalog import load_gpu, load_model
from model.errors import InputError
from model.measured import engine_fit
from model.operations import SpecRequest, capacity_report, resolve_spec
from model.performance.engine import (
    SHIPPED_FILE,
    SHIPPED_SILICON_FILE,
    EngineOverheads,
    TransferredFrom,
    gpu_folder,
    open_database,
    shipped_calibration,
    shipped_document,
)
from tests.conftest import kernel_tables, shared_data_dir
from tests.model.rows import composed, script

TRUE = EngineOverheads(t_iter_s=0.8e-3, t_req_s=40e-6, t_layer_s=15e-6)
OTHER = EngineOverheads(t_iter_s=0.2e-3, t_req_s=60e-6, t_layer_s=25e-6)
#: the kernels of the second "GPU" take this share of the first's
FASTER = 0.6
MODELS = ("qwen3-8b", "qwen3-14b", "qwen3-32b", "llama-3.1-70b")  # 36, 40, 64, 80 layers
BATCHES = (8, 16, 32, 64, 128, 256)


def _row(gpu: str, model: str, batch: float, kernel_s: float, itl_s: float) -> engine_fit.Composed:
    return composed(gpu, model, batch, kernel_s, itl_s, "0.0.1")


def _kernel_s(model: str, batch: int) -> float:
    """Any kernel time (given, not fitted): a weight read plus a per-request part."""
    return 5e-3 + 1e-4 * batch + 2e-5 * load_model(model).layers


def _two_gpus(target: EngineOverheads) -> list[engine_fit.Composed]:
    """H100 rows with overheads TRUE; B200 rows with kernels FASTER times the H100's and
    overheads ``target``."""
    rows = []
    for gpu, share, o in (("h100-sxm", 1.0, TRUE), ("b200", FASTER, target)):
        for model in MODELS:
            n = load_model(model).layers
            for b in BATCHES:
                k = share * _kernel_s(model, b)
                t = k + o.t_iter_s + o.t_req_s * b + o.t_layer_s * n
                rows.append(_row(gpu, model, float(b), k, t))
    return rows


H100, B200 = ("h100-sxm", "vllm"), ("b200", "vllm")


def test_overheads_shared_by_two_gpus_are_recovered_and_carry_over() -> None:
    t = engine_fit.transfer_check(_two_gpus(TRUE), H100, B200)
    assert (t.source, t.target) == (H100, B200)
    for name, true in TRUE.as_dict().items():
        assert getattr(t.overheads, name) == pytest.approx(true, rel=1e-4), name
        assert getattr(t.own_overheads, name) == pytest.approx(true, rel=1e-4), name
    assert len(t.target_rows) == len(MODELS) * len(BATCHES)
    assert all(c.gpu == "b200" for c in t.target_rows)
    assert max(abs(e) for e in t.transferred) < 1e-6
    assert max(abs(e) for e in t.own) < 1e-6
    # the kernels alone are short by the overheads
    assert all(e < -0.05 for e in t.alone)


def test_overheads_that_differ_give_the_difference_as_the_transfer_error() -> None:
    t = engine_fit.transfer_check(_two_gpus(OTHER), H100, B200)
    for name, true in OTHER.as_dict().items():  # the target's own fit finds its own
        assert getattr(t.own_overheads, name) == pytest.approx(true, rel=1e-4), name
    for c, e, alone in zip(t.target_rows, t.transferred, t.alone, strict=True):
        b, n, k = c.u.m.batch, c.layers, float(c.kernel_s[0])
        moved = k + TRUE.t_iter_s + TRUE.t_req_s * b + TRUE.t_layer_s * n
        measured = k + OTHER.t_iter_s + OTHER.t_req_s * b + OTHER.t_layer_s * n
        assert e == pytest.approx(moved / measured - 1.0, rel=1e-3, abs=1e-7)
        assert alone == pytest.approx(k / measured - 1.0, rel=1e-12)
    assert max(abs(e) for e in t.transferred) > 0.01  # the check tells them apart


def test_prompt_lengths_come_from_the_source_never_from_the_target() -> None:
    """Rows that do not state their context: the transfer predicts them at the prompt
    lengths the source's rows set, and a task only the target ran at PROMPT_DEFAULT;
    the target's own fit sets that task's length from its rows."""
    grid = np.array(engine_fit.PROMPT_GRID)
    lengths = {"a": 512.0, "b": 64.0}
    rows = []
    for gpu, share, tasks in (("h100-sxm", 1.0, ("a",)), ("b200", FASTER, ("a", "b"))):
        for task in tasks:
            for model in MODELS:
                n = load_model(model).layers
                for b in BATCHES:
                    # attention reads every request's context in every layer: a term
                    # that no overhead (1, B, n) can take the place of
                    k = share * (_kernel_s(model, b) + 2e-8 * b * n * grid)
                    lk = np.interp(np.log(lengths[task]), np.log(grid), np.log(k))
                    itl = float(np.exp(lk)) + TRUE.t_iter_s + TRUE.t_req_s * b + TRUE.t_layer_s * n
                    c = _row(gpu, model, float(b), 0.0, itl)
                    m = dataclasses.replace(c.u.m, task=task, row=f"{c.u.m.row} {task}")
                    u = dataclasses.replace(c.u, m=m)
                    rows.append(dataclasses.replace(c, u=u, kernel_s=k, fixed=False))
    t = engine_fit.transfer_check(rows, H100, B200)
    assert t.prompts == {"a": pytest.approx(512.0, rel=1e-4)}  # "b": not the source's
    o = TRUE
    for c, e in zip(t.target_rows, t.transferred, strict=True):
        if c.u.m.task == "a":
            assert abs(e) < 1e-6
        else:  # at PROMPT_DEFAULT, not at the target's 64 tokens
            p = engine_fit.PROMPT_DEFAULT
            moved = c.kernels_at(p) + o.t_iter_s + o.t_req_s * c.u.m.batch + o.t_layer_s * c.layers
            assert e == pytest.approx(moved / c.u.m.itl_s - 1.0, rel=1e-3, abs=1e-7)
            assert e > 0.1  # 256 tokens read more than 64
    assert max(abs(e) for e in t.own) < 1e-5  # the own fit finds "b" from its rows


def test_a_pair_without_rows_is_named() -> None:
    rows = _two_gpus(TRUE)
    with pytest.raises(InputError, match="h200/vllm") as e:
        engine_fit.transfer_check(rows, H100, ("h200", "vllm"))
    assert e.value.field == "target"
    with pytest.raises(InputError, match="h200/sglang") as e:
        engine_fit.transfer_check(rows, ("h200", "sglang"), B200)
    assert e.value.field == "source"


# ---- the shipped file -------------------------------------------------------------------

PAIRS = {(g, f) for g in ("h100-sxm", "h200", "b200") for f in ("vllm", "sglang")}


def _shipped() -> dict[tuple[str, str], dict]:
    doc = json.loads(SHIPPED_FILE.read_text())
    return {(e["gpu"], e["framework"]): e for e in doc["calibrations"]}


def test_the_shipped_file_holds_every_gpu_under_both_frameworks() -> None:
    entries = _shipped()
    assert set(entries) == PAIRS
    transferred = {k for k, e in entries.items() if e.get("transferred_from")}
    # the measured (or Tab. 3) pairs are fitted; the three others carry a fitted pair's
    assert transferred == {("h200", "vllm"), ("h100-sxm", "sglang"), ("b200", "sglang")}
    for key, e in entries.items():
        cal = shipped_calibration(*key)
        assert cal.version == e["version"]
        if key not in transferred:
            assert e["rows"] > 0 and cal.transferred_from is None
            assert not e["source"].startswith("transferred")
            continue
        src = entries[(e["transferred_from"]["gpu"], e["transferred_from"]["framework"])]
        assert not src.get("transferred_from")  # carried from a fitted pair
        assert e["transferred_from"]["version"] == src["version"]
        assert e["overheads"] == src["overheads"]  # exactly, not refitted
        assert e["rows"] == 0 and e["models"] == []
        assert e["source"].startswith(f"transferred: no whole-server measurement of {key[0]}")
        assert cal.transferred_from == TransferredFrom(**e["transferred_from"])
        assert cal.overheads == shipped_calibration(src["gpu"], src["framework"]).overheads
    # the choice of docs/calibration.md: H200 under vLLM from H100, SGLang from H200
    assert entries[("h200", "vllm")]["transferred_from"]["gpu"] == "h100-sxm"
    assert entries[("h100-sxm", "sglang")]["transferred_from"]["gpu"] == "h200"
    assert entries[("b200", "sglang")]["transferred_from"]["gpu"] == "h200"


def test_each_shipped_pair_reads_its_own_gpus_tables() -> None:
    root = kernel_tables()
    db = open_database(str(root))
    for (gpu, framework), e in _shipped().items():
        folder = gpu_folder(gpu)
        for op in ("gemm", "generation_attention", "context_attention"):
            assert (framework, e["version"]) in db.versions(folder, op), (gpu, framework, op)
        if e.get("transferred_from"):
            # the version rule of the fitted pairs: the framework's oldest tables
            assert e["version"] == engine_fit.default_version(str(root), gpu, framework)
            assert e["source"].endswith(f"{framework} {e['version']} tables of {gpu}")


def test_a_capacity_report_on_h200_under_vllm_names_the_transferred_calibration() -> None:
    root = kernel_tables()
    spec = resolve_spec(
        SpecRequest(gpu="h200", workload="fixed:4096:256", performance="kernels", kernels=str(root))
    )
    assert spec.engine is not None and spec.kernel_source is not None
    assert spec.kernel_source.version("h200") == "0.24.0"
    assert spec.engine.overheads == shipped_calibration("h100-sxm", "vllm").overheads
    rep = capacity_report(spec, 3, 1)
    perf = rep["performance"]
    assert perf["kernels"] == {
        "folder": root.name,
        "framework": "vllm",
        "gpu": "h200",
        "version": "0.24.0",
    }
    eng = perf["engine_calibration"]
    assert eng["transferred_from"] == {"gpu": "h100-sxm", "framework": "vllm", "version": "0.14.0"}
    assert eng["fitted_version"] == "0.14.0"  # the tables the overheads were fitted against
    assert eng["source"].startswith("transferred:") and "h100-sxm / vllm 0.14.0" in eng["source"]
    assert math.isfinite(rep["capacity_rps"]) and rep["capacity_rps"] > 0
    # a fitted pair says it carries nothing
    h100 = resolve_spec(
        SpecRequest(
            gpu="h100-sxm", workload="fixed:4096:256", performance="kernels", kernels=str(root)
        )
    )
    assert h100.engine is not None
    fitted = capacity_report(h100, 3, 1)["performance"]["engine_calibration"]
    assert fitted["transferred_from"] is None
    assert fitted["fitted_version"] == h100.engine.version == "0.14.0"


def test_the_shipped_file_read_back_marks_its_transferred_rows() -> None:
    """``pdwatt predict --kernels DIR`` reads the shipped file (which names no kernel
    folder): its transferred pairs predict rows that say so, the fitted pairs' do not."""
    fit, folder = engine_fit.from_document(shipped_document(), "shipped")
    assert folder is None
    # the ML.ENERGY file's pairs, and the silicon file's TensorRT-LLM ones after them
    silicon = json.loads(SHIPPED_SILICON_FILE.read_text())["calibrations"]
    assert set(fit.overheads) == PAIRS | {(e["gpu"], e["framework"]) for e in silicon}
    assert set(fit.transferred) == {("h200", "vllm"), ("h100-sxm", "sglang"), ("b200", "sglang")}
    assert fit.overheads[("h200", "vllm")] == fit.overheads[("h100-sxm", "vllm")]
    assert fit.versions[("h200", "vllm")] == "0.24.0"
    rows = _two_gpus(TRUE)
    h200 = [
        dataclasses.replace(
            c,
            u=dataclasses.replace(
                c.u, m=dataclasses.replace(c.u.m, gpu="h200"), gpu=load_gpu("h200")
            ),
        )
        for c in rows[:3]
    ]
    out = engine_fit.predict_rows([*h200, rows[0]], fit)
    for r in out[:3]:
        assert r["gpu"] == "h200"
        assert r["transferred_from"] == {
            "gpu": "h100-sxm",
            "framework": "vllm",
            "version": "0.14.0",
        }
    assert out[3]["gpu"] == "h100-sxm" and "transferred_from" not in out[3]
    # the same overheads on the same kernels: the same prediction
    assert out[0]["itl_ms"]["predicted"] == pytest.approx(out[3]["itl_ms"]["predicted"])


@pytest.mark.slow
def test_the_shipped_file_is_a_fresh_run_of_the_script(tmp_path: Path) -> None:
    """model/data/engine_calibrations.json, its transferred entries and its transfer
    figures (docs/calibration.md, section 8) are what scripts/fit_engine.py makes from
    the published files (to the optimiser's tolerance)."""
    data = shared_data_dir()
    if not (data / "aiconfigurator").is_dir() or not list((data / "mlenergy").glob("*.json")):
        pytest.skip("the ML.ENERGY files or the kernel tables are not in the data directory")
    mod = script("fit_engine")
    out = tmp_path / "engine.json"
    assert mod.main([str(data), "--out", str(out), "--json"]) == 0
    fresh, shipped = json.loads(out.read_text()), json.loads(SHIPPED_FILE.read_text())
    assert fresh["source"] == shipped["source"]
    for a, b in zip(shipped["calibrations"], fresh["calibrations"], strict=True):
        for name in ("gpu", "framework", "version", "transferred_from", "source", "rows"):
            assert a.get(name) == b.get(name), name
        assert a["overheads"] == pytest.approx(b["overheads"], rel=1e-6, abs=1e-9)

    def close(x: object, y: object) -> None:
        if isinstance(x, dict):
            assert isinstance(y, dict) and set(x) == set(y)
            for k in x:
                close(x[k], y[k])
        elif isinstance(x, float):
            assert x == pytest.approx(y, rel=1e-6, abs=1e-9)
        else:
            assert x == y

    for name in (
        "transfer",
        "transfer version (h100 vllm)",
        "h200 / h100 decode kernels (qwen3-32b)",
    ):
        close(shipped["figures"][name], fresh["figures"][name])
