"""The solve's parallel work on a Ray cluster (formulation.processes.raypool): a local
cluster of a head without CPUs and two worker nodes of one CPU each, started once for
the module. The same request gives the same schedule and bound as on the local pool;
each DP task is sent its deployment's part of the tables, not the site's; a worker
killed mid-relaxation is replaced and its task run again; the limit and a stop cancel
the tasks still running."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from formulation.bounds.lagrange import (
    DualOracle,
    deployment_part,
    dual_value,
    local_grids,
    solve_one,
)
from formulation.budget import Deadline
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from formulation.processes.executor import on_ray, open_pool, ray_address
from formulation.processes.interrupt import Interrupted, interruptible
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
        # the tasks of this module run on the nodes, which cannot import it
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
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


def busy_workers(cluster: Any) -> list[int]:
    """The cluster's worker processes running a pool's task (Ray names a worker process
    after the function it runs): children of its raylets."""
    raylets = {n.all_processes["raylet"][0].process.pid for n in cluster.list_all_nodes()}
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            title = (d / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid in raylets and title.startswith(b"ray::execute"):
            out.append(int(d.name))
    return out


def test_a_worker_killed_mid_relaxation_is_replaced_and_the_solve_answers(cluster: Any) -> None:
    # 40 s: the relaxation's quarter of it outlasts a replaced worker's start on two
    # loaded cores (with 15 s, a run beside the other server tests ended its relaxation
    # before any round came back)
    body = fleet(8, 32, 40)
    in_relaxation = threading.Event()
    killed: list[int] = []
    done = threading.Event()

    def monitor(state: dict[str, Any]) -> bool:
        if state["phase"] == "relaxation":
            in_relaxation.set()
        elif in_relaxation.is_set():
            done.set()  # the relaxation is over
        return False

    def killer() -> None:
        in_relaxation.wait(60)
        while not done.is_set() and not killed:
            for pid in busy_workers(cluster):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
            time.sleep(0.002)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        o = _solve(body, monitor=monitor)
    finally:
        done.set()
        thread.join()
    assert killed, "no worker was found running a DP during the relaxation"
    assert (
        not Path(f"/proc/{killed[0]}").exists()
        or b"zombie" in Path(f"/proc/{killed[0]}/status").read_bytes().lower()
    )
    relaxation = o.stats["relaxation"]
    assert relaxation["iterations"] >= 1
    assert o.priced.violation_free and o.lower_bound_usd <= o.priced.objective_usd + 1e-6
    # the zero-price round, whoever ran it, is the sum of the deployments' DPs
    data = build_data(problem_from_dict(body))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    zero, sigma = np.zeros(data.n_periods), np.zeros((1, data.n_periods))
    values = [solve_one(data, grids, m, zero, zero)[0] for m in range(8)]
    assert relaxation["first_bound_usd"] == dual_value(data, values, zero, sigma)


def sleep_task(shared: object, seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_the_limit_and_a_stop_cancel_the_tasks_still_running(cluster: Any) -> None:
    with open_pool(None, 2) as pool:
        assert pool.parallel
        for how in ("limit", "stop"):
            t0 = time.monotonic()
            asked = threading.Event()
            timer = threading.Timer(1.0, asked.set)
            timer.start()
            end = Deadline.after(1.0) if how == "limit" else None
            with interruptible(asked.is_set, end), pytest.raises(Interrupted):
                pool.map(sleep_task, [(60.0,), (60.0,), (60.0,)])
            timer.cancel()
            assert time.monotonic() - t0 < 30  # not the tasks' minute
        # the cancelled tasks freed the nodes: a round of short tasks runs at once
        t0 = time.monotonic()
        assert pool.map(sleep_task, [(0.1,), (0.2,)]) == [0.1, 0.2]
        assert time.monotonic() - t0 < 30


def test_a_solve_on_the_cluster_ends_within_its_limit(cluster: Any) -> None:
    limit = 4.0
    t0 = time.monotonic()
    o = _solve(fleet(16, 48, limit))
    took = time.monotonic() - t0
    assert o.status in ("time_limit", "optimal")
    assert o.solve_time_s <= limit * 1.25
    assert took <= limit * 1.25 + 10  # the request's set-up and pricing besides
    assert o.priced.violation_free
