"""Benchmark: estimated against measured peak memory of schedule solves.

Each case runs in a fresh process (so its peak resident set is its own): one day of
15-minute periods, deployments of the demo's first kind (Qwen3-32B, azure-conv-2023,
change limit 4) scaled to the given GPUs, solved with the given time limit. Prints,
per case, the candidate cells (periods x configurations), the estimate of
``formulation.memory``, the measured peak RSS of the solving process and of its HiGHS
process (``formulation.milp.highs``), and the ratio of the estimate to their sum (the
estimate should stay above it). ``64x100+60`` is a fleet of 64 deployments of 100 to
160 GPUs (8,320 GPUs).

    python benchmarks/bench_memory.py [--cases 32 64 128 4x32 64x100+60] [--time-limit 10]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any


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


def child(n_dep: int, gpus: int, spread: int, limit_s: float) -> None:
    from formulation.data import check_memory
    from formulation.milp.highs import PROCESS
    from formulation.problem import problem_from_dict
    from formulation.solve import solve

    problem = problem_from_dict(request(n_dep, gpus, limit_s, spread))
    est = check_memory(problem)
    t0 = time.perf_counter()
    o = solve(problem)
    wall = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    highs_mb = PROCESS.peak_rss_mb()
    print(
        json.dumps(
            {
                "deployments": n_dep,
                "gpus": sum(d.max_gpus for d in problem.deployments),
                "estimate_mb": round(est.total_mb, 1),
                "peak_rss_mb": round(rss_mb, 1),
                "highs_peak_rss_mb": round(highs_mb, 1),
                "ratio": round(est.total_mb / (rss_mb + highs_mb), 2),
                "status": o.status,
                "gap_pct": round(100 * o.mip_gap, 3),
                "solve_s": round(wall, 1),
            }
        )
    )


def parse_case(case: str) -> tuple[int, int, int]:
    """``G`` (one deployment of G GPUs), ``NxG`` (N of G each) or ``NxG+S`` (N of G to
    G + S GPUs, evenly)."""
    n_dep, _, rest = case.rpartition("x")
    gpus, _, spread = rest.partition("+")
    return int(n_dep or 1), int(gpus), int(spread or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases",
        nargs="+",
        default=["64", "128", "192", "8x32", "16x64", "32x128", "64x100+60"],
    )
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--child", nargs=4, type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(int(a.child[0]), int(a.child[1]), int(a.child[2]), a.child[3])
        return
    print(
        f"{'case':>10} {'GPUs':>6} {'estimate MB':>12} {'solve RSS':>10} {'HiGHS RSS':>10} "
        f"{'ratio':>6}  status"
    )
    for case in a.cases:
        n_dep, gpus, spread = parse_case(case)
        args = [str(n_dep), str(gpus), str(spread), str(a.time_limit)]
        out = subprocess.run(
            [sys.executable, __file__, "--child", *args], capture_output=True, text=True
        )
        if out.returncode != 0:
            print(f"{case:>10} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{case:>10} {r['gpus']:>6} {r['estimate_mb']:>12.0f} {r['peak_rss_mb']:>10.0f} "
            f"{r['highs_peak_rss_mb']:>10.0f} {r['ratio']:>6.2f}  "
            f"{r['status']} (gap {r['gap_pct']}%, {r['solve_s']} s)"
        )


if __name__ == "__main__":
    main()
