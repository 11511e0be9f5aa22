"""Errors of the schedule: invalid requests name their field, infeasible ones name the
periods and constraints responsible, and a time limit still returns a schedule (SPEC 4,
6, 6.1)."""

from __future__ import annotations

from typing import Any

import pytest

from formulation.budget import Deadline
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.infeasible import InfeasibleError
from formulation.primal.baselines import greedy
from formulation.problem import problem_from_dict
from formulation.solve import solve
from model.errors import InputError

PUE = 1.2
IDLE_W = 120.0


def request(
    demand: list[float] | None = None,
    cap: float | list[float] = 1e4,
    *,
    inventory: int = 6,
    max_gpus: int = 6,
    initial: tuple[int, int] = (0, 0),
    limit: int | None = None,
    method: str = "auto",
) -> dict[str, Any]:
    demand = [10.0, 8.0, 6.0, 4.0] if demand is None else demand
    return {
        "period_minutes": 15,
        "site": {"gpu_inventory": {"h200": inventory}, "pue": PUE, "idle_gpu_power_w": IDLE_W},
        "deployments": [
            {
                "name": "chat",
                "model": "qwen3-32b",
                "gpu": "h200",
                "workload": "fixed:1024:256",
                "demand_rps": demand,
                "unserved_penalty_usd_per_request": 0.01,
                "max_gpus": max_gpus,
                "initial": {"n_p": initial[0], "n_d": initial[1]},
            }
        ],
        "grid": {"power_cap_w": cap, "price_usd_per_mwh": 100.0},
        "transitions": {"max_instance_changes_per_period": limit},
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60, "method": method},
    }


def field_of(body: dict[str, Any]) -> str:
    """The field named by the error of parsing ``body`` and building its tables."""
    with pytest.raises(InputError) as err:
        build_data(problem_from_dict(body))
    assert str(err.value).startswith(f"{err.value.field}: ")
    assert err.value.reason
    return err.value.field


# --------------------------------------------------------------------------- validation


def test_series_length_mismatch_names_the_series() -> None:
    assert field_of(request(cap=[1e4, 1e4, 1e4])) == "grid.power_cap_w"
    body = request()
    body["grid"]["price_usd_per_mwh"] = [50.0] * 5
    assert field_of(body) == "grid.price_usd_per_mwh"
    body = request()
    body["deployments"].append({**body["deployments"][0], "name": "b", "demand_rps": [1.0]})
    assert field_of(body) == "deployments[1].demand_rps"


def test_gpu_not_in_inventory() -> None:
    body = request()
    body["deployments"][0]["gpu"] = "b200"
    assert field_of(body) == "deployments[0].gpu"


def test_gpu_unknown_to_the_catalog() -> None:
    body = request()
    body["site"]["gpu_inventory"] = {"h100": 8}  # the catalog's is "h100-sxm"
    body["deployments"][0]["gpu"] = "h100"
    assert field_of(body) == "site.gpu_inventory.h100"


def test_negative_demand_names_the_period() -> None:
    assert field_of(request(demand=[1.0, 2.0, -0.5, 3.0])) == "deployments[0].demand_rps[2]"


def test_negative_price_and_bad_cap_name_the_period() -> None:
    body = request()
    body["grid"]["price_usd_per_mwh"] = [10.0, -1.0, 10.0, 10.0]
    assert field_of(body) == "grid.price_usd_per_mwh[1]"
    assert field_of(request(cap=[1e4, 1e4, 1e4, -5.0])) == "grid.power_cap_w[3]"


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ((), "colour"),
        (("site",), "site.colour"),
        (("deployments", 0), "deployments[0].colour"),
        (("grid",), "grid.colour"),
        (("transitions",), "transitions.colour"),
        (("solver",), "solver.colour"),
    ],
)
def test_unknown_field_is_named(where: tuple[Any, ...], expected: str) -> None:
    body = request()
    obj: Any = body
    for key in where:
        obj = obj[key]
    obj["colour"] = "blue"
    assert field_of(body) == expected


@pytest.mark.parametrize("initial", [(2, 2), (4, 1), (1, 0)])
def test_initial_state_beyond_max_gpus_or_half_running(initial: tuple[int, int]) -> None:
    assert field_of(request(max_gpus=3, inventory=3, initial=initial)) == "deployments[0].initial"


def test_initial_state_beyond_inventory() -> None:
    assert field_of(request(max_gpus=6, inventory=3, initial=(2, 2))) == "deployments[0].initial"


@pytest.mark.parametrize("headroom", [0.0, -0.1, 1.5])
def test_headroom_out_of_range(headroom: float) -> None:
    body = request()
    body["deployments"][0]["headroom"] = headroom
    assert field_of(body) == "deployments[0].headroom"


def test_missing_cap_and_bad_method() -> None:
    body = request()
    del body["grid"]["power_cap_w"]
    assert field_of(body) == "grid.power_cap_w"
    body = request()
    body["solver"]["method"] = "fastest"
    assert field_of(body) == "solver.method"


# --------------------------------------------------------------------------- infeasible


@pytest.mark.parametrize("method", ["auto", "compact"])
def test_cap_below_the_idle_site_names_exactly_those_periods(method: str) -> None:
    idle_site = PUE * 6 * IDLE_W  # every GPU idle, deployment off
    cap = [1e4, idle_site - 1.0, 1e4, 0.5 * idle_site, idle_site + 1.0]
    with pytest.raises(InfeasibleError) as err:
        solve(problem_from_dict(request(demand=[5.0] * 5, cap=cap, method=method)))
    conflicts = err.value.conflicts
    assert sorted(c["period"] for c in conflicts) == [1, 3]
    assert {c["constraint"] for c in conflicts} == {"site_power_within_cap"}


def _shedding_too_slow(method: str) -> dict[str, Any]:
    # from 3P3D with one instance change per period, period 0 can at best run 3P2D or
    # 2P3D (>= 1295 W IT at zero load), but its cap only allows the site near idle
    near_idle = PUE * 6 * IDLE_W + 50.0
    return request(
        demand=[10.0, 10.0, 10.0],
        cap=[near_idle, 1e4, 1e4],
        initial=(3, 3),
        limit=1,
        method=method,
    )


def _assert_names_period_zero(method: str) -> None:
    with pytest.raises(InfeasibleError) as err:
        solve(problem_from_dict(_shedding_too_slow(method)))
    conflicts = err.value.conflicts
    assert [(c.get("period"), c["constraint"]) for c in conflicts] == [(0, "site_power_within_cap")]


def test_transition_limit_that_prevents_shedding_is_infeasible() -> None:
    near_idle = PUE * 6 * IDLE_W + 50.0
    # without the limit the same request is feasible (turn off in period 0)
    body = _shedding_too_slow("auto")
    body["transitions"]["max_instance_changes_per_period"] = None
    out = solve(problem_from_dict(body))
    assert out.priced.violation_free
    assert out.priced.site_power_w[0] <= near_idle * (1 + 1e-9)
    _assert_names_period_zero("auto")


def test_transition_limit_infeasibility_raises_with_compact_method() -> None:
    with pytest.raises(InfeasibleError):
        solve(problem_from_dict(_shedding_too_slow("compact")))


def test_transition_limit_infeasibility_names_the_period_with_compact_method() -> None:
    _assert_names_period_zero("compact")


# --------------------------------------------------------------------------- time limit


@pytest.fixture(scope="module")
def short_demo() -> Any:
    body = demo_request()
    body["solver"]["time_limit_s"] = 2
    return solve(problem_from_dict(body))


@pytest.mark.slow  # 2.1 s on two cores
def test_time_limit_returns_a_clean_schedule_with_its_gap(short_demo: Any) -> None:
    out = short_demo
    assert out.status in {"time_limit", "optimal"}
    obj, lb = out.priced.objective_usd, out.lower_bound_usd
    assert lb <= obj * (1 + 1e-9)
    assert out.mip_gap == pytest.approx((obj - lb) / obj, rel=1e-9, abs=1e-12)
    target = demo_request()["solver"]["mip_gap"]
    assert (out.status == "optimal") == (out.mip_gap <= target + 1e-12)
    assert out.priced.violation_free
    assert out.priced.schedule.config.shape == (3, 96)
    clean = [b.objective_usd for b in out.baselines.values() if b.violation_free]
    for value in clean:
        assert obj <= value * (1 + 1e-9)


def test_greedy_baseline_meets_the_cap_whenever_shedding_can() -> None:
    data = build_data(problem_from_dict(demo_request()))
    # every demo period can meet its cap with every deployment off and all GPUs idle
    assert (data.pue * data.idle_site_it_w <= data.power_cap_w).all()
    base = greedy(data, Deadline.after(0.01))
    assert base.cap_violations == []
