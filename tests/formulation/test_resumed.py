"""Column generation stopped and resumed (``relaxation_resumed``): the same rounds as
without the stop, a bound that never falls, and never above the optimum, which the
compact MILP proves on small random sites with GPU settings (3 x 3 clocks)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import formulation.solve as solve_module
from formulation.bounds import decomposition
from formulation.bounds.decomposition import ascend, decompose
from formulation.bounds.lagrange import DualOracle, VolumeState, local_grids, relax
from formulation.budget import Deadline, TimeBudget
from formulation.data import build_data
from formulation.problem import problem_from_dict
from formulation.solve import solve
from formulation.subproblems.dp import deployment_grid
from tests.formulation.test_settings import (
    CLOCKS,
    plan,
    random_deployments,
    request,
    with_settings_listed,
)

SEEDS = range(8)


def site(seed: int, method: str = "compact") -> dict[str, Any]:
    """Three deployments over six periods, each offered the H200's three clocks per
    phase, a cap that binds in some periods and a change limit of 1 to 3."""
    rng = np.random.default_rng(seed)
    periods = 6
    deps = random_deployments(rng, 3, periods)
    cap = [round(float(x), 1) for x in rng.uniform(2500.0, 9000.0, periods)]
    price = [round(float(x), 2) for x in rng.uniform(20.0, 300.0, periods)]
    inventory = int(rng.integers(6, 16))
    body = request(deps, cap, price, inventory, method, changes=int(rng.integers(1, 4)))
    return with_settings_listed(body, CLOCKS, CLOCKS)


def optimum(seed: int) -> float:
    """The compact MILP's optimum (``plan`` asserts it is proven, gap 1e-9)."""
    return float(plan(site(seed))["objective_usd"])


@pytest.mark.parametrize("seed", SEEDS)
def test_resumed_column_generation_is_the_uninterrupted_one(seed: int) -> None:
    data = build_data(problem_from_dict(site(seed)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    with DualOracle(data, grids) as oracle:
        whole = decompose(data, Deadline.after(60.0), oracle=oracle)
        cut = decompose(data, Deadline.after(60.0), oracle=oracle, max_iter=1)
    assert cut.iterations == 1
    gen = cut.generation
    assert gen is not None
    before = cut.lower_bound_usd
    # another oracle, as the solve's later phase has: the state is all it needs
    with DualOracle(data, grids) as other:
        gen.rounds(other, Deadline.after(60.0), whole=True)
    after = gen.result()
    assert after.iterations == whole.iterations
    assert after.converged == whole.converged
    assert after.lower_bound_usd == pytest.approx(whole.lower_bound_usd, rel=1e-9, abs=1e-9)
    assert after.lower_bound_usd >= before
    if not (whole.lp_slack_periods or whole.lp_inventory_slack):  # feasible sites only
        best = optimum(seed)
        assert after.lower_bound_usd <= best + 1e-7 * max(abs(best), 1.0)


def test_some_sites_need_more_than_one_round() -> None:
    rounds = []
    for seed in SEEDS:
        data = build_data(problem_from_dict(site(seed)))
        grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
        with DualOracle(data, grids) as oracle:
            rounds.append(decompose(data, Deadline.after(60.0), oracle=oracle).iterations)
    assert sum(r > 2 for r in rounds) >= 3, rounds


def test_a_solve_resumes_its_relaxation_with_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The relaxation given no time of its own stops after one round; with the primal
    phases after it ending at once (as when no MILP fits in the time left), the time
    left goes back to column generation, as the last phase: its bound is reported, at
    least the relaxation's, at most the optimum."""
    monkeypatch.setattr(TimeBudget, "RELAXATION", 0.0)
    monkeypatch.setattr(TimeBudget, "RELAXATION_AT_LEAST", 0.0)
    monkeypatch.setattr(solve_module, "exact_window", lambda *args: None)
    monkeypatch.setattr(solve_module, "search_corridors", lambda *args: None)
    resumed = 0
    for seed in SEEDS:
        out = solve(problem_from_dict(site(seed, "auto")))
        names = [p["name"] for p in out.stats["phases"]]
        if "relaxation_resumed" not in names:
            # column generation converged in its round, or the gap closed before
            assert out.status == "optimal" or out.stats["relaxation"]["iterations"] <= 1
            continue
        resumed += 1
        # the last phase, or followed by the MILPs it left time for
        after = names[names.index("relaxation_resumed") + 1 :]
        assert after in (
            [],
            ["lp_support_resumed"],
            ["lp_support_resumed", "neighbourhoods_resumed"],
        )
        assert names.count("relaxation_resumed") == 1
        r = out.stats["relaxation_resumed"]
        assert r["bound_before_usd"] == pytest.approx(out.stats["relaxation"]["bound_usd"])
        assert r["bound_usd"] >= r["bound_before_usd"]
        assert r["rounds"] >= 1
        assert out.lower_bound_usd >= r["bound_usd"] - 1e-9 * abs(r["bound_usd"])
        best = optimum(seed)
        assert out.lower_bound_usd <= best + 1e-7 * max(abs(best), 1.0)
        assert out.priced.objective_usd >= best - 1e-7 * max(abs(best), 1.0)
    assert resumed >= 2, resumed


def test_the_milps_go_on_after_a_resumed_relaxation_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no neighbourhood before it (they end at once) and no window, a relaxation
    resumed until it ends (converged, or no round to gain) leaves time: the MILP over
    its master LP's support takes it (``lp_support_resumed``), then the corridors
    (``neighbourhoods_resumed``), from the state the first neighbourhood phase left
    (none: radius 1); the schedules they find are never better than the optimum."""
    monkeypatch.setattr(TimeBudget, "RELAXATION", 0.0)
    monkeypatch.setattr(TimeBudget, "RELAXATION_AT_LEAST", 0.0)
    monkeypatch.setattr(solve_module, "exact_window", lambda *args: None)
    monkeypatch.setattr(solve_module, "_neighbourhoods_end", lambda _generation: 0.0)
    went_on = 0
    for seed in SEEDS:
        body = site(seed, "auto")
        body["solver"]["time_limit_s"] = 3  # the optimum's gap is not closed by corridors
        out = solve(problem_from_dict(body))
        names = [p["name"] for p in out.stats["phases"]]
        best = optimum(seed)
        assert out.priced.objective_usd >= best - 1e-7 * max(abs(best), 1.0)
        assert out.lower_bound_usd <= best + 1e-7 * max(abs(best), 1.0)
        if "lp_support_resumed" not in names:
            continue
        went_on += 1
        assert names[names.index("relaxation_resumed") + 1] == "lp_support_resumed"
        assert out.stats["relaxation_resumed"]["rounds"] >= 1
        assert out.stats["lp_support_resumed"]["status"] in ("optimal", "time_limit")
        if "neighbourhoods_resumed" not in names:  # the support's MILP closed the gap
            assert out.status == "optimal"
            continue
        assert names[-1] == "neighbourhoods_resumed"
        rows = out.stats["neighbourhoods"]
        assert rows and rows[0]["radius"] == 1  # the first neighbourhoods ran none
        whole = [r["radius"] for r in rows if r["periods"] is None]
        assert whole == sorted(whole)  # one search, its radius growing
    assert went_on >= 2, went_on


def handed_over(seed: int) -> tuple[Any, Any, float, list[float], int]:
    """Column generation on ``seed``'s site, cut after one round, then :func:`ascend`:
    (the uninterrupted result, the ascended one, the bound before, the bounds seen,
    the volume algorithm's evaluations)."""
    data = build_data(problem_from_dict(site(seed)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    with DualOracle(data, grids) as oracle:
        whole = decompose(data, Deadline.after(60.0), oracle=oracle)
        cut = decompose(data, Deadline.after(60.0), oracle=oracle, max_iter=1)
        gen = cut.generation
        assert gen is not None
        before = gen.best_lb
        bounds: list[float] = []
        ascend(gen, oracle, Deadline.after(60.0), lambda: np.inf, 0.0, on_bound=bounds.append)
    return whole, gen.result(), before, bounds, gen.volume_evaluations


@pytest.mark.parametrize("seed", SEEDS)
def test_stalled_rounds_hand_over_to_the_volume_algorithm_and_back(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the switch after a single round that leaves the bound where it was
    (whatever the master LP does), the
    volume algorithm's points join the column generation, and the bound stays valid
    (never above the compact MILP's optimum), never falls, and where the rounds
    converge it is the Dantzig-Wolfe bound of column generation alone."""
    monkeypatch.setattr(decomposition, "STALL_ROUNDS", 1)
    monkeypatch.setattr(decomposition, "STALL_SHARE", np.inf)
    whole, after, before, bounds, _ = handed_over(seed)
    assert after.lower_bound_usd >= before
    assert bounds == sorted(bounds)
    if not (whole.lp_slack_periods or whole.lp_inventory_slack):  # feasible sites only
        best = optimum(seed)
        assert after.lower_bound_usd <= best + 1e-7 * max(abs(best), 1.0)
    if after.converged and whole.converged:
        assert after.lower_bound_usd == pytest.approx(whole.lower_bound_usd, rel=1e-6)


def test_some_sites_stall_and_take_the_volume_algorithm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decomposition, "STALL_ROUNDS", 1)
    monkeypatch.setattr(decomposition, "STALL_SHARE", np.inf)
    calls = [handed_over(seed)[4] for seed in SEEDS]
    assert sum(c > 0 for c in calls) >= 1, calls


def test_an_adopted_point_joins_as_columns_and_centre_when_better() -> None:
    data = build_data(problem_from_dict(site(0)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    T, G = data.n_periods, len(data.pools)
    with DualOracle(data, grids) as oracle:
        gen = decompose(data, Deadline.after(60.0), oracle=oracle, max_iter=1).generation
        assert gen is not None
        worse = oracle(np.zeros(T), np.zeros((G, T)))  # zero prices: the first bound
        assert not gen.adopt(worse)
        centre = gen.best_lb
        assert gen.best_lb == centre
        n = len(gen.master.columns)
        high = oracle(np.full(T, 1e-3), np.zeros((G, T)))
        better = replace(high, value_usd=centre + 1.0)  # as if its bound were the best
        assert gen.adopt(better)
    assert gen.best_lb == centre + 1.0
    assert gen.best_point is better
    assert np.array_equal(gen.best_pi, high.pi_w)
    assert len(gen.master.columns) >= n


def test_column_generation_tails_off_only_when_the_bound_and_the_lp_both_stall() -> None:
    """``stalling``: the bound unchanged for the rounds asked and the master LP falling
    by less than ``STALL_SHARE`` of its gap to the bound over them."""
    data = build_data(problem_from_dict(site(0)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    with DualOracle(data, grids) as oracle:
        gen = decompose(data, Deadline.after(60.0), oracle=oracle, max_iter=1).generation
    assert gen is not None
    share = decomposition.STALL_SHARE
    gen.best_point = replace(gen.best_point, value_usd=1000.0)  # the bound: 1000 USD
    gen.improved_at, gen.iterations = 2, 10
    gap = 100.0
    slow = [1100.0 + share * gap * (1 - 0.01) * (4 - i) / 4 for i in range(5)]
    fast = [1100.0 + share * gap * 1.01 * (4 - i) / 4 for i in range(5)]
    gen.lp_history = slow
    assert gen.stalling(4)
    assert not gen.stalling(4, since=7)  # only three rounds since round 7
    gen.lp_history = fast
    assert not gen.stalling(4)
    gen.lp_history = slow
    gen.improved_at = 8  # the bound rose two rounds ago
    assert not gen.stalling(4)
    gen.improved_at, gen.lp_history = 2, slow[-3:]  # fewer rounds than asked
    assert not gen.stalling(4)


@pytest.mark.parametrize("seed", [0, 3, 4])  # sites whose cap binds at zero prices
def test_the_volume_algorithm_resumed_from_its_state_is_the_uninterrupted_one(seed: int) -> None:
    """Two runs of ten evaluations, the second from the first's best point and its
    ``VolumeState``, evaluate the same multipliers as one run of twenty."""
    data = build_data(problem_from_dict(site(seed)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    seen_whole: list[float] = []
    seen_cut: list[float] = []
    with DualOracle(data, grids) as oracle:
        start = oracle(np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods)))
        args = (oracle, Deadline.never(), lambda: np.inf, 0.0)
        whole = relax(*args, lambda p: seen_whole.append(p.value_usd), 20, start)
        state = VolumeState()
        first = relax(*args, lambda p: seen_cut.append(p.value_usd), 10, start, state=state)
        assert state.f > 0 and state.v_cap is not None
        second = relax(*args, lambda p: seen_cut.append(p.value_usd), 10, first.best, state=state)
    assert whole.iterations == first.iterations + second.iterations == 20
    # the same steps, up to rounding (the multipliers pass through the rows' scales)
    assert second.best.value_usd == pytest.approx(whole.best.value_usd, rel=1e-9)
    assert np.allclose(second.best.pi_w, whole.best.pi_w, rtol=1e-9, atol=1e-15)
    # the same improving points, the second run reporting its start (the first's best)
    # again before going on
    cut = sorted({round(v, 6) for v in seen_cut})
    assert cut == sorted({round(v, 6) for v in seen_whole})
