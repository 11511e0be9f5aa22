"""Tiny schedules whose optimum is checked by hand (SPEC 4, 5).

Qwen3-32B on H200 with the fixed workload 1024:256. Capacities come from the
analytical core (``model.capacity.evaluate``, SPEC 2.5); power and money are computed
here from SPEC 2.6 and 5: the capped ramps of calibrations.json (paper Tab. 3),

    prefill  min(133 + 566 x, 692) W        decode  min(448 + 458 x, 678) W,

site power = PUE x (deployment power + 120 W x idle GPUs), and each period costs
``site_w x dt_h x (price / 1e6 + carbon_g_per_kwh x carbon_price / 1e9)`` plus
``penalty x unserved_rps x 3600 dt_h`` plus start/stop costs.
"""

from __future__ import annotations

from typing import Any

import pytest

from formulation.problem import problem_from_dict
from formulation.results import response
from formulation.solve import solve
from model.capacity import evaluate
from model.operations import SpecRequest, resolve_spec

P0_P, GAMMA_P, PSAT_P = 133.0, 566.0, 692.0
P0_D, GAMMA_D, PSAT_D = 448.0, 458.0, 678.0
IDLE_W = 120.0
PUE = 1.2
DT_H = 0.25
WORKLOAD = "fixed:1024:256"

_CAP = evaluate(resolve_spec(SpecRequest("qwen3-32b", "h200", WORKLOAD, {})), [1, 2, 1], [1, 1, 2])
MU_P = float(_CAP.mu_p_rps[0])  # one prefill instance
MU_D_MAX = float(_CAP.mu_d_max_rps[0])  # one decode instance, no reservations
MU = {(1, 1): float(_CAP.capacity_rps[0]), (2, 1): float(_CAP.capacity_rps[1])}
MU[(1, 2)] = float(_CAP.capacity_rps[2])

METHODS = ["auto", "compact"]


def it_power_w(n_p: int, n_d: int, load_rps: float) -> float:
    """SPEC 2.6: ``n_P p_P(s / (n_P mu_P)) + n_D p_D(s / (n_D mu_D_max))``."""
    if n_p == 0:
        return 0.0
    pp = min(P0_P + GAMMA_P * load_rps / (n_p * MU_P), PSAT_P)
    pd = min(P0_D + GAMMA_D * load_rps / (n_d * MU_D_MAX), PSAT_D)
    return n_p * pp + n_d * pd


def period_usd(site_w: float, price: float, carbon: float = 0.0, cprice: float = 0.0) -> float:
    return site_w * DT_H * (price / 1e6 + carbon * cprice / 1e9)


def request(
    demand: list[float],
    cap: float | list[float],
    *,
    price: float | list[float] = 100.0,
    carbon: float | list[float] = 0.0,
    carbon_price: float = 0.0,
    penalty: float = 1.0,
    max_gpus: int = 2,
    inventory: int = 2,
    headroom: float = 1.0,
    initial: tuple[int, int] = (0, 0),
    start: float = 0.0,
    stop: float = 0.0,
    method: str = "auto",
) -> dict[str, Any]:
    return {
        "period_minutes": 15,
        "site": {
            "gpu_inventory": {"h200": inventory},
            "pue": PUE,
            "idle_gpu_power_w": IDLE_W,
            "carbon_price_usd_per_tonne": carbon_price,
        },
        "deployments": [
            {
                "name": "chat",
                "model": "qwen3-32b",
                "gpu": "h200",
                "workload": WORKLOAD,
                "demand_rps": demand,
                "unserved_penalty_usd_per_request": penalty,
                "headroom": headroom,
                "max_gpus": max_gpus,
                "initial": {"n_p": initial[0], "n_d": initial[1]},
            }
        ],
        "grid": {"power_cap_w": cap, "price_usd_per_mwh": price, "carbon_g_per_kwh": carbon},
        "transitions": {"start_cost_usd": start, "stop_cost_usd": stop},
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60, "method": method},
    }


def plan(body: dict[str, Any]) -> dict[str, Any]:
    resp = response(solve(problem_from_dict(body)))
    assert resp["status"] == "optimal"
    return resp


def schedule(resp: dict[str, Any]) -> list[tuple[int, int, float]]:
    return [
        (p["deployments"]["chat"]["n_p"], p["deployments"]["chat"]["n_d"],
         p["deployments"]["chat"]["served_rps"])
        for p in resp["periods"]
    ]  # fmt: skip


def test_hand_model_matches_the_core_at_capacity() -> None:
    # guards the hand formula above: at capacity it must give the core's P(mu)
    assert it_power_w(1, 1, MU[(1, 1)]) == pytest.approx(float(_CAP.power_w[0]), rel=1e-12)
    assert it_power_w(2, 1, MU[(2, 1)]) == pytest.approx(float(_CAP.power_w[1]), rel=1e-12)
    assert 5.0 < MU[(1, 1)] < 12.0  # demand of 5 and 3 req/s below 1P1D capacity


@pytest.mark.parametrize("method", METHODS)
def test_one_p_one_d_serves_all_demand(method: str) -> None:
    demand, price, carbon = [5.0, 3.0], [100.0, 80.0], [300.0, 200.0]
    resp = plan(
        request(
            demand,
            1e4,
            price=price,
            carbon=carbon,
            carbon_price=40.0,
            start=0.1,
            stop=0.05,
            method=method,
        )
    )
    assert schedule(resp) == [(1, 1, pytest.approx(5.0)), (1, 1, pytest.approx(3.0))]
    site = [PUE * it_power_w(1, 1, s) for s in demand]  # both GPUs run: none idle
    energy = sum(period_usd(w, c) for w, c in zip(site, price, strict=True))
    carbon_usd = sum(period_usd(w, 0.0, e, 40.0) for w, e in zip(site, carbon, strict=True))
    expected = energy + carbon_usd + 2 * 0.1  # two instances started from off
    assert resp["objective_usd"] == pytest.approx(expected, rel=1e-9)
    tot = resp["totals"]
    assert tot["cost_usd"] == pytest.approx(energy, rel=1e-9)
    assert tot["energy_kwh"] == pytest.approx(sum(site) * DT_H / 1e3, rel=1e-9)
    assert tot["carbon_kg"] == pytest.approx(
        sum(w * DT_H / 1e3 * e / 1e3 for w, e in zip(site, carbon, strict=True)), rel=1e-9
    )
    assert tot["transition_cost_usd"] == pytest.approx(0.2)
    assert tot["unserved_requests"] == pytest.approx(0.0, abs=1e-6)
    assert tot["served_requests"] == pytest.approx(8.0 * 900.0)
    for per, w in zip(resp["periods"], site, strict=True):
        assert per["power_w"] == pytest.approx(w, rel=1e-9)
        assert per["idle_gpus"] == 0


@pytest.mark.parametrize("method", METHODS)
def test_tiny_penalty_and_high_price_turns_off(method: str) -> None:
    demand, penalty, price = [5.0, 3.0], 1e-6, 1000.0
    resp = plan(
        request(demand, 1e4, price=price, penalty=penalty, initial=(1, 1), stop=0.05, method=method)
    )
    assert schedule(resp) == [(0, 0, 0.0), (0, 0, 0.0)]
    idle_site = PUE * 2 * IDLE_W
    expected = (
        2 * period_usd(idle_site, price)
        + penalty * 900.0 * sum(demand)
        + 2 * 0.05  # 1P1D stopped in period 0
    )
    assert resp["objective_usd"] == pytest.approx(expected, rel=1e-9)
    assert [p["power_w"] for p in resp["periods"]] == pytest.approx([idle_site] * 2)
    assert resp["totals"]["unserved_requests"] == pytest.approx(900.0 * sum(demand))


@pytest.mark.parametrize("method", METHODS)
def test_cap_allowing_only_off_forces_off_in_that_period(method: str) -> None:
    demand = [5.0, 3.0, 4.0]
    idle_site = PUE * 2 * IDLE_W  # 288 W; 1P1D at zero load draws 1.2 x 581 = 697 W
    cap = [1e4, idle_site + 10.0, 1e4]
    resp = plan(request(demand, cap, start=0.1, stop=0.05, method=method))
    assert schedule(resp) == [
        (1, 1, pytest.approx(5.0)),
        (0, 0, 0.0),
        (1, 1, pytest.approx(4.0)),
    ]
    site = [PUE * it_power_w(1, 1, 5.0), idle_site, PUE * it_power_w(1, 1, 4.0)]
    expected = (
        sum(period_usd(w, 100.0) for w in site)
        + 1.0 * 3.0 * 900.0  # period 1 sheds its 3 req/s
        + 4 * 0.1  # started in periods 0 and 2
        + 2 * 0.05  # stopped in period 1
    )
    assert resp["objective_usd"] == pytest.approx(expected, rel=1e-9)
    p1 = resp["periods"][1]
    assert p1["power_w"] == pytest.approx(idle_site)
    assert p1["power_w"] <= p1["power_cap_w"]


@pytest.mark.parametrize("method", METHODS)
def test_partial_cap_sheds_exactly_what_does_not_fit(method: str) -> None:
    # no ramp saturates below 7 req/s on 1P1D: P(s) = 581 + s (566/mu_P + 458/mu_D_max)
    slope = GAMMA_P / MU_P + GAMMA_D / MU_D_MAX
    fit = 4.0
    cap = PUE * (P0_P + P0_D + slope * fit)
    resp = plan(request([6.0], cap, method=method))
    assert schedule(resp) == [(1, 1, pytest.approx(fit, rel=1e-7))]
    expected = period_usd(cap, 100.0) + 1.0 * (6.0 - fit) * 900.0
    assert resp["objective_usd"] == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("method", METHODS)
def test_headroom_limits_served_load(method: str) -> None:
    limit = 0.5 * MU[(1, 1)]
    resp = plan(request([8.0], 1e4, headroom=0.5, method=method))
    assert schedule(resp) == [(1, 1, pytest.approx(limit, rel=1e-9))]
    expected = period_usd(PUE * it_power_w(1, 1, limit), 100.0) + (8.0 - limit) * 900.0
    assert resp["objective_usd"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_picks_the_cheapest_configuration_per_period(method: str) -> None:
    # max_gpus 3: off, 1P1D, 1P2D, 2P1D. At 12 req/s only 2P1D has the capacity;
    # at 9 req/s 1P1D (one GPU idle at 120 W) draws less than 2P1D and 1P2D.
    assert MU[(1, 1)] < 12.0 < MU[(2, 1)] and MU[(1, 2)] < 12.0
    at9 = {c: it_power_w(*c, 9.0) + IDLE_W * (3 - sum(c)) for c in [(1, 1), (2, 1), (1, 2)]}
    assert min(at9, key=at9.__getitem__) == (1, 1)
    resp = plan(request([12.0, 9.0], 1e4, max_gpus=3, inventory=3, method=method))
    assert schedule(resp) == [(2, 1, pytest.approx(12.0)), (1, 1, pytest.approx(9.0))]
    site = [PUE * it_power_w(2, 1, 12.0), PUE * at9[(1, 1)]]
    assert resp["objective_usd"] == pytest.approx(sum(period_usd(w, 100.0) for w in site), rel=1e-9)
    assert resp["periods"][1]["idle_gpus"] == 1
