"""Benchmark: estimated against measured peak memory of schedule solves, counted over
the whole process tree.

Each case runs in a fresh process: one day of 15-minute periods, deployments of the
demo's first kind (Qwen3-32B, azure-conv-2023, change limit 4) scaled to the given
GPUs, solved with the given time limit. The tree is that process, the workers it
forks (``formulation.processes.workers``) and its HiGHS process
(``formulation.milp.highs``). It is measured as the peak of a memory cgroup v2 around
the tree where this process may create one, else as the peak over samples (every 50
ms) of the sum of each process's proportional set size (``Pss``,
``formulation.processes.footprint``): a page the forked workers share with the solving
process counts once. Prints, per case, the candidate cells, the estimate of
``formulation.memory``, the measured tree peak, their ratio (the estimate should stay
above the peak and within twice it), the tree's parts at its peak (the solving
process, the workers, HiGHS) and the phase in which it peaked. ``64x100+60`` is a fleet
of 64 deployments of 100 to 160 GPUs (8,320 GPUs); ``@150`` gives a case its own time
limit (the fleet's peak comes in phases a 10 s limit does not reach).

    python benchmarks/bench_memory.py [--cases 32 64 128 4x32 64x100+60@150] [--time-limit 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from formulation.processes.footprint import TreeSampler, cgroup_peak_mb, memory_cgroup


def request(n_dep: int, gpus: int, limit_s: float, spread: int = 0) -> dict[str, Any]:
    """``n_dep`` deployments of ``gpus`` GPUs each, or with ``spread``, of ``gpus`` to
    ``gpus + spread`` GPUs evenly (the fleet case: 64 of 100 to 160, 8,320 GPUs)."""
    from formulation.demo import demo_request

    body = demo_request()
    base = body["deployments"][0]
    deps = []
    for i in range(n_dep):
        g = gpus + round(spread * i / max(n_dep - 1, 1))
        d = dict(base)
        d["name"] = f"d{i}"
        d["max_gpus"] = g
        d["demand_rps"] = [x * g / 24 * (1 + 0.1 * i) for x in base["demand_rps"]]
        deps.append(d)
    body["deployments"] = deps
    total = sum(d["max_gpus"] for d in deps)
    body["site"]["gpu_inventory"] = {"h200": total}
    body["grid"]["power_cap_w"] = [c * total / 64 for c in body["grid"]["power_cap_w"]]
    body["solver"]["time_limit_s"] = limit_s
    return body


def child(
    n_dep: int, gpus: int, spread: int, limit_s: float, group: str, budget_mb: float
) -> None:
    from formulation.data import check_memory
    from formulation.problem import Host, problem_from_dict
    from formulation.processes.footprint import join_cgroup
    from formulation.solve import solve

    if group:
        join_cgroup(Path(group))
    host = Host(memory_budget_mb=budget_mb or None)
    problem = problem_from_dict(request(n_dep, gpus, limit_s, spread), host)
    est = check_memory(problem)
    started = time.time()
    o = solve(problem)
    print(
        json.dumps(
            {
                "deployments": n_dep,
                "gpus": sum(d.max_gpus for d in problem.deployments),
                "cells": est.cells,
                "estimate_mb": round(est.total_mb, 1),
                "milp_choices": est.milp_choices,
                "status": o.status,
                "gap_pct": round(100 * o.mip_gap, 3),
                "objective_usd": o.priced.objective_usd,
                "lower_bound_usd": o.lower_bound_usd,
                "started": started,
                "phases": o.stats.get("phases", []),
            }
        )
    )


def parse_case(case: str) -> tuple[int, int, int, float | None]:
    """``G`` (one deployment of G GPUs), ``NxG`` (N of G each) or ``NxG+S`` (N of G to
    G + S GPUs, evenly), with ``@L``: a time limit of L s for this case."""
    case, _, limit = case.partition("@")
    n_dep, _, rest = case.rpartition("x")
    gpus, _, spread = rest.partition("+")
    return int(n_dep or 1), int(gpus), int(spread or 0), float(limit) if limit else None


def phase_peaks(
    samples: list[tuple[float, float]], started: float, t0: float, phases: list[dict[str, Any]]
) -> dict[str, float]:
    """The tree's peak (MB) within each phase (phases run in order from ``started``;
    sample times are seconds since ``t0``); ``setup`` is before the first."""
    edges, at = [], started - t0
    for p in phases:
        edges.append((p["name"], at, at + p["seconds"]))
        at += p["seconds"]
    out: dict[str, float] = {}
    for t, mb in samples:
        name = "setup" if t < started - t0 else "finish"
        for n, a, b in edges:
            if a <= t < b:
                name = n
        out[name] = max(out.get(name, 0.0), mb)
    return out


def run_case(case: str, limit_s: float, budget_mb: float) -> dict[str, Any]:
    n_dep, gpus, spread, own_limit = parse_case(case)
    args = [str(n_dep), str(gpus), str(spread), str(own_limit or limit_s), str(budget_mb)]
    with memory_cgroup(f"pdwatt-bench-{os.getpid()}") as group:
        cmd = [sys.executable, __file__, "--child", *args, "--group", str(group or "")]
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sampler = TreeSampler(proc.pid).start()
        out, err = proc.communicate()
        sampler.stop()
        cgroup_mb = None if group is None else cgroup_peak_mb(group)
    if proc.returncode != 0:
        return {"case": case, "error": err.strip().splitlines()[-1:]}
    r = json.loads(out.strip().splitlines()[-1])
    highs = {p for p, c in sampler.commands.items() if "highs_child" in c}
    parts = {
        "solver_mb": sampler.at_peak.get(proc.pid, 0.0),
        # a HiGHS process started after the tree's peak has no share in it
        "highs_mb": sum(sampler.at_peak.get(p, 0.0) for p in highs),
    }
    parts["workers_mb"] = sampler.peak_mb - parts["solver_mb"] - parts["highs_mb"]
    own = {
        "solver_mb": sampler.peak_by_pid.get(proc.pid, 0.0),
        "highs_mb": max((v for p, v in sampler.peak_by_pid.items() if p in highs), default=0.0),
        "worker_mb": max(
            (v for p, v in sampler.peak_by_pid.items() if p not in highs and p != proc.pid),
            default=0.0,
        ),
    }
    peaks = phase_peaks(sampler.samples, r["started"], t0, r["phases"])
    measured = cgroup_mb if cgroup_mb is not None else sampler.peak_mb
    return r | {
        "case": case,
        "measured_by": "cgroup memory.peak" if cgroup_mb is not None else "sum of Pss",
        "tree_peak_mb": round(measured, 1),
        "pss_peak_mb": round(sampler.peak_mb, 1),
        "ratio": round(r["estimate_mb"] / measured, 2),
        "parts_at_peak_mb": {k: round(v, 1) for k, v in parts.items()},
        "own_peaks_mb": {k: round(v, 1) for k, v in own.items()},
        "peak_by_phase_mb": {k: round(v, 1) for k, v in peaks.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases",
        nargs="+",
        default=["64", "128", "192", "8x32", "16x64", "32x128", "64x100+60", "64x100+60@150"],
    )
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--json", action="store_true", help="also print each case's JSON row")
    ap.add_argument(
        "--budget-mb",
        type=float,
        default=4096.0,
        help="the solve's memory budget, which bounds its MILPs (default: the server's "
        "4,096 MB; 0: none)",
    )
    ap.add_argument("--child", nargs=5, type=float, help=argparse.SUPPRESS)
    ap.add_argument("--group", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(int(a.child[0]), int(a.child[1]), int(a.child[2]), a.child[3], a.group, a.child[4])
        return
    print(
        f"{'case':>10} {'GPUs':>6} {'cells':>11} {'estimate MB':>12} {'tree peak':>10} "
        f"{'ratio':>6} {'solver':>7} {'workers':>8} {'HiGHS':>6}  peak phase, status"
    )
    for case in a.cases:
        r = run_case(case, a.time_limit, a.budget_mb)
        if "error" in r:
            print(f"{case:>10} failed: {r['error']}")
            continue
        if a.json:
            print(json.dumps(r))
        parts = r["parts_at_peak_mb"]
        phase = max(r["peak_by_phase_mb"].items(), key=lambda kv: kv[1])[0]
        print(
            f"{case:>10} {r['gpus']:>6} {r['cells']:>11,} {r['estimate_mb']:>12.0f} "
            f"{r['tree_peak_mb']:>10.0f} {r['ratio']:>6.2f} {parts['solver_mb']:>7.0f} "
            f"{parts['workers_mb']:>8.0f} {parts['highs_mb']:>6.0f}  {phase}, {r['status']} "
            f"(gap {r['gap_pct']}%, {r['measured_by']})",
            flush=True,
        )


if __name__ == "__main__":
    main()
