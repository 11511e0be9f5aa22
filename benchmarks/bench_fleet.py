"""Benchmark: fleets of several sites sharing demand (docs/fleet.md), the joint solve's
time, proven gap and peak memory.

Each site is ``bench_schedule.py``'s site of ``--deployments`` deployments of
``--gpus`` GPUs each (its models, workloads, diurnal demand, prices and capped draw),
with a seed of its own; half of each deployment's demand becomes a region that every
site's deployment of the same index (the same model) may serve, at no penalty at home
and ``--penalty`` USD per request elsewhere; the other half stays the site's own.

    python benchmarks/bench_fleet.py --sites 2 3 8 --deployments 2 --gpus 16 --limit 120
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

from bench_schedule import site_request

from formulation.fleet.problem import fleet_from_dict
from formulation.fleet.solve import solve_fleet
from formulation.infeasible import InfeasibleError
from formulation.milp.highs import PROCESS
from model.errors import InputError


def fleet_request(
    n_sites: int, n_dep: int, gpus: int, limit_s: float, penalty: float, seed: int
) -> dict[str, Any]:
    sites, regions = [], []
    for i in range(n_sites):
        body = site_request(n_dep, gpus, n_dep * gpus, seed + i, limit_s)
        for dep in body["deployments"]:
            dep["demand_rps"] = [round(0.5 * x, 4) for x in dep["demand_rps"]]
        site = {k: body[k] for k in ("site", "deployments", "grid", "transitions")}
        sites.append({"name": f"s{i}", **site})
    for i, site in enumerate(sites):
        for k, dep in enumerate(site["deployments"]):
            regions.append(
                {
                    "name": f"r{i}-{k}",
                    "model": dep["model"],
                    "demand_rps": list(dep["demand_rps"]),
                    "unserved_penalty_usd_per_request": dep["unserved_penalty_usd_per_request"],
                    "served_by": [
                        {
                            "site": other["name"],
                            "deployment": other["deployments"][k]["name"],
                            "penalty_usd_per_request": 0.0 if j == i else penalty,
                        }
                        for j, other in enumerate(sites)
                    ],
                }
            )
    return {
        "period_minutes": 15,
        "sites": sites,
        "regions": regions,
        "solver": {"time_limit_s": limit_s, "mip_gap": 1e-3},
    }


def run(n_sites: int, n_dep: int, gpus: int, limit_s: float, penalty: float, seed: int) -> dict:
    body = fleet_request(n_sites, n_dep, gpus, limit_s, penalty, seed)
    problem = fleet_from_dict(body)
    t0 = time.perf_counter()
    row: dict[str, Any] = {"sites": n_sites, "deployments": n_sites * n_dep}
    row["gpus"] = n_sites * n_dep * gpus
    try:
        o = solve_fleet(problem)
    except (InputError, InfeasibleError) as e:  # too large for the joint MILP: refused
        return row | {"status": f"refused: {e}", "wall_s": round(time.perf_counter() - t0, 1)}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + PROCESS.peak_rss_mb()
    return row | {
        "method": o.method,
        "status": o.status,
        "objective_usd": round(o.objective_usd, 2),
        "lower_bound_usd": round(o.lower_bound_usd, 2),
        "gap_pct": round(100 * o.mip_gap, 3),
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_rss_mb": round(rss, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--deployments", type=int, default=2, help="per site")
    ap.add_argument("--gpus", type=int, default=16, help="per deployment")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds per fleet")
    ap.add_argument("--penalty", type=float, default=0.002, help="USD per request away")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = []
    for n in a.sites:
        row = run(n, a.deployments, a.gpus, a.limit, a.penalty, a.seed)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\n{'sites':>5} {'deps':>5} {'GPUs':>6} {'status':>12} {'gap':>8} {'wall s':>7}")
    for r in rows:
        gap = f"{r['gap_pct']:.3f}%" if "gap_pct" in r else "-"
        print(
            f"{r['sites']:>5} {r['deployments']:>5} {r['gpus']:>6} {r['status'][:12]:>12} "
            f"{gap:>8} {r['wall_s']:>7}"
        )


if __name__ == "__main__":
    main()
