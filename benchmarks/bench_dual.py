"""Benchmark: one evaluation of the Lagrangian dual function (one exact DP per
deployment) in this process and on forked worker processes, on the sites of
``bench_schedule.py``.

Prints, per site, the deployments, their candidates, the seconds per evaluation
serially and with ``--workers`` processes (median of ``--repeat``), and the speed-up.

    python benchmarks/bench_dual.py [--sites B C D] [--workers 2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from bench_schedule import SITES, site_request

from formulation.bounds.lagrange import DualOracle, local_grids
from formulation.data import build_data
from formulation.problem import problem_from_dict
from formulation.subproblems.dp import deployment_grid


def per_eval_s(oracle: DualOracle, repeat: int, rng: np.random.Generator) -> float:
    data = oracle.data
    T, G = data.n_periods, len(data.pools)
    times = []
    for _ in range(repeat):
        pi = rng.uniform(0, 1, T) * float(np.max(data.cost_usd_per_w))
        t0 = time.perf_counter()
        oracle(pi, np.zeros((G, T)))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", nargs="+", default=["B", "C", "D"], choices=list(SITES))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    print(
        f"{'site':>4} {'deps':>5} {'candidates':>10} {'serial':>9} {a.workers:>2} workers  speed-up"
    )
    for name in a.sites:
        n_dep, gpus_each, site_gpus, limit = SITES[name]
        data = build_data(problem_from_dict(site_request(n_dep, gpus_each, site_gpus, 0, limit)))
        grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
        serial = DualOracle(data, grids, 1)
        threaded = DualOracle(data, grids, a.workers)
        one = per_eval_s(serial, a.repeat, np.random.default_rng(0))
        many = per_eval_s(threaded, a.repeat, np.random.default_rng(0))
        threaded.close()
        cands = sum(d.n_configs for d in data.deployments)
        print(
            f"{name:>4} {n_dep:>5} {cands:>10,} {one:>8.3f}s {many:>8.3f}s   {one / many:>6.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
