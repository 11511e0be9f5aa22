"""Benchmark: the fast demand response (formulation.whatif.shed) on the demo site and
on a 32-deployment site (bench_schedule.py's site D: 32 deployments, 4,096 H200; ``D3x3``
is the same site with every deployment listing the H200's default settings, 3 x 3 pairs,
so that its schedule, and the next boundary's, may change settings too).

The running ``(n_P, n_D)`` are those of period 72 (18:00) of a plan: for the demo, the
uncapped schedule's (one exact DP per deployment, as site D's cap is derived); the
targets are fractions of the site's draw with the settings chosen freely, from one
that does not bind to one below what settings reach. Each call is timed from the
schedule problem to the answer (its one-period tables built: ``cold`` the first time a
process sees them, ``warm`` after, as a server answering a second shed does), and
printed with the answer's power and shortfall. The capacity model's own table cache is
cleared too before each cold call.

Then the answer when settings fall short (targets below the least power settings
reach): the settings plus the next boundary's instance changes (period 73), as
``POST /v1/sites/{id}/shed`` gives them, cold and warm, with the next boundary alone,
and the same period by the solve pipeline as it was answered before (``solve`` of the
one-period problem, 5 s limit, the site's gap, its tables already built), with both
objectives.

    python benchmarks/bench_shed.py [--sites demo D D3x3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from bench_schedule import SITES, site_request

from formulation.bounds.lagrange import uncoupled_schedule
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.evaluate import price_schedule
from formulation.infeasible import InfeasibleError
from formulation.problem import ScheduleProblem, SolverOptions, problem_from_dict
from formulation.solve import solve
from formulation.subproblems.dp import deployment_grid
from formulation.whatif.shed import (
    boundary_plan,
    clear_cache,
    fast_response,
    next_boundary,
    one_period,
)
from model.catalog import load_gpu_clocks
from model.tables import clear_cache as clear_table_cache

PERIOD = 72
FRACTIONS = (1.2, 0.95, 0.9, 0.85, 0.8, 0.7)
#: targets of the next-boundary runs, as fractions of the least power settings reach
BOUNDARY_FRACTIONS = (0.995, 0.99, 0.95)


def running_at(problem: ScheduleProblem, t: int) -> tuple[list[tuple[int, int]], float]:
    """The uncapped schedule's counts in period ``t`` and its site power there."""
    data = build_data(problem)
    sched = uncoupled_schedule(data, [deployment_grid(data, d) for d in data.deployments])
    ks = sched.config[:, t]
    counts = [(int(d.n_p[k]), int(d.n_d[k])) for d, k in zip(data.deployments, ks, strict=True)]
    return counts, float(price_schedule(data, sched).site_power_w[t])


def bench(
    name: str, body: dict[str, Any], repeat: int
) -> tuple[ScheduleProblem, list[tuple[int, int]]]:
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
    return problem, running


def pipeline_boundary(
    problem: ScheduleProblem, t: int, running: list[tuple[int, int]], target: float
) -> tuple[float | None, str]:
    """The next boundary as it was answered before: the solve pipeline on the
    one-period problem (5 s, one thread); (objective or None when infeasible, status)."""
    p1 = one_period(problem, t, target, running)
    p1 = dataclasses.replace(
        p1, solver=SolverOptions(time_limit_s=5.0, mip_gap=p1.solver.mip_gap, threads=1)
    )
    try:
        o = solve(p1)
    except InfeasibleError:
        return None, "infeasible"
    return o.priced.objective_usd, o.status


def bench_boundary(
    name: str, problem: ScheduleProblem, running: list[tuple[int, int]], repeat: int
) -> None:
    floor = fast_response(problem, PERIOD, running, 0.0).site_power_w
    for frac in BOUNDARY_FRACTIONS:
        target = frac * floor
        answer, alone = [], []
        clear_cache()
        clear_table_cache()
        for _ in range(repeat):
            t0 = time.perf_counter()
            r = fast_response(problem, PERIOD, running, target)
            nb = next_boundary(problem, PERIOD + 1, running, target)
            t1 = time.perf_counter()
            plan = boundary_plan(problem, PERIOD + 1, running, target)
            alone.append(time.perf_counter() - t1)
            answer.append(t1 - t0)
        assert not r.met
        t0 = time.perf_counter()
        ref, status = pipeline_boundary(problem, PERIOD + 1, running, target)
        ref_s = time.perf_counter() - t0
        obj = None if plan.priced is None else plan.priced.objective_usd
        print(
            json.dumps(
                {
                    "site": name,
                    "boundary_target_w": round(target, 1),
                    "feasible": nb["feasible"],
                    "instance_changes": len(nb.get("instance_changes", {})),
                    "method": plan.method,
                    "answer_cold_s": round(answer[0], 3),
                    "answer_warm_s": round(min(answer[1:] or answer), 3),
                    "boundary_warm_s": round(min(alone), 3),
                    "objective_usd": None if obj is None else round(obj, 4),
                    "pipeline_s": round(ref_s, 3),
                    "pipeline_status": status,
                    "pipeline_objective_usd": None if ref is None else round(ref, 4),
                }
            )
        )


def with_settings(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every deployment listing the H200's default settings per phase."""
    clocks = load_gpu_clocks("h200")
    assert clocks is not None
    offer = list(clocks.settings)
    for dep in body["deployments"]:
        dep["settings"] = {"prefill": offer, "decode": offer}
    return body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sites", nargs="+", default=["demo", "D", "D3x3"], choices=["demo", "D3x3", *SITES]
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for name in args.sites:
        if name == "demo":
            body = demo_request()
        else:
            n_dep, gpus_each, site_gpus, limit = SITES[name.removesuffix("3x3")]
            body = site_request(n_dep, gpus_each, site_gpus, 0, limit)
            if name.endswith("3x3"):
                body = with_settings(body)
        problem, running = bench(name, body, args.repeat)
        bench_boundary(name, problem, running, args.repeat)


if __name__ == "__main__":
    main()
