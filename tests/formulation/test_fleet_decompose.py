"""The fleet's price-directed decomposition (docs/fleet.md, section 5): its relaxation
is a bound between the compact LP relaxation and the optimum, equals the sites' own
relaxations when they share nothing, the routing within capacities is the least-cost
one, and a decomposed plan is a feasible plan no better than the joint optimum."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pyomo.environ as pyo
import pytest

from formulation.bounds.decomposition import decompose
from formulation.budget import Deadline
from formulation.fleet import solve as fleet_solve
from formulation.fleet.compact import build_fleet_model, own_demand, routable, site_data
from formulation.fleet.decompose import relax_fleet, route_within, tangent_power
from formulation.fleet.problem import FleetProblem, fleet_from_dict
from formulation.fleet.solve import DECOMPOSED, JOINT, sent_to, sites_at_prices, solve_fleet
from formulation.milp.compact import solve_pyomo
from tests.formulation.test_fleet import PERIODS, fleet, larger_fleet, random_fleet, site


def _values(fp: FleetProblem) -> list[np.ndarray]:
    sec = 3600.0 * fp.period_hours
    return [
        sec * np.array([[d.unserved_penalty_usd_per_request] * fp.n_periods for d in p.deployments])
        for p in fp.sites
    ]


def _tables(fp: FleetProblem) -> list[Any]:
    return [
        site_data(fp, i, own_demand(fp, i) + routable(fp, i), penalties=False)
        for i in range(len(fp.sites))
    ]


def _relax(fp: FleetProblem) -> Any:
    return relax_fleet(fp, _tables(fp), _values(fp), Deadline.after(60), lambda _m: None)


CASES = [random_fleet(1), random_fleet(4), larger_fleet(1), larger_fleet(2, ramp=0.3)]


@pytest.mark.parametrize("body", CASES)
def test_the_relaxation_lies_between_the_lp_relaxation_and_the_optimum(body: dict) -> None:
    fp = fleet_from_dict(body)
    joint = solve_fleet(fp)  # the joint MILP, proven optimal on these (test_fleet.py)
    assert joint.method == JOINT and joint.status == "optimal"
    rel = _relax(fp)
    assert rel.converged
    assert rel.lower_bound_usd <= joint.objective_usd + 1e-6 * abs(joint.objective_usd)
    # the Dantzig-Wolfe bound is at least the compact model's LP relaxation's
    datas = _tables(fp)
    lp = pyo.TransformationFactory("core.relax_integer_vars").create_using(
        build_fleet_model(fp, datas).model
    )
    r = solve_pyomo(lp, Deadline.after(60), 1e-9, None)
    assert r.objective is not None
    assert rel.lower_bound_usd >= r.objective - 1e-6 * max(abs(r.objective), 1.0)
    # converged: the master LP's value is its bound
    assert rel.lp_value_usd == pytest.approx(rel.lower_bound_usd, rel=1e-5)


def test_without_shared_demand_the_relaxation_is_the_sites_own() -> None:
    body = copy.deepcopy(larger_fleet(3))
    body["regions"] = []
    fp = fleet_from_dict(body)
    rel = _relax(fp)
    each = sum(
        decompose(
            site_data(fp, i, own_demand(fp, i), penalties=True), Deadline.after(60)
        ).lower_bound_usd
        for i in range(len(fp.sites))
    )
    assert rel.lower_bound_usd == pytest.approx(each, rel=1e-6)


def test_routing_within_capacities_fills_the_cheapest_server_first() -> None:
    # one region of demand 6 req/s served at two sites of capacity 3 and 5, the first
    # at no penalty and the second at 0.1 USD per request (below the region's value of
    # 0.5): 3 go to the first, 3 to the second; no own demand
    sites = [
        site(name, [0.0] * PERIODS, 2, [4000.0] * PERIODS, [50.0] * PERIODS, 4)
        for name in ("near", "far")
    ]
    region = {
        "name": "r",
        "model": "qwen3-32b",
        "demand_rps": [6.0] * PERIODS,
        "unserved_penalty_usd_per_request": 0.5,
        "served_by": [
            {"site": "near", "deployment": "d", "penalty_usd_per_request": 0.0},
            {"site": "far", "deployment": "d", "penalty_usd_per_request": 0.1},
        ],
    }
    fp = fleet_from_dict(fleet(sites, [region]))
    cap = [np.full((1, PERIODS), 3.0), np.full((1, PERIODS), 5.0)]
    owns, flows = route_within(fp, cap, _values(fp))
    np.testing.assert_allclose(flows, [[3.0] * PERIODS, [3.0] * PERIODS], atol=1e-9)
    assert all(float(np.abs(o).max()) == 0.0 for o in owns)
    # above the region's value the far site is not used
    region["served_by"][1]["penalty_usd_per_request"] = 0.6
    fp = fleet_from_dict(fleet(sites, [region]))
    _owns, flows = route_within(fp, cap, _values(fp))
    np.testing.assert_allclose(flows, [[3.0] * PERIODS, [0.0] * PERIODS], atol=1e-9)


def test_routing_within_capacities_keeps_the_ramp() -> None:
    body = larger_fleet(2, ramp=0.1)
    fp = fleet_from_dict(body)
    rng = np.random.default_rng(7)
    cap = [rng.uniform(0.0, 10.0, (len(p.deployments), fp.n_periods)) for p in fp.sites]
    owns, flows = route_within(fp, cap, _values(fp))
    f = 0
    for reg in fp.regions:
        d = np.asarray(reg.demand_rps)
        assert np.all(sum(flows[f + q] for q in range(len(reg.servers))) <= d + 1e-7)
        for q in range(len(reg.servers)):
            share = flows[f + q] / d
            assert np.all(np.abs(np.diff(share)) <= 0.1 + 1e-7)
        f += len(reg.servers)
    for i in range(len(fp.sites)):
        assert np.all(owns[i] + sent_to(fp, i, flows) <= cap[i] + 1e-7)
        assert np.all(owns[i] <= own_demand(fp, i) + 1e-9)


@pytest.mark.parametrize("body", CASES)
def test_a_decomposed_plan_is_a_plan_and_its_bound_a_bound(body: dict) -> None:
    joint = solve_fleet(fleet_from_dict(body))
    decomposed = copy.deepcopy(body)
    decomposed["routing"]["method"] = "decomposition"
    fp = fleet_from_dict(decomposed)
    o = solve_fleet(fp)
    assert o.method == DECOMPOSED
    tol = 1e-6 * abs(joint.objective_usd)
    assert o.lower_bound_usd <= joint.objective_usd + tol <= o.objective_usd + 2 * tol
    # each site within its limits, serving what it is sent
    for i, out in enumerate(o.sites):
        assert out.priced.violation_free, fp.site_names[i]
    f = 0
    for reg in fp.regions:
        sent = sum(o.flows[f + q] for q in range(len(reg.servers)))
        assert np.all(sent <= np.asarray(reg.demand_rps) + 1e-7)
        f += len(reg.servers)


def test_joint_on_a_fleet_too_large_to_build_is_refused_naming_the_field() -> None:
    from model.errors import InputError

    body = copy.deepcopy(larger_fleet(1))
    body["routing"]["method"] = "joint"
    body["solver"]["time_limit_s"] = 0.01  # the least a request may ask for
    with pytest.raises(InputError) as e:
        solve_fleet(fleet_from_dict(body))
    assert e.value.field == "routing.method"


def test_the_tangent_rows_keep_the_cap_wherever_they_hold() -> None:
    # each deployment's power is concave in its load: its tangent lies above it, so a
    # load that keeps the tangent row keeps the cap (random configurations and loads)
    fp = fleet_from_dict(larger_fleet(4))
    rng = np.random.default_rng(11)
    for i, data in enumerate(_tables(fp)):
        K, T = len(data.deployments), data.n_periods
        config = np.stack([rng.integers(0, d.n_configs, T) for d in data.deployments])
        top = np.stack(
            [d.smax_rps[np.arange(T), config[k]] for k, d in enumerate(data.deployments)]
        )
        at = rng.uniform(0.0, 1.0, (K, T)) * top
        row = tangent_power(data, config, at)
        for _ in range(20):
            load = rng.uniform(0.0, 1.0, (K, T)) * top
            pnet = sum(
                d.power_w(config[k], load[k]) - data.idle_gpu_power_w * d.gpus[config[k]]
                for k, d in enumerate(data.deployments)
            )
            lhs = np.sum(row.slope * load, axis=0)
            keeps = lhs <= row.room + 1e-9
            assert np.all(pnet[keeps] <= data.net_cap_w[keeps] + 1e-6), i
        # at the loads it is taken around, the row is the cap's own
        pnet0 = sum(
            d.power_w(config[k], at[k]) - data.idle_gpu_power_w * d.gpus[config[k]]
            for k, d in enumerate(data.deployments)
        )
        np.testing.assert_allclose(
            np.sum(row.slope * at, axis=0) - row.room, pnet0 - data.net_cap_w, atol=1e-6
        )


@pytest.mark.parametrize("body", CASES[2:])
def test_without_settled_prices_the_plan_starts_at_home(
    body: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a time limit too short for the relaxation to converge, and no time for the
    # relaxation by period (its share 0): the sites are planned for each region's
    # demand at home, and the demand is routed within their plans
    joint = solve_fleet(fleet_from_dict(body))
    short = copy.deepcopy(body)
    short["routing"]["method"] = "decomposition"
    short["solver"]["time_limit_s"] = 0.05
    monkeypatch.setattr(fleet_solve, "PERIOD_SHARE", 0.0)
    messages: list[str] = []
    o = solve_fleet(fleet_from_dict(short), progress=messages.append)
    assert not any("rounded routing" in m for m in messages)
    assert any("for each region's demand at home" in m for m in messages)
    assert any("routed within the sites' plans" in m for m in messages)
    assert all(out.priced.violation_free for out in o.sites)
    tol = 1e-6 * abs(joint.objective_usd)
    assert o.lower_bound_usd <= joint.objective_usd + tol <= o.objective_usd + 2 * tol


@pytest.mark.parametrize("body", CASES[2:])
def test_the_sites_at_unsettled_prices_still_bound_the_fleet(body: dict) -> None:
    """Weak duality holds at any routing prices (docs/fleet.md, section 5), so each site
    planned alone at the prices of a relaxation cut after two rounds, its own
    relaxation pricing its cap and pools, bounds the fleet with the terms outside the
    sites: below the joint optimum, and above the cut relaxation's own bound (the
    eight-site benchmark: 1,869.61 USD from the relaxation, 4,339.77 with the sites)."""
    fp = fleet_from_dict(body)
    joint = solve_fleet(fp)
    assert joint.status == "optimal"
    datas = _tables(fp)
    rel = relax_fleet(fp, datas, _values(fp), Deadline.after(60), lambda _m: None, max_rounds=2)
    assert not rel.converged and rel.prices is not None
    _configs, _served, sites = sites_at_prices(fp, datas, rel.prices.lams, 10.0, lambda _m: None)
    bound = sites + rel.outside_usd
    assert bound <= joint.objective_usd + 1e-6 * abs(joint.objective_usd)
    assert bound > rel.lower_bound_usd
