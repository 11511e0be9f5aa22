"""The memory budget: candidate counts without building them, a problem over the
budget refused before any table is built, naming the deployment's max_gpus (or the
deployments, when it is their number), and the estimate against a real solve's whole
process tree."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation import memory
from formulation.data import build_data, candidate_count, check_memory, deployment_candidates
from formulation.demo import demo_request
from formulation.problem import DeploymentInput, Host, problem_from_dict
from formulation.processes.footprint import TreeSampler
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
    limit = 1.0  # a MILP term of MILP_CHOICES_PER_S choices, below these cells
    one = memory.estimate(96, [1000], workers=2, milp_build_s=limit)
    two = memory.estimate(96, [1000, 1000], workers=2, milp_build_s=limit)
    milp = memory.MILP_BYTES_PER_CHOICE * memory.MILP_CHOICES_PER_S * limit / 2**20
    # a second deployment of the same size adds what it keeps and the workers'
    # enumeration fronts over its candidates, not another working set
    fronts = 2 * memory.ENUMERATION_BYTES_PER_CANDIDATE * 2000 / 2**20
    assert two.total_mb - one.total_mb == pytest.approx(one.per_deployment_mb[0] + fronts)
    fixed = memory.BASE_MB + 2 * memory.WORKER_MB
    working = one.total_mb - fixed - one.per_deployment_mb[0] - milp
    # the solving process and each of the two workers
    assert working == pytest.approx(3 * memory.WORKING_BYTES_PER_CELL * 96 * 1000 / 2**20)
    assert memory.estimate(192, [1000]).per_deployment_mb[0] == 2 * one.per_deployment_mb[0]
    # each worker adds its working set; the MILP term grows with the time limit, up to
    # the cells
    assert memory.estimate(96, [1000], 3, limit).total_mb > one.total_mb
    assert (
        memory.estimate(96, [10**6], 1, 10.0).total_mb
        < memory.estimate(96, [10**6], 1, 100.0).total_mb
    )
    assert memory.estimate(96, [10], 1, 10.0).total_mb == memory.estimate(96, [10], 1, 1e5).total_mb


def test_over_budget_is_refused_before_any_table_naming_the_largest_deployment() -> None:
    body = site([8, 512, 16], periods=288)
    problem = problem_from_dict(body, Host(memory_budget_mb=4096))
    tracemalloc.start()
    with pytest.raises(InputError) as err:
        build_data(problem)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert err.value.field == "deployments[1].max_gpus"
    # what it needs without any MILP: the budget bounds the MILPs, not the rest
    need = _without_milp(check_memory(problem_from_dict(body)))  # no budget
    assert need > 4096
    assert f"{need:,.0f} MB" in err.value.reason and "4,096 MB" in err.value.reason
    assert peak < 20 * 2**20  # no (period x configuration) table was built


def test_many_deployments_are_refused_by_the_estimate_naming_their_number() -> None:
    """No fixed number of deployments: 400 are a valid problem, refused only where
    their estimate exceeds the budget, naming ``deployments`` (each alone would fit)."""
    body = site([64] * 400)
    need = check_memory(problem_from_dict(body)).total_mb
    assert check_memory(problem_from_dict(site([64]))).total_mb < 2048 < need
    with pytest.raises(InputError) as err:
        check_memory(problem_from_dict(body, Host(memory_budget_mb=2048)))
    assert err.value.field == "deployments"
    assert "400 deployments" in err.value.reason and "2,048 MB" in err.value.reason
    check_memory(problem_from_dict(body, Host(memory_budget_mb=need + 1)))


def _without_milp(est: memory.MemoryEstimate) -> float:
    return est.total_mb - memory.MILP_BYTES_PER_CHOICE * est.milp_choices / 2**20


def test_within_budget_builds_and_no_budget_means_no_limit() -> None:
    small = site([8, 16], periods=4)
    need = _without_milp(check_memory(problem_from_dict(small)))
    data = build_data(problem_from_dict(small, Host(memory_budget_mb=need + 1)))
    # a megabyte left: MILPs of at most 64 choices (16 KB each)
    assert data.milp_choices == 64
    with pytest.raises(InputError, match="memory budget"):
        build_data(problem_from_dict(small, Host(memory_budget_mb=need - 1)))
    big = site([512], periods=288)
    assert check_memory(problem_from_dict(big)).total_mb > 4096  # estimated, not refused


def test_one_deployment_counts_no_milp_unless_the_method_is_compact() -> None:
    """With one deployment the relaxation's bound is the exact optimum and the solve
    ends there (formulation/phases.py): the estimate counts no MILP and holds the solve
    to none; under ``solver.method`` compact, its one MILP is counted as before."""
    one = site([64])
    est = check_memory(problem_from_dict(one))
    assert est.milp_choices == 0 and est.milp_budget_choices == 0
    assert est.total_mb == pytest.approx(_without_milp(est))
    compact = dict(one, solver={"method": "compact", "time_limit_s": 10})
    counted = check_memory(problem_from_dict(compact))
    assert counted.milp_choices == 15_000 and counted.milp_budget_choices is None
    assert counted.total_mb == pytest.approx(
        est.total_mb + memory.MILP_BYTES_PER_CHOICE * 15_000 / 2**20
    )
    two = check_memory(problem_from_dict(site([32, 32])))
    assert two.milp_choices > 0 and two.milp_budget_choices is None
    # the solve itself: proven optimal by the relaxation, no MILP phase
    from formulation.solve import solve

    out = solve(problem_from_dict(site([16], periods=8)))
    assert out.status == "optimal" and out.mip_gap == 0.0
    ran = {p["name"] for p in out.stats["phases"]}
    assert "relaxation" in ran
    assert not {"compact", "lp_support", "repair", "neighbourhoods"} & ran


def test_a_fleet_of_8320_gpus_is_within_the_default_budget() -> None:
    """64 deployments of 100 to 160 GPUs (8,320 GPUs, 52.5 million cells): its whole
    process tree measured at up to 1,508 MB (benchmarks/bench_memory.py,
    formulation/memory.py), so the server's default budget of 4,096 MB must not refuse
    it, and the estimate stays above the measurement; twice as many GPUs per deployment
    is refused."""
    gpus = [100 + round(60 * i / 63) for i in range(64)]
    body = site(gpus)
    assert sum(gpus) == 8320
    est = check_memory(problem_from_dict(body, Host(memory_budget_mb=4096)))
    assert 4096 > est.total_mb > 1508
    with pytest.raises(InputError, match="memory budget"):
        check_memory(problem_from_dict(site([2 * g for g in gpus]), Host(memory_budget_mb=4096)))


def test_the_budget_bounds_the_milps_not_the_admission() -> None:
    """The same fleet with a 300 s limit, whose limit alone would admit a MILP of
    450,000 choices (7 GB): admitted under the default 4,096 MB, its MILPs bounded by
    what the rest leaves of the budget (measured whole-tree peak of this fleet at 300 s:
    1,456 MB, formulation/memory.py). The estimate never exceeds the budget, and the
    MILP bound is what fills it."""
    gpus = [100 + round(60 * i / 63) for i in range(64)]
    body = site(gpus)
    body["solver"] = {"time_limit_s": 300}
    free = check_memory(problem_from_dict(body))
    assert free.total_mb > 4096 and free.milp_choices == 450_000
    est = check_memory(problem_from_dict(body, Host(memory_budget_mb=4096)))
    rest = _without_milp(est)
    assert est.total_mb <= 4096 and est.milp_choices < free.milp_choices
    assert est.milp_choices == int((4096 - rest) * 2**20 / memory.MILP_BYTES_PER_CHOICE)
    assert est.milp_budget_choices == est.milp_choices and free.milp_budget_choices is None
    assert rest == pytest.approx(_without_milp(free), rel=1e-12)


def test_a_milp_beyond_the_memory_left_is_not_built() -> None:
    """The MILP builder refuses a MILP over more choices than the budget leaves room
    for (status ``memory``: no schedule, no bound), and builds it within."""
    from formulation.budget import Deadline
    from formulation.milp.compact import solve_compact

    small = site([8, 16], periods=4)
    data = build_data(problem_from_dict(small))
    cells = sum(len(d.n_p) for d in data.deployments) * data.n_periods
    assert data.milp_choices is None  # no budget: no bound but the phases' time
    r = solve_compact(dataclasses.replace(data, milp_choices=cells - 1), Deadline.after(30.0), 1e-4)
    assert r.status == "memory" and r.schedule is None and r.bound_usd is None
    r = solve_compact(dataclasses.replace(data, milp_choices=cells), Deadline.after(30.0), 1e-4)
    assert r.status == "optimal" and r.schedule is not None


CHILD = """
import json, sys
from formulation.data import check_memory
from formulation.problem import problem_from_dict
from formulation.solve import solve
problem = problem_from_dict(json.load(open(sys.argv[1])))
est = check_memory(problem).total_mb
o = solve(problem)
print(json.dumps({"estimate_mb": est, "status": o.status}))
"""


def test_the_estimate_covers_a_real_solves_whole_process_tree(tmp_path: Path) -> None:
    """A small real solve with two forked workers (4 deployments under a binding cap,
    so the baselines, the relaxation and the MILPs all run), measured as the peak of
    the sum of its tree's proportional set sizes: the estimate is above it and within
    twice it."""
    body = demo_request()
    base = body["deployments"][0]
    body["deployments"] = [
        dict(
            base,
            name=f"d{i}",
            max_gpus=32,
            demand_rps=[x * (1 + 0.2 * i) for x in base["demand_rps"]],
        )
        for i in range(4)
    ]
    body["site"]["gpu_inventory"] = {"h200": 128}
    body["grid"]["power_cap_w"] = [c * 2 for c in body["grid"]["power_cap_w"]]
    body["solver"].update(time_limit_s=3.0, threads=2)
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    sampler = TreeSampler(proc.pid, interval_s=0.02).start()
    out, _ = proc.communicate(timeout=300)
    peak = sampler.stop()
    assert proc.returncode == 0
    est = json.loads(out.strip().splitlines()[-1])["estimate_mb"]
    if not os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"):
        pytest.skip("no /proc/PID/smaps_rollup here: the tree cannot be measured")
    assert len(sampler.peak_by_pid) >= 2  # the solving process and its workers were seen
    assert peak <= est <= 2 * peak, (peak, est)
