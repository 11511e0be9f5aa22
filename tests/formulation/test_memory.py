"""The memory budget: candidate counts without building them, and a problem over the
budget refused before any table is built, naming the deployment's max_gpus."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation import memory
from formulation.data import build_data, candidate_count, check_memory, deployment_candidates
from formulation.problem import DeploymentInput, Host, problem_from_dict
from model.errors import InputError


@settings(max_examples=200, deadline=None)
@given(
    max_gpus=st.integers(0, 80),
    tp=st.sampled_from([1, 2, 4, 8]),
    decode_tp=st.sampled_from([None, 1, 2, 4, 8]),  # None: the prefill's (one shape)
    min_p=st.integers(0, 5),
    min_d=st.integers(0, 5),
    max_p=st.one_of(st.none(), st.integers(0, 40)),
    max_d=st.one_of(st.none(), st.integers(0, 40)),
)
def test_candidate_count_counts_the_candidates(
    max_gpus: int,
    tp: int,
    decode_tp: int | None,
    min_p: int,
    min_d: int,
    max_p: int | None,
    max_d: int | None,
) -> None:
    d = DeploymentInput(
        "a", "m", "g", "fixed:1:1", (1.0,), max_gpus=max_gpus, min_n_p=min_p,
        max_n_p=max_p, min_n_d=min_d, max_n_d=max_d,
    )  # fmt: skip
    gd = tp if decode_tp is None else decode_tp
    cp, cd = deployment_candidates(d, tp, gd)
    assert candidate_count(d, tp, gd) == cp.size + 1  # plus "off"
    # every pair within the bounds and max_gpus, by brute force
    want = [
        (p, q)
        for p in range(max(1, min_p), 81)
        for q in range(max(1, min_d), 81)
        if p * tp + q * gd <= max_gpus
        and (max_p is None or p <= max_p)
        and (max_d is None or q <= max_d)
    ]
    assert list(zip(cp.tolist(), cd.tolist(), strict=True)) == want


def site(max_gpus: list[int], periods: int = 96) -> dict[str, Any]:
    return {
        "period_minutes": 15,
        "site": {"gpu_inventory": {"h200": sum(max_gpus)}},
        "deployments": [
            {
                "name": f"d{i}",
                "model": "qwen3-8b",
                "gpu": "h200",
                "workload": "fixed:1024:128",
                "demand_rps": [1.0] * periods,
                "max_gpus": g,
            }
            for i, g in enumerate(max_gpus)
        ],
        "grid": {"power_cap_w": 1e7},
    }


def test_estimate_is_kept_cells_plus_the_largest_working_set() -> None:
    one = memory.estimate(96, [1000])
    two = memory.estimate(96, [1000, 1000])
    # a second deployment of the same size adds what it keeps, not another working set
    assert two.total_mb - one.total_mb == pytest.approx(one.per_deployment_mb[0])
    working = one.total_mb - memory.BASE_MB - one.per_deployment_mb[0]
    assert working == pytest.approx(memory.WORKING_BYTES_PER_CELL * 96 * 1000 / 2**20)
    # a smaller second deployment does not change the working set
    small = memory.estimate(96, [1000, 10])
    assert small.total_mb - one.total_mb == pytest.approx(small.per_deployment_mb[1])
    assert memory.estimate(192, [1000]).per_deployment_mb[0] == 2 * one.per_deployment_mb[0]


def test_over_budget_is_refused_before_any_table_naming_the_largest_deployment() -> None:
    body = site([8, 512, 16])
    problem = problem_from_dict(body, Host(memory_budget_mb=4096))
    tracemalloc.start()
    with pytest.raises(InputError) as err:
        build_data(problem)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert err.value.field == "deployments[1].max_gpus"
    need = check_memory(problem_from_dict(body)).total_mb  # no budget: just the estimate
    assert need > 4096
    assert f"{need:,.0f} MB" in err.value.reason and "4,096 MB" in err.value.reason
    assert peak < 20 * 2**20  # no (period x configuration) table was built


def test_within_budget_builds_and_no_budget_means_no_limit() -> None:
    small = site([8, 16], periods=4)
    need = check_memory(problem_from_dict(small)).total_mb
    build_data(problem_from_dict(small, Host(memory_budget_mb=need + 1)))
    with pytest.raises(InputError, match="memory budget"):
        build_data(problem_from_dict(small, Host(memory_budget_mb=need - 1)))
    assert check_memory(problem_from_dict(site([512]))).total_mb > 4096  # estimated, not refused


def test_a_fleet_of_8320_gpus_is_within_the_default_budget() -> None:
    """64 deployments of 100 to 160 GPUs (8,320 GPUs, 52.5 million cells): measured at
    2,976 MB in all (benchmarks/bench_memory.py, formulation/memory.py), so the server's
    default budget of 4,096 MB must not refuse it; twice as many GPUs per deployment is
    refused."""
    gpus = [100 + round(60 * i / 63) for i in range(64)]
    body = site(gpus)
    assert sum(gpus) == 8320
    est = check_memory(problem_from_dict(body, Host(memory_budget_mb=4096)))
    assert 4096 > est.total_mb > 2976
    with pytest.raises(InputError, match="memory budget"):
        check_memory(problem_from_dict(site([2 * g for g in gpus]), Host(memory_budget_mb=4096)))
