"""The schedule response of SPEC 6.1, as plain JSON-able data, its shape
(:class:`ScheduleResponse`, the response model the HTTP API publishes and checks every
answer against) and its CSV table."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from formulation.data import DeploymentData
from formulation.evaluate import Priced, phase_power_w
from model.operations import performance_report, phase_gpus_record

if TYPE_CHECKING:  # the solve loads Pyomo and HiGHS: the API's schemas need only this name
    from formulation.solve import Outcome


class DeploymentPeriod(BaseModel):
    model_config = ConfigDict(extra="allow")
    n_p: int
    n_d: int
    demand_rps: float
    served_rps: float
    capacity_rps: float
    power_w: float
    prefill_power_w: float = Field(
        description="the prefill instances' part of power_w at the served load (W)"
    )
    decode_power_w: float = Field(
        description="the decode instances' part of power_w at the served load (W)"
    )
    #: only for a deployment that lists settings, and then always: absent otherwise,
    #: never null (the routes answer the document itself, not this model's dump)
    prefill_setting: str | SkipJsonSchema[None] = Field(
        None, description="the prefill GPUs' setting this period (a deployment with settings)"
    )
    decode_setting: str | SkipJsonSchema[None] = Field(
        None, description="the decode GPUs' setting this period (a deployment with settings)"
    )


class PeriodOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: int
    power_w: float
    power_cap_w: float
    deployments: dict[str, DeploymentPeriod]


class Totals(BaseModel):
    model_config = ConfigDict(extra="allow")
    objective_usd: float
    energy_kwh: float
    cost_usd: float
    carbon_kg: float
    served_requests: float
    unserved_requests: float
    unserved_value_usd: float
    transition_cost_usd: float


class BaselineOut(Totals):
    cap_violations: int
    limit_violations: int
    feasible: bool = Field(
        description="false when the baseline breaks a constraint the schedule keeps (the "
        "cap, the inventory, the transition limits or the served loads): then its cost and "
        "savings are no comparison"
    )


class SettingPair(BaseModel):
    prefill: str
    decode: str


class DeploymentOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    #: only for a deployment that lists settings: the pairs it was offered
    settings: list[SettingPair] | SkipJsonSchema[None] = Field(
        None, description="the (prefill, decode) setting pairs offered (with settings)"
    )


class ScheduleResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["optimal", "time_limit", "stopped"]
    mip_gap: float
    lower_bound_usd: float
    solve_time_s: float
    objective_usd: float
    periods: list[PeriodOut]
    totals: Totals
    baselines: dict[str, BaselineOut]
    deployments: list[DeploymentOut]


def _totals(p: Priced) -> dict[str, Any]:
    return {k: (float(v) if isinstance(v, float | np.floating) else v) for k, v in p.totals.items()}


def _baseline(p: Priced, best: Priced) -> dict[str, Any]:
    out = _totals(p)
    out.update(p.violations())
    out["feasible"] = p.violation_free
    saving = p.objective_usd - best.objective_usd
    out["savings_usd"] = saving
    out["savings_pct"] = 100.0 * saving / p.objective_usd if p.objective_usd else 0.0
    out["energy_savings_kwh"] = p.totals["energy_kwh"] - best.totals["energy_kwh"]
    return out


def _settings_offered(d: DeploymentData) -> dict[str, Any]:
    """The setting pairs a deployment listed (nothing when it listed none)."""
    if d.settings is None:
        return {}
    return {"settings": [{"prefill": a, "decode": b} for a, b in d.settings]}


def response(o: Outcome) -> dict[str, Any]:
    """SPEC 6.1 schedule response (extended with bounds, savings and solver statistics)."""
    data, p = o.data, o.priced
    sched = p.schedule
    prefill_w, decode_w = phase_power_w(data, sched)
    periods = []
    for t in range(data.n_periods):
        deps: dict[str, dict[str, Any]] = {}
        for m, d in enumerate(data.deployments):
            k = int(sched.config[m, t])
            deps[d.name] = {
                "n_p": int(d.n_p[k]),
                "n_d": int(d.n_d[k]),
                "gpus": int(d.gpus[k]),
                "demand_rps": float(d.demand_rps[t]),
                "served_rps": float(sched.served_rps[m, t]),
                "capacity_rps": float(d.capacity_rps[k]),
                "power_w": float(p.it_power_w[m, t]),
                "prefill_power_w": float(prefill_w[m, t]),
                "decode_power_w": float(decode_w[m, t]),
                "instances_started": int(p.starts[m, t]),
                "instances_stopped": int(p.stops[m, t]),
            }
            setting = d.setting_of(k)
            if setting is not None:  # only for a deployment that lists settings
                deps[d.name]["prefill_setting"], deps[d.name]["decode_setting"] = setting
        periods.append(
            {
                "index": t,
                "start_minute": t * data.problem.period_minutes,
                "power_w": float(p.site_power_w[t]),
                "power_cap_w": float(data.power_cap_w[t]),
                "price_usd_per_mwh": float(data.price_usd_per_mwh[t]),
                "carbon_g_per_kwh": float(data.carbon_g_per_kwh[t]),
                "idle_gpus": int((data.pool_gpus - p.gpus_used[:, t]).sum()),
                "deployments": deps,
            }
        )
    return {
        "status": o.status,
        "mip_gap": float(o.mip_gap),
        "lower_bound_usd": float(o.lower_bound_usd),
        "solve_time_s": float(o.solve_time_s),
        "objective_usd": float(p.objective_usd),
        "periods": periods,
        "totals": _totals(p),
        "baselines": {name: _baseline(b, p) for name, b in o.baselines.items()},
        "deployments": [
            {
                "name": d.name,
                "model": d.spec.model.name,
                "gpu": d.spec.gpu.name,
                "workload": d.spec.workload.name,
                "calibration_measured": d.measured_calibration,
                "model_variant": d.spec.variant,
                "performance": performance_report(d.spec, d.table.result.coefficients),
                "candidates": d.n_configs,
                **_settings_offered(d),
                **phase_gpus_record(d.spec),
            }
            for d in data.deployments
        ],
        "solver": {k: v for k, v in o.stats.items()},
    }


def to_csv(resp: dict[str, Any]) -> str:
    """One row per (period, deployment); with two columns more, the settings, when a
    deployment lists settings."""
    settings = any(
        "prefill_setting" in d for per in resp["periods"] for d in per["deployments"].values()
    )
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "period",
            "start_minute",
            "site_power_w",
            "power_cap_w",
            "price_usd_per_mwh",
            "deployment",
            "n_p",
            "n_d",
            "gpus",
            "demand_rps",
            "served_rps",
            "capacity_rps",
            "deployment_power_w",
            "prefill_power_w",
            "decode_power_w",
            *(["prefill_setting", "decode_setting"] if settings else []),
        ]
    )
    for per in resp["periods"]:
        for name, d in per["deployments"].items():
            w.writerow(
                [
                    per["index"],
                    per["start_minute"],
                    f"{per['power_w']:.3f}",
                    f"{per['power_cap_w']:.3f}",
                    f"{per['price_usd_per_mwh']:.4f}",
                    name,
                    d["n_p"],
                    d["n_d"],
                    d["gpus"],
                    f"{d['demand_rps']:.6f}",
                    f"{d['served_rps']:.6f}",
                    f"{d['capacity_rps']:.6f}",
                    f"{d['power_w']:.3f}",
                    f"{d['prefill_power_w']:.3f}",
                    f"{d['decode_power_w']:.3f}",
                    *(
                        [d.get("prefill_setting", ""), d.get("decode_setting", "")]
                        if settings
                        else []
                    ),
                ]
            )
    return buf.getvalue()
