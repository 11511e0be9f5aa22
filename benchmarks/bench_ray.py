"""Benchmark: a relaxation round (one exact DP per deployment, the dual function at
given prices) on the local pool and on a Ray cluster, what a round moves, and a
projection to larger sites and clusters from the measured per-task times.

The site is bench_memory.py's fleet (``NxG+S``: N deployments of G to G + S GPUs,
evenly, the demo's first kind, one day of 15-minute periods). Measured on this
machine: the DP of each deployment alone in this process (the per-task times), a round
serially, on ``--workers`` forked processes, and on a local Ray cluster of a head
without CPUs and ``--nodes`` nodes of one CPU each (median of ``--rounds`` rounds at
random cap prices after a first one, which on Ray also puts and fetches the
deployments' parts); the bytes a round moves: the tasks' arguments and results, and
the parts (put once, fetched once per node that runs a task naming one).

The projection (printed with its model): a round on P = machines x cores worker CPUs
takes the longest of (a) the tasks list-scheduled on P CPUs in the order sent
(Ray's dynamic scheduling), each task's time that measured here for its deployment's
GPUs (interpolated; a power law fitted to them beyond the measured range), and (b) the
driver's own work per task (sending it and taking its result: the Ray round's time
here less its tasks' share of two CPUs, per task), times the tasks; plus, in the first
round only, the parts sent from the driver over the network (``--gbps``).

    python benchmarks/bench_ray.py [--case 32x100+112] [--nodes 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from bench_memory import parse_case, request

from formulation.bounds.lagrange import DualOracle, deployment_part, local_grids, solve_one
from formulation.data import build_data
from formulation.problem import problem_from_dict
from formulation.processes.executor import on_ray
from formulation.processes.raypool import RayPool
from formulation.subproblems.dp import DeploymentGrid, deployment_grid

#: the sites projected: (name, deployments, least GPUs, spread)
PROJECTED = [
    ("39,936 GPUs (256 x 100-212)", 256, 100, 112),
    ("~200,000 GPUs (1,024 x 100-290)", 1024, 100, 190),
]


def prices(data: Any, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    T = data.n_periods
    pi = rng.uniform(0, 1, T) * float(np.max(data.cost_usd_per_w))
    return pi, np.zeros((len(data.pools), T))


def rounds(oracle: DualOracle, n: int) -> tuple[float, list[float]]:
    """The first round's seconds and those of ``n`` more, at random prices."""
    rng = np.random.default_rng(0)
    times = []
    for _ in range(n + 1):
        pi, sigma = prices(oracle.data, rng)
        t0 = time.perf_counter()
        oracle(pi, sigma)
        times.append(time.perf_counter() - t0)
    return times[0], times[1:]


def task_times(data: Any, grids: Sequence[DeploymentGrid], repeat: int) -> list[float]:
    """Each deployment's DP alone in this process (median of ``repeat``)."""
    rng = np.random.default_rng(1)
    out = []
    for m in range(len(data.deployments)):
        ts = []
        for _ in range(repeat):
            pi, sigma = prices(data, rng)
            t0 = time.perf_counter()
            solve_one(data, grids, m, pi, sigma[0])
            ts.append(time.perf_counter() - t0)
        out.append(statistics.median(ts))
    return out


def noop(part: Any, *args: Any) -> int:
    """A task that only receives its part: what a task costs besides its DP."""
    return 0


def list_schedule(times: Sequence[float], cpus: int) -> float:
    """Makespan of ``times`` taken in order by the first free of ``cpus`` CPUs."""
    free = [0.0] * cpus
    for t in times:
        heapq.heapreplace(free, free[0] + t)
    return max(free)


def per_task_model(gpus: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """``a, b`` of ``t = a * gpus ** b`` fitted (least squares in logs)."""
    b, log_a = np.polyfit(np.log(gpus), np.log(times), 1)
    return float(np.exp(log_a)), float(b)


def projected_times(
    gpus: Sequence[int], times: Sequence[float], sizes: Sequence[int]
) -> list[float]:
    """Per-task times of deployments of ``sizes`` GPUs: interpolated within the measured
    sizes, the power law beyond."""
    a, b = per_task_model(gpus, times)
    order = np.argsort(gpus)
    g, t = np.asarray(gpus)[order], np.asarray(times)[order]
    lo, hi = g[0], g[-1]
    return [float(np.interp(s, g, t)) if lo <= s <= hi else a * s**b for s in sizes]


def mb(x: float) -> str:
    return f"{x / 2**20:,.1f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="32x100+112")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gbps", type=float, default=10.0, help="network of the projection")
    ap.add_argument("--object-store-mb", type=int, default=2048, help="per node")
    a = ap.parse_args()
    n_dep, g0, spread, _ = parse_case(a.case)
    t0 = time.perf_counter()
    data = build_data(problem_from_dict(request(n_dep, g0, 60.0, spread)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    sizes = [int(d.gpus.max()) for d in data.deployments]
    print(
        f"site {a.case}: {n_dep} deployments, {sum(sizes):,} GPUs, "
        f"{sum(d.n_configs for d in data.deployments):,} candidates, "
        f"{data.n_periods} periods (tables {time.perf_counter() - t0:.1f} s)"
    )
    per_task = task_times(data, grids, 3)
    print(
        f"per-task DP (alone, this process): median {statistics.median(per_task) * 1e3:.1f} "
        f"ms, {min(per_task) * 1e3:.1f}-{max(per_task) * 1e3:.1f} ms, "
        f"sum {sum(per_task):.2f} s"
    )
    rows: dict[str, float] = {}
    with DualOracle(data, grids, 1) as serial:
        _, ts = rounds(serial, a.rounds)
        rows["serial, this process"] = statistics.median(ts)
    with DualOracle(data, grids, a.workers) as forked:
        _, ts = rounds(forked, a.rounds)
        rows[f"local pool, {a.workers} forked workers"] = statistics.median(ts)
    from ray.cluster_utils import Cluster

    store = a.object_store_mb * 2**20
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": store}
    )
    try:
        for _ in range(a.nodes):
            cluster.add_node(num_cpus=1, object_store_memory=store)
        cluster.wait_for_nodes()
        with on_ray(cluster.address), DualOracle(data, grids, a.workers) as on:
            first, ts = rounds(on, a.rounds)
            assert isinstance(on.pool, RayPool)
            c = dataclasses.replace(on.pool.traffic(), nodes=dict(on.pool.traffic().nodes))
            submit_per_task = c.submit_s / c.tasks
            empty = []
            for _ in range(a.rounds):
                t1 = time.perf_counter()
                on.pool.map_parts(noop, deployment_part, [(m,) for m in range(n_dep)])
                empty.append(time.perf_counter() - t1)
    finally:
        cluster.shutdown()
    ray_round = statistics.median(ts)
    rows[f"Ray, {a.nodes} nodes x 1 CPU"] = ray_round
    print(f"\n{'a relaxation round':<34} {'seconds':>8}")
    for name, s in rows.items():
        print(f"{name:<34} {s:>8.3f}")
    print(f"{'Ray, its first round':<34} {first:>8.3f}  (parts put and fetched)")
    per_round = (c.argument_bytes + c.result_bytes) / c.maps
    print(
        f"\ndata per round on Ray: {mb(per_round)} ({per_round / n_dep / 1024:.1f} kB per "
        f"task: prices out, path and loads back); parts: {c.objects} objects, "
        f"{mb(c.object_bytes)} put once (the site's data and grids: "
        f"{mb(c.object_bytes / n_dep)} per deployment), {mb(c.fetched_bytes)} fetched by "
        f"the nodes in all; tasks per node {sorted(c.nodes.values())}"
    )
    # a task's cost besides its DP, on its node: a round of tasks that only receive
    # their parts, spread over the nodes; the driver's own: sending a task
    empty_round = statistics.median(empty)
    overhead = empty_round * a.nodes / n_dep
    print(
        f"a round of empty tasks (each receives its part): {empty_round:.3f} s, "
        f"{overhead * 1e3:.2f} ms per task on a node; sending a task: "
        f"{submit_per_task * 1e3:.2f} ms of the driver"
    )
    bytes_per_gpu = c.object_bytes / sum(sizes)
    a_fit, b_fit = per_task_model(sizes, per_task)
    print(
        f"\nmodel: round = max(list schedule of (DP time + {overhead * 1e3:.2f} ms) per task "
        f"on machines x cores CPUs, {submit_per_task * 1e3:.2f} ms of the driver per task "
        f"x tasks); first round + parts / {a.gbps:g} Gb/s; DP time t(GPUs) measured here, "
        f"{a_fit:.3g} * GPUs^{b_fit:.2f} beyond {max(sizes)} GPUs; parts "
        f"{bytes_per_gpu / 1024:.0f} kB per GPU"
    )
    print(
        "parts: the site's tables, all in the driver's object store and, as fetched here "
        "(the nodes fetch the parts of the tasks Ray gives them, most of them over a few "
        "rounds), up to all on each node"
    )
    print(
        f"{'site':<32} {'machines':>8} {'cores':>5} {'round':>8} {'first':>8} "
        f"{'1 core':>8} {'parts':>10}"
    )
    for name, n, lo, sp in PROJECTED:
        site = [lo + round(sp * i / (n - 1)) for i in range(n)]
        times = [t + overhead for t in projected_times(sizes, per_task, site)]
        parts = bytes_per_gpu * sum(site)
        for machines in (8, 32):
            p = machines * 2
            rnd = max(list_schedule(times, p), submit_per_task * n)
            send = parts * 8 / (a.gbps * 1e9)
            print(
                f"{name:<32} {machines:>8} {2:>5} {rnd:>7.2f}s {rnd + send:>7.2f}s "
                f"{sum(times):>7.1f}s {parts / 2**30:>8.1f} GB"
            )


if __name__ == "__main__":
    main()
