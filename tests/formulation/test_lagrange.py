"""The Lagrangian relaxation (formulation.bounds.lagrange) against references computed here:
exhaustive enumeration of small sites (tests.formulation.test_exact) and, for one
deployment under a binding cap, a dense DP written in this file."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formulation.bounds.lagrange import DualOracle, corridor, keep_choices, local_grids, relax
from formulation.budget import Deadline, TimeBudget
from formulation.data import build_data
from formulation.evaluate import Schedule
from formulation.problem import problem_from_dict
from formulation.solve import solve
from formulation.subproblems.dp import deployment_grid
from tests.formulation.test_exact import (
    REL,
    enumerate_optimum,
    hand_model,
    index_of,
    one_deployment_request,
    random_request,
    step_cost,
    with_method,
)

# seeds of test_exact.random_request whose enumeration finds a feasible optimum
FEASIBLE = [s for s in range(24) if s % 7 != 3]


def _instance(seed: int) -> tuple[Any, Any, Any]:
    body = random_request(seed)
    data = build_data(problem_from_dict(body))
    best = enumerate_optimum(hand_model(body, data), data)
    return body, data, best


@pytest.mark.slow  # 3.9 s on two cores
@settings(max_examples=40, deadline=None)
@given(
    seed=st.sampled_from(FEASIBLE),
    scale=st.floats(0.0, 20.0),
    gpu_scale=st.floats(0.0, 5.0),
    draw=st.integers(0, 2**31 - 1),
)
def test_dual_bound_never_exceeds_the_enumerated_optimum(
    seed: int, scale: float, gpu_scale: float, draw: int
) -> None:
    """Weak duality at arbitrary multipliers, with and without the local restriction;
    the restricted bound is never below the plain one at the same prices."""
    _, data, best = _instance(seed)
    if best is None:
        return
    rng = np.random.default_rng(draw)
    T, G = data.n_periods, len(data.pools)
    cw = float(np.max(data.cost_usd_per_w))
    pi = rng.uniform(0, 1, T) * scale * cw
    sigma = rng.uniform(0, 1, (G, T)) * gpu_scale * 1e-3
    grids = [deployment_grid(data, d) for d in data.deployments]
    plain = DualOracle(data, grids)(pi, sigma).value_usd
    local = DualOracle(data, local_grids(data, grids))(pi, sigma).value_usd
    tol = 1e-9 * max(abs(best.value), 1.0)
    assert plain <= best.value + tol
    assert local <= best.value + tol
    assert local >= plain - tol


@pytest.mark.parametrize("seed", FEASIBLE[:8])
def test_relaxation_raises_the_bound_and_pruning_keeps_the_optimum(seed: int) -> None:
    _, data, best = _instance(seed)
    if best is None:
        pytest.skip("infeasible instance")
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    oracle = DualOracle(data, grids)
    r = relax(oracle, Deadline.after(30.0), lambda: best.value, 1e-9, max_iter=200)
    tol = 1e-9 * max(abs(best.value), 1.0)
    assert r.first.value_usd <= r.best.value_usd <= best.value + tol
    assert [v for _, v in r.history] == sorted(v for _, v in r.history)
    # every (deployment, period, configuration) of the optimum survives pruning
    allowed, kept, total = keep_choices(data, grids, r.best, best.value)
    assert 0 < kept <= total
    idx = index_of(data)
    for m in range(len(data.deployments)):
        for t, cfg in enumerate(best.configs[m]):
            assert idx[m][cfg] in allowed[m][t], (m, t, cfg)


@pytest.mark.slow  # 3.4 s on two cores
def test_volume_method_equals_exhaustive_enumeration() -> None:
    for seed in FEASIBLE[:10]:
        body, _, best = _instance(seed)
        if best is None:
            continue
        out = solve(problem_from_dict(with_method(body, "volume")))
        assert out.priced.violation_free
        assert out.priced.objective_usd == pytest.approx(best.value, rel=REL, abs=1e-9)
        assert out.lower_bound_usd <= out.priced.objective_usd * (1 + 1e-9) + 1e-9


def capped_body(cap_w: float) -> dict[str, Any]:
    body = one_deployment_request(2)
    body["grid"]["power_cap_w"] = cap_w
    return body


def capped_dp_optimum(body: dict[str, Any]) -> float:
    """Dense DP for one deployment whose site cap binds: in each period a configuration
    may serve any load whose site power stays within the cap (found by bisection on
    the hand power curve); the concave cost is least at 0 or at the largest such load."""
    data = build_data(problem_from_dict(body))
    h = hand_model(body, data)
    (d,) = h.deps
    total_gpus = sum(h.inventory.values())
    cap = float(body["grid"]["power_cap_w"])

    def site_w(cfg: tuple[int, int], s: float) -> float:
        return h.pue * (d.power_w(cfg, s) + h.idle_w * (total_gpus - cfg[0] - cfg[1]))

    def stage(t: int, cfg: tuple[int, int]) -> float:
        if site_w(cfg, 0.0) > cap * (1 + 1e-9):
            return np.inf
        lo, hi = 0.0, d.smax(t, cfg)
        if site_w(cfg, hi) <= cap:
            lo = hi
        for _ in range(200 if lo < hi else 0):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if site_w(cfg, mid) <= cap else (lo, mid)
        per_w = h.dt_h * (h.price[t] / 1e6 + h.carbon[t] * h.carbon_price / 1e9)
        u = d.penalty * 3600.0 * h.dt_h
        return min(per_w * site_w(cfg, s) + u * (d.demand[t] - s) for s in (0.0, lo))

    value = {c: step_cost(h, (d.initial,), (c,)) + stage(0, c) for c in d.configs}
    for t in range(1, h.n_periods):
        value = {
            c: min(value[a] + step_cost(h, (a,), (c,)) for a in d.configs) + stage(t, c)
            for c in d.configs
        }
    return min(value.values())


@pytest.mark.parametrize("cap_w", [2600.0, 3500.0])
def test_one_deployment_under_a_binding_cap_is_exact_at_the_first_point(cap_w: float) -> None:
    body = capped_body(cap_w)
    expected = capped_dp_optimum(body)
    assert np.isfinite(expected)
    uncapped = solve(problem_from_dict(capped_body(1e6)))
    assert uncapped.priced.site_power_w.max() > cap_w  # the cap binds
    out = solve(problem_from_dict(body))
    assert out.status == "optimal"
    assert out.priced.violation_free
    assert out.priced.objective_usd == pytest.approx(expected, rel=1e-6)
    # the zero-price restricted DP is already the optimum and its proof
    assert out.stats["relaxation"]["first_bound_usd"] == pytest.approx(expected, rel=1e-6)
    assert out.stats["relaxation"]["iterations"] == 0


def test_corridor_keeps_configurations_within_the_radius() -> None:
    body = random_request(0)
    data = build_data(problem_from_dict(body))
    M, T = len(data.deployments), data.n_periods
    path = np.array([[int(np.flatnonzero(d.allowed)[-1])] * T for d in data.deployments])
    zero = corridor(data, [path], 0, range(T))
    assert all(zero[m][t] == [int(path[m, t])] for m in range(M) for t in range(T))
    one = corridor(data, [path], 1, range(T))
    for m, d in enumerate(data.deployments):
        k = int(path[m, 0])
        dist = np.abs(d.n_p - d.n_p[k]) + np.abs(d.n_d - d.n_d[k])
        assert one[m][0] == [int(j) for j in np.flatnonzero((dist <= 1) & d.allowed)]
    pruned = corridor(data, [path], 5, range(T), keep=zero)
    assert pruned == zero


def test_time_budget_phases_end_in_order_within_the_limit() -> None:
    b = TimeBudget(100.0, started=0.0)
    ends = [b.deadline(f).at for f in (b.BASELINES, b.RELAXATION, b.REPAIR, b.END)]
    assert ends == sorted(ends)
    assert ends[-1] == pytest.approx(100.0 * (1 - b.RESERVE))
    assert b.deadline(2.0).at == ends[-1]


def test_schedule_shape_of_the_oracle() -> None:
    body = random_request(1)
    data = build_data(problem_from_dict(body))
    grids = [deployment_grid(data, d) for d in data.deployments]
    with DualOracle(data, grids, workers=2) as threaded:
        p = threaded(np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods)))
    assert isinstance(p.schedule, Schedule)
    assert p.schedule.config.shape == (len(data.deployments), data.n_periods)
    # the oracle on worker processes returns what the serial one does
    q = DualOracle(data, grids)(
        np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods))
    )
    assert p.value_usd == q.value_usd
    assert np.array_equal(p.schedule.config, q.schedule.config)


def test_compact_too_large_to_build_in_time_returns_the_best_baseline() -> None:
    """The demo's compact model cannot be built within 2 s: the solve says so and
    returns its best violation-free baseline with a valid bound, instead of building."""
    from formulation.demo import demo_request

    body = demo_request()
    body["solver"] = {"time_limit_s": 2, "mip_gap": 1e-3, "method": "compact"}
    out = solve(problem_from_dict(body))
    assert "not built" in out.stats["compact"]
    assert "milp_build_s" not in out.stats
    clean = [b.objective_usd for b in out.baselines.values() if b.violation_free]
    assert out.priced.violation_free
    assert out.priced.objective_usd == pytest.approx(min(clean))
    assert out.lower_bound_usd <= out.priced.objective_usd
    assert out.status == "time_limit"


@pytest.mark.parametrize("seed", [0, 1, 2, 4, 5])
def test_priced_period_fits_the_cap_whenever_shedding_can(seed: int) -> None:
    from formulation.evaluate import price_schedule
    from formulation.primal.baselines import priced_period

    body = random_request(seed)
    data = build_data(problem_from_dict(body))
    grids = [deployment_grid(data, d) for d in data.deployments]
    floor = sum(
        float(np.min((g.p0_w[0] - data.idle_gpu_power_w * d.gpus)[d.allowed]))
        for d, g in zip(data.deployments, grids, strict=True)
    )
    for t in range(data.n_periods):
        ks, loads = priced_period(data, grids, t)
        one = Schedule(
            np.repeat(ks[:, None], data.n_periods, axis=1),
            np.repeat(loads[:, None], data.n_periods, axis=1),
        )
        priced = price_schedule(data, one)
        assert not any(v[1] == t for v in priced.served_violations)
        if floor <= float(data.net_cap_w[t]):
            assert t not in priced.cap_violations


def test_oracle_goes_on_serially_when_a_worker_process_dies() -> None:
    import multiprocessing
    import os
    import signal

    body = random_request(1)
    data = build_data(problem_from_dict(body))
    grids = [deployment_grid(data, d) for d in data.deployments]
    zeros = (np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods)))
    with DualOracle(data, grids, workers=2) as oracle:
        first = oracle(*zeros)
        children = multiprocessing.active_children()
        assert children  # the DPs ran on forked workers
        victim = children[0]
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)  # as the out-of-memory killer would
        victim.join(5)
        again = oracle(*zeros)
    assert again.value_usd == first.value_usd
    assert np.array_equal(again.schedule.config, first.schedule.config)


def _value_in_this_process(seed: int) -> float:
    data = build_data(problem_from_dict(random_request(seed)))
    grids = [deployment_grid(data, d) for d in data.deployments]
    zeros = (np.zeros(data.n_periods), np.zeros((len(data.pools), data.n_periods)))
    with DualOracle(data, grids, workers=2) as oracle:
        return oracle(*zeros).value_usd


@pytest.mark.slow  # 2.2 s on two cores
def test_oracle_in_a_daemonic_process_runs_serially() -> None:
    """A daemonic process (a ``multiprocessing.Pool`` worker) may not start workers of
    its own: the oracle then evaluates serially, with the same result."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        inside = pool.apply(_value_in_this_process, (1,))
    assert inside == _value_in_this_process(1)


@pytest.mark.slow  # 30 s on two cores
def test_a_milp_over_the_master_lp_support_follows_column_generation() -> None:
    """Nine deployments (the demo three times over, cap and GPUs tripled): column
    generation runs, then the MILP over its LP's columns and the incumbent; its schedule
    is a real one (within cap, inventory and transition limits) and never worse than a
    violation-free baseline."""
    from tests.demo_sites import demo_three_times

    body = demo_three_times(30.0)
    deps = body["deployments"]
    cap = body["grid"]["power_cap_w"]
    o = solve(problem_from_dict(body))
    phases = [p["name"] for p in o.stats["phases"]]
    assert phases.index("relaxation") < phases.index("lp_support")
    # then the repair, or the window guided by one-period optima (which repairs its own)
    assert phases[phases.index("lp_support") + 1] in {"repair", "exact_window"}
    lp = o.stats["lp_support"]
    assert lp["choices"] >= len(deps) * len(cap if isinstance(cap, list) else [0])
    assert lp["status"] in {"optimal", "time_limit"}, lp
    assert o.priced.violations() == {
        "cap_violations": 0,
        "inventory_violations": 0,
        "limit_violations": 0,
    }
    free = [b.objective_usd for b in o.baselines.values() if not any(b.violations().values())]
    assert all(o.priced.objective_usd <= v + 1e-6 for v in free)
    assert o.lower_bound_usd <= o.priced.objective_usd + 1e-6
