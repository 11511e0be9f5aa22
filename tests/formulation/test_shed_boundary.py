"""The next boundary's instance changes (formulation.whatif.shed.boundary_plan) against
the full solve pipeline on the same one-period problem.

``boundary_plan`` solves the period by the one-period enumeration with the transitions
from the running counts as offsets, or by the pipeline when a GPU pool can bind. The
reference is :func:`formulation.solve.solve` of
:func:`formulation.whatif.shed.one_period` (every configuration within the bounds, the
transition costs and limit as the MILP and the dynamic programs state them) with a
relative gap of 1e-7 within 10 s: the enumeration's cost (its own bound) lies between
the reference's bound and its cost, and equals its cost when the reference proves it
optimal; where the pipeline answers, within its time limit, the bounds agree as well.
The sites are those of the fast-response tests (tests/formulation/test_shed.py), with
random transition limits and costs."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from formulation.budget import Deadline
from formulation.infeasible import InfeasibleError
from formulation.problem import ScheduleProblem, SolverOptions, problem_from_dict
from formulation.solve import Outcome, solve
from formulation.whatif.shed import BoundaryPlan, boundary_plan, fast_response, one_period
from model.operations import SpecRequest, resolve_spec
from tests.formulation.test_shed import _site

pytestmark = pytest.mark.slow  # a proven one-period pipeline solve per case

IDLE_SITE_W = 1.2 * 120 * 32  # _site's PUE, idle GPU power and inventory


def _reference(
    problem: ScheduleProblem, t: int, running: list[tuple[int, int]], target: float
) -> Outcome | None:
    p1 = one_period(problem, t, target, running)
    p1 = dataclasses.replace(p1, solver=SolverOptions(time_limit_s=10, mip_gap=1e-7, threads=1))
    try:
        return solve(p1)
    except InfeasibleError:
        return None


def _changes(doc: dict[str, Any]) -> dict[str, int]:
    """Instances started plus stopped per deployment, from the answer's document."""
    out = {}
    for name, c in doc["instance_changes"].items():
        out[name] = abs(c["to"]["n_p"] - c["from"]["n_p"]) + abs(c["to"]["n_d"] - c["from"]["n_d"])
    return out


def _pool_can_bind(body: dict[str, Any], running: list[tuple[int, int]]) -> bool:
    """Whether the deployments' largest reachable configurations together use more
    GPUs than the site has (counted here from the request: every (n_P, n_D) within the
    bounds and max_gpus and within the change limit of the running counts)."""
    limit = (body.get("transitions") or {}).get("max_instance_changes_per_period")
    most = 0
    for dep, (n_p, n_d) in zip(body["deployments"], running, strict=True):
        tp = resolve_spec(
            SpecRequest(dep["model"], dep["gpu"], dep["workload"])
        ).serving.tensor_parallel
        top = dep["max_gpus"] // tp
        sizes = [
            (a + b) * tp
            for a in range(1, top + 1)
            for b in range(1, top + 1 - a)
            if limit is None or abs(a - n_p) + abs(b - n_d) <= limit
        ]
        most += max(sizes, default=0)
    return most > body["site"]["gpu_inventory"]["h200"]


def _check(
    body: dict[str, Any], running: list[tuple[int, int]], target: float
) -> tuple[BoundaryPlan, Outcome | None]:
    """The plan equals the reference (both infeasible, or the same objective to 1e-6),
    meets the cap within the limit, and is enumerated unless a pool can bind."""
    problem = problem_from_dict(body)
    plan = boundary_plan(problem, 0, running, target)
    ref = _reference(problem, 0, running, target)
    assert plan.method == ("milp" if _pool_can_bind(body, running) else "enumeration")
    if ref is None:
        assert plan.priced is None and not plan.document(running)["feasible"]
        return plan, ref
    assert plan.priced is not None and plan.lower_bound_usd is not None
    tol = 1e-9 * abs(ref.priced.objective_usd) + 1e-9
    # the bounds agree: neither plan costs less than the other's proven bound
    assert plan.lower_bound_usd <= ref.priced.objective_usd + tol
    assert ref.lower_bound_usd <= plan.priced.objective_usd + tol
    if plan.method == "enumeration":  # exact: its cost is its bound
        assert plan.lower_bound_usd == plan.priced.objective_usd
        if ref.status == "optimal":
            assert plan.priced.objective_usd == pytest.approx(ref.priced.objective_usd, rel=1e-6)
    assert plan.priced.violation_free
    doc = plan.document(running)
    assert doc["feasible"] and doc["site_power_w"] <= target * (1 + 1e-7) + 1e-6
    limit = body["transitions"]["max_instance_changes_per_period"]
    if limit is not None:
        assert all(n <= limit for n in _changes(doc).values())
    return plan, ref


@pytest.mark.parametrize("seed", range(12))
def test_next_boundary_equals_the_pipelines_one_period_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    body, running = _site(rng)
    body["transitions"] = {
        "max_instance_changes_per_period": [None, 0, 1, 2, 3][int(rng.integers(0, 5))],
        "start_cost_usd": float(rng.choice([0.0, 0.02, 2.0, 20.0])),
        "stop_cost_usd": float(rng.choice([0.0, 0.02, 2.0, 20.0])),
    }
    target = float(rng.uniform(IDLE_SITE_W, IDLE_SITE_W + 3_500 * len(running)))
    plan, ref = _check(body, running, target)
    if plan.method == "enumeration" and ref is not None:
        # where no pool can bind whatever the limit, the reference proves its optimum
        # (and the enumeration equals it): the comparison is not vacuous
        assert _pool_can_bind({**body, "transitions": {}}, running) or ref.status == "optimal"


def _changed(plan: BoundaryPlan, running: list[tuple[int, int]]) -> dict[str, int]:
    return _changes(plan.document(running))


def test_the_change_limit_and_the_stop_cost_decide_the_changes() -> None:
    """Two deployments whose settings cannot meet the target: without a limit the
    optimum stops one of them (more than one change), with a limit of one change it
    changes each by one at a higher cost, and with a high stop cost it stops one
    instance only; each equals the pipeline's optimum."""
    body, running = _site(np.random.default_rng(1))
    assert len(running) == 2
    floor = fast_response(problem_from_dict(body), 0, running, 0.0).site_power_w
    target = IDLE_SITE_W + 0.8 * (floor - IDLE_SITE_W)
    plans = {}
    for key, limit, stop in (("free", None, 0.0), ("limited", 1, 0.0), ("stop", None, 50.0)):
        body["transitions"] = {"max_instance_changes_per_period": limit, "stop_cost_usd": stop}
        plan, ref = _check(body, running, target)
        assert plan.priced is not None and ref is not None
        plans[key] = plan
    free, limited, stop = (_changed(plans[k], running) for k in ("free", "limited", "stop"))
    assert max(free.values()) > 1  # the limit binds
    assert max(limited.values()) == 1
    free_cost = plans["free"].priced.objective_usd  # type: ignore[union-attr]
    assert plans["limited"].priced.objective_usd > free_cost + 1e-6  # type: ignore[union-attr]
    assert sum(stop.values()) < sum(free.values())  # the stop cost keeps instances


def test_a_pool_that_can_bind_only_beyond_the_limit_is_enumerated() -> None:
    """Three deployments of up to 16 GPUs on 32: without a limit a pool can bind and
    the pipeline answers; with a limit of one change no reachable choice can, and the
    enumeration answers; both equal the pipeline's optimum."""
    body, running = _site(np.random.default_rng(0))
    assert len(running) == 3
    target = IDLE_SITE_W + 3_000.0
    body["transitions"] = {"max_instance_changes_per_period": None, "start_cost_usd": 0.02}
    assert _check(body, running, target)[0].method == "milp"
    body["transitions"] = {"max_instance_changes_per_period": 1, "start_cost_usd": 0.02}
    assert _check(body, running, target)[0].method == "enumeration"


def test_the_pipeline_keeps_to_the_sites_time_limit_or_the_callers_deadline() -> None:
    """Where the pipeline answers, it has the problem's own time limit (the site's
    request's ``solver.time_limit_s``, no fixed 5 s), or the caller's deadline when
    that comes sooner (the limit it reports having had)."""
    body, running = _site(np.random.default_rng(0))
    body["transitions"] = {"max_instance_changes_per_period": None, "start_cost_usd": 0.02}
    target = IDLE_SITE_W + 3_000.0
    for limit, deadline, most in ((0.5, None, 0.5), (30.0, Deadline.after(0.2), 0.2)):
        body["solver"] = {"time_limit_s": limit}
        plan = boundary_plan(problem_from_dict(body), 0, running, target, deadline)
        assert plan.method == "milp" and plan.priced is not None
        assert plan.time_limit_s is not None and plan.solve_time_s is not None
        assert plan.time_limit_s <= most
    body["transitions"]["max_instance_changes_per_period"] = 1  # no pool can bind
    enumerated = boundary_plan(problem_from_dict(body), 0, running, target)
    assert enumerated.method == "enumeration" and enumerated.time_limit_s is None
