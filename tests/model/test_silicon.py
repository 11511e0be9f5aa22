"""TTFT and TPOT of AIConfigurator's measured serving runs (``model/silicon.py``) on a
50-row sample of the installed package's ``silicon_sample.csv``; skipped when
aiconfigurator-core is not installed."""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import pytest

from model import silicon
from model.errors import InputError
from tests.conftest import installed_kernel_tables


@cache
def _rows() -> tuple[silicon.SiliconRow, ...]:
    path = silicon.installed_silicon()
    if path is None:
        pytest.skip("the aiconfigurator-core package is not installed")
    return tuple(silicon.read_silicon(path))


def sample() -> list[silicon.SiliconRow]:
    """50 rows: every 44th of the file's rows but those of H200 and B200 (whose tables
    would take most of the test's time to load), rows the tables cannot compose among
    them."""
    return [r for r in _rows() if r.system not in ("h200_sxm", "b200_sxm")][::44][:50]


@cache
def _dense(per_model: int = 8) -> tuple[silicon.Case, ...]:
    """Composed rows of two models in one (GPU, framework): H100 under TensorRT-LLM."""
    folder = str(installed_kernel_tables())
    out: list[silicon.Case] = []
    for path in ("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct"):
        sel = [
            r
            for r in _rows()
            if r.model_path == path and r.system == "h100_sxm" and r.backend == "trtllm"
        ]
        for r in sel[:: max(1, len(sel) // per_model)][:per_model]:
            c = silicon.resolve(r, folder)
            assert isinstance(c, silicon.Case), c
            out.append(c)
    return tuple(out)


def test_file_read_whole() -> None:
    rows = _rows()
    assert len(rows) == 5221  # the rows of aiconfigurator-core 0.12.0's file
    assert len({r.id for r in rows}) == len(rows)


def test_every_sampled_row_predicted_or_given_a_reason() -> None:
    rows = sample()
    assert len(rows) == 50
    cases, skipped = silicon.resolve_all(rows, str(installed_kernel_tables()))
    ids = [c.row.id for c in cases] + [s.row.id for s in skipped]
    assert sorted(ids) == sorted(r.id for r in rows)
    assert cases and skipped
    assert all(s.reason for s in skipped)
    solved = silicon.solve(cases, silicon.Overheads())
    assert np.all(np.isfinite(solved.ttft)) and np.all(solved.ttft > 0)
    assert np.all(np.isfinite(solved.tpot)) and np.all(solved.tpot > 0)
    doc = silicon.report(cases, skipped, solved, solved, [None] * len(cases))
    assert doc["summary"]["all"]["rows"] == 50
    assert doc["summary"]["all"]["composed"] == len(cases)


def test_reasons_name_what_is_missing() -> None:
    folder = str(installed_kernel_tables())
    qwen = next(r for r in _rows() if r.model_path == "Qwen/Qwen3-32B")
    r = silicon.resolve(dataclasses.replace(qwen, model_path="example/NoSuchModel"), folder)
    assert isinstance(r, silicon.Unpredicted)
    assert r.reason == "model example/NoSuchModel not in the catalog"
    r = silicon.resolve(dataclasses.replace(qwen, system="no_such_gpu"), folder)
    assert isinstance(r, silicon.Unpredicted) and "gpu no_such_gpu not in the catalog" in r.reason
    # DeepSeek-R1 in FP8 (its block-scaled release) is composed: MLA and MoE tables
    row = next(
        r for r in _rows() if r.model_path == "deepseek-ai/DeepSeek-R1" and r.precision == "fp8"
        and r.system == "h200_sxm" and r.mode == "agg"
    )  # fmt: skip
    r = silicon.resolve(row, folder)
    assert not isinstance(r, silicon.Unpredicted), r.reason


def test_closed_loop_fixed_point() -> None:
    """The solved state holds the row's clients: ``r (TTFT + (osl - 1) TPOT) = C`` and,
    aggregated, the decode batch is the requests in their decode phase."""
    cases = list(_dense())
    o = silicon.Overheads(1e-3, 1e-5, 0.05, 3.0)
    s = silicon.solve(cases, o)
    c = np.array([float(x.row.concurrency or 0) for x in cases])
    osl = np.array([float(x.row.osl) for x in cases])
    held = s.rate * (s.ttft + (osl - 1.0) * s.tpot)
    assert np.allclose(held, c, rtol=1e-6)
    free = s.capped == 0
    assert free.any()
    assert np.allclose(s.batch[free], (s.rate * (osl - 1.0) * s.tpot)[free], rtol=1e-5)
    # TPOT: the decode iteration stretched by the prefills' share of the time
    assert np.all(s.tpot > 0) and np.all((s.rho >= 0) & (s.rho < 1))


def test_leave_one_model_out_ignores_the_models_rows() -> None:
    """Changing one model's measurements leaves its own predictions unchanged (its
    overheads come from the other model's rows) and changes the other's."""
    cases = list(_dense())
    first, fits = silicon.leave_one_model_out(cases)
    assert all(f is not None for f in fits)
    for c, f in zip(cases, fits, strict=True):
        assert f is not None and c.model not in f.models

    def scaled(c: silicon.Case) -> silicon.Case:
        row = dataclasses.replace(c.row, ttft_ms=c.row.ttft_ms * 1.7, tpot_ms=c.row.tpot_ms * 1.3)
        return dataclasses.replace(c, row=row)

    moved = [scaled(c) if c.model == "qwen3-32b" else c for c in cases]
    second, _ = silicon.leave_one_model_out(moved)
    own = np.array([c.model == "qwen3-32b" for c in cases])
    assert np.array_equal(first.ttft[own], second.ttft[own])
    assert np.array_equal(first.tpot[own], second.tpot[own])
    assert not np.allclose(first.ttft[~own], second.ttft[~own])


HEADER = ",".join(silicon.REQUIRED)


def _line(**values: str) -> str:
    base = {c: "" for c in silicon.REQUIRED}
    base.update(id="r1", backend="vllm", model_path="Qwen/Qwen3-32B", system="h100_sxm",
                mode="agg", isl="1024", osl="128", batch_size="8", tp_size="2",
                silicon_ttft_ms="100", silicon_tpot_ms="10")  # fmt: skip
    base.update(values)
    return ",".join(base[c] for c in silicon.REQUIRED)


def test_bad_files_name_the_column() -> None:
    with pytest.raises(InputError, match="missing the column.*silicon_tpot_ms"):
        silicon.parse_silicon("x.csv", HEADER.replace(",silicon_tpot_ms", "") + "\n")
    with pytest.raises(InputError, match=r"line 2 \(r1\): isl") as e:
        silicon.parse_silicon("x.csv", HEADER + "\n" + _line(isl="long") + "\n")
    assert "x.csv" in e.value.field
    with pytest.raises(InputError, match="silicon_ttft_ms.*> 0"):
        silicon.parse_silicon("x.csv", HEADER + "\n" + _line(silicon_ttft_ms="-3") + "\n")
    with pytest.raises(InputError, match="mode"):
        silicon.parse_silicon("x.csv", HEADER + "\n" + _line(mode="mixed") + "\n")
    rows = silicon.parse_silicon("x.csv", HEADER + "\n" + _line() + "\n")
    assert rows[0].concurrency == 8 and rows[0].agg is not None and rows[0].agg.tp == 2
    assert silicon.is_silicon_header(HEADER)
    assert not silicon.is_silicon_header("model,gpu,tp,batch,itl_ms")
