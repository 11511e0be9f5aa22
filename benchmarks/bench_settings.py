"""Benchmark: the schedule with GPU settings against the same schedule without them.

Each site (bench_schedule.py's A-D, or the demo) is solved twice with the same time
limit: as it is (the full clock only) and with 3 x 3 settings per deployment (the
GPU's default settings of gpus.json, for H200 1980, 1590 and 1185 MHz, for each
phase). Prints one JSON row per solve (objective, proven gap, time, candidates, the
phases' times, column generation's rounds and what its resumed phase did) and a
table: the saving with settings, each solve's gap and time.

    python benchmarks/bench_settings.py [--sites demo A B C D]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

from bench_schedule import SITES, site_request

from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from formulation.solve import solve
from model.catalog import load_gpu_clocks


def with_default_settings(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every deployment offered its GPU's default settings per phase."""
    out = copy.deepcopy(body)
    for d in out["deployments"]:
        clocks = load_gpu_clocks(d["gpu"])
        assert clocks is not None, f"{d['gpu']} has no clock data"
        d["settings"] = {"prefill": list(clocks.settings), "decode": list(clocks.settings)}
    return out


def run(name: str, body: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    o = solve(problem_from_dict(body))
    wall = time.perf_counter() - t0
    return {
        "site": name,
        "status": o.status,
        "objective_usd": float(o.priced.objective_usd),
        "lower_bound_usd": float(o.lower_bound_usd),
        "gap": float(o.mip_gap),
        "solve_time_s": float(o.solve_time_s),
        "wall_s": wall,
        "time_limit_s": body["solver"]["time_limit_s"],
        "candidates": sum(d.n_configs for d in o.data.deployments),
        "phases": [[p["name"], p["seconds"]] for p in o.stats["phases"]],
        "relaxation_rounds": o.stats.get("relaxation", {}).get("iterations"),
        "relaxation_resumed": o.stats.get("relaxation_resumed"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", nargs="+", default=["demo", "A", "B"], choices=["demo", *SITES])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    for name in args.sites:
        if name == "demo":
            body = demo_request()
        else:
            n_dep, gpus_each, site_gpus, limit_s = SITES[name]
            body = site_request(n_dep, gpus_each, site_gpus, args.seed, limit_s)
        plain = run(name, body)
        print(json.dumps({**plain, "settings": "full clock"}), flush=True)
        offered = run(name, with_default_settings(body))
        print(json.dumps({**offered, "settings": "3 x 3"}), flush=True)
        rows.append((name, plain, offered))
    print(
        f"{'site':5} {'without USD':>12} {'gap':>8} {'time s':>7} {'with USD':>12} {'gap':>8} "
        f"{'time s':>7} {'saving':>8} {'candidates':>17}"
    )
    for name, a, b in rows:
        saving = 100.0 * (a["objective_usd"] - b["objective_usd"]) / a["objective_usd"]
        print(
            f"{name:5} {a['objective_usd']:12.2f} {100 * a['gap']:7.3f}% {a['solve_time_s']:7.1f} "
            f"{b['objective_usd']:12.2f} {100 * b['gap']:7.3f}% {b['solve_time_s']:7.1f} "
            f"{saving:7.2f}% {a['candidates']:>8}/{b['candidates']:<8}"
        )


if __name__ == "__main__":
    main()
