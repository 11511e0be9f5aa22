"""The engine-overhead fit (model/measured/engine_fit.py) on rows whose kernel times are given."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from model.catalog import load_model
from model.errors import InputError
from model.measured import engine_fit
from model.performance.engine import EngineOverheads
from tests.model.rows import composed, script

TRUE = EngineOverheads(t_iter_s=0.8e-3, t_req_s=40e-6, t_layer_s=15e-6)


def _row(
    model: str, batch: float, kernel_s: float, itl_s: float, task: str = ""
) -> engine_fit.Composed:
    return composed("h100-sxm", model, batch, kernel_s, itl_s, "0.14.0", task)


def _data(noise: float, seed: int = 7) -> list[engine_fit.Composed]:
    rng = np.random.default_rng(seed)
    rows = []
    # models of 36, 40, 64 and 80 layers tell the per-layer term from the per-iteration one
    for model in ("qwen3-8b", "qwen3-14b", "qwen3-32b", "llama-3.1-70b"):
        layers = load_model(model).layers
        for b in (8, 16, 32, 64, 128, 256):
            k = 5e-3 + 1e-4 * b + 2e-5 * layers  # any kernel time: it is given, not fitted
            t = k + TRUE.t_iter_s + TRUE.t_req_s * b + TRUE.t_layer_s * layers
            rows.append(_row(model, float(b), k, t * (1.0 + noise * rng.standard_normal())))
    return rows


def test_recovers_overheads_exactly_without_noise() -> None:
    fit = engine_fit.fit_engine(_data(0.0))
    got = fit.overheads[("h100-sxm", "vllm")]
    assert got.t_iter_s == pytest.approx(TRUE.t_iter_s, rel=1e-4)
    assert got.t_req_s == pytest.approx(TRUE.t_req_s, rel=1e-4)
    assert got.t_layer_s == pytest.approx(TRUE.t_layer_s, rel=1e-4)
    assert max(abs(e) for e in engine_fit.errors(_data(0.0), fit)) < 1e-6


def test_recovers_overheads_within_their_standard_errors_with_noise() -> None:
    rows = _data(0.01)
    fit = engine_fit.fit_engine(rows)
    got = fit.overheads[("h100-sxm", "vllm")].as_dict()
    std = fit.std[("h100-sxm", "vllm")]
    for name, true in TRUE.as_dict().items():
        assert std[name] > 0.0
        assert abs(got[name] - true) <= 4.0 * std[name], (name, got[name], true, std[name])
    assert fit.rows[("h100-sxm", "vllm")] == len(rows)


def test_one_batch_size_is_refused_naming_the_pair() -> None:
    rows = [r for r in _data(0.0) if r.u.m.batch == 8.0]
    with pytest.raises(InputError, match="h100-sxm/vllm: one batch size"):
        engine_fit.fit_engine(rows)


def test_kernels_alone_are_the_fitted_prediction_less_the_overheads() -> None:
    rows = _data(0.0)
    bare = engine_fit.unfitted(rows, {})
    for r, e in zip(rows, bare, strict=True):
        k = float(r.kernel_s[0])
        assert e == pytest.approx(k / r.u.m.itl_s - 1.0)
        assert e < 0.0  # the overheads are positive


def test_prompt_grid_interpolates_in_log_log() -> None:
    r = _row("qwen3-8b", 8.0, 1.0, 1.0)
    grid = np.array(engine_fit.PROMPT_GRID)
    r = dataclasses.replace(r, kernel_s=1e-3 * np.sqrt(grid), fixed=False)
    for p in (16.0, 100.0, 3000.0):  # a power law is exact in log-log
        assert r.kernels_at(p) == pytest.approx(1e-3 * np.sqrt(p), rel=1e-12)


def _task_rows(prompt: float) -> list[engine_fit.Composed]:
    """Rows of one task whose prompt length the files leave open: the kernels grow with
    the context (a power law of the prompt on the grid, each row's own scale), measured
    at ``prompt`` tokens with TRUE's overheads."""
    grid = np.array(engine_fit.PROMPT_GRID)
    rows = []
    for r in _data(0.0):
        scale = float(r.kernel_s[0])
        kernels = scale * (grid / 256.0) ** (0.1 + 1e-3 * r.u.m.batch)
        k = scale * (prompt / 256.0) ** (0.1 + 1e-3 * r.u.m.batch)
        t = k + TRUE.t_iter_s + TRUE.t_req_s * r.u.m.batch + TRUE.t_layer_s * r.layers
        m = dataclasses.replace(r.u.m, itl_s=t, task="chat")
        rows.append(
            dataclasses.replace(r, u=dataclasses.replace(r.u, m=m), kernel_s=kernels, fixed=False)
        )
    return rows


@pytest.mark.parametrize("start", [32.0, 2048.0])
def test_a_task_prompt_length_is_recovered_from_either_end_of_the_grid(start: float) -> None:
    fit = engine_fit.fit_engine(_task_rows(700.0), start={"chat": start})
    assert fit.prompts["chat"] == pytest.approx(700.0, rel=1e-3)
    assert fit.cost == pytest.approx(0.0, abs=1e-12)


def test_a_start_beyond_the_prompt_bounds_is_refused_naming_the_task() -> None:
    with pytest.raises(InputError, match="start.chat") as e:
        engine_fit.fit_engine(_task_rows(700.0), start={"chat": 8192.0})
    assert "16-4096 tokens" in str(e.value)


def test_robust_cost_is_the_loss_least_squares_minimises() -> None:
    from scipy.optimize import least_squares

    from model.measured.calibrate import F_SCALE, LOSS, robust_cost

    x = np.linspace(0.0, 1.0, 30)
    y = 2.0 * x + 1.0 + np.where(np.arange(30) % 7 == 0, 0.3, 0.01)  # a few outliers

    def resid(p: np.ndarray) -> np.ndarray:
        return (p[0] * x + p[1]) / y - 1.0

    res = least_squares(resid, [1.0, 0.0], loss=LOSS, f_scale=F_SCALE)
    assert robust_cost(res.fun) == pytest.approx(res.cost, rel=1e-12)
    assert robust_cost(resid(res.x + 0.05)) > res.cost  # the minimum is the least loss


def test_the_prompt_starts_report_refits_from_every_start() -> None:
    """scripts/fit_engine.py --prompt-starts: every start of the one open task's prompt
    length, sorted by loss, each fit (in sample, small to larger, held out) from it."""
    mod = script("fit_engine")
    said: list[str] = []
    out = mod.prompt_starts(_task_rows(700.0), said.append)
    assert [r["start"]["chat"] for r in sorted(out, key=lambda r: r["start"]["chat"])] == list(
        mod.PROMPT_STARTS
    )
    assert len(said) == len(mod.PROMPT_STARTS)
    assert [r["cost"] for r in out] == sorted(r["cost"] for r in out)
    for r in out:  # noiseless rows: every start ends at the generating prompt length
        assert r["prompts"]["chat"] == pytest.approx(700.0, rel=1e-3)
        fig = r["figures"]["h100-sxm dense"]
        assert fig["in_sample"] == pytest.approx(0.0, abs=1e-6)
        assert fig["leave_one_model_out"] == pytest.approx(0.0, abs=1e-4)
