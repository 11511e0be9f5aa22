"""Benchmark: the fast demand response (formulation.whatif.shed) on the demo site and
on a 32-deployment site (bench_schedule.py's site D: 32 deployments, 4,096 H200).

The running ``(n_P, n_D)`` are those of period 72 (18:00) of a plan: for the demo, the
uncapped schedule's (one exact DP per deployment, as site D's cap is derived); the
targets are fractions of the site's draw with the settings chosen freely, from one
that does not bind to one below what settings reach. Each call is timed from the
schedule problem to the answer (its one-period tables built: ``cold`` the first time a
process sees them, ``warm`` after, as a server answering a second shed does), and
printed with the answer's power and shortfall. The capacity model's own table cache is
cleared too before each cold call.

    python benchmarks/bench_shed.py [--sites demo D] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench_schedule import SITES, site_request

from formulation.bounds.lagrange import uncoupled_schedule
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.evaluate import price_schedule
from formulation.problem import ScheduleProblem, problem_from_dict
from formulation.subproblems.dp import deployment_grid
from formulation.whatif.shed import clear_cache, fast_response
from model.tables import clear_cache as clear_table_cache

PERIOD = 72
FRACTIONS = (1.2, 0.95, 0.9, 0.85, 0.8, 0.7)


def running_at(problem: ScheduleProblem, t: int) -> tuple[list[tuple[int, int]], float]:
    """The uncapped schedule's counts in period ``t`` and its site power there."""
    data = build_data(problem)
    sched = uncoupled_schedule(data, [deployment_grid(data, d) for d in data.deployments])
    ks = sched.config[:, t]
    counts = [(int(d.n_p[k]), int(d.n_d[k])) for d, k in zip(data.deployments, ks, strict=True)]
    return counts, float(price_schedule(data, sched).site_power_w[t])


def bench(name: str, body: dict[str, Any], repeat: int) -> None:
    problem = problem_from_dict(body)
    running, plan_w = running_at(problem, PERIOD)
    free = fast_response(problem, PERIOD, running, 1e12)
    print(
        json.dumps(
            {
                "site": name,
                "deployments": len(running),
                "instances": sum(a + b for a, b in running),
                "plan_power_w": round(plan_w, 1),
                "free_settings_power_w": round(free.site_power_w, 1),
            }
        )
    )
    for frac in FRACTIONS:
        target = frac * free.site_power_w
        times = []
        clear_cache()
        clear_table_cache()  # the first call builds the tables of the running counts
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = fast_response(problem, PERIOD, running, target)
            times.append(time.perf_counter() - t0)
        print(
            json.dumps(
                {
                    "site": name,
                    "target_w": round(target, 1),
                    "met": r.met,
                    "power_w": round(r.site_power_w, 1),
                    "shortfall_w": round(r.shortfall_w, 1),
                    "cost_usd_per_h": round(r.cost_usd_per_h, 3),
                    "cold_s": round(times[0], 3),
                    "warm_s": round(min(times[1:] or times), 3),
                }
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", nargs="+", default=["demo", "D"], choices=["demo", *SITES])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for name in args.sites:
        if name == "demo":
            body = demo_request()
        else:
            n_dep, gpus_each, site_gpus, limit = SITES[name]
            body = site_request(n_dep, gpus_each, site_gpus, 0, limit)
        bench(name, body, args.repeat)


if __name__ == "__main__":
    main()
