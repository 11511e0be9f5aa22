"""Benchmark: estimated against measured peak memory of schedule solves.

Each case runs in a fresh process (so its peak resident set is its own): one day of
15-minute periods, deployments of the demo's first kind (Qwen3-32B, azure-conv-2023,
change limit 4) scaled to the given GPUs, solved with the given time limit. Prints,
per case, the candidate cells (periods x configurations), the estimate of
``formulation.memory``, the measured peak RSS and their ratio (the estimate should
stay above the measurement).

    python benchmarks/bench_memory.py [--cases 32 64 128 4x32] [--time-limit 10]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from typing import Any


def request(n_dep: int, gpus: int, limit_s: float) -> dict[str, Any]:
    from formulation.demo import demo_request

    body = demo_request()
    base = body["deployments"][0]
    deps = []
    for i in range(n_dep):
        d = dict(base)
        d["name"] = f"d{i}"
        d["max_gpus"] = gpus
        d["demand_rps"] = [x * gpus / 24 * (1 + 0.1 * i) for x in base["demand_rps"]]
        deps.append(d)
    body["deployments"] = deps
    body["site"]["gpu_inventory"] = {"h200": n_dep * gpus}
    body["grid"]["power_cap_w"] = [c * n_dep * gpus / 64 for c in body["grid"]["power_cap_w"]]
    body["solver"]["time_limit_s"] = limit_s
    return body


def child(n_dep: int, gpus: int, limit_s: float) -> None:
    from formulation.data import check_memory
    from formulation.problem import problem_from_dict
    from formulation.solve import solve

    problem = problem_from_dict(request(n_dep, gpus, limit_s))
    est = check_memory(problem)
    o = solve(problem)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "deployments": n_dep,
                "gpus_each": gpus,
                "estimate_mb": round(est.total_mb, 1),
                "peak_rss_mb": round(rss_mb, 1),
                "ratio": round(est.total_mb / rss_mb, 2),
                "status": o.status,
                "gap_pct": round(100 * o.mip_gap, 3),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["64", "128", "192", "8x32", "16x64", "32x128"])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--child", nargs=3, type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(int(a.child[0]), int(a.child[1]), a.child[2])
        return
    print(f"{'case':>8} {'estimate MB':>12} {'peak RSS MB':>12} {'ratio':>6}  status")
    for case in a.cases:
        n_dep, _, gpus = case.rpartition("x")
        args = [n_dep or "1", gpus, str(a.time_limit)]
        out = subprocess.run(
            [sys.executable, __file__, "--child", *args], capture_output=True, text=True
        )
        if out.returncode != 0:
            print(f"{case:>8} failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{case:>8} {r['estimate_mb']:>12.0f} {r['peak_rss_mb']:>12.0f} {r['ratio']:>6.2f}  "
            f"{r['status']} (gap {r['gap_pct']}%)"
        )


if __name__ == "__main__":
    main()
