"""Measured rows written by tests: one row with plain values, each test naming only the
fields it is about."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from model.catalog import load_gpu, load_model
from model.measured import engine_fit
from model.measured.calibrate import Usable
from model.measured.measurements import Measurement
from model.measured.silicon import SiliconRow, installed_silicon, read_silicon

#: a dense bf16 model on one H100 under vLLM; every test replaces the fields it needs
PLAIN = Measurement(
    file="synthetic.csv",
    row="line 2",
    model="qwen3-8b",
    gpu="h100-sxm",
    stack="vllm",
    task="",
    tp=1,
    ep=1,
    precision="bf16",
    architecture="dense",
    batch=8.0,
    output_tokens=100.0,
    output_weighted_tokens=100.0,
    prompt_tokens=None,
    context_tokens=None,
    itl_s=0.01,
    power_w=None,
    prefill_tokens_per_s=None,
)


def measurement(model: str, batch: float, **fields: Any) -> Measurement:
    """:data:`PLAIN` of ``model`` at ``batch`` with ``fields`` replaced."""
    return dataclasses.replace(PLAIN, model=model, batch=batch, **fields)


def composed(
    gpu: str, model: str, batch: float, kernel_s: float, itl_s: float, version: str, task: str = ""
) -> engine_fit.Composed:
    """A decode row at context 1,000 whose kernel time is given: the engine fit's input."""
    arch = load_model(model)
    where = f"{gpu} {model} B={batch}"
    m = measurement(model, batch, row=where, gpu=gpu, task=task, context_tokens=1e3, itl_s=itl_s)
    u = Usable(m, arch, load_gpu(gpu))
    return engine_fit.Composed(u, "vllm", version, arch.layers, np.array([kernel_s]), True)


def script(name: str) -> ModuleType:
    """``scripts/<name>.py`` loaded as a module (scripts are not a package)."""
    path = Path(__file__).resolve().parents[2] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_script", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def installed_silicon_rows() -> dict[str, SiliconRow]:
    """The installed aiconfigurator-core package's silicon rows by id (read once);
    skips the test when the package is not installed."""
    path = installed_silicon()
    if path is None:
        pytest.skip("the aiconfigurator-core package is not installed")
    return {r.id: r for r in read_silicon(path)}
