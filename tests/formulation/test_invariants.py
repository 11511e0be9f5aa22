"""Invariants of a solved schedule, checked on the demo's response JSON alone (SPEC 4,
5, 6.1): caps, site power accounting, inventory, served load, transitions, totals,
baselines and the reported gap."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np
import pytest

from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from formulation.results import response, to_csv
from formulation.solve import solve
from model.capacity import Coefficients, evaluate
from model.operations import SpecRequest, resolve_spec
from model.spec import DEFAULT_VARIANT

pytestmark = pytest.mark.slow

REL = 1e-6


def fleet_request(copies: int) -> dict[str, Any]:
    """The demo's deployments ``copies`` times over, with the inventory and cap scaled
    alike: more deployments than one-period enumeration takes."""
    body = demo_request()
    deps = []
    for i in range(copies):
        for d in body["deployments"]:
            deps.append({**d, "name": f"{d['name']}-{i}"})
    body["deployments"] = deps
    body["site"]["gpu_inventory"] = {"h200": 64 * copies}
    body["grid"]["power_cap_w"] = [c * copies for c in body["grid"]["power_cap_w"]]
    return body


@pytest.fixture(scope="module", params=["demo", "demo-volume", "demo-paper", "fleet"])
def demo(request: pytest.FixtureRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo with each multiplier method and with the paper's memory balance (the
    default is the admission variant), and a 9-deployment site, solved; the response is
    checked from its JSON alone."""
    body = fleet_request(3) if request.param == "fleet" else demo_request()
    body["solver"]["time_limit_s"] = 10
    if request.param == "demo-volume":
        body["solver"]["method"] = "volume"
    if request.param == "demo-paper":
        for d in body["deployments"]:
            d["model_variant"] = "paper"
    resp = response(solve(problem_from_dict(body)))
    # the contract is JSON: everything must survive a strict round trip
    return body, json.loads(json.dumps(resp, allow_nan=False))


def deps_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in body["deployments"]}


def test_shape(demo: tuple[dict[str, Any], dict[str, Any]]) -> None:
    body, resp = demo
    n = len(body["deployments"][0]["demand_rps"])
    assert [p["index"] for p in resp["periods"]] == list(range(n))
    for p in resp["periods"]:
        assert set(p["deployments"]) == set(deps_of(body))
    assert set(resp["baselines"]) == {"static_peak", "greedy", "greedy_ramped"}
    assert resp["baselines"]["greedy_ramped"]["limit_violations"] == 0


def test_site_power_within_cap(demo: tuple[dict[str, Any], dict[str, Any]]) -> None:
    body, resp = demo
    for p, cap in zip(resp["periods"], body["grid"]["power_cap_w"], strict=True):
        assert p["power_cap_w"] == pytest.approx(cap)
        assert p["power_w"] <= p["power_cap_w"] * (1 + REL)


def test_site_power_accounting(demo: tuple[dict[str, Any], dict[str, Any]]) -> None:
    body, resp = demo
    site = body["site"]
    inventory = site["gpu_inventory"]["h200"]
    for p in resp["periods"]:
        deps = p["deployments"].values()
        used = sum(d["n_p"] + d["n_d"] for d in deps)  # one GPU per instance
        assert used <= inventory
        assert p["idle_gpus"] == inventory - used
        it_w = sum(d["power_w"] for d in deps) + p["idle_gpus"] * site["idle_gpu_power_w"]
        assert p["power_w"] == pytest.approx(site["pue"] * it_w, rel=1e-9)


def test_served_within_demand_and_headroom(demo: tuple[dict[str, Any], dict[str, Any]]) -> None:
    body, resp = demo
    raw = deps_of(body)
    for p in resp["periods"]:
        for name, d in p["deployments"].items():
            assert d["demand_rps"] == pytest.approx(raw[name]["demand_rps"][p["index"]])
            assert -1e-9 <= d["served_rps"] <= d["demand_rps"] * (1 + 1e-9) + 1e-9
            assert d["served_rps"] <= raw[name]["headroom"] * d["capacity_rps"] * (1 + 1e-7) + 1e-9
            assert (d["n_p"] == 0) == (d["n_d"] == 0)
            if d["n_p"] == 0:
                assert d["capacity_rps"] == 0.0 and d["power_w"] == 0.0
            assert d["n_p"] + d["n_d"] <= raw[name]["max_gpus"]


def test_deployment_power_and_capacity_follow_the_core(
    demo: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """Per-deployment power is SPEC 2.6 at the served load, its prefill and decode parts
    each phase's term of it, summing to it; capacity is SPEC 2.5."""
    body, resp = demo
    for raw in body["deployments"]:
        spec = resolve_spec(
            SpecRequest(
                raw["model"],
                raw["gpu"],
                raw["workload"],
                {},
                model_variant=raw.get("model_variant", DEFAULT_VARIANT),
            )
        )
        c = Coefficients.of(spec)
        rows = [p["deployments"][raw["name"]] for p in resp["periods"]]
        on = [r for r in rows if r["n_p"] > 0]
        assert on
        r = evaluate(spec, [x["n_p"] for x in on], [x["n_d"] for x in on])
        for x, mu, mu_p, mu_d in zip(on, r.capacity_rps, r.mu_p_rps, r.mu_d_max_rps, strict=True):
            assert x["capacity_rps"] == pytest.approx(float(mu), rel=1e-9)
            s = x["served_rps"]
            pp = min(c.p0_prefill_w + c.gamma_prefill_w * s / (x["n_p"] * mu_p), c.psat_prefill_w)
            pd = min(c.p0_decode_w + c.gamma_decode_w * s / (x["n_d"] * mu_d), c.psat_decode_w)
            assert x["power_w"] == pytest.approx(x["n_p"] * pp + x["n_d"] * pd, rel=1e-9)
            assert x["prefill_power_w"] == pytest.approx(x["n_p"] * pp, rel=1e-9)
            assert x["decode_power_w"] == pytest.approx(x["n_d"] * pd, rel=1e-9)
        for x in rows:  # off included: both parts 0
            assert x["prefill_power_w"] + x["decode_power_w"] == pytest.approx(
                x["power_w"], rel=1e-12, abs=1e-9
            )


def test_csv_gives_each_phase_power(demo: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """The CSV's prefill and decode columns are the response's parts (to the CSV's 1 mW)
    and add up to its deployment power column."""
    _, resp = demo
    rows = list(csv.DictReader(io.StringIO(to_csv(resp))))
    periods = {p["index"]: p for p in resp["periods"]}
    assert len(rows) == sum(len(p["deployments"]) for p in resp["periods"])
    for r in rows:
        d = periods[int(r["period"])]["deployments"][r["deployment"]]
        parts = float(r["prefill_power_w"]), float(r["decode_power_w"])
        assert parts == pytest.approx((d["prefill_power_w"], d["decode_power_w"]), abs=5e-4)
        assert sum(parts) == pytest.approx(float(r["deployment_power_w"]), abs=1.5e-3)


def test_transitions_follow_consecutive_states(
    demo: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    body, resp = demo
    limit = body["transitions"]["max_instance_changes_per_period"]
    for raw in body["deployments"]:
        prev = (raw["initial"]["n_p"], raw["initial"]["n_d"])
        for p in resp["periods"]:
            d = p["deployments"][raw["name"]]
            dp, dd = d["n_p"] - prev[0], d["n_d"] - prev[1]
            assert d["instances_started"] == max(dp, 0) + max(dd, 0)
            assert d["instances_stopped"] == max(-dp, 0) + max(-dd, 0)
            assert d["instances_started"] + d["instances_stopped"] <= limit
            prev = (d["n_p"], d["n_d"])


def test_totals_are_consistent(demo: tuple[dict[str, Any], dict[str, Any]]) -> None:
    body, resp = demo
    sec = body["period_minutes"] * 60.0
    dt_h = sec / 3600.0
    raw = deps_of(body)
    grid, tr = body["grid"], body["transitions"]
    periods = resp["periods"]
    power = np.array([p["power_w"] for p in periods])
    served = sum(d["served_rps"] for p in periods for d in p["deployments"].values()) * sec
    unserved = [
        (name, (d["demand_rps"] - d["served_rps"]) * sec)
        for p in periods
        for name, d in p["deployments"].items()
    ]
    starts = sum(d["instances_started"] for p in periods for d in p["deployments"].values())
    stops = sum(d["instances_stopped"] for p in periods for d in p["deployments"].values())
    tot = resp["totals"]
    assert tot["served_requests"] == pytest.approx(served, rel=1e-9)
    assert tot["unserved_requests"] == pytest.approx(sum(u for _, u in unserved), rel=1e-9)
    unserved_usd = sum(u * raw[n]["unserved_penalty_usd_per_request"] for n, u in unserved)
    assert tot["unserved_value_usd"] == pytest.approx(unserved_usd, rel=1e-9)
    assert tot["energy_kwh"] == pytest.approx(power.sum() * dt_h / 1e3, rel=1e-9)
    price = np.array(grid["price_usd_per_mwh"])
    carbon = np.array(grid["carbon_g_per_kwh"])
    assert tot["cost_usd"] == pytest.approx(float(power @ price) * dt_h / 1e6, rel=1e-9)
    carbon_kg = float(power @ carbon) * dt_h / 1e6
    assert tot["carbon_kg"] == pytest.approx(carbon_kg, rel=1e-9)
    trans = starts * tr["start_cost_usd"] + stops * tr["stop_cost_usd"]
    assert tot["transition_cost_usd"] == pytest.approx(trans, rel=1e-9, abs=1e-12)
    carbon_usd = carbon_kg / 1e3 * body["site"]["carbon_price_usd_per_tonne"]
    objective = tot["cost_usd"] + carbon_usd + unserved_usd + trans
    assert tot["objective_usd"] == pytest.approx(objective, rel=1e-9)
    assert resp["objective_usd"] == tot["objective_usd"]


def test_baselines_and_gap(demo: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, resp = demo
    obj = resp["objective_usd"]
    for b in resp["baselines"].values():
        for key in ("cap_violations", "limit_violations", "inventory_violations"):
            assert isinstance(b[key], int) and b[key] >= 0
        assert b["savings_usd"] == pytest.approx(b["objective_usd"] - obj, rel=1e-9, abs=1e-9)
        if b["cap_violations"] == b["limit_violations"] == b["inventory_violations"] == 0:
            assert obj <= b["objective_usd"] * (1 + 1e-9)
    lb = resp["lower_bound_usd"]
    assert lb <= obj * (1 + 1e-9)
    assert resp["mip_gap"] == pytest.approx((obj - lb) / obj, rel=1e-9, abs=1e-12)
    assert resp["status"] in {"optimal", "time_limit"}
    assert (resp["status"] == "optimal") == (resp["mip_gap"] <= demo_request()["solver"]["mip_gap"])
