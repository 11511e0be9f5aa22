"""The one-period enumeration behind the lower bounds is exact.

``solve_period`` must equal (a) the compact MILP on the same period alone and (b) a
brute force over every joint configuration with the exact served loads of
``best_served``, also when per-configuration cost offsets (Lagrange multipliers) are
added: the schedule's proven gap rests on both.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from formulation.budget import Deadline
from formulation.data import ScheduleData, build_data
from formulation.evaluate import best_served
from formulation.milp.compact import solve_compact
from formulation.primal.baselines import periods_alone
from formulation.problem import problem_from_dict
from formulation.subproblems import period
from formulation.subproblems.period import cap_price, solve_period

WORKLOADS = ["fixed:1024:256", "fixed:4096:256", "fixed:2048:64"]


def _site(rng: np.random.Generator, n_dep: int, max_gpus: int) -> dict[str, Any]:
    deps = []
    for i in range(n_dep):
        deps.append(
            {
                "name": f"d{i}",
                "model": "qwen3-32b",
                "gpu": "h200",
                "workload": WORKLOADS[i % len(WORKLOADS)],
                "demand_rps": rng.uniform(0.5, 12.0, size=3).round(3).tolist(),
                "unserved_penalty_usd_per_request": float(rng.choice([0.001, 0.01, 0.05])),
                "headroom": float(rng.choice([1.0, 0.9])),
                "max_gpus": max_gpus,
            }
        )
    idle = 1.2 * 120.0 * n_dep * max_gpus
    caps = (idle + rng.uniform(200.0, 4000.0 * n_dep, size=3)).round(1).tolist()
    return {
        "period_minutes": 15,
        "site": {"gpu_inventory": {"h200": n_dep * max_gpus}, "pue": 1.2},
        "deployments": deps,
        "grid": {"power_cap_w": caps, "price_usd_per_mwh": 80.0, "carbon_g_per_kwh": 300.0},
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60},
    }


def _period_cost(data: ScheduleData, t: int, ks: tuple[int, ...], served: np.ndarray) -> float:
    total = 0.0
    for m, d in enumerate(data.deployments):
        p = float(d.power_w(ks[m], float(served[m]))[0])
        total += float(data.cost_usd_per_w[t]) * (p - data.idle_gpu_power_w * float(d.gpus[ks[m]]))
        total += float(d.unserved_usd_per_rps[t]) * (float(d.demand_rps[t]) - float(served[m]))
    return total


def _brute(data: ScheduleData, t: int, offsets: list[np.ndarray]) -> float:
    best = np.inf
    choices = [np.flatnonzero(d.allowed) for d in data.deployments]
    for ks in itertools.product(*choices):
        served, ok = best_served(data, t, np.array(ks))
        if not ok:
            continue
        # best_served minimises the true cost; offsets depend on configurations only
        c = _period_cost(data, t, ks, served) + sum(
            float(o[k]) for o, k in zip(offsets, ks, strict=True)
        )
        best = min(best, c)
    return best


def _equals_the_milp(data: ScheduleData) -> None:
    const_per_w = data.idle_gpu_power_w * data.total_gpus
    for t in range(data.n_periods):
        sol = solve_period(data, t)
        r = solve_compact(periods_alone(data, np.array([t])), Deadline.after(120), 1e-9)
        if sol is None:
            assert r.schedule is None
            continue
        assert sol.proven
        assert r.objective_usd is not None
        expected = r.objective_usd - float(data.cost_usd_per_w[t]) * const_per_w
        assert sol.cost_usd == pytest.approx(expected, rel=1e-7, abs=1e-7)


def _equals_brute_force(data: ScheduleData, rng: np.random.Generator, scale: float) -> None:
    for t in range(data.n_periods):
        offsets = [rng.normal(0.0, scale, size=d.n_configs) for d in data.deployments]
        sol = solve_period(data, t, offsets)
        ref = _brute(data, t, offsets)
        if sol is None:
            assert not np.isfinite(ref)
            continue
        assert sol.cost_usd == pytest.approx(ref, rel=1e-9, abs=1e-9)
        # the returned decisions achieve the returned cost
        achieved = _period_cost(data, t, tuple(int(k) for k in sol.config), sol.served)
        achieved += sum(float(o[k]) for o, k in zip(offsets, sol.config, strict=True))
        assert achieved == pytest.approx(sol.cost_usd, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_one_period_optimum_equals_the_milp(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    _equals_the_milp(build_data(problem_from_dict(_site(rng, int(rng.integers(2, 4)), 5))))


@pytest.mark.parametrize("seed", range(6))
def test_one_period_optimum_with_offsets_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    data = build_data(problem_from_dict(_site(rng, int(rng.integers(2, 4)), 3)))
    _equals_brute_force(data, rng, 0.05)


@pytest.mark.parametrize("seed", range(4))
def test_a_hint_changes_nothing_but_speed(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    data = build_data(problem_from_dict(_site(rng, 3, 4)))
    for t in range(data.n_periods):
        first = solve_period(
            data, t, [rng.normal(0.0, 0.05, d.n_configs) for d in data.deployments]
        )
        offsets = [rng.normal(0.0, 0.05, size=d.n_configs) for d in data.deployments]
        plain = solve_period(data, t, offsets)
        hinted = solve_period(data, t, offsets, hint=first)
        if plain is None:
            assert first is None
            continue
        assert hinted is not None
        assert hinted.cost_usd == pytest.approx(plain.cost_usd, rel=1e-12, abs=1e-9)


def _dual(options: list[tuple[np.ndarray, np.ndarray]], budget: float, pi: float) -> float:
    return float(sum(np.min(c + pi * p) for p, c in options)) - pi * budget


@pytest.mark.parametrize("seed", range(8))
def test_cap_price_maximises_the_dual_and_its_picks_straddle_the_budget(seed: int) -> None:
    rng = np.random.default_rng(400 + seed)
    options = []
    for _ in range(int(rng.integers(2, 7))):
        n = int(rng.integers(1, 12))
        options.append((rng.uniform(0.0, 1000.0, n), rng.uniform(-50.0, 50.0, n)))
    least = sum(float(p.min()) for p, _ in options)
    cheapest = sum(float(p[np.argmin(c)]) for p, c in options)
    budget = float(rng.uniform(least, max(cheapest, least + 1.0)))
    pi, fit, over = cap_price(options, budget)
    assert fit is not None
    assert sum(float(p[i]) for (p, _), i in zip(options, fit, strict=True)) <= budget
    if over is not None:  # the cheapest picks break the budget
        assert sum(float(p[i]) for (p, _), i in zip(options, over, strict=True)) > budget
    # weak duality makes every L(pi) a bound; pi is the best one (a fine scan)
    grid = np.concatenate([[0.0], np.geomspace(1e-6, 1e3, 4000)])
    best = max(_dual(options, budget, float(x)) for x in grid)
    assert _dual(options, budget, pi) >= best - 1e-6 * max(1.0, abs(best))


def test_cap_price_reports_a_budget_that_nothing_fits() -> None:
    options = [(np.array([5.0, 9.0]), np.array([1.0, 0.0])), (np.array([4.0]), np.array([2.0]))]
    assert cap_price(options, 8.0)[1] is None


@pytest.mark.parametrize("seed", range(4))
def test_larger_one_period_optima_equal_the_milp(seed: int) -> None:
    # more deployments and configurations than above, so that the Lagrangian
    # reduced-cost pruning and the dual rounding decide most of the search
    rng = np.random.default_rng(500 + seed)
    _equals_the_milp(build_data(problem_from_dict(_site(rng, 5, 8))))


@pytest.mark.slow  # 31.4 s on two cores
@pytest.mark.parametrize("seed", range(3))
def test_four_deployments_with_offsets_equal_brute_force(seed: int) -> None:
    rng = np.random.default_rng(700 + seed)
    _equals_brute_force(build_data(problem_from_dict(_site(rng, 4, 4))), rng, 0.2)


@pytest.mark.parametrize("seed", range(4))
def test_a_search_stopped_by_its_deadline_returns_a_feasible_unproven_choice(seed: int) -> None:
    rng = np.random.default_rng(600 + seed)
    data = build_data(problem_from_dict(_site(rng, 4, 6)))
    for t in range(data.n_periods):
        exact = solve_period(data, t)
        stopped = solve_period(data, t, deadline=Deadline(0.0))  # long past
        if exact is None:
            assert stopped is None
            continue
        assert stopped is not None
        # the decisions achieve the reported cost, fit the cap, and cannot beat the optimum
        ks = tuple(int(k) for k in stopped.config)
        assert _period_cost(data, t, ks, stopped.served) == pytest.approx(
            stopped.cost_usd, rel=1e-9, abs=1e-9
        )
        net = sum(
            float(d.power_w(ks[m], float(stopped.served[m]))[0])
            - data.idle_gpu_power_w * float(d.gpus[ks[m]])
            for m, d in enumerate(data.deployments)
        )
        assert net <= float(data.net_cap_w[t]) * (1 + 1e-9) + 1e-6
        assert stopped.cost_usd >= exact.cost_usd - 1e-9
        if not stopped.proven:
            continue
        assert stopped.cost_usd == pytest.approx(exact.cost_usd, rel=1e-12, abs=1e-9)


def test_a_search_too_large_for_its_memory_stops_unproven(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(650)
    data = build_data(problem_from_dict(_site(rng, 4, 6)))
    exact = [solve_period(data, t) for t in range(data.n_periods)]
    monkeypatch.setattr(period, "MAX_PAIRS", 1)  # every merge beyond the first is too big
    stopped = [solve_period(data, t, deadline=Deadline.never()) for t in range(data.n_periods)]
    unbounded = [solve_period(data, t) for t in range(data.n_periods)]  # no deadline: exact
    searched = 0
    for e, s, u in zip(exact, stopped, unbounded, strict=True):
        if e is None:
            assert s is None and u is None
            continue
        assert s is not None and u is not None
        assert s.cost_usd >= e.cost_usd - 1e-9
        assert u.proven and u.cost_usd == pytest.approx(e.cost_usd, rel=1e-12, abs=1e-9)
        searched += not s.proven
    assert searched > 0  # the cap did stop some search


@pytest.mark.parametrize("seed", range(3))
def test_merging_in_small_blocks_finds_the_same_optima(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge formed a few pairs at a time (each block's Pareto points pruned again as
    a union) gives the optimum the whole merge at once gives: same cost, same
    decisions' cost, and the decisions read back through the steps are a real mix."""
    rng = np.random.default_rng(800 + seed)
    data = build_data(problem_from_dict(_site(rng, 5, 8)))
    whole = [solve_period(data, t) for t in range(data.n_periods)]
    monkeypatch.setattr(period, "MERGE_BLOCK", 7)  # a few pairs per block, many blocks
    blocks = [solve_period(data, t) for t in range(data.n_periods)]
    for t, (w, b) in enumerate(zip(whole, blocks, strict=True)):
        if w is None:
            assert b is None
            continue
        assert b is not None and b.proven
        assert b.cost_usd == pytest.approx(w.cost_usd, rel=1e-12, abs=1e-9)
        ks = tuple(int(k) for k in b.config)
        assert _period_cost(data, t, ks, b.served) == pytest.approx(b.cost_usd, rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_single_decisions_are_priced_as_the_vectorised_curves_price_them(seed: int) -> None:
    """``power_at`` and ``max_load_at`` (one configuration, one value) agree with
    ``power_w`` and ``max_load_within`` everywhere, beyond the breakpoints included."""
    rng = np.random.default_rng(seed)
    data = build_data(problem_from_dict(_site(rng, 3, 6)))
    for d in data.deployments:
        for _ in range(300):
            k = int(rng.integers(d.n_configs))
            top = float(np.nanmax(d.bp_load_rps[k]))
            load = float(rng.uniform(-0.1, 1.3 * top + 0.1))
            assert d.power_at(k, load) == pytest.approx(float(d.power_w(k, load)[0]), rel=1e-12)
            watts = float(rng.uniform(0.0, 1.3 * float(np.nanmax(d.bp_power_w[k])) + 1.0))
            assert d.max_load_at(k, watts) == pytest.approx(
                float(d.max_load_within(k, watts)[0]), rel=1e-12, abs=1e-12
            )
