"""The per-deployment DP kernels: the banded min-plus step (``reach``) equals the dense
minimum over every pair of candidates that the change limit allows, and the memory it
needs grows with the number of candidates, not with its square."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.data import build_data
from formulation.problem import problem_from_dict
from formulation.subproblems.dp import (
    deployment_grid,
    reach,
    shortest_path,
    stage_costs,
    step_cost_from,
    step_cost_to,
    transition_cost,
)


def body(max_gpus: int, limit: int | None, start: float, stop: float, periods: int = 3) -> Any:
    return {
        "period_minutes": 60,
        "site": {"gpu_inventory": {"h200": max(max_gpus, 1)}},
        "deployments": [
            {
                "name": "a",
                "model": "qwen3-8b",
                "gpu": "h200",
                "workload": "fixed:1024:128",
                "demand_rps": [5.0] * periods,
                "max_gpus": max_gpus,
                "bounds": {"max_n_p": max(1, max_gpus - 2)},
            }
        ],
        "grid": {"power_cap_w": 1e7},
        "transitions": {
            "start_cost_usd": start,
            "stop_cost_usd": stop,
            "max_instance_changes_per_period": limit,
        },
    }


def dense_step(n_p: np.ndarray, n_d: np.ndarray, limit: int | None, up_c: float, down_c: float):
    """The K x K transition matrix written out: rows from, columns to."""
    dp = n_p[None, :] - n_p[:, None]
    dd = n_d[None, :] - n_d[:, None]
    up = np.maximum(dp, 0) + np.maximum(dd, 0)
    down = np.maximum(-dp, 0) + np.maximum(-dd, 0)
    cost = up_c * up + down_c * down
    if limit is not None:
        cost = np.where(up + down > limit, np.inf, cost)
    return cost.astype(float)


@settings(max_examples=60, deadline=None)
@given(
    max_gpus=st.integers(2, 12),
    limit=st.one_of(st.none(), st.integers(0, 8)),
    start=st.sampled_from([0.0, 0.3, 1.0]),
    stop=st.sampled_from([0.0, 0.2, 2.0]),
    seed=st.integers(0, 2**31),
    inf_share=st.sampled_from([0.0, 0.3]),
)
def test_reach_equals_the_dense_minimum(
    max_gpus: int, limit: int | None, start: float, stop: float, seed: int, inf_share: float
) -> None:
    data = build_data(problem_from_dict(body(max_gpus, limit, start, stop)))
    d = data.deployments[0]
    g = deployment_grid(data, d)
    rng = np.random.default_rng(seed)
    prev = rng.uniform(0, 10, d.n_configs)
    prev[rng.random(d.n_configs) < inf_share] = np.inf
    trans = dense_step(d.n_p, d.n_d, limit, start, stop)
    with np.errstate(invalid="ignore"):
        want_fwd = np.min(prev[:, None] + trans, axis=0)
        want_back = np.min(trans + prev[None, :], axis=1)
    np.testing.assert_allclose(reach(data, d, g, prev, True), want_fwd, rtol=0, atol=1e-12)
    np.testing.assert_allclose(reach(data, d, g, prev, False), want_back, rtol=0, atol=1e-12)
    k = int(rng.integers(d.n_configs))
    np.testing.assert_array_equal(step_cost_to(data, d, k), trans[:, k])
    np.testing.assert_array_equal(step_cost_from(data, d, k), trans[k, :])
    np.testing.assert_array_equal(transition_cost(data, d, k, k), 0.0)


def test_shortest_path_equals_a_dense_dp() -> None:
    """The whole DP, banded, against the textbook O(T K^2) recursion."""
    data = build_data(problem_from_dict(body(10, 2, 0.5, 0.1, periods=8)))
    d = data.deployments[0]
    g = deployment_grid(data, d)
    zero = np.zeros(data.n_periods)
    stage, _ = stage_costs(data, d, g, zero, zero)
    trans = dense_step(d.n_p, d.n_d, 2, 0.5, 0.1)
    v = trans[d.initial] + stage[0]
    for t in range(1, data.n_periods):
        v = np.min(v[:, None] + trans, axis=0) + stage[t]
    best, cfg, _ = shortest_path(data, d, g, stage)
    assert best == np.min(v) or abs(best - np.min(v)) <= 1e-9 * abs(best)
    # the path returned has that value and respects the limit
    path_cost = trans[d.initial, cfg[0]] + sum(stage[t, cfg[t]] for t in range(len(cfg)))
    path_cost += sum(trans[cfg[t - 1], cfg[t]] for t in range(1, len(cfg)))
    assert abs(path_cost - best) <= 1e-9 * abs(best)


def test_a_limited_dp_on_a_large_deployment_needs_no_k_squared_memory() -> None:
    """128 GPUs: K = 8,000+ candidates, so a K x K matrix would take 0.5 GB; the
    banded step needs a few grids of (129 x 129) floats."""
    data = build_data(problem_from_dict(body(128, 4, 0.1, 0.1, periods=2)))
    d = data.deployments[0]
    assert d.n_configs > 8000
    g = deployment_grid(data, d)
    prev = np.zeros(d.n_configs)
    tracemalloc.start()
    reach(data, d, g, prev, True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50 * 8 * d.n_configs  # O(K); K^2 floats would be > 500 MB
