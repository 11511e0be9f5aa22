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

from formulation.baselines import periods_alone
from formulation.data import ScheduleData, build_data
from formulation.evaluate import best_served
from formulation.milp import solve_compact
from formulation.period import solve_period
from formulation.problem import problem_from_dict

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


@pytest.mark.parametrize("seed", range(6))
def test_one_period_optimum_equals_the_milp(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    data = build_data(problem_from_dict(_site(rng, int(rng.integers(2, 4)), 5)))
    const_per_w = data.idle_gpu_power_w * data.total_gpus
    for t in range(data.n_periods):
        sol = solve_period(data, t)
        r = solve_compact(periods_alone(data, np.array([t])), 60, 1e-9)
        if sol is None:
            assert r.schedule is None
            continue
        assert r.objective_usd is not None
        expected = r.objective_usd - float(data.cost_usd_per_w[t]) * const_per_w
        assert sol.cost_usd == pytest.approx(expected, rel=1e-7, abs=1e-7)


@pytest.mark.parametrize("seed", range(6))
def test_one_period_optimum_with_offsets_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    data = build_data(problem_from_dict(_site(rng, int(rng.integers(2, 4)), 3)))
    for t in range(data.n_periods):
        offsets = [rng.normal(0.0, 0.05, size=d.n_configs) for d in data.deployments]
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
