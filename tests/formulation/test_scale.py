"""What large sites rely on: the ramped greedy's moves scanned as one flat array make
the moves a deployment-by-deployment scan makes, and the periods' own cap prices (the
greedy baseline's one-period multipliers), which start column generation, give a
valid bound.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from formulation.bounds.decomposition import decompose, integer_columns
from formulation.bounds.lagrange import DualOracle, local_grids
from formulation.budget import Deadline
from formulation.data import ScheduleData, build_data
from formulation.evaluate import Priced, Schedule, price_schedule
from formulation.milp.compact import solve_compact
from formulation.primal.baselines import greedy_ramped, greedy_with_report
from formulation.problem import problem_from_dict
from formulation.solve import solve
from formulation.subproblems.dp import deployment_grid, transition_cost

WORKLOADS = ["fixed:1024:256", "fixed:4096:256", "fixed:2048:64"]


def _site(seed: int, n_dep: int, max_gpus: int, periods: int) -> dict[str, Any]:
    """A site whose cap binds in most periods, with a change limit of 2."""
    rng = np.random.default_rng(seed)
    deps = [
        {
            "name": f"d{i}",
            "model": "qwen3-32b",
            "gpu": "h200",
            "workload": WORKLOADS[i % len(WORKLOADS)],
            "demand_rps": rng.uniform(2.0, 14.0, size=periods).round(3).tolist(),
            "unserved_penalty_usd_per_request": float(rng.choice([0.001, 0.01])),
            "headroom": 0.9,
            "max_gpus": max_gpus,
            "initial": {"n_p": 1, "n_d": 1},
        }
        for i in range(n_dep)
    ]
    idle = 1.2 * 120.0 * n_dep * max_gpus
    caps = (idle + rng.uniform(800.0, 2500.0 * n_dep, size=periods)).round(1).tolist()
    return {
        "period_minutes": 15,
        "site": {"gpu_inventory": {"h200": n_dep * max_gpus}, "pue": 1.2},
        "deployments": deps,
        "grid": {"power_cap_w": caps, "price_usd_per_mwh": 80.0, "carbon_g_per_kwh": 300.0},
        "transitions": {"start_cost_usd": 0.002, "max_instance_changes_per_period": 2},
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60},
    }


def _ramped_by_scan(data: ScheduleData) -> Priced:
    """The ramped greedy as first written: each move found by a scan over the
    deployments, one at a time (the reference the flat scan must reproduce)."""
    M, T = len(data.deployments), data.n_periods
    grids = [deployment_grid(data, d) for d in data.deployments]
    tabs = [(g.p0_w[0], g.p1_w) for g in grids]
    cfg = np.zeros((M, T), dtype=np.int64)
    served = np.zeros((M, T))
    prev = np.array([d.initial for d in data.deployments], dtype=np.int64)
    idle = data.idle_gpu_power_w
    for t in range(T):
        options = []
        pick = np.zeros(M, dtype=np.int64)
        for m, d in enumerate(data.deployments):
            p0, p1 = tabs[m]
            step = transition_cost(data, d, int(prev[m]), np.arange(d.n_configs))
            ks = np.flatnonzero(np.isfinite(step) & d.allowed)
            k2 = np.concatenate([ks, ks])
            s_full = np.concatenate([np.zeros(ks.size, bool), np.ones(ks.size, bool)])
            u, cw = d.unserved_usd_per_rps[t], data.cost_usd_per_w[t]
            smax = d.smax_rps[t, ks]
            c = np.concatenate(
                [cw * p0[ks] + u * d.demand_rps[t], cw * p1[t, ks] + u * (d.demand_rps[t] - smax)]
            )
            c = c - cw * idle * d.gpus[k2] + np.concatenate([step[ks], step[ks]])
            net = np.concatenate([p0[ks], p1[t, ks]]) - idle * d.gpus[k2]
            options.append((k2, s_full, c, net, d.gpus[k2]))
            pick[m] = int(np.argmin(c))
        budget = float(data.net_cap_w[t])
        for _ in range(sum(o[0].size for o in options)):
            used = np.zeros(len(data.pools), dtype=np.int64)
            for m, o in enumerate(options):
                used[data.pool_of[m]] += o[4][pick[m]]
            over_pool = used - data.pool_gpus
            over_w = sum(o[3][pick[m]] for m, o in enumerate(options)) - budget
            if over_pool.max() <= 0 and over_w <= 1e-9 * max(abs(budget), 1.0):
                break
            best: tuple[float, int, int] | None = None
            for m, o in enumerate(options):
                pool = int(data.pool_of[m])
                dc = o[2] - o[2][pick[m]]
                added = o[4] - o[4][pick[m]]
                if over_pool.max() > 0:
                    if over_pool[pool] <= 0:
                        continue
                    gain = -added.astype(float)
                    ok = gain > 0
                else:
                    gain = o[3][pick[m]] - o[3]
                    ok = (gain > 0) & (added <= -over_pool[pool])
                if not ok.any():
                    continue
                ratio = np.where(ok, dc / np.where(ok, gain, 1.0), np.inf)
                j = int(np.argmin(ratio))
                if best is None or ratio[j] < best[0]:
                    best = (float(ratio[j]), m, j)
            if best is None:
                break
            pick[best[1]] = best[2]
        for m, o in enumerate(options):
            k = int(o[0][pick[m]])
            cfg[m, t] = k
            served[m, t] = data.deployments[m].smax_rps[t, k] if o[1][pick[m]] else 0.0
        prev = cfg[:, t].copy()
    return price_schedule(data, Schedule(cfg, served))


@pytest.mark.parametrize("seed", range(4))
def test_the_ramped_greedy_makes_the_moves_of_a_scan_by_deployment(seed: int) -> None:
    data = build_data(problem_from_dict(_site(seed, 3 + seed % 2, 6, 6)))
    got = greedy_ramped(data)
    ref = _ramped_by_scan(data)
    assert np.array_equal(got.schedule.config, ref.schedule.config)
    assert np.array_equal(got.schedule.served_rps, ref.schedule.served_rps)
    assert got.objective_usd == ref.objective_usd
    # the sites bind: the moves are exercised, not just the deployments' own choices
    assert ref.cap_violations or not np.array_equal(
        ref.schedule.config, greedy_ramped(_uncapped(data)).schedule.config
    )


def _uncapped(data: ScheduleData) -> ScheduleData:
    return dataclasses.replace(data, power_cap_w=np.full(data.n_periods, 1e12))


@pytest.mark.parametrize("seed", range(3))
def test_the_periods_cap_prices_bound_the_optimum(seed: int) -> None:
    data = build_data(problem_from_dict(_site(10 + seed, 3, 4, 4)))
    grids = [deployment_grid(data, d) for d in data.deployments]
    _, report = greedy_with_report(data, Deadline.after(60), grids)
    prices = report.cap_prices
    assert prices is not None and prices.shape == (data.n_periods,)
    assert np.all(prices >= 0) and np.any(prices > 0)  # the cap binds somewhere
    with DualOracle(data, local_grids(data, grids)) as oracle:
        zero = np.zeros((len(data.pools), data.n_periods))
        warm = oracle(prices, zero)
    exact = solve_compact(data, Deadline.after(120), 1e-9)
    assert exact.status == "optimal" and exact.objective_usd is not None
    # weak duality: any multipliers give a bound, these among them
    assert warm.value_usd <= exact.objective_usd * (1 + 1e-9) + 1e-9
    # and the solve that starts from them reaches the optimum, its bound below it
    out = solve(problem_from_dict(_site(10 + seed, 3, 4, 4)))
    assert out.stats["warm_start"]["bound_usd"] == pytest.approx(warm.value_usd, rel=1e-12)
    assert out.priced.objective_usd == pytest.approx(exact.objective_usd, rel=1e-6, abs=1e-6)
    assert out.lower_bound_usd <= exact.objective_usd * (1 + 1e-9) + 1e-9


def test_no_cap_prices_where_the_deployments_own_optima_fit() -> None:
    data = _uncapped(build_data(problem_from_dict(_site(20, 3, 4, 4))))
    _, report = greedy_with_report(data, Deadline.after(60))
    assert report.periods_over_cap == 0 and report.cap_prices is None
    assert "cap_prices" not in report.as_stats()


@pytest.mark.parametrize("seed", range(3))
def test_the_columns_integer_program_picks_feasible_paths_above_the_master_lp(seed: int) -> None:
    data = build_data(problem_from_dict(_site(30 + seed, 3, 4, 4)))
    grids = local_grids(data, [deployment_grid(data, d) for d in data.deployments])
    with DualOracle(data, grids) as oracle:
        dec = decompose(data, Deadline.after(60), oracle=oracle)
    assert dec.generation is not None
    choice = integer_columns(dec.generation, Deadline.after(60), 1e-9)
    exact = solve_compact(data, Deadline.after(120), 1e-9)
    assert exact.objective_usd is not None
    assert choice.columns == len(dec.columns)
    if choice.schedule is None:  # no combination of whole columns meets the site
        assert choice.status in ("Infeasible", "Time limit reached")
        return
    priced = price_schedule(data, choice.schedule)
    assert priced.violation_free
    # the master LP relaxes the columns' integer program, which restricts the problem
    assert priced.objective_usd >= dec.lp_value_usd - 1e-7 * abs(dec.lp_value_usd)
    assert priced.objective_usd >= exact.objective_usd - 1e-7 * abs(exact.objective_usd)
    # each deployment runs one of its own columns
    for m in range(len(data.deployments)):
        own = [c.config for c in dec.columns if c.deployment == m]
        assert any(np.array_equal(choice.schedule.config[m], cfg) for cfg in own)
