"""The schedule optimum equals exhaustive enumeration and, for one deployment, a DP
(SPEC 4, "Exactness").

The reference optimum is computed here without the solver: every candidate
``(n_P, n_D)`` of every deployment is listed from its bounds, every joint sequence of
configurations over the horizon is enumerated, and each is priced by hand from SPEC
2.6 and 5. The served loads of a fixed joint configuration come from
``evaluate.best_served`` (exact for fixed configurations; checked against a fine grid
search below); capacities come from the analytical core.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from formulation.bounds.lagrange import uncoupled_bound
from formulation.data import ScheduleData, build_data
from formulation.evaluate import Schedule, best_served, price_schedule
from formulation.infeasible import InfeasibleError
from formulation.problem import problem_from_dict
from formulation.solve import solve
from formulation.subproblems.dp import deployment_grid
from model.capacity import Coefficients, evaluate

WORKLOADS = ["fixed:1024:256", "fixed:512:512", "fixed:4096:256"]
REL = 1e-6
CAP_RTOL = 1e-7  # the feasibility tolerance of evaluate.FEAS_RTOL


# --------------------------------------------------------------------------- hand model


@dataclass
class HandDeployment:
    """One deployment's candidates and SPEC 2.6 power, computed here."""

    configs: list[tuple[int, int]]  # index 0 is off when off is allowed
    mu_rps: dict[tuple[int, int], float]
    mu_p: float
    mu_d_max: float
    coef: Coefficients
    pool: str
    demand: np.ndarray
    penalty: float
    headroom: float
    initial: tuple[int, int]

    def power_w(self, cfg: tuple[int, int], s: float) -> float:
        n_p, n_d = cfg
        if n_p == 0:
            return 0.0
        c = self.coef
        pp = min(c.p0_prefill_w + c.gamma_prefill_w * s / (n_p * self.mu_p), c.psat_prefill_w)
        pd = min(c.p0_decode_w + c.gamma_decode_w * s / (n_d * self.mu_d_max), c.psat_decode_w)
        return n_p * pp + n_d * pd

    def smax(self, t: int, cfg: tuple[int, int]) -> float:
        return min(float(self.demand[t]), self.headroom * self.mu_rps.get(cfg, 0.0))


@dataclass
class Hand:
    deps: list[HandDeployment]
    inventory: dict[str, int]
    pue: float
    idle_w: float
    dt_h: float
    cap: np.ndarray
    price: np.ndarray
    carbon: np.ndarray
    carbon_price: float
    start: float
    stop: float
    limit: int | None

    @property
    def n_periods(self) -> int:
        return len(self.cap)


def candidate_pairs(dep: dict[str, Any]) -> list[tuple[int, int]]:
    """Off (if the bounds allow it) and every (n_P >= 1, n_D >= 1) within bounds and
    max_gpus (one GPU per instance)."""
    b = dep.get("bounds", {})
    top = dep["max_gpus"]
    out = []
    if b.get("min_n_p", 0) == 0 and b.get("min_n_d", 0) == 0:
        out.append((0, 0))
    for n_p in range(max(1, b.get("min_n_p", 0)), min(b.get("max_n_p", top), top) + 1):
        for n_d in range(max(1, b.get("min_n_d", 0)), min(b.get("max_n_d", top), top) + 1):
            if n_p + n_d <= top:
                out.append((n_p, n_d))
    return out


def hand_model(body: dict[str, Any], data: ScheduleData) -> Hand:
    deps = []
    for raw, d in zip(body["deployments"], data.deployments, strict=True):
        assert d.spec.serving.tensor_parallel == 1
        pairs = candidate_pairs(raw)
        on = [c for c in pairs if c != (0, 0)]
        r = evaluate(d.spec, [c[0] for c in on], [c[1] for c in on])
        init = raw.get("initial", {"n_p": 0, "n_d": 0})
        deps.append(
            HandDeployment(
                configs=pairs,
                mu_rps={c: float(mu) for c, mu in zip(on, r.capacity_rps, strict=True)},
                mu_p=float(r.mu_p_rps[0]),
                mu_d_max=float(r.mu_d_max_rps[0]),
                coef=r.coefficients,
                pool=raw["gpu"],
                demand=np.asarray(raw["demand_rps"], dtype=float),
                penalty=raw["unserved_penalty_usd_per_request"],
                headroom=raw.get("headroom", 1.0),
                initial=(init["n_p"], init["n_d"]),
            )
        )
    site, grid, tr = body["site"], body["grid"], body["transitions"]
    t_count = len(body["deployments"][0]["demand_rps"])

    def series(v: float | list[float]) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=float), (t_count,)).copy()

    return Hand(
        deps=deps,
        inventory=dict(site["gpu_inventory"]),
        pue=site["pue"],
        idle_w=site["idle_gpu_power_w"],
        dt_h=body["period_minutes"] / 60.0,
        cap=series(grid["power_cap_w"]),
        price=series(grid["price_usd_per_mwh"]),
        carbon=series(grid["carbon_g_per_kwh"]),
        carbon_price=site["carbon_price_usd_per_tonne"],
        start=tr["start_cost_usd"],
        stop=tr["stop_cost_usd"],
        limit=tr["max_instance_changes_per_period"],
    )


def period_cost(
    h: Hand, t: int, joint: tuple[tuple[int, int], ...], served: np.ndarray
) -> tuple[float, bool]:
    """Energy, carbon and unserved cost of period ``t`` (SPEC 4, 5); and whether the
    joint configuration fits the inventory and the cap at these served loads."""
    used = dict.fromkeys(h.inventory, 0)
    it_w = 0.0
    unserved_usd = 0.0
    ok = True
    for d, cfg, s in zip(h.deps, joint, served, strict=True):
        used[d.pool] += cfg[0] + cfg[1]
        smax = d.smax(t, cfg)
        ok &= -1e-9 <= s <= smax * (1 + CAP_RTOL) + 1e-9
        s = min(max(s, 0.0), smax)
        it_w += d.power_w(cfg, s)
        unserved_usd += d.penalty * (d.demand[t] - s) * 3600.0 * h.dt_h
    ok &= all(used[g] <= h.inventory[g] for g in used)
    idle = sum(max(h.inventory[g] - used[g], 0) for g in used)
    site_w = h.pue * (it_w + h.idle_w * idle)
    ok &= site_w <= h.cap[t] * (1 + CAP_RTOL) + 1e-6
    per_w = h.dt_h * (h.price[t] / 1e6 + h.carbon[t] * h.carbon_price / 1e9)
    return site_w * per_w + unserved_usd, ok


def step_cost(h: Hand, a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> float:
    """Start/stop cost from joint configuration ``a`` to ``b``; inf beyond the limit."""
    total = 0.0
    for (p0, d0), (p1, d1) in zip(a, b, strict=True):
        up = max(p1 - p0, 0) + max(d1 - d0, 0)
        down = max(p0 - p1, 0) + max(d0 - d1, 0)
        if h.limit is not None and up + down > h.limit:
            return np.inf
        total += h.start * up + h.stop * down
    return total


def hand_objective(h: Hand, configs: list[list[tuple[int, int]]], served: np.ndarray) -> float:
    """Objective of a schedule given as ``configs[m][t]`` and ``served[m, t]``; inf if it
    breaks a constraint."""
    total = 0.0
    prev = tuple(d.initial for d in h.deps)
    for t in range(h.n_periods):
        joint = tuple(configs[m][t] for m in range(len(h.deps)))
        c, ok = period_cost(h, t, joint, served[:, t])
        if not ok:
            return np.inf
        total += c + step_cost(h, prev, joint)
        prev = joint
    return total


def index_of(data: ScheduleData) -> list[dict[tuple[int, int], int]]:
    return [
        {(int(p), int(q)): k for k, (p, q) in enumerate(zip(d.n_p, d.n_d, strict=True))}
        for d in data.deployments
    ]


@dataclass
class Enumerated:
    value: float
    configs: list[list[tuple[int, int]]]  # [m][t]
    served: np.ndarray  # (M, T)


def enumerate_optimum(h: Hand, data: ScheduleData) -> Enumerated | None:
    """Every joint sequence of configurations, each priced; the least violation-free one."""
    idx = index_of(data)
    m_count, t_count = len(h.deps), h.n_periods
    joints = list(itertools.product(*(d.configs for d in h.deps)))
    # per period: the joint configurations that can run, their cost and served loads
    feasible: list[list[tuple[tuple[int, int], ...]]] = []
    stage: list[np.ndarray] = []
    served_of: list[list[np.ndarray]] = []
    for t in range(t_count):
        keep, cost, loads = [], [], []
        for joint in joints:
            ks = np.array([idx[m][c] for m, c in enumerate(joint)], dtype=np.int64)
            s, ok = best_served(data, t, ks)
            if not ok:
                continue
            c, fits = period_cost(h, t, joint, s)
            if fits:
                keep.append(joint)
                cost.append(c)
                loads.append(s)
        if not keep:
            return None
        feasible.append(keep)
        stage.append(np.array(cost))
        served_of.append(loads)
    # exhaustive: the cost of every sequence, as one array with an axis per period
    init = tuple(d.initial for d in h.deps)
    total = np.array([step_cost(h, init, j) for j in feasible[0]]) + stage[0]
    for t in range(1, t_count):
        trans = np.array([[step_cost(h, a, b) for b in feasible[t]] for a in feasible[t - 1]])
        total = total[..., None] + trans + stage[t]
    flat = int(np.argmin(total))
    value = float(total.flat[flat])
    if not np.isfinite(value):
        return None
    seq = np.unravel_index(flat, total.shape)
    configs = [[feasible[t][seq[t]][m] for t in range(t_count)] for m in range(m_count)]
    served = np.array([[served_of[t][seq[t]][m] for t in range(t_count)] for m in range(m_count)])
    return Enumerated(value, configs, served)


# --------------------------------------------------------------------------- instances


def random_request(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    m_count = 3 if seed % 3 == 0 else 2
    t_count = 3 if m_count == 3 else int(rng.choice([3, 4]))
    two_pools = seed % 4 == 1
    deps = []
    for m in range(m_count):
        max_gpus = 3 if m_count == 3 else int(rng.choice([3, 4]))
        gpu = "b200" if two_pools and m == m_count - 1 else "h200"
        dep: dict[str, Any] = {
            "name": f"d{m}",
            "model": "qwen3-32b",
            "gpu": gpu,
            "workload": str(rng.choice(WORKLOADS)),
            "demand_rps": [round(float(x), 3) for x in rng.uniform(0.0, 25.0, t_count)],
            "unserved_penalty_usd_per_request": float(10 ** rng.uniform(-6.3, -4)),
            "headroom": float(rng.choice([1.0, 0.9, 0.7])),
            "max_gpus": max_gpus,
        }
        if rng.random() < 0.15:
            dep["bounds"] = {"min_n_d": 1}  # off not allowed
        elif rng.random() < 0.15:
            dep["bounds"] = {"max_n_p": 1}
        if rng.random() < 0.6:
            pairs = [c for c in candidate_pairs(dep) if c != (0, 0)]
            p, q = pairs[int(rng.integers(len(pairs)))]
            dep["initial"] = {"n_p": p, "n_d": q}
        deps.append(dep)
    inventory: dict[str, int] = {}
    for dep in deps:
        inventory[dep["gpu"]] = inventory.get(dep["gpu"], 0) + dep["max_gpus"]
    for g in inventory:  # the shared pool often binds; each initial state fits alone
        starts = [
            sum(d.get("initial", {"n_p": 0, "n_d": 0}).values()) for d in deps if d["gpu"] == g
        ]
        inventory[g] = max(inventory[g] - int(rng.integers(1, 5)), 3, *starts)
    pue = float(rng.uniform(1.0, 1.4))
    idle = float(rng.choice([0.0, 60.0, 120.0]))
    total_gpus = sum(inventory.values())
    lo = pue * idle * total_gpus
    hi = pue * 550.0 * total_gpus
    frac = rng.uniform(0.1, 1.0, t_count)
    if seed % 7 == 3:
        frac[int(rng.integers(t_count))] = -0.05  # below the idle site: infeasible
    cap = [round(float(lo + f * (hi - lo)), 3) for f in frac]
    if idle == 0.0 and seed % 7 == 3:
        cap[0] = 300.0  # too low for any deployment that must run, or for the initial state
    return {
        "period_minutes": float(rng.choice([15, 60])),
        "site": {
            "gpu_inventory": inventory,
            "pue": pue,
            "idle_gpu_power_w": idle,
            "carbon_price_usd_per_tonne": float(rng.choice([0.0, 50.0])),
        },
        "deployments": deps,
        "grid": {
            "power_cap_w": cap,
            "price_usd_per_mwh": [round(float(x), 2) for x in rng.uniform(20, 200, t_count)],
            "carbon_g_per_kwh": [round(float(x), 1) for x in rng.uniform(100, 500, t_count)],
        },
        "transitions": {
            "start_cost_usd": float(rng.choice([0.0, 0.002, 0.02])),
            "stop_cost_usd": float(rng.choice([0.0, 0.005])),
            "max_instance_changes_per_period": [None, 1, 2][int(rng.integers(3))],
        },
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60},
    }


def with_method(body: dict[str, Any], method: str) -> dict[str, Any]:
    out = dict(body)
    out["solver"] = {**body["solver"], "method": method}
    return out


# --------------------------------------------------------------------------- tests


def test_candidates_are_off_and_every_pair_within_bounds() -> None:
    for seed in range(6):
        body = random_request(seed)
        data = build_data(problem_from_dict(body))
        for raw, d in zip(body["deployments"], data.deployments, strict=True):
            got = sorted((int(p), int(q)) for p, q in zip(d.n_p, d.n_d, strict=True))
            allowed = [
                (int(p), int(q)) for p, q, ok in zip(d.n_p, d.n_d, d.allowed, strict=True) if ok
            ]
            assert sorted(allowed) == sorted(candidate_pairs(raw))
            assert (0, 0) in got and (int(d.n_p[0]), int(d.n_d[0])) == (0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(24))
def test_solver_equals_exhaustive_enumeration(seed: int) -> None:
    body = random_request(seed)
    data = build_data(problem_from_dict(body))
    h = hand_model(body, data)
    best = enumerate_optimum(h, data)
    for method in ("auto", "volume", "compact"):
        problem = problem_from_dict(with_method(body, method))
        if best is None:
            with pytest.raises(InfeasibleError):
                solve(problem)
            continue
        out = solve(problem)
        got = out.priced
        assert got.violation_free, method
        assert got.objective_usd == pytest.approx(best.value, rel=REL, abs=1e-9), method
        # the solver's own schedule, priced by hand, is feasible and costs what it says
        sched = got.schedule
        cfgs = [
            [(int(d.n_p[k]), int(d.n_d[k])) for k in sched.config[m]]
            for m, d in enumerate(data.deployments)
        ]
        assert hand_objective(h, cfgs, sched.served_rps) == pytest.approx(
            got.objective_usd, rel=1e-9, abs=1e-9
        ), method
        assert out.lower_bound_usd <= got.objective_usd * (1 + 1e-9) + 1e-9
        # never weaker than the deployments' uncapped optima, which bound the optimum
        floor = uncoupled_bound(data, [deployment_grid(data, d) for d in data.deployments])
        assert out.lower_bound_usd >= floor - 1e-9 * abs(floor)
        assert floor <= best.value * (1 + 1e-9) + 1e-9
        # the ramped greedy never breaks a transition limit
        assert not out.baselines["greedy_ramped"].limit_violations
        for base in out.baselines.values():
            if base.violation_free:
                assert best.value <= base.objective_usd * (1 + 1e-9) + 1e-12
    if best is not None:
        # the enumerated optimum, priced by the package, agrees with the hand price
        idx = index_of(data)
        config = np.array(
            [[idx[m][c] for c in best.configs[m]] for m in range(len(h.deps))], dtype=np.int64
        )
        priced = price_schedule(data, Schedule(config, best.served))
        assert priced.violation_free
        assert priced.objective_usd == pytest.approx(best.value, rel=1e-9, abs=1e-9)


@pytest.mark.slow
def test_instances_cover_feasible_and_infeasible_cases() -> None:
    outcomes = []
    for seed in range(24):
        body = random_request(seed)
        data = build_data(problem_from_dict(body))
        outcomes.append(enumerate_optimum(hand_model(body, data), data) is None)
    assert 2 <= sum(outcomes) <= 10


@pytest.mark.parametrize("seed", [101, 202])
def test_best_served_matches_a_grid_search(seed: int) -> None:
    """For fixed configurations, best_served is the least-cost load split under the cap."""
    rng = np.random.default_rng(seed)
    body = random_request(seed)
    body["deployments"] = body["deployments"][:2]
    for dep in body["deployments"]:
        dep["gpu"] = "h200"
        dep["max_gpus"] = 4
        dep.pop("bounds", None)
        dep["demand_rps"] = [float(x) for x in rng.uniform(8, 20, len(dep["demand_rps"]))]
        dep["unserved_penalty_usd_per_request"] = 5e-6
    body["site"]["gpu_inventory"] = {"h200": 8}
    data = build_data(problem_from_dict(body))
    h = hand_model(body, data)
    idx = index_of(data)
    joint = ((2, 1), (1, 2))
    ks = np.array([idx[m][c] for m, c in enumerate(joint)], dtype=np.int64)
    n = 2001
    for t in range(h.n_periods):
        it_all = sum(h.deps[m].power_w(joint[m], h.deps[m].smax(t, joint[m])) for m in range(2))
        it_none = sum(h.deps[m].power_w(joint[m], 0.0) for m in range(2))
        idle = h.idle_w * (8 - 6)
        # a cap between "serve nothing" and "serve everything": the split matters
        h.cap[t] = h.pue * (idle + it_none + 0.55 * (it_all - it_none))
        data.power_cap_w[t] = h.cap[t]
        s, ok = best_served(data, t, ks)
        assert ok
        got, fits = period_cost(h, t, joint, s)
        assert fits
        grids = [np.linspace(0.0, h.deps[m].smax(t, joint[m]), n) for m in range(2)]
        power = [np.array([h.deps[m].power_w(joint[m], x) for x in grids[m]]) for m in range(2)]
        lost = [
            h.deps[m].penalty * 3600 * h.dt_h * (h.deps[m].demand[t] - grids[m]) for m in range(2)
        ]
        site = h.pue * (power[0][:, None] + power[1][None, :] + idle)
        per_w = h.dt_h * (h.price[t] / 1e6 + h.carbon[t] * h.carbon_price / 1e9)
        cost = site * per_w + lost[0][:, None] + lost[1][None, :]
        best = float(np.min(np.where(site <= h.cap[t], cost, np.inf)))
        step = max(g[1] - g[0] for g in grids)
        per_rps = max(d.penalty * 3600 * h.dt_h for d in h.deps)
        assert got <= best + 1e-12
        assert got >= best - 2 * step * per_rps


# --------------------------------------------------------------------------- one deployment, DP


def one_deployment_request(limit: int | None) -> dict[str, Any]:
    hours = np.arange(24)
    demand = 2.0 + 30.0 * np.exp(-0.5 * ((hours - 14) / 2.5) ** 2)
    price = 60.0 + 50.0 * np.exp(-0.5 * ((hours - 19) / 2.0) ** 2)
    return {
        "period_minutes": 60,
        "site": {
            "gpu_inventory": {"h200": 8},
            "pue": 1.25,
            "idle_gpu_power_w": 100,
            "carbon_price_usd_per_tonne": 60,
        },
        "deployments": [
            {
                "name": "chat",
                "model": "qwen3-32b",
                "gpu": "h200",
                "workload": "fixed:1024:256",
                "demand_rps": [round(float(x), 3) for x in demand],
                "unserved_penalty_usd_per_request": 4e-6,
                "headroom": 0.9,
                "max_gpus": 6,
                "initial": {"n_p": 1, "n_d": 1},
            }
        ],
        "grid": {
            "power_cap_w": 1e6,
            "price_usd_per_mwh": [round(float(x), 2) for x in price],
            "carbon_g_per_kwh": 350.0,
        },
        "transitions": {
            "start_cost_usd": 0.03,
            "stop_cost_usd": 0.01,
            "max_instance_changes_per_period": limit,
        },
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60},
    }


def dp_optimum(h: Hand) -> float:
    """O(T K^2) DP over periods for one deployment under a cap that never binds."""
    (d,) = h.deps
    total_gpus = sum(h.inventory.values())
    configs = d.configs

    def stage(t: int, cfg: tuple[int, int]) -> float:
        per_w = h.dt_h * h.pue * (h.price[t] / 1e6 + h.carbon[t] * h.carbon_price / 1e9)
        idle_w = h.idle_w * (total_gpus - cfg[0] - cfg[1])
        u = d.penalty * 3600.0 * h.dt_h
        # cost is concave in the served load s: its minimum is at s = 0 or s = smax
        return min(
            per_w * (d.power_w(cfg, s) + idle_w) + u * (d.demand[t] - s)
            for s in (0.0, d.smax(t, cfg))
        )

    value = {c: step_cost(h, (d.initial,), (c,)) + stage(0, c) for c in configs}
    for t in range(1, h.n_periods):
        value = {
            c: min(value[a] + step_cost(h, (a,), (c,)) for a in configs) + stage(t, c)
            for c in configs
        }
    return min(value.values())


@pytest.mark.parametrize("limit", [None, 1])
@pytest.mark.parametrize("method", ["auto", "compact"])
def test_one_deployment_equals_dynamic_program(limit: int | None, method: str) -> None:
    body = one_deployment_request(limit)
    data = build_data(problem_from_dict(body))
    h = hand_model(body, data)
    expected = dp_optimum(h)
    assert np.isfinite(expected)
    out = solve(problem_from_dict(with_method(body, method)))
    assert out.priced.violation_free
    assert out.priced.objective_usd == pytest.approx(expected, rel=REL)
    cfgs = [[(int(data.deployments[0].n_p[k]), int(data.deployments[0].n_d[k]))
             for k in out.priced.schedule.config[0]]]  # fmt: skip
    assert hand_objective(h, cfgs, out.priced.schedule.served_rps) == pytest.approx(
        expected, rel=REL
    )
