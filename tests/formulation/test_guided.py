"""The window guided by one-period optima: its first bound, taken on its own before the
relaxation, and the bounds and schedules it reports while it runs, against exhaustive
enumeration (tests.formulation.test_exact) on small random sites."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from formulation.bounds.decomposition import decompose
from formulation.bounds.lagrange import (
    DualOracle,
    local_grids,
    uncoupled_schedule,
)
from formulation.bounds.split import SplitBound, split_bound
from formulation.budget import Deadline
from formulation.data import build_data, site_constant_usd
from formulation.demo import demo_request
from formulation.evaluate import Priced, price_schedule
from formulation.primal.window import binding_periods, guided_start, round_stats, solve_guided
from formulation.problem import fill_model_variant, problem_from_dict
from formulation.processes.workers import ForkPool
from formulation.solve import solve
from formulation.subproblems.dp import deployment_grid, reach
from formulation.subproblems.period import pool_can_bind
from tests.formulation.test_exact import enumerate_optimum, hand_model, random_request

FEASIBLE = [s for s in range(24) if s % 7 != 3]


def _request(seed: int) -> dict[str, Any]:
    """test_exact's random site with GPUs for every deployment at its largest (the
    one-period search is for the cap alone: no GPU pool may bind)."""
    body = random_request(seed)
    inventory: dict[str, int] = {}
    for dep in body["deployments"]:
        inventory[dep["gpu"]] = inventory.get(dep["gpu"], 0) + dep["max_gpus"]
    body["site"]["gpu_inventory"] = inventory
    return body


def _capped(seed: int) -> tuple[Any, Any, Any]:
    body = _request(seed)
    data = build_data(problem_from_dict(body))
    grids = [deployment_grid(data, d) for d in data.deployments]
    return data, grids, enumerate_optimum(hand_model(body, data), data)


def _binding() -> list[int]:
    """Seeds with a feasible optimum and uncoupled optima that break the cap somewhere
    (no GPU pool can bind: checked)."""
    out = []
    for seed in FEASIBLE:
        data, grids, best = _capped(seed)
        if any(pool_can_bind(data, t) for t in range(data.n_periods)):
            continue
        if (
            best is not None
            and not price_schedule(data, uncoupled_schedule(data, grids)).violation_free
        ):
            out.append(seed)
    return out


BINDING = _binding()


def test_some_instances_have_a_binding_site() -> None:
    assert len(BINDING) >= 4, BINDING


@pytest.mark.parametrize("seed", BINDING)
def test_the_first_guided_bound_is_a_bound(seed: int) -> None:
    """Weak duality: DPs outside the span, one-period optima inside, never above the
    enumerated optimum; and never below the same sum with the cap left out inside the
    span (each deployment's cheapest configuration in every period of it)."""
    data, grids, best = _capped(seed)
    start = guided_start(data, grids)
    assert start.span is not None
    a, b = start.span
    assert len(start.solutions) == b - a
    tol = 1e-9 * max(abs(best.value), 1.0)
    assert start.bound_usd <= best.value + tol
    without_cap = start.bound_usd - sum(s.cost_usd for s in start.solutions)
    for stage, *_ in start.tabs:  # (T, K) each deployment's period costs at zero prices
        without_cap += float(np.min(stage[a:b], axis=1).sum())
    assert start.bound_usd >= without_cap - tol


@pytest.mark.parametrize("seed", BINDING[:3])
def test_a_first_bound_cut_short_by_its_deadline_is_no_bound(seed: int) -> None:
    data, grids, _ = _capped(seed)
    start = guided_start(data, grids, deadline=Deadline.after(-1.0))
    if all(s.proven for s in start.solutions):
        pytest.skip("every one-period search finished before its first deadline check")
    assert start.bound_usd == -np.inf


@pytest.mark.slow  # 2.8 s on two cores
@pytest.mark.parametrize("seed", BINDING)
def test_guided_reports_only_bounds_and_feasible_schedules_as_they_come(seed: int) -> None:
    data, grids, best = _capped(seed)
    bounds: list[float] = []
    schedules: list[Priced] = []
    start = guided_start(data, grids)
    r = solve_guided(
        data,
        grids,
        Deadline.after(30.0),
        1e-9,
        start=start,
        on_bound=bounds.append,
        on_schedule=schedules.append,
    )
    tol = 1e-7 * max(abs(best.value), 1.0)
    assert bounds, "no bound reported"
    assert all(v <= best.value + tol for v in bounds)
    assert bounds[0] == pytest.approx(start.bound_usd, rel=1e-12)
    assert all(p.violation_free for p in schedules)
    assert all(p.objective_usd >= best.value - tol for p in schedules)
    # what comes back is what was reported last
    assert r.priced is not None
    assert schedules and schedules[-1].objective_usd == pytest.approx(r.priced.objective_usd)
    assert max(bounds) == pytest.approx(min(r.lower_bound_usd, r.priced.objective_usd), rel=1e-12)


@pytest.mark.slow  # 2.1 s on two cores
@pytest.mark.parametrize("seed", BINDING)
def test_column_generation_stops_at_a_bound_it_cannot_beat(seed: int) -> None:
    """The restricted master LP's value is at least the Dantzig-Wolfe bound: once it is
    at or below a bound proven otherwise, column generation stops (after its first
    round for a bound above every LP value); without one it runs to convergence."""
    data, grids, best = _capped(seed)
    oracle = DualOracle(data, local_grids(data, grids))
    full = decompose(data, Deadline.after(30.0), oracle=oracle)
    assert full.converged and not full.beaten
    assert full.lower_bound_usd <= best.value * (1 + 1e-9) + 1e-9
    if full.iterations == 1:
        pytest.skip("converged in its first round")
    beaten = decompose(data, Deadline.after(30.0), oracle=oracle, bound_to_beat=lambda: np.inf)
    assert beaten.beaten and not beaten.converged and beaten.iterations == 1
    assert beaten.lower_bound_usd <= full.lower_bound_usd + 1e-9 * abs(full.lower_bound_usd)
    # a bound just above the Dantzig-Wolfe one: stopped no later than convergence
    at = full.lower_bound_usd + 1e-6 * abs(full.lower_bound_usd)
    near = decompose(data, Deadline.after(30.0), oracle=oracle, bound_to_beat=lambda: at)
    assert near.iterations <= full.iterations
    assert near.beaten or near.converged
    assert not near.beaten or near.lp_value_usd <= at


def test_a_solve_takes_the_one_period_bound_first_and_names_the_bound_it_reports() -> None:
    for seed in BINDING:
        data, _, best = _capped(seed)
        out = solve(problem_from_dict(_request(seed)))
        names = [p["name"] for p in out.stats["phases"]]
        if "one_period_bound" not in names:
            continue
        assert names.index("one_period_bound") < names.index("relaxation")
        taken = out.stats["one_period_bound"]["bound_usd"]
        assert taken is not None and taken <= best.value * (1 + 1e-9) + 1e-9
        assert out.lower_bound_usd >= taken - 1e-9 * abs(taken)
        assert isinstance(out.stats["lower_bound"], str) and out.stats["lower_bound"]
        return
    pytest.fail("no instance took the one-period bound")


def _split_value(seed: int, pool: ForkPool[Any] | None, restart_every: int | None = None) -> float:
    data, grids, _ = _capped(seed)
    start = guided_start(data, grids)
    assert start.span is not None
    a, b = start.span
    T, M = data.n_periods, len(data.deployments)
    tabs = start.tabs
    entry = (
        [reach(data, d, grids[m], tabs[m][2][a - 1], True) for m, d in enumerate(data.deployments)]
        if a > 0
        else None
    )
    exit_ = [tabs[m][3][b - 1] for m in range(M)] if b < T else None
    free = price_schedule(data, uncoupled_schedule(data, grids))
    ub = free.objective_usd * 1.5 + 1.0
    sb = split_bound(
        data,
        grids,
        a,
        b,
        entry,
        exit_,
        site_constant_usd(data),
        ub,
        Deadline.after(30.0),
        max_iter=15,
        pool=pool,
        restart_every=restart_every,
    )
    return sb.value_usd


@pytest.mark.parametrize("seed", BINDING[:4])
def test_the_decomposition_bound_is_the_same_with_period_problems_on_workers(seed: int) -> None:
    data, _, best = _capped(seed)
    serial = _split_value(seed, None)
    with ForkPool(data, 2) as pool:
        assert pool.parallel
        parallel = _split_value(seed, pool)
    assert parallel == serial
    assert serial <= best.value * (1 + 1e-9) + 1e-9


def _square(shared: int, x: int) -> int:
    if x < 0:
        raise ValueError(f"negative: {x}")
    return shared * x * x


def test_a_fork_pool_maps_in_order_and_raises_what_its_tasks_raise() -> None:
    with ForkPool(3, 2) as pool:
        assert pool.map(_square, [(x,) for x in range(7)]) == [3 * x * x for x in range(7)]
        with pytest.raises(ValueError, match="negative: -2"):
            pool.map(_square, [(1,), (-2,)])
    serial = ForkPool(3, 1)
    assert not serial.parallel
    assert serial.map(_square, [(2,)]) == [12]


@pytest.mark.slow  # 2.8 s on two cores
@pytest.mark.parametrize("seed", BINDING[:6])
def test_a_restarted_ascent_still_bounds_the_optimum(seed: int) -> None:
    """Restarting from the best multipliers every few iterations changes the path of
    the ascent, never what its value means: at least the zero-multiplier bound, at most
    the enumerated optimum."""
    data, grids, best = _capped(seed)
    first = guided_start(data, grids).bound_usd
    for every in (2, 3, 5):
        value = _split_value(seed, None, every)
        assert first - 1e-9 * abs(first) <= value <= best.value * (1 + 1e-9) + 1e-9


def test_a_round_without_a_bound_is_reported_as_null() -> None:
    """A round of the ascent given no time ends before its first bound (-inf, or +inf
    when the site cannot be served); the solve's statistics say null, never an infinity:
    results are stored as JSON (PostgreSQL refuses -Infinity) and served as JSON."""
    for value in (-np.inf, np.inf, np.nan):
        cut = round_stats(SplitBound(value, 0, 0.0))
        assert cut == {"value_usd": None, "iterations": 0, "seconds": 0.0}
        json.dumps(cut, allow_nan=False)
    assert round_stats(SplitBound(12.5, 3, 0.1234)) == {
        "value_usd": 12.5,
        "iterations": 3,
        "seconds": 0.123,
    }
    # and a whole guided window's statistics are strict JSON
    data, grids, _ = _capped(BINDING[0])
    r = solve_guided(data, grids, Deadline.after(2.0), 1e-9, start=guided_start(data, grids))
    rounds = json.loads(json.dumps(r.stats, allow_nan=False))["split_bound"]
    assert rounds and all(e["value_usd"] is None or np.isfinite(e["value_usd"]) for e in rounds)


def test_binding_periods_are_where_a_schedule_meets_the_cap_or_fills_a_pool() -> None:
    body = demo_request()
    data = build_data(problem_from_dict(body))
    grids = [deployment_grid(data, d) for d in data.deployments]
    free = price_schedule(data, uncoupled_schedule(data, grids))
    # a cap set to the schedule's own power in periods 3 and 40, above it elsewhere
    # (and every pool larger than what the schedule uses)
    data.power_cap_w[:] = free.site_power_w * 1.01
    data.power_cap_w[[3, 40]] = free.site_power_w[[3, 40]]
    data.pool_gpus[:] = free.gpus_used.max(axis=1) + 1
    assert binding_periods(data, free) == {3, 40}
    # a pool filled in period 7 binds there too, and wherever it is as full
    data.pool_gpus[:] = free.gpus_used[:, 7]
    full = set(np.flatnonzero((free.gpus_used >= data.pool_gpus[:, None]).any(axis=0)))
    assert binding_periods(data, free) == full | {3, 40}
    assert 7 in full


@pytest.mark.slow  # 9.3 s on two cores
@pytest.mark.parametrize("variant", ["paper", "admission"])
def test_the_readme_demo_is_proven_within_its_gap_under_both_model_variants(
    variant: str,
) -> None:
    """``pdwatt plan --demo`` (formulation.demo) within its own limits, 30 s and a gap
    of 0.1%, under each model variant. Under the admission tables the best schedules
    also draw the whole cap in period 78, just after the span the uncoupled optima
    break (68-77): without that period in the guided window the window's bound stays
    near 477.30 USD against an optimum near 477.94, a 0.13% gap no subgradient
    closes (formulation.primal.window.binding_periods)."""
    body = fill_model_variant(demo_request(), variant)
    problem = problem_from_dict(body)
    out = solve(problem)
    assert out.status == "optimal"
    assert out.mip_gap <= problem.solver.mip_gap
    assert out.lower_bound_usd <= out.priced.objective_usd
    assert out.priced.violation_free
