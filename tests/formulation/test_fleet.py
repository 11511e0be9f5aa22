"""Several sites planned together (docs/fleet.md): the joint MILP against brute force on
tiny fleets, the routing's rows (shares, capacities, the ramp), a fleet of one site
against the site schedule, and bad input named by its field.

The brute force prices every pair of configuration paths of two one-deployment sites
over three periods; with the configurations fixed, each period's served loads and
flows minimise a concave cost (the power curve is concave in the load) over a
polytope, so the least is at one of its vertices, which are enumerated."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
import pytest

from formulation.data import ScheduleData, build_data
from formulation.fleet.problem import fleet_from_dict
from formulation.fleet.results import fleet_response
from formulation.fleet.solve import JOINT, solve_fleet
from formulation.infeasible import InfeasibleError
from formulation.problem import problem_from_dict
from formulation.results import response
from formulation.solve import solve
from model.errors import InputError
from tests.formulation.test_settings import deployment, request

PERIODS = 3


def site(name: str, own: list[float], max_gpus: int, cap: list[float], price: list[float],
         inventory: int, dep: str = "d", changes: int | None = 2) -> dict[str, Any]:  # fmt: skip
    body = request([deployment(dep, own, max_gpus)], cap, price, inventory, changes=changes)
    return {"name": name, **{k: body[k] for k in ("site", "deployments", "grid", "transitions")}}


def fleet(sites: list[dict[str, Any]], regions: list[dict[str, Any]],
          ramp: float | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "period_minutes": 15,
        "sites": sites,
        "regions": regions,
        "routing": {"max_share_change_per_period": ramp},
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60, "method": "compact"},
    }


def random_fleet(seed: int) -> dict[str, Any]:
    """Two one-deployment sites (qwen3-32b on H200, 2 to 4 GPUs), their own demand, and
    one region both may serve, the far site at a penalty per request."""
    rng = np.random.default_rng(seed)

    def series(lo: float, hi: float) -> list[float]:
        return [round(float(x), 3) for x in rng.uniform(lo, hi, PERIODS)]

    sites = [
        site(
            name,
            series(0.0, 4.0),
            int(rng.integers(2, 5)),
            series(900.0, 4000.0),
            series(20.0, 300.0),
            int(rng.integers(2, 5)),
        )
        for name in ("east", "west")
    ]
    region = {
        "name": "r0",
        "model": "qwen3-32b",
        "demand_rps": series(1.0, 10.0),
        "unserved_penalty_usd_per_request": round(float(rng.uniform(0.1, 1.0)), 3),
        "served_by": [
            {"site": "east", "deployment": "d", "penalty_usd_per_request": 0.0},
            {
                "site": "west",
                "deployment": "d",
                "penalty_usd_per_request": round(float(rng.uniform(0.0, 0.3)), 3),
            },
        ],
    }
    return fleet(sites, [region])


# ------------------------------------------------------------------ brute force


def _site_data(body: dict[str, Any], i: int, extra: list[float]) -> ScheduleData:
    """Site ``i`` with its deployment's demand raised by ``extra`` and no value on
    unserved requests (the routing prices them): its candidates and curves."""
    s = copy.deepcopy(body["sites"][i])
    dep = s["deployments"][0]
    dep["demand_rps"] = [a + b for a, b in zip(dep["demand_rps"], extra, strict=True)]
    dep["unserved_penalty_usd_per_request"] = 0.0
    return build_data(
        problem_from_dict(
            {
                "period_minutes": body["period_minutes"],
                **{k: v for k, v in s.items() if k != "name"},
            }
        )
    )


def _most_served(data: ScheduleData, t: int, k: int) -> float:
    """The most configuration ``k`` may serve in period ``t`` within its smax and the
    site's cap (-1: over the cap even serving nothing)."""
    d = data.deployments[0]
    g = data.total_gpus

    def site_w(s: float) -> float:
        it = float(np.ravel(d.power_w(k, s))[0]) - data.idle_gpu_power_w * int(d.gpus[k])
        return data.pue * (it + data.idle_gpu_power_w * g)

    cap = float(data.power_cap_w[t])
    hi = float(d.smax_rps[t, k])
    if site_w(0.0) > cap * (1 + 1e-12):
        return -1.0
    if site_w(hi) <= cap:
        return hi
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if site_w(mid) <= cap else (lo, mid)
    return lo


def _period_best(
    body: dict[str, Any], datas: list[ScheduleData], t: int, ks: tuple[int, int]
) -> float:
    """The least cost of period ``t`` with configurations ``ks``: every vertex of the
    polytope of (own served 1, 2, flow 1, 2)."""
    region = body["regions"][0]
    sec = 3600.0 * body["period_minutes"] / 60.0
    own = [body["sites"][i]["deployments"][0]["demand_rps"][t] for i in range(2)]
    pen = [body["sites"][i]["deployments"][0]["unserved_penalty_usd_per_request"] for i in range(2)]
    demand = region["demand_rps"][t]
    route = [s["penalty_usd_per_request"] for s in region["served_by"]]
    most = [_most_served(datas[i], t, ks[i]) for i in range(2)]
    if min(most) < 0:
        return np.inf
    # rows A x <= b over x = (o1, o2, f1, f2)
    a = np.array(
        [
            [-1, 0, 0, 0], [0, -1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0],
            [0, 0, -1, 0], [0, 0, 0, -1], [0, 0, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1],
        ],
        dtype=float,
    )  # fmt: skip
    b = np.array([0, 0, own[0], own[1], 0, 0, demand, most[0], most[1]], dtype=float)
    best = np.inf
    for rows in itertools.combinations(range(len(b)), 4):
        sub = a[list(rows)]
        if abs(np.linalg.det(sub)) < 1e-12:
            continue
        x = np.linalg.solve(sub, b[list(rows)])
        if np.any(a @ x > b + 1e-9):
            continue
        cost = 0.0
        for i in range(2):
            d, data = datas[i].deployments[0], datas[i]
            s = max(x[i] + x[2 + i], 0.0)
            it = float(np.ravel(d.power_w(ks[i], s))[0]) - data.idle_gpu_power_w * int(
                d.gpus[ks[i]]
            )
            cost += float(data.cost_usd_per_w[t]) * it
            cost += sec * pen[i] * (own[i] - x[i]) + sec * route[i] * x[2 + i]
        cost += sec * region["unserved_penalty_usd_per_request"] * (demand - x[2] - x[3])
        best = min(best, cost)
    return best


def _paths(data: ScheduleData, body_site: dict[str, Any]) -> list[tuple[tuple[int, ...], float]]:
    """Every path of configurations over the periods within the change limit, with its
    start and stop cost from the initial state (off)."""
    d = data.deployments[0]
    tr = body_site["transitions"]
    limit = tr["max_instance_changes_per_period"]
    ks = [k for k in range(d.n_configs) if d.allowed[k] and int(d.gpus[k]) <= data.total_gpus]
    out = []
    for path in itertools.product(ks, repeat=PERIODS):
        cost, prev, ok = 0.0, d.initial, True
        for k in path:
            dn = [int(d.n_p[k]) - int(d.n_p[prev]), int(d.n_d[k]) - int(d.n_d[prev])]
            if limit is not None and sum(abs(x) for x in dn) > limit:
                ok = False
                break
            cost += sum(
                tr["start_cost_usd"] * max(x, 0) + tr["stop_cost_usd"] * max(-x, 0) for x in dn
            )
            prev = k
        if ok:
            out.append((path, cost))
    return out


def brute_force(body: dict[str, Any]) -> float:
    demand = body["regions"][0]["demand_rps"]
    datas = [_site_data(body, i, demand) for i in range(2)]
    paths = [_paths(datas[i], body["sites"][i]) for i in range(2)]
    per = {}
    for t in range(PERIODS):
        for k1 in {p[t] for p, _ in paths[0]}:
            for k2 in {p[t] for p, _ in paths[1]}:
                per[t, k1, k2] = _period_best(body, datas, t, (k1, k2))
    const = sum(
        float(np.sum(data.cost_usd_per_w)) * data.idle_gpu_power_w * data.total_gpus
        for data in datas
    )
    best = np.inf
    for (p1, c1), (p2, c2) in itertools.product(*paths):
        total = c1 + c2 + sum(per[t, p1[t], p2[t]] for t in range(PERIODS))
        best = min(best, total)
    return best + const


@pytest.mark.parametrize("seed", range(6))
def test_the_fleet_milp_is_the_brute_force_optimum(seed: int) -> None:
    body = random_fleet(seed)
    out = solve_fleet(fleet_from_dict(body))
    assert out.method == JOINT
    best = brute_force(body)
    assert np.isfinite(best)
    assert out.status == "optimal"
    assert out.objective_usd == pytest.approx(best, rel=1e-6, abs=1e-6)
    assert out.lower_bound_usd <= out.objective_usd + 1e-9


def test_some_fleets_route_demand_to_both_sites() -> None:
    """The brute-force instances exercise the routing: in some, both sites serve the
    region in one period or another."""
    both = 0
    for seed in range(6):
        out = solve_fleet(fleet_from_dict(random_fleet(seed)))
        if (out.flows > 1e-6).any(axis=1).all():
            both += 1
    assert both >= 2, both


# ------------------------------------------------------------------ the routing's rows


def larger_fleet(seed: int, ramp: float | None = None) -> dict[str, Any]:
    """Two sites of two deployments each (qwen3-32b and llama-3.1-8b), two regions per
    model, capped sites."""
    rng = np.random.default_rng(100 + seed)

    def series(lo: float, hi: float) -> list[float]:
        return [round(float(x), 3) for x in rng.uniform(lo, hi, 4)]

    sites = []
    for name in ("a", "b"):
        body = request(
            [
                deployment("q", series(0.0, 3.0), 4),
                deployment("l", series(0.0, 3.0), 3, model="llama-3.1-8b"),
            ],
            series(1500.0, 6000.0),
            series(20.0, 300.0),
            int(rng.integers(4, 8)),
            changes=3,
        )
        sites.append(
            {"name": name, **{k: body[k] for k in ("site", "deployments", "grid", "transitions")}}
        )
    regions = [
        {
            "name": f"r{j}",
            "model": model,
            "demand_rps": series(1.0, 12.0),
            "unserved_penalty_usd_per_request": 0.5,
            "served_by": [
                {"site": "a", "deployment": dep, "penalty_usd_per_request": 0.02 * j},
                {"site": "b", "deployment": dep, "penalty_usd_per_request": 0.02 * (1 - j)},
            ],
        }
        for j in range(2)
        for model, dep in (("qwen3-32b", "q"), ("llama-3.1-8b", "l"))
    ]
    for j, r in enumerate(regions):
        r["name"] = f"r{j}"
    return fleet(sites, regions, ramp)


@pytest.mark.parametrize("seed", range(3))
def test_shares_sum_to_at_most_one_and_sites_keep_their_limits(seed: int) -> None:
    body = larger_fleet(seed)
    out = solve_fleet(fleet_from_dict(body))
    doc = fleet_response(out)
    for reg in doc["regions"]:
        total = np.sum([s["share"] for s in reg["shares"]], axis=0)
        assert (total <= 1 + 1e-6).all()
        served = np.sum([s["served_rps"] for s in reg["shares"]], axis=0)
        assert np.allclose(np.asarray(reg["demand_rps"]) - served, reg["unserved_rps"], atol=1e-6)
    for s, o in zip(doc["sites"], out.sites, strict=True):
        assert o.priced.violation_free, s["name"]  # the cap, the inventory, the limits
        for per in s["periods"]:
            assert per["power_w"] <= per["power_cap_w"] * (1 + 1e-6)
            for dep in per["deployments"].values():
                assert dep["served_rps"] <= dep["capacity_rps"] + 1e-6
                assert dep["served_rps"] <= dep["demand_rps"] + 1e-6
    # the fleet's objective is its sites' and the regions' costs
    sites_cost = sum(o.priced.objective_usd for o in out.sites)
    assert out.objective_usd == pytest.approx(sites_cost + doc["routing_cost_usd"], rel=1e-9)
    assert out.lower_bound_usd <= out.objective_usd * (1 + 1e-6)


def test_the_ramp_bounds_each_share_change() -> None:
    free = solve_fleet(fleet_from_dict(larger_fleet(0)))
    ramped_doc = fleet_response(solve_fleet(fleet_from_dict(larger_fleet(0, ramp=0.1))))
    for reg in ramped_doc["regions"]:
        demand = np.asarray(reg["demand_rps"])
        for s in reg["shares"]:
            share = np.asarray(s["share"])
            steps = np.abs(np.diff(share))[(demand[1:] > 0) & (demand[:-1] > 0)]
            assert (steps <= 0.1 + 1e-6).all()
    assert ramped_doc["objective_usd"] >= free.objective_usd - 1e-6 * abs(free.objective_usd)


# ------------------------------------------------------------------ one site


def test_a_fleet_of_one_site_is_that_sites_schedule() -> None:
    body = request(
        [deployment("d0", [3.0, 8.0, 5.0], 4), deployment("d1", [1.0, 2.0, 6.0], 3)],
        [2500.0, 3000.0, 2000.0],
        [40.0, 200.0, 90.0],
        6,
        changes=2,
    )
    one = fleet(
        [{"name": "only", **{k: body[k] for k in ("site", "deployments", "grid", "transitions")}}],
        [],
    )
    got = fleet_response(solve_fleet(fleet_from_dict(one)))
    want = response(solve(problem_from_dict(body)))
    site_doc = got["sites"][0]
    assert site_doc["name"] == "only"
    assert got["objective_usd"] == want["objective_usd"]
    assert got["lower_bound_usd"] == want["lower_bound_usd"]
    assert [p["deployments"] for p in site_doc["periods"]] == [
        p["deployments"] for p in want["periods"]
    ]
    assert site_doc["totals"] == want["totals"]


def test_a_region_served_by_one_deployment_is_its_own_demand() -> None:
    """A region only one deployment serves, at no penalty, is the same problem as that
    deployment's own demand at the region's value: the joint MILP and the site schedule
    agree."""
    demand = [4.0, 9.0, 2.5]
    body = request([deployment("d0", demand, 4)], [2500.0, 1800.0, 3000.0], [50.0, 250.0, 80.0], 4)
    body["deployments"][0]["unserved_penalty_usd_per_request"] = 0.3
    own = copy.deepcopy(body)
    own["deployments"][0]["demand_rps"] = [0.0] * 3
    routed = fleet(
        [{"name": "s", **{k: own[k] for k in ("site", "deployments", "grid", "transitions")}}],
        [
            {
                "name": "r",
                "model": "qwen3-32b",
                "demand_rps": demand,
                "unserved_penalty_usd_per_request": 0.3,
                "served_by": [{"site": "s", "deployment": "d0"}],
            }
        ],
    )
    got = solve_fleet(fleet_from_dict(routed))
    want = solve(problem_from_dict(body))
    assert got.method == JOINT
    assert got.objective_usd == pytest.approx(want.priced.objective_usd, rel=1e-7)
    assert np.allclose(got.flows[0], want.priced.schedule.served_rps[0], atol=1e-6)


# ------------------------------------------------------------------ bad input


def _bad(mutate: Any) -> InputError:
    body = random_fleet(0)
    mutate(body)
    with pytest.raises(InputError) as e:
        fleet_from_dict(body)
    return e.value


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda b: b["regions"][0].update(served_by=[]), "regions[0].served_by", "at least 1"),
        (
            lambda b: b["regions"][0]["served_by"][1].update(site="north"),
            "regions[0].served_by[1].site",
            "no site named 'north'",
        ),
        (
            lambda b: b["regions"][0]["served_by"][0].update(deployment="x"),
            "regions[0].served_by[0].deployment",
            "no deployment named 'x'",
        ),
        (
            lambda b: b["regions"][0].update(model="llama-3.1-8b"),
            "regions[0].served_by[0].deployment",
            "not the region's 'llama-3.1-8b'",
        ),
        # a model the catalog does not know is named as such, not as a mismatch
        (lambda b: b["regions"][0].update(model="zzz"), "regions[0].model", "unknown model"),
        (
            lambda b: b["sites"][1]["deployments"][0].update(gpu="h900"),
            "sites[1].deployments[0].gpu",
            "h900",
        ),
        (
            lambda b: b["sites"][1]["site"].update(gpu_inventory={"h900": 4}),
            "sites[1]",
            "h900",
        ),
        (
            lambda b: b["sites"][1]["deployments"][0].update(demand_rps=[1.0, 2.0]),
            "sites[1].deployments[0].demand_rps",
            "horizon",
        ),
        (
            lambda b: b["regions"][0].update(demand_rps=[1.0] * 5),
            "regions[0].demand_rps",
            "horizon",
        ),
        (lambda b: b["sites"][1].update(name="east"), "sites[1].name", "sites[0]"),
        (
            lambda b: b["regions"][0]["served_by"].append(dict(b["regions"][0]["served_by"][0])),
            "regions[0].served_by[2]",
            "again",
        ),
        (lambda b: b.update(sites=[]), "sites", "at least 1"),
    ],
)
def test_bad_fleet_input_names_the_field(mutate: Any, field: str, words: str) -> None:
    err = _bad(mutate)
    assert err.field.startswith(field), (err.field, err.reason)
    assert words in str(err), str(err)


@pytest.mark.parametrize("coupled", [True, False])
def test_an_infeasible_site_is_named(coupled: bool) -> None:
    """A cap below the west site's idle draw in one period: no plan, and the error names
    the site, whether the sites share demand or not."""
    body = random_fleet(0)
    body["sites"][1]["grid"]["power_cap_w"][1] = 10.0
    if not coupled:
        body["regions"] = []
    with pytest.raises(InfeasibleError) as e:
        solve_fleet(fleet_from_dict(body))
    assert str(e.value).startswith("sites[1] (west): ")
    assert e.value.conflicts and all(c["site"] == "west" for c in e.value.conflicts)


def test_without_a_schedule_from_highs_the_start_is_the_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HiGHS ending the joint MILP without a schedule (its time spent, as on three sites
    of two 16-GPU deployments over 96 periods in 60 s) leaves the start, checked, as the
    plan: its bound the LP relaxation's, never above it."""
    import formulation.fleet.solve as fleet_solve
    from formulation.milp.compact import Solved

    real = fleet_solve.solve_pyomo
    calls: list[int] = []

    def ends_empty(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:  # the LP relaxation, the start's completion, then the MILP
            return Solved("time_limit", None, None, 0, 0.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(fleet_solve, "solve_pyomo", ends_empty)
    body = random_fleet(3)
    out = solve_fleet(fleet_from_dict(body))
    assert len(calls) == 3
    assert out.status == "time_limit"
    assert all(o.priced.violation_free for o in out.sites)
    best = brute_force(body)
    assert out.objective_usd >= best - 1e-6 * abs(best)
    assert out.lower_bound_usd <= best + 1e-6 * abs(best)
