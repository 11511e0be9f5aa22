"""The core's user-level operations, as JSON-able reports (SPEC 6.1).

The CLI and the HTTP service both call these, so that ``pdwatt capacity --json``
and ``POST /v1/capacity`` give the same document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model.capacity import DEFAULT_VARIANT, DeploymentSpec, candidate_configs, evaluate
from model.catalog import (
    Calibration,
    ServingStack,
    apply_overrides,
    load_calibration,
    load_gpu,
    load_model,
)
from model.errors import InputError
from model.pareto import front_indices, max_capacity_index, min_power_index
from model.workload import Workload, parse_workload

SECTIONS = ("model", "gpu", "calibration", "serving")


@dataclass(frozen=True)
class SpecRequest:
    """Names plus per-section overrides, as a user gives them."""

    model: str = "qwen3-32b"
    gpu: str = "h200"
    workload: str = "azure-conv-2023"
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    moments: Mapping[str, Any] | None = None  # explicit workload moments (replace `workload`)
    read_files: bool = False  # resolve `trace:`/`moments:` file forms (the CLI only)
    #: a calibration to start from instead of the catalog's (a fitted file's entry);
    #: the ``calibration`` overrides still apply on top
    calibration: Calibration | None = None
    #: the memory balance (model.capacity.MODEL_VARIANTS)
    model_variant: str = DEFAULT_VARIANT


def resolve_spec(req: SpecRequest) -> DeploymentSpec:
    """Catalog entries by name, then the user's overrides (unknown fields are errors)."""
    unknown = set(req.overrides) - set(SECTIONS)
    if unknown:
        raise InputError(
            "overrides", f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}"
        )
    ov = req.overrides
    model = apply_overrides(load_model(req.model), ov.get("model", {}), "model")
    gpu = apply_overrides(load_gpu(req.gpu), ov.get("gpu", {}), "gpu")
    cal = req.calibration or load_calibration(req.model, req.gpu)
    if ov.get("calibration"):
        cal = apply_overrides(cal, ov["calibration"], "calibration")
    serving = apply_overrides(ServingStack(), ov.get("serving", {}), "serving")
    if req.moments is not None:
        workload = Workload.from_dict(req.moments)
    else:
        workload = parse_workload(req.workload, read_files=req.read_files)
    return DeploymentSpec(model, gpu, cal, workload, serving, req.model_variant)


def _context(spec: DeploymentSpec, overridden: bool) -> dict[str, Any]:
    cal = spec.calibration
    return {
        "model": spec.model.name,
        "gpu": spec.gpu.name,
        "workload": spec.workload.name,
        "model_variant": spec.variant,
        "calibration": {
            "measured": bool(cal.measured),
            "overridden": overridden,
            "source": cal.source,
        },
    }


def capacity_report(
    spec: DeploymentSpec,
    n_p: int,
    n_d: int,
    load_rps: float | None = None,
    overridden: bool = False,
) -> dict[str, Any]:
    """``pdwatt capacity``: one configuration (SPEC 6.1 keys plus context)."""
    for name, v in (("n_p", n_p), ("n_d", n_d)):
        if int(v) != v or v < 0:
            raise InputError(name, "must be an integer >= 0")
    if load_rps is not None and (not np.isfinite(load_rps) or load_rps < 0):
        raise InputError("load", "must be finite and >= 0")
    r = evaluate(spec, [n_p], [n_d], None if load_rps is None else [load_rps])
    out = r.record(0)
    out.update(_context(spec, overridden))
    return out


def front_report(
    spec: DeploymentSpec,
    max_gpus: int = 16,
    required_rps: float | None = None,
    headroom: float = 1.0,
    budget_w: float | None = None,
    overridden: bool = False,
) -> dict[str, Any]:
    """``pdwatt front``: every candidate, the Pareto front by capacity, and selections."""
    if int(max_gpus) != max_gpus or max_gpus < 2:
        raise InputError("max_gpus", "must be an integer >= 2")
    if max_gpus > 4096:
        raise InputError("max_gpus", "must be <= 4096")
    n_p, n_d = candidate_configs(int(max_gpus), spec.serving.tensor_parallel)
    r = evaluate(spec, n_p, n_d)
    configs = [r.record(i) for i in range(len(r))]
    front = front_indices(r.capacity_rps, r.power_w)
    out: dict[str, Any] = _context(spec, overridden)
    out.update(
        {
            "max_gpus": int(max_gpus),
            "configs": configs,
            "front": [configs[i] for i in front],
        }
    )
    mu_f, p_f, g_f = r.capacity_rps[front], r.power_w[front], r.gpus[front]
    if required_rps is not None:
        i = min_power_index(mu_f, p_f, required_rps, headroom, g_f)
        out["min_power_for_rate"] = {
            "required_rps": required_rps,
            "headroom": headroom,
            "config": None if i is None else configs[front[i]],
        }
    if budget_w is not None:
        i = max_capacity_index(mu_f, p_f, budget_w)
        out["max_capacity_under_budget"] = {
            "budget_w": budget_w,
            "config": None if i is None else configs[front[i]],
        }
    return out
