"""Demand-response what-if and site flexibility curve (issue 5: DR what-if, flexibility).

Small sites are solved exactly (compact MILP, mip_gap 1e-9) so that costs and orders
can be compared strictly; the demo runs with a short time limit, so its checks use
only what holds for any schedule the solver returns (caps, proven bounds).

Hand numbers: Qwen3-32B on H200 idles at 133 W per prefill and 448 W per decode
instance (the capped ramps of the calibration, as in test_tiny), an unused GPU at
120 W, PUE 1.2.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from typing import Any

import numpy as np
import pytest

from formulation.budget import DR_BASELINE_SHARE
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.evaluate import best_served
from formulation.infeasible import InfeasibleError
from formulation.problem import problem_from_dict
from formulation.shed_figures import demand_lost
from formulation.whatif.dr import DEMO_EVENT, demand_response, parse_event
from formulation.whatif.flex import flexibility_curve
from model.errors import InputError

PUE = 1.2
IDLE_W = 120.0
P0_P, P0_D = 133.0, 448.0
EXACT = {"time_limit_s": 30, "mip_gap": 1e-9, "method": "compact"}
TOL = 1e-6


def dep(name: str, demand: list[float], penalty: float = 0.01, **kw: Any) -> dict[str, Any]:
    out = {
        "name": name,
        "model": "qwen3-32b",
        "gpu": "h200",
        "workload": "fixed:1024:256",
        "demand_rps": demand,
        "unserved_penalty_usd_per_request": penalty,
        "max_gpus": 4,
        "initial": {"n_p": 1, "n_d": 1},
    }
    out.update(kw)
    return out


def site(
    deployments: list[dict[str, Any]],
    *,
    gpus: int = 8,
    limit: int | None = None,
    start_cost: float = 0.0,
    price: float | list[float] = 100.0,
) -> dict[str, Any]:
    return {
        "period_minutes": 60,
        "site": {"gpu_inventory": {"h200": gpus}, "pue": PUE, "idle_gpu_power_w": IDLE_W},
        "deployments": deployments,
        "grid": {"power_cap_w": 20_000, "price_usd_per_mwh": price, "carbon_g_per_kwh": 300},
        "transitions": {
            "max_instance_changes_per_period": limit,
            "start_cost_usd": start_cost,
        },
        "solver": dict(EXACT),
    }


def twins() -> dict[str, Any]:
    """Two deployments identical but for the value of their requests."""
    return site(
        [dep("cheap", [6.0] * 4, 0.001), dep("dear", [6.0] * 4, 0.004)],
        limit=1,
    )


def powers(resp: dict[str, Any]) -> list[float]:
    return [p["power_w"] for p in resp["periods"]]


def check_report(r: dict[str, Any]) -> None:
    """Invariants every report satisfies, whatever the event."""
    ev = r["event"]
    win = range(ev["start_period"], ev["end_period"])
    base, resp = r["baseline"], r["response"]
    for j, t in enumerate(win):
        cap = ev["cap_w"][j]
        assert cap <= ev["request_cap_w"][j] + TOL
        assert resp["periods"][t]["power_cap_w"] == pytest.approx(cap)
        assert resp["periods"][t]["power_w"] <= cap * (1 + 1e-7) + TOL
    shed = np.array(powers(base)) - np.array(powers(resp))
    assert r["power_shed_w"] == pytest.approx(shed.tolist(), abs=1e-6)
    assert r["max_shed_w"] == pytest.approx(max(shed[t] for t in win))
    delta = resp["objective_usd"] - base["objective_usd"]
    assert r["cost_delta_usd"] == pytest.approx(delta, abs=1e-9)
    b = r["cost_delta_breakdown"]
    assert sum(b.values()) == pytest.approx(delta, abs=1e-6)
    lost = sum(d["value_usd"] for d in r["demand_lost"].values())
    assert lost == pytest.approx(
        resp["totals"]["unserved_value_usd"] - base["totals"]["unserved_value_usd"], abs=1e-6
    )
    # the response is a restriction of the baseline problem
    assert resp["objective_usd"] >= base["lower_bound_usd"] - 1e-6
    assert resp["lower_bound_usd"] >= base["lower_bound_usd"] - 1e-9


# --------------------------------------------------------------------------- what-if


def test_small_event_sheds_the_cheaper_twin_first_and_costs_no_less() -> None:
    r = demand_response(twins(), {"start_period": 1, "end_period": 3, "reduction_w": 600})
    check_report(r)
    base, resp = r["baseline"], r["response"]
    assert base["status"] == resp["status"] == "optimal"
    # the reduction is measured against the baseline schedule's power
    for j, t in enumerate(range(1, 3)):
        assert r["event"]["cap_w"][j] == pytest.approx(base["periods"][t]["power_w"] - 600)
        assert r["power_shed_w"][t] >= 600 - 1e-6
    lost = r["demand_lost"]
    assert lost["cheap"]["requests"] > 1000  # the cut forces shedding
    assert lost["cheap"]["requests"] >= lost["dear"]["requests"] - 1e-6
    assert lost["dear"]["requests"] == pytest.approx(0.0, abs=1e-3)
    assert r["cost_delta_usd"] >= -1e-9
    assert r["cost_delta_usd"] > 0  # shedding valuable demand costs money
    # the console tells a posted event's demand lost from its two plans in these terms
    told = demand_lost(base["periods"], resp["periods"], 1.0, {"cheap": 0.001, "dear": 0.004})
    for name, d in lost.items():
        assert told[name]["requests"] == pytest.approx(d["requests"], abs=1e-6)
        assert told[name]["value_usd"] == pytest.approx(d["value_usd"], abs=1e-9)
    # nothing changes outside the window
    assert r["power_shed_w"][0] == pytest.approx(0.0, abs=1e-6)
    assert r["power_shed_w"][3] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    ("event", "caps"),
    [
        ({"cap_w": 2900.0}, [2900.0, 2900.0]),
        ({"cap_w": 50_000.0}, [20_000.0, 20_000.0]),  # never above the request's cap
        ({"reduction_pct": 86.0}, [2800.0, 2800.0]),  # of the request's 20 kW cap
    ],
)
def test_cap_forms(event: dict[str, Any], caps: list[float]) -> None:
    r = demand_response(twins(), {"start_period": 1, "end_period": 3, **event})
    check_report(r)
    assert r["event"]["cap_w"] == pytest.approx(caps)
    assert r["event"]["kind"] == next(iter(event))
    assert r["cost_delta_usd"] >= -1e-9
    if caps[0] < 3000:  # the baseline draws more than that: something is shed
        assert r["demand_lost"]["cheap"]["requests"] >= r["demand_lost"]["dear"]["requests"]
        assert r["demand_lost"]["cheap"]["requests"] > 0
    else:
        assert r["cost_delta_usd"] == pytest.approx(0.0, abs=1e-9)


def test_three_values_shed_in_order() -> None:
    body = site(
        [
            dep("low", [5.0] * 3, 0.001),
            dep("mid", [5.0] * 3, 0.003),
            dep("high", [5.0] * 3, 0.009),
        ],
        gpus=12,
    )
    # room for "high" in full and "mid" in part: "low" goes off first
    r = demand_response(body, {"start_period": 1, "end_period": 2, "cap_w": 3300.0})
    check_report(r)
    lost = {n: d["requests"] for n, d in r["demand_lost"].items()}
    assert lost["low"] == pytest.approx(5.0 * 3600)
    assert lost["low"] > lost["mid"] > 1000
    assert lost["high"] == pytest.approx(0.0, abs=1e-3)


def test_preparation_and_recovery_follow_the_transition_limit() -> None:
    """One deployment at 2P2D, at most 2 instance changes per period: to be off in
    periods 2-3 it must step down through 1P1D in period 1, and climbs back through
    1P1D in period 4 to 2P2D in period 5."""
    body = site([dep("chat", [20.0] * 6, initial={"n_p": 2, "n_d": 2})], limit=2, start_cost=0.01)
    floor = PUE * IDLE_W * 8
    r = demand_response(body, {"start_period": 2, "end_period": 4, "cap_w": floor})
    check_report(r)
    cfg = [
        (p["deployments"]["chat"]["n_p"], p["deployments"]["chat"]["n_d"])
        for p in r["response"]["periods"]
    ]
    assert cfg == [(2, 2), (1, 1), (0, 0), (0, 0), (1, 1), (2, 2)]
    assert {
        (p["deployments"]["chat"]["n_p"], p["deployments"]["chat"]["n_d"])
        for p in r["baseline"]["periods"]
    } == {(2, 2)}
    assert r["preparation"] == {
        "first_changed_period": 1,
        "periods": 1,
        "instance_starts": 0,
        "instance_stops": 2,
    }
    rec = r["recovery"]
    assert rec["rejoined"] and rec["rejoin_period"] == 5 and rec["periods"] == 1
    assert (rec["instance_starts"], rec["instance_stops"]) == (4, 0)
    assert r["cost_delta_breakdown"]["transition_usd"] == pytest.approx(0.04)


def test_infeasible_event_gives_the_deepest_feasible_cap_per_period() -> None:
    """From 2P2D with 2 changes per period the site reaches 1P1D in the window's first
    period and "off" from the second: the deepest caps are PUE x (8 idle GPUs + the
    net power of 1P1D), then PUE x 8 idle GPUs."""
    body = site([dep("chat", [6.0] * 4, initial={"n_p": 2, "n_d": 2})], limit=2)
    one_one = P0_P + P0_D - 2 * IDLE_W
    deepest = [PUE * (8 * IDLE_W + one_one), PUE * 8 * IDLE_W, PUE * 8 * IDLE_W]
    with pytest.raises(InfeasibleError) as err:
        demand_response(body, {"start_period": 0, "end_period": 3, "cap_w": 1000.0})
    conflicts = err.value.conflicts
    assert [c["period"] for c in conflicts] == [0, 1, 2]
    assert [c["deepest_feasible_cap_w"] for c in conflicts] == pytest.approx(deepest)
    assert all(c["power_cap_w"] == 1000.0 for c in conflicts)
    # just below the first period's floor: only that period conflicts
    with pytest.raises(InfeasibleError) as err:
        demand_response(body, {"start_period": 0, "end_period": 3, "cap_w": deepest[0] - 2})
    assert [c["period"] for c in err.value.conflicts] == [0]
    assert err.value.conflicts[0]["deepest_feasible_cap_w"] == pytest.approx(deepest[0])
    # at the deepest cap the event is met
    r = demand_response(body, {"start_period": 0, "end_period": 3, "cap_w": deepest[0]})
    check_report(r)
    assert powers(r["response"])[1] == pytest.approx(deepest[1])


@pytest.mark.slow
def test_demo_event() -> None:
    body = demo_request()
    body["solver"]["time_limit_s"] = 5
    r = demand_response(body, DEMO_EVENT)
    check_report(r)
    ev = r["event"]
    assert (ev["start_period"], ev["end_period"]) == (48, 56)  # 12:00-14:00
    assert ev["cap_w"] == pytest.approx([0.8 * 32_000.0] * 8)
    assert r["max_shed_w"] > 0
    assert r["cost_delta_usd"] >= -1e-6
    assert sum(d["value_usd"] for d in r["demand_lost"].values()) > 0
    # the demo's own event (17:00-20:00, 24 kW) still holds in the response
    for p in r["response"]["periods"][68:80]:
        assert p["power_w"] <= 24_000.0 * (1 + 1e-7)


@pytest.mark.slow  # 3 s: the demo's two solves within one 1.5 s limit
def test_the_two_solves_share_the_requests_one_time_limit() -> None:
    """The request's time limit bounds both solves together: the baseline is given
    DR_BASELINE_SHARE of it, the response what is left after the baseline's reported
    time (each reports the limit it had), and neither proves the demo's optimum in that
    time. How long each took against its limit is wall-clock time, which a loaded
    machine stretches: that is measured by benchmarks, not asserted here."""
    limit = 1.5
    body = demo_request()
    body["solver"]["time_limit_s"] = limit
    r = demand_response(body, DEMO_EVENT)
    check_report(r)
    base, resp = r["baseline"], r["response"]
    assert base["solver"]["time_limit_s"] <= DR_BASELINE_SHARE * limit + 1e-3
    assert resp["solver"]["time_limit_s"] <= limit - base["solve_time_s"] + 1e-3
    assert base["status"] == resp["status"] == "time_limit"


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"start_period": 1, "end_period": 5, "cap_w": 1.0}, "event.end_period"),
        ({"start_period": 4, "end_period": 5, "cap_w": 1.0}, "event.start_period"),
        ({"start_period": 2, "end_period": 2, "cap_w": 1.0}, "event.end_period"),
        ({"start_period": -1, "end_period": 2, "cap_w": 1.0}, "event.start_period"),
        ({"start_period": 1.5, "end_period": 2, "cap_w": 1.0}, "event.start_period"),
        ({"start_period": 1, "cap_w": 1.0}, "event.end_period"),
        ({"start_minute": 0, "end_minute": 300, "cap_w": 1.0}, "event.end_minute"),
        ({"start_minute": 240, "end_minute": 250, "cap_w": 1.0}, "event.start_minute"),
        ({"start_minute": 10, "end_period": 2, "cap_w": 1.0}, "event.start_minute"),
        ({"cap_w": 1.0}, "event.start_period"),
        ({"start_period": 0, "end_period": 1}, "event.cap_w"),
        ({"start_period": 0, "end_period": 1, "cap_w": 1.0, "reduction_w": 5}, "event.reduction_w"),
        ({"start_period": 0, "end_period": 1, "cap_w": -1.0}, "event.cap_w"),
        ({"start_period": 0, "end_period": 1, "reduction_w": -5}, "event.reduction_w"),
        ({"start_period": 0, "end_period": 1, "reduction_pct": 101}, "event.reduction_pct"),
        ({"start_period": 0, "end_period": 1, "reduction_pct": -1}, "event.reduction_pct"),
        ({"start_period": 0, "end_period": 1, "cap_w": float("nan")}, "event.cap_w"),
        ({"start_period": 0, "end_period": 1, "cap_w": 1.0, "until": 3}, "event.until"),
    ],
)
def test_invalid_events_name_the_field(event: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        demand_response(twins(), event)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_a_window_in_minutes_covers_every_overlapping_period() -> None:
    body = twins()
    body["period_minutes"] = 15
    problem = problem_from_dict(body)
    ev = parse_event({"start_minute": 20, "end_minute": 50, "cap_w": 1.0}, problem)
    assert (ev.start, ev.end) == (1, 4)
    # the answer says the window was widened to whole periods, and what was asked
    record = ev.record(15)
    assert (record["start_minute"], record["end_minute"]) == (15, 60)
    assert record["asked_minutes"] == [20, 50]
    assert "minutes 20-50 widened to the whole periods they touch, 15-60" in record["window_note"]
    ev = parse_event({"start_minute": 15, "end_minute": 30, "reduction_pct": 5}, problem)
    assert (ev.start, ev.end, ev.kind, ev.value) == (1, 2, "reduction_pct", 5.0)
    assert "window_note" not in ev.record(15)  # on period boundaries: as asked
    ev = parse_event(
        {"start_minute": 0, "end_minute": 60, "cap_w": None, "reduction_w": 2}, problem
    )
    assert (ev.start, ev.end, ev.kind) == (0, 4, "reduction_w")


def test_request_errors_can_be_named_under_a_prefix() -> None:
    body = twins()
    body["deployments"][0]["gpu"] = "b200"
    with pytest.raises(InputError) as err:
        demand_response(
            body, {"start_period": 0, "end_period": 1, "cap_w": 1.0}, request_field="request."
        )
    assert err.value.field == "request.deployments[0].gpu"


# --------------------------------------------------------------------------- flexibility


def own_optimum(data: Any, m: int, t: int) -> tuple[int, float, float]:
    """Deployment ``m``'s best (config, served, cost) in period ``t`` alone, uncapped, by
    enumeration of every allowed configuration at zero and at full load (the cost is
    concave in the served load)."""
    d = data.deployments[m]
    cw, u, lam = data.cost_usd_per_w[t], d.unserved_usd_per_rps[t], d.demand_rps[t]
    best = (0, 0.0, np.inf)
    for k in np.flatnonzero(d.allowed):
        for s in (0.0, float(d.smax_rps[t, k])):
            c = cw * (float(d.power_w(k, s)[0]) - IDLE_W * d.gpus[k]) + u * (lam - s)
            if c < best[2] - 1e-12:
                best = (int(k), s, c)
    return best


def brute_cost(data: Any, t: int, cap: float) -> float:
    """Least period cost within ``cap`` over every pair of configurations, each with its
    exact best served loads (formulation.evaluate.best_served)."""
    caps = data.power_cap_w.copy()
    caps[t] = cap * (1 + 1e-9) + 1e-6
    capped = dataclasses.replace(data, power_cap_w=caps)
    best = np.inf
    ranges = [np.flatnonzero(d.allowed) for d in data.deployments]
    for ks in itertools.product(*ranges):
        ks_arr = np.array(ks, dtype=np.int64)
        used = sum(int(d.gpus[k]) for d, k in zip(data.deployments, ks, strict=True))
        if used > int(data.pool_gpus.sum()):
            continue
        served, ok = best_served(capped, t, ks_arr)
        if not ok:
            continue
        it = sum(
            float(d.power_w(int(k), float(s))[0])
            for d, k, s in zip(data.deployments, ks, served, strict=True)
        )
        it += IDLE_W * (int(data.pool_gpus.sum()) - used)
        unserved = sum(
            (d.demand_rps[t] - s) * d.unserved_usd_per_rps[t]
            for d, s in zip(data.deployments, served, strict=True)
        )
        best = min(best, float(data.cost_usd_per_w[t]) * it + float(unserved))
    return best


def check_curve(per: dict[str, Any], names: list[str]) -> None:
    pts = per["points"]
    caps = [p["cap_w"] for p in pts]
    assert caps == sorted(caps)
    if not per.get("unevaluated_caps_w"):  # else the least caps may be among those left out
        assert caps[0] == pytest.approx(per["min_site_power_w"])
    assert caps[-1] == pytest.approx(per["unconstrained_power_w"])
    for a, b in itertools.pairwise(pts):
        assert b["served_value_usd_per_h"] >= a["served_value_usd_per_h"] - 1e-9
        assert b["period_cost_usd"] <= a["period_cost_usd"] + 1e-9
    for p in pts:
        assert p["site_power_w"] <= p["cap_w"] * (1 + 1e-7) + 1e-6
        assert set(p["served_rps"]) == set(names) == set(p["configurations"])


def test_flexibility_is_monotone_with_exact_end_points() -> None:
    body = site([dep("a", [3.0, 6.0, 4.0], 0.002), dep("b", [2.0, 5.0, 1.0], 0.01)])
    body["deployments"][1]["workload"] = "fixed:4096:256"
    data = build_data(problem_from_dict(body))
    r = flexibility_curve(body, 1, 15)
    assert r["deployments"] == ["a", "b"]
    (per,) = r["periods"]
    assert per["period"] == 1 and per["method"] == "pareto"
    check_curve(per, ["a", "b"])
    pts = per["points"]
    assert len(pts) == 15
    # least draw: everything off, 8 idle GPUs, nothing served
    assert per["min_site_power_w"] == pytest.approx(PUE * IDLE_W * 8)
    assert pts[0]["site_power_w"] == pytest.approx(PUE * IDLE_W * 8)
    assert pts[0]["served_rps"] == {"a": 0.0, "b": 0.0}
    assert pts[0]["served_value_usd_per_h"] == 0.0
    # unconstrained: each deployment's own optimum
    top = pts[-1]
    for m, name in enumerate(["a", "b"]):
        k, s, _ = own_optimum(data, m, 1)
        d = data.deployments[m]
        assert top["served_rps"][name] == pytest.approx(s)
        assert (top["configurations"][name]["n_p"], top["configurations"][name]["n_d"]) == (
            int(d.n_p[k]),
            int(d.n_d[k]),
        )
    assert top["served_rps"]["a"] > 0 and top["served_rps"]["b"] > 0
    # every point is the one-period optimum within its cap
    for p in pts:
        assert p["period_cost_usd"] == pytest.approx(brute_cost(data, 1, p["cap_w"]), rel=1e-9)


def test_flexibility_of_every_period_and_validation() -> None:
    body = site([dep("a", [3.0, 6.0, 4.0]), dep("b", [2.0, 5.0, 0.0])])
    r = flexibility_curve(body, None, 5)
    assert [p["period"] for p in r["periods"]] == [0, 1, 2]
    for per in r["periods"]:
        check_curve(per, ["a", "b"])
    # no demand for b in period 2: it stays off all along the curve
    assert {p["configurations"]["b"]["n_p"] for p in r["periods"][2]["points"]} == {0}
    for period, points, field in ((3, 5, "period"), (-1, 5, "period"), (0, 1, "points")):
        with pytest.raises(InputError) as err:
            flexibility_curve(body, period, points)
        assert err.value.field == field


def test_flexibility_when_a_pool_can_bind_uses_the_milp() -> None:
    body = site([dep("a", [8.0, 8.0], 0.01), dep("b", [8.0, 8.0], 0.02)], gpus=5)
    r = flexibility_curve(body, 0, 6)
    assert r["status"] == "complete" and "unevaluated_periods" not in r
    (per,) = r["periods"]
    assert per["method"] == "milp" and "unevaluated_caps_w" not in per
    check_curve(per, ["a", "b"])
    data = build_data(problem_from_dict(body))
    for p in per["points"]:
        gpus = sum(c["n_p"] + c["n_d"] for c in p["configurations"].values())
        assert gpus <= 5
        assert p["period_cost_usd"] == pytest.approx(brute_cost(data, 0, p["cap_w"]), rel=1e-5)


def test_flexibility_keeps_to_the_requests_time_limit() -> None:
    """A curve whose MILPs need more than the request's time limit: it stops when the
    limit runs out and says so (status time_limit, the caps and periods left out
    listed), and what it did evaluate is
    a curve as any other. Before, nothing bounded the curve as a whole (each MILP had
    its share of the limit, and at least 0.2 s): this request took 3 to 4 s."""
    demand = [8.0, 8.0, 7.0, 6.0]
    body = site([dep("a", demand, 0.01), dep("b", demand[::-1], 0.02)], gpus=5)
    body["solver"] = {"time_limit_s": 0.3}
    points = 30
    r = flexibility_curve(body, None, points)
    assert r["status"] == "time_limit"
    done = {per["period"] for per in r["periods"]}
    assert done and done.isdisjoint(r.get("unevaluated_periods", []))
    assert done | set(r.get("unevaluated_periods", [])) == set(range(len(demand)))
    left = sum(len(per.get("unevaluated_caps_w", [])) for per in r["periods"])
    assert left + len(r.get("unevaluated_periods", [])) > 0
    for per in r["periods"]:
        assert per["method"] == "milp"
        check_curve(per, ["a", "b"])
        evaluated = len(per["points"]) + len(per.get("infeasible_caps_w", []))
        assert evaluated + len(per.get("unevaluated_caps_w", [])) == points


def test_demo_flexibility_at_the_evening_peak() -> None:
    body = demo_request()
    data = build_data(problem_from_dict(body))
    r = flexibility_curve(copy.deepcopy(body), 72, 25)
    (per,) = r["periods"]
    names = [d["name"] for d in body["deployments"]]
    check_curve(per, names)
    pts = per["points"]
    assert len(pts) == 25
    # every deployment may be off: the least draw is the idle site, serving nothing
    assert per["min_site_power_w"] == pytest.approx(PUE * IDLE_W * 64)
    assert pts[0]["total_served_rps"] == 0.0
    for m, name in enumerate(names):
        _, s, _ = own_optimum(data, m, 72)
        assert pts[-1]["served_rps"][name] == pytest.approx(s)
    # value per hour of 15-minute periods: served req/s x $/request x 3600 s
    penalty = {d["name"]: d["unserved_penalty_usd_per_request"] for d in body["deployments"]}
    for p in pts:
        want = sum(p["served_rps"][n] * penalty[n] * 3600.0 for n in names)
        assert p["served_value_usd_per_h"] == pytest.approx(want)
    assert pts[-1]["served_value_usd_per_h"] > pts[len(pts) // 2]["served_value_usd_per_h"] > 0


def test_progress_of_a_flexibility_curve_and_of_a_what_if() -> None:
    """A monitor sees a curve's evaluations done of its total, up to the total, and
    stops it when it asks to (the caps left listed); a what-if's solves done of two,
    each solve's phase named after it."""
    seen: list[dict[str, Any]] = []
    out = flexibility_curve(twins(), 1, 6, monitor=lambda s: seen.append(s) or False)
    assert out["status"] == "complete"
    assert [s["total"] for s in seen] == [6] * len(seen)
    done = [s["done"] for s in seen]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 6
    assert all(s["elapsed_s"] >= 0 for s in seen)
    seen.clear()
    out = flexibility_curve(twins(), 1, 6, monitor=lambda s: seen.append(s) or s["done"] >= 3)
    curve = out["periods"][0]
    assert out["status"] == "time_limit" and curve["unevaluated_caps_w"]
    assert len(curve["points"]) + len(curve["unevaluated_caps_w"]) == 6
    seen.clear()
    demand_response(
        twins(),
        {"start_period": 1, "end_period": 3, "reduction_w": 600},
        monitor=lambda s: seen.append(s) or False,
    )
    assert {s["total"] for s in seen} == {2}
    assert {s["done"] for s in seen} == {0, 1, 2}
    assert any(s["phase"].startswith("baseline: ") for s in seen if s["done"] == 0)
    assert any(s["phase"].startswith("response: ") for s in seen if s["done"] == 1)
