"""The fleet's relaxation by period (formulation/fleet/periods.py, docs/fleet.md section
5): a bound below the joint optimum and below the relaxation with the transitions
back, equal to it where nothing ties a period to the next, and prices at which the
fleet's dual function is at least the bound."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from formulation.budget import Deadline
from formulation.fleet import periods
from formulation.fleet.decompose import FleetMaster, FleetPricing, relax_fleet
from formulation.fleet.periods import relax_by_period
from formulation.fleet.problem import FleetProblem, fleet_from_dict
from formulation.fleet.solve import JOINT, sent_to, solve_fleet
from tests.formulation.test_fleet import larger_fleet, random_fleet
from tests.formulation.test_fleet_decompose import CASES, _tables, _values


def _by_period(fp: FleetProblem, seconds: float = 60.0) -> Any:
    return relax_by_period(fp, _tables(fp), _values(fp), Deadline.after(seconds), lambda _m: None)


def _untied(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with nothing tying a period to the next: free transitions, no limit on
    instance changes, no ramp on the shares."""
    out = copy.deepcopy(body)
    for s in out["sites"]:
        s["transitions"] = {
            "start_cost_usd": 0.0,
            "stop_cost_usd": 0.0,
            "max_instance_changes_per_period": None,
        }
    out["routing"]["max_share_change_per_period"] = None
    return out


@pytest.mark.parametrize("body", CASES)
def test_the_bound_by_period_lies_below_the_relaxation_and_the_optimum(body: dict) -> None:
    fp = fleet_from_dict(body)
    joint = solve_fleet(fp)  # proven optimal on these (test_fleet.py)
    assert joint.method == JOINT and joint.status == "optimal"
    per = _by_period(fp)
    assert per.periods == fp.n_periods and per.lower_bound_usd is not None
    tol = 1e-6 * max(abs(joint.objective_usd), 1.0)
    assert per.lower_bound_usd <= joint.objective_usd + tol
    # the relaxation over whole-horizon schedules keeps the transitions and the ramp:
    # at least as high
    rel = relax_fleet(fp, _tables(fp), _values(fp), Deadline.after(60), lambda _m: None)
    assert rel.converged
    assert per.lower_bound_usd <= rel.lower_bound_usd + tol


@pytest.mark.parametrize("body", [random_fleet(2), larger_fleet(1), larger_fleet(4)])
def test_with_nothing_tying_the_periods_it_is_the_whole_relaxation(body: dict) -> None:
    # the convex hull of whole-horizon schedules is then the product of the periods'
    # hulls: the two relaxations are one LP
    fp = fleet_from_dict(_untied(body))
    per = _by_period(fp)
    rel = relax_fleet(fp, _tables(fp), _values(fp), Deadline.after(60), lambda _m: None)
    assert rel.converged
    assert per.lower_bound_usd == pytest.approx(rel.lower_bound_usd, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("untie", [False, True])
@pytest.mark.parametrize("body", [random_fleet(3), larger_fleet(2)])
def test_its_prices_give_the_fleet_a_bound_at_least_its_own(body: dict, untie: bool) -> None:
    """The fleet's dual function at the periods' duals is at least the periods' bound
    (each period's LP attains its dual, and the transitions only add); without the
    transitions it is the bound (strong duality, period by period)."""
    fp = fleet_from_dict(_untied(body) if untie else body)
    datas, values = _tables(fp), _values(fp)
    per = relax_by_period(fp, datas, values, Deadline.after(60), lambda _m: None)
    pricing = FleetPricing(fp, datas, values, FleetMaster(fp, datas, values))
    dual, _points = pricing(per.prices)
    tol = 1e-6 * max(abs(per.lower_bound_usd), 1.0)
    assert dual >= per.lower_bound_usd - tol
    if untie:
        assert dual == pytest.approx(per.lower_bound_usd, rel=1e-6, abs=1e-6)
    # every price is >= 0, one per row it prices
    assert all(np.all(p >= 0) and p.shape == (fp.n_periods,) for p in per.prices.pis)
    assert all(np.all(lam >= 0) for lam in per.prices.lams)
    assert per.prices.region.shape == (len(fp.regions), fp.n_periods)


def test_its_flows_route_no_more_than_each_region_asks() -> None:
    fp = fleet_from_dict(larger_fleet(3))
    per = _by_period(fp)
    at = 0
    for reg in fp.regions:
        n = len(reg.servers)
        sent = per.flows[at : at + n].sum(axis=0)
        assert np.all(sent <= np.asarray(reg.demand_rps) + 1e-7)
        at += n
    assert np.all(per.flows >= 0)


def test_out_of_time_it_proves_nothing() -> None:
    fp = fleet_from_dict(larger_fleet(1))
    per = _by_period(fp, seconds=0.0)
    assert per.lower_bound_usd is None and per.periods == 0


@pytest.mark.parametrize("body", [larger_fleet(1), larger_fleet(3), random_fleet(5)])
def test_the_rounded_periods_choose_configurations_that_serve_what_they_route(
    body: dict,
) -> None:
    """Each period's rounding picks one allowed configuration per deployment, and what
    it routes there (own load and flows) is within that configuration's most in the
    period; its routing sends no region more than its demand."""
    fp = fleet_from_dict(body)
    datas = _tables(fp)
    per = relax_by_period(
        fp, datas, _values(fp), Deadline.after(60), lambda _m: None, round_within=Deadline.after(60)
    )
    ro = per.rounded
    assert ro is not None and ro.periods == fp.n_periods
    T = fp.n_periods
    for i, data in enumerate(datas):
        sent = sent_to(fp, i, ro.flows)
        for k, d in enumerate(data.deployments):
            c = ro.configs[i][k]
            assert np.all(d.period_allowed()[np.arange(T), c])
            load = ro.owns[i][k] + sent[k]
            assert np.all(load <= d.smax_rps[np.arange(T), c] + 1e-6)
    at = 0
    for reg in fp.regions:
        n = len(reg.servers)
        assert np.all(ro.flows[at : at + n].sum(axis=0) <= np.asarray(reg.demand_rps) + 1e-7)
        at += n


def test_a_decomposed_solve_plans_the_sites_for_the_rounded_routing() -> None:
    body = copy.deepcopy(larger_fleet(2))
    joint = solve_fleet(fleet_from_dict(body))
    body["routing"]["method"] = "decomposition"
    messages: list[str] = []
    o = solve_fleet(fleet_from_dict(body), progress=messages.append)
    assert any("for the periods' rounded routing" in m for m in messages)
    assert any(m.startswith("relaxation by period: bound") for m in messages)
    tol = 1e-6 * abs(joint.objective_usd)
    assert o.lower_bound_usd <= joint.objective_usd + tol <= o.objective_usd + 2 * tol
    assert all(out.priced.violation_free for out in o.sites)


def _exact_periods(fp: FleetProblem, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """Each period's MILP optimum over every choice: the rounding offered every allowed
    configuration (its MILP is then the period's whole problem)."""
    with monkeypatch.context() as m:
        m.setattr(periods, "KEEP", 10**6)
        per = relax_by_period(
            fp,
            _tables(fp),
            _values(fp),
            Deadline.after(120),
            lambda _m: None,
            round_within=Deadline.after(120),
        )
    assert per.rounded is not None
    return per.rounded.values


@pytest.mark.parametrize("body", [larger_fleet(1), larger_fleet(2), random_fleet(4)])
def test_the_periods_as_milps_bound_each_period_below_its_optimum(
    body: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periods solved as MILPs over the choices reduced-cost fixing leaves: each
    period's bound lies between its LP's value and its MILP optimum over every choice,
    and equals that optimum wherever HiGHS proves it (so no choice the optimum needs
    was fixed away); the fleet's bound stays below the joint optimum."""
    fp = fleet_from_dict(body)
    exact = _exact_periods(fp, monkeypatch)
    datas = _tables(fp)
    per = relax_by_period(
        fp,
        datas,
        _values(fp),
        Deadline.after(120),
        lambda _m: None,
        round_within=Deadline.after(120),
        bound_within=Deadline.after(120),
    )
    assert per.period_bounds is not None and per.lp_bound_usd is not None
    lp_only = _by_period(fp)
    tol = 1e-3 + 1e-4 * np.abs(exact)
    assert np.all(per.period_bounds <= exact + tol)
    assert per.lower_bound_usd >= lp_only.lower_bound_usd - 1e-6
    assert per.lp_bound_usd == pytest.approx(lp_only.lower_bound_usd, rel=1e-9)
    # every period with a rounding gap was solved (the time is ample): its bound is
    # its optimum within HiGHS's gap
    assert per.tightened >= 1
    assert per.period_bounds == pytest.approx(exact, rel=2e-4, abs=1e-3)
    joint = solve_fleet(fp)
    assert per.lower_bound_usd <= joint.objective_usd + 1e-6 * abs(joint.objective_usd)
