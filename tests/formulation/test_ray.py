"""The solve's parallel work on a Ray cluster (formulation.processes.raypool): a local
cluster of a head without CPUs and two worker nodes of one CPU each, started once for
the module. The same request gives the same schedule and bound as on the local pool;
each DP task is sent its deployment's part of the tables, not the site's; a worker
killed mid-relaxation is replaced and its task run again; the limit and a stop cancel
the tasks still running."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from formulation.bounds.lagrange import DualOracle, deployment_part, local_grids, solve_one
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from formulation.processes.executor import on_ray, ray_address
from formulation.processes.raypool import RayPool
from formulation.solve import Outcome, solve
from formulation.subproblems.dp import deployment_grid
from tests.service.conftest import small_schedule

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install '.[ray]'")

pytestmark = pytest.mark.servers  # starts a Ray cluster (its GCS, raylets and workers)


def fleet(n_dep: int, gpus: int, limit_s: float) -> dict[str, Any]:
    """``n_dep`` deployments of the demo's first kind, ``gpus`` GPUs each, the cap scaled
    with the site (benchmarks/bench_memory.py's sites)."""
    body = demo_request()
    base = body["deployments"][0]
    deps = []
    for i in range(n_dep):
        d = dict(base, name=f"d{i}", max_gpus=gpus)
        d["demand_rps"] = [x * gpus / 24 * (1 + 0.1 * i) for x in base["demand_rps"]]
        deps.append(d)
    body["deployments"] = deps
    body["site"]["gpu_inventory"] = {"h200": gpus * n_dep}
    body["grid"]["power_cap_w"] = [c * gpus * n_dep / 64 for c in body["grid"]["power_cap_w"]]
    body["solver"]["time_limit_s"] = limit_s
    return body


REQUESTS = {"demo": demo_request(), "small": small_schedule()}


def _solve(body: dict[str, Any], **kw: Any) -> Outcome:
    return solve(problem_from_dict(body), **kw)


@pytest.fixture(scope="module")
def local() -> dict[str, Outcome]:
    """The requests solved on the local pool, before the cluster is named."""
    assert ray_address() is None
    return {name: _solve(body) for name, body in REQUESTS.items()}


@pytest.fixture(scope="module")
def cluster(local: dict[str, Outcome]) -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        c.add_node(num_cpus=1)
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        with on_ray(c.address):
            yield c
    finally:
        c.shutdown()
    assert ray_address() is None


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_the_same_schedule_and_bound_as_on_the_local_pool(
    name: str, local: dict[str, Outcome], cluster: Any
) -> None:
    here, there = local[name], _solve(REQUESTS[name])
    np.testing.assert_array_equal(there.priced.schedule.config, here.priced.schedule.config)
    np.testing.assert_array_equal(there.priced.schedule.served_rps, here.priced.schedule.served_rps)
    assert there.priced.objective_usd == here.priced.objective_usd
    assert there.lower_bound_usd == here.lower_bound_usd
    assert there.status == here.status


def test_a_dp_task_is_sent_its_deployment_alone(cluster: Any) -> None:
    data = build_data(problem_from_dict(fleet(6, 16, 30)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    rng = np.random.default_rng(0)
    T, M = data.n_periods, len(data.deployments)
    with DualOracle(data, grids, 2) as oracle:
        pool = oracle.pool
        assert isinstance(pool, RayPool)
        for _ in range(3):
            pi = rng.uniform(0, 2e-4, T)
            sigma = np.zeros((1, T))
            p = oracle(pi, sigma)
            for m in range(M):  # the DP of each deployment, in this process
                value, cfg, served = solve_one(data, grids, m, pi, sigma[0])
                np.testing.assert_array_equal(p.schedule.config[m], cfg)
                np.testing.assert_array_equal(p.schedule.served_rps[m], served)
        c = pool.traffic()
    assert c.maps == 3 and c.tasks == 3 * M and c.objects == M
    # every part is far smaller than the site, and no node fetched one twice
    whole = len(__import__("pickle").dumps((data, grids), protocol=5))
    one = len(__import__("pickle").dumps(deployment_part((data, grids), 0), protocol=5))
    assert one < whole / (M - 1)
    assert c.object_bytes < 1.2 * whole
    assert c.fetched_bytes <= len(c.nodes) * c.object_bytes
    assert sum(c.nodes.values()) == 3 * M and len(c.nodes) == 2  # both worker nodes ran
    # a round's arguments and results: prices and paths, a few kB per deployment
    assert (c.argument_bytes + c.result_bytes) / c.maps < M * 8 * 8 * T
