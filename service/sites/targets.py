"""Replica targets of a site's plan, as an orchestrator applies them (docs/service.md,
"Replica targets"): per deployment and period the replicas per role and, for a
deployment that lists GPU settings, each role's setting (a locked SM clock or a
per-GPU power limit); per period the GPU power the plan's instances were held to.
Each in plain fields (a Kubernetes scaler) and in NVIDIA Dynamo's names (``dynamo``).

What the plan obeyed, in GPU watts: the site cap is on the facility's power,
``PUE x (the instances' draw + idle_gpu_power_w x the pools' idle GPUs) <= power_cap_w``
(formulation/evaluate.py), so the instances were held to ``power_cap_w / PUE -
idle_gpu_power_w x idle_gpus``: :func:`total_gpu_power_limit_w`.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from model.catalog import load_gpu_clocks
from model.clocks import GpuClocks, parse_setting

#: the pod annotation Dynamo's Power Agent applies as each GPU's power limit (watts per
#: GPU, a string), read from each worker component's ``podTemplate``
DYNAMO_POWER_ANNOTATION = "dynamo.nvidia.com/gpu-power-limit"
ROLES = ("prefill", "decode")


def site_power(plan_response: dict[str, Any], site_body: dict[str, Any]) -> tuple[float, float]:
    """``(pue, idle_gpu_power_w)`` the plan was made with: those stored with the plan,
    else (a plan stored before they were) the site's registration."""
    stored = plan_response.get("site_power") or site_body["site"]
    return float(stored["pue"]), float(stored["idle_gpu_power_w"])


def total_gpu_power_limit_w(period: dict[str, Any], pue: float, idle_w: float) -> float:
    """The GPU power (W) the plan's instances were held to in ``period``: the site cap
    after PUE, less what the pools' idle GPUs draw."""
    return float(period["power_cap_w"]) / pue - idle_w * int(period["idle_gpus"])


def role_setting(text: str, clocks: GpuClocks | None) -> dict[str, float]:
    """A role's setting as an orchestrator applies it: ``{"gpu_power_limit_w": N}``
    for a power limit, ``{"sm_clock_mhz": N}`` for a clock locked below the full
    clock, ``{}`` at the full clock (the GPU's defaults: clocks not locked, its
    default power limit)."""
    s = parse_setting(text, clocks, "setting")
    if s is None or clocks is None:
        return {}
    if s.kind == "limit":
        return {"gpu_power_limit_w": s.value}
    return {} if s.value >= clocks.sm_clock_max_mhz else {"sm_clock_mhz": s.value}


def dynamo_annotation(applied: dict[str, float], clocks: GpuClocks) -> dict[str, Any]:
    """A role's ``podTemplate`` as Dynamo reads its power limit: the limit's watts, or,
    for a role without one (a locked clock or the full clock), the GPU's default limit
    (its highest, ``power_limit_max_w``), which lifts an earlier one."""
    watts = applied.get("gpu_power_limit_w", clocks.power_limit_max_w)
    return {
        "podTemplate": {
            "metadata": {"annotations": {DYNAMO_POWER_ANNOTATION: str(math.floor(watts))}}
        }
    }


def _gpus(plan_response: dict[str, Any]) -> dict[str, str]:
    """Each deployment's GPU, by name."""
    return {d["name"]: d["gpu"] for d in plan_response["schedule"].get("deployments", [])}


def targets(plan_response: dict[str, Any], periods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One replica target per deployment and period of a plan; a deployment whose
    period names settings also gets them per role."""
    gpus = _gpus(plan_response)
    out = []
    for per in periods:
        for name, d in per["deployments"].items():
            row: dict[str, Any] = {
                "deployment": name,
                "period": per["index"],
                "start": per["start"],
                "end": per["end"],
                "num_prefill": d["n_p"],
                "num_decode": d["n_d"],
                "replicas": {"prefill": d["n_p"], "decode": d["n_d"]},
                "gpus": d["gpus"],
            }
            if "prefill_setting" in d:
                clocks = load_gpu_clocks(gpus[name])
                assert clocks is not None  # a setting is only planned with clock data
                applied = {r: role_setting(d[f"{r}_setting"], clocks) for r in ROLES}
                row["prefill_setting"] = d["prefill_setting"]
                row["decode_setting"] = d["decode_setting"]
                row["gpu_settings"] = applied
                row["dynamo"] = {r: dynamo_annotation(applied[r], clocks) for r in ROLES}
            out.append(row)
    return out


def period_limits(periods: list[dict[str, Any]], pue: float, idle_w: float) -> list[dict[str, Any]]:
    """Per period, the site cap and the GPU power the plan's instances were held to,
    plain and as Dynamo's Planner configuration reads it."""
    out = []
    for per in periods:
        total = total_gpu_power_limit_w(per, pue, idle_w)
        out.append(
            {
                "period": per["index"],
                "start": per["start"],
                "end": per["end"],
                "power_cap_w": float(per["power_cap_w"]),
                "idle_gpus": int(per["idle_gpus"]),
                "total_gpu_power_limit_w": total,
                "dynamo": {
                    "enable_power_awareness": True,
                    "total_gpu_power_limit": max(math.floor(total), 0),
                },
            }
        )
    return out


#: the CSV's columns for a deployment's settings, after the replica columns
SETTING_COLUMNS = [
    "prefill_setting",
    "decode_setting",
    "prefill_gpu_power_limit_w",
    "decode_gpu_power_limit_w",
    "prefill_sm_clock_mhz",
    "decode_sm_clock_mhz",
]


def targets_csv(doc: dict[str, Any]) -> str:
    """One row per target; the period's ``total_gpu_power_limit_w`` on each row, and,
    when a target names settings, :data:`SETTING_COLUMNS` (empty where a role has no
    such field or the deployment lists no settings)."""
    rows = doc["targets"]
    totals = {p["period"]: p["total_gpu_power_limit_w"] for p in doc["periods"]}
    named = any("gpu_settings" in t for t in rows)
    cols = ["deployment", "period", "start", "end", "num_prefill", "num_decode", "gpus"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([*cols, "total_gpu_power_limit_w", *(SETTING_COLUMNS if named else [])])
    for t in rows:
        extra = []
        if named:
            applied = t.get("gpu_settings", {})
            extra = [t.get("prefill_setting", ""), t.get("decode_setting", "")]
            for field in ("gpu_power_limit_w", "sm_clock_mhz"):
                extra += [applied.get(r, {}).get(field, "") for r in ROLES]
        w.writerow([*(t[c] for c in cols), repr(totals[t["period"]]), *extra])
    return buf.getvalue()
