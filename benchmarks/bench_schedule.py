"""Benchmark: schedule build and solve times and the proven gap.

Two sites, 96 periods of 15 minutes each (one day):

* A: 4 deployments of up to 16 GPUs each on a 64-GPU site;
* B: 8 deployments of up to 32 GPUs each on a 256-GPU site.

Deployments mix models and workloads (see ``site_request``); demand follows diurnal
curves with random phases; the cap binds at the daily peak and a demand-response
event lowers it further for three evening hours. Prints, per site and method, the
time to build the tables, the decomposition, the MILP build and solve times, the
objective, the proven lower bound and gap, and the baselines.

    python benchmarks/bench_schedule.py [--sites A B] [--methods auto compact] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from typing import Any

import numpy as np

from formulation.data import build_data
from formulation.dp import deployment_grid
from formulation.evaluate import price_schedule
from formulation.lagrange import uncoupled_schedule
from formulation.problem import problem_from_dict
from formulation.solve import solve

MIX = [
    ("qwen3-32b", "azure-conv-2023", 0.01),
    ("qwen3-32b", "azure-code-2023", 0.005),
    ("qwen3-8b", "azure-conv-2023", 0.004),
    ("qwen3-14b", "mooncake", 0.05),
    ("llama-3.1-8b", "azure-code-2023", 0.003),
    ("mistral-small-24b", "azure-conv-2023", 0.008),
    ("qwen3-32b", "mooncake", 0.06),
    ("qwen3-14b", "azure-conv-2023", 0.006),
]


def site_request(
    n_dep: int, gpus_each: int, site_gpus: int, seed: int, limit_s: float
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    T = 96
    hours = (np.arange(T) + 0.5) / 4.0
    deps = []
    for i in range(n_dep):
        model, workload, value = MIX[i % len(MIX)]
        deps.append(
            {
                "name": f"d{i}-{model}-{workload}",
                "model": model,
                "gpu": "h200",
                "workload": workload,
                "demand_rps": [0.0] * T,  # filled below from capacity
                "unserved_penalty_usd_per_request": value,
                "headroom": 0.9,
                "max_gpus": gpus_each,
                "initial": {"n_p": 1, "n_d": 1},
            }
        )
    body: dict[str, Any] = {
        "period_minutes": 15,
        "site": {"gpu_inventory": {"h200": site_gpus}, "pue": 1.25, "idle_gpu_power_w": 120},
        "deployments": deps,
        "grid": {"power_cap_w": 1e9, "price_usd_per_mwh": 50.0, "carbon_g_per_kwh": 300.0},
        "transitions": {"start_cost_usd": 0.02, "max_instance_changes_per_period": 4},
        "solver": {"time_limit_s": limit_s, "mip_gap": 0.001},
    }
    # demand: a diurnal curve peaking at ~70% of the largest capacity within max_gpus
    data = build_data(problem_from_dict(body))
    for dep, d in zip(deps, data.deployments, strict=True):
        peak = 0.7 * 0.9 * float(d.capacity_rps.max())
        phase = rng.uniform(11, 20)
        width = rng.uniform(2.5, 4.5)
        dist = np.minimum(np.abs(hours - phase), 24 - np.abs(hours - phase))
        curve = 0.15 + 0.85 * np.exp(-0.5 * (dist / width) ** 2)
        dep["demand_rps"] = np.round(peak * curve, 4).tolist()
    price = (
        45
        + 35 * np.exp(-0.5 * ((hours - 8) / 1.5) ** 2)
        + 110 * np.exp(-0.5 * ((hours - 18.5) / 1.5) ** 2)
    )
    body["grid"]["price_usd_per_mwh"] = np.round(price, 3).tolist()
    # cap: 90% of the uncapped schedule's peak power, 25% lower from 17:00 to 20:00;
    # without the cap the deployments are independent: one exact DP each
    data = build_data(problem_from_dict(body))
    peak_w = float(
        price_schedule(
            data, uncoupled_schedule(data, [deployment_grid(data, d) for d in data.deployments])
        ).site_power_w.max()
    )
    cap = np.full(T, 0.9 * peak_w)
    cap[(hours >= 17) & (hours < 20)] = 0.75 * 0.9 * peak_w
    body["grid"]["power_cap_w"] = np.round(cap, 1).tolist()
    return body


SITES = {
    "S64": (1, 64, 64, 30.0),
    "A": (4, 16, 64, 10.0),
    "B": (8, 32, 256, 60.0),
    "C": (16, 64, 1024, 120.0),
    "D": (32, 128, 4096, 300.0),
}


def run(name: str, method: str, seed: int) -> dict[str, Any]:
    n_dep, gpus_each, site_gpus, limit = SITES[name]
    body = site_request(n_dep, gpus_each, site_gpus, seed, limit)
    body["solver"]["method"] = method
    t0 = time.perf_counter()
    problem = problem_from_dict(body)
    data = build_data(problem)
    tables_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    o = solve(problem)
    wall = time.perf_counter() - t1
    st = o.stats
    milp_build = sum(w.get("build_s", 0.0) for w in st.get("windows", [])) + st.get(
        "milp_build_s", 0.0
    )
    milp_solve = sum(w.get("solve_s", 0.0) for w in st.get("windows", [])) + st.get(
        "milp_solve_s", 0.0
    )
    row = {
        "site": name,
        "method": method,
        "periods": data.n_periods,
        "deployments": len(data.deployments),
        "candidates": sum(d.n_configs for d in data.deployments),
        "tables_s": round(tables_s, 3),
        "decomposition_s": st.get("decomposition_s"),
        "milp_build_s": round(milp_build, 3),
        "milp_solve_s": round(milp_solve, 3),
        "total_s": round(wall, 3),
        "status": o.status,
        "objective_usd": round(o.priced.objective_usd, 4),
        "lower_bound_usd": round(o.lower_bound_usd, 4),
        "gap_pct": round(100 * o.mip_gap, 4),
        "baselines_usd": {k: round(v.objective_usd, 4) for k, v in o.baselines.items()},
        "baseline_violations": {k: v.violations() for k, v in o.baselines.items()},
        "windows": st.get("windows"),
        "split_bound": st.get("split_bound"),
        "lower_bound": st.get("lower_bound"),
        "choices_kept": st.get("choices_kept"),
        "choices_total": st.get("choices_total"),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", nargs="+", default=["A", "B"], choices=sorted(SITES))
    ap.add_argument("--methods", nargs="+", default=["auto"], choices=["auto", "compact"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for s in a.sites:
        for m in a.methods:
            row = run(s, m, a.seed)
            n_dep, gpus_each, site_gpus, limit = SITES[s]
            print(
                f"site {s} ({row['periods']} periods x {n_dep} deployments x <= {gpus_each} GPUs, "
                f"{site_gpus}-GPU site), method {m}, time limit {limit:g} s: {row['status']}, "
                f"gap {row['gap_pct']:.3f}%, total {row['total_s']:.2f} s "
                f"(tables {row['tables_s']:.2f} s, MILP build {row['milp_build_s']:.2f} s, "
                f"MILP solve {row['milp_solve_s']:.2f} s)"
            )
            print(
                json.dumps(
                    row, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v
                )
            )


if __name__ == "__main__":
    main()
