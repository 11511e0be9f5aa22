"""GPU settings in the schedule (docs/clocks.md section 8): each deployment chooses its
prefill and decode settings per period with ``(n_P, n_D)``; a change of setting is
free and is not an instance change.

Qwen3-32B on H200 with the fixed workload 1024:256, the settings of gpus.json's H200
entry (1980, 1590, 1185 MHz) and power limits inside its 200-700 W range. The brute
force prices every ``(n_P, n_D, s_P, s_D)`` of one period from the model's tables
(``model.tables.build_table`` of ``model.spec.with_settings``) with SPEC 5's
cost, independently of the formulation's candidates and of the dominance pruning.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
import pytest

from formulation.data import build_data, check_memory
from formulation.problem import problem_from_dict
from formulation.request import parse_model
from formulation.results import response, to_csv
from formulation.solve import solve
from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.spec import with_settings
from model.tables import build_table
from service.sites.schemas import SiteRequest

WORKLOAD = "fixed:1024:256"
PUE = 1.2
IDLE_W = 120.0
DT_H = 0.25
CLOCKS = ["1980MHz", "1590MHz", "1185MHz"]
SETTING_KEYS = ("prefill_setting", "decode_setting")


def deployment(name: str, demand: list[float], max_gpus: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": "qwen3-32b",
        "gpu": "h200",
        "workload": WORKLOAD,
        "demand_rps": demand,
        "unserved_penalty_usd_per_request": 0.5,
        "max_gpus": max_gpus,
        **extra,
    }


def request(
    deployments: list[dict[str, Any]],
    cap: list[float],
    price: list[float],
    inventory: int,
    method: str = "compact",
    changes: int | None = None,
) -> dict[str, Any]:
    return {
        "period_minutes": 15,
        "site": {"gpu_inventory": {"h200": inventory}, "pue": PUE, "idle_gpu_power_w": IDLE_W},
        "deployments": deployments,
        "grid": {"power_cap_w": cap, "price_usd_per_mwh": price},
        "transitions": {
            "start_cost_usd": 0.01,
            "stop_cost_usd": 0.005,
            "max_instance_changes_per_period": changes,
        },
        "solver": {"mip_gap": 1e-9, "time_limit_s": 60, "method": method},
    }


def plan(body: dict[str, Any]) -> dict[str, Any]:
    resp = response(solve(problem_from_dict(body)))
    assert resp["status"] == "optimal"
    return resp


def with_settings_listed(body: dict[str, Any], prefill: list[str], decode: list[str]) -> dict:
    out = copy.deepcopy(body)
    for d in out["deployments"]:
        d["settings"] = {"prefill": prefill, "decode": decode}
    return out


def numbers(resp: dict[str, Any]) -> list[dict[str, Any]]:
    """The periods without the settings' names."""
    return [
        {
            name: {k: v for k, v in d.items() if k not in SETTING_KEYS}
            for name, d in p["deployments"].items()
        }
        | {"power_w": p["power_w"], "idle_gpus": p["idle_gpus"]}
        for p in resp["periods"]
    ]


def small_site(method: str) -> dict[str, Any]:
    return request(
        [
            deployment("a", [3.0, 9.0, 14.0, 6.0], 8),
            deployment("b", [1.0, 4.0, 7.0, 2.0], 6),
        ],
        cap=[6000.0, 6000.0, 5200.0, 6000.0],
        price=[60.0, 90.0, 140.0, 70.0],
        inventory=12,
        method=method,
    )


@pytest.mark.parametrize("method", ["auto", "compact"])
def test_the_full_clock_alone_is_the_schedule_without_settings(method: str) -> None:
    body = small_site(method)
    without = plan(body)
    only_full = plan(with_settings_listed(body, ["default"], ["1980MHz"]))
    assert only_full["objective_usd"] == without["objective_usd"]
    assert only_full["lower_bound_usd"] == without["lower_bound_usd"]
    assert numbers(only_full) == numbers(without)
    for p in only_full["periods"]:
        for d in p["deployments"].values():
            assert (d["prefill_setting"], d["decode_setting"]) == ("1980MHz", "1980MHz")
    for p in without["periods"]:
        for d in p["deployments"].values():
            assert not set(SETTING_KEYS) & set(d)
    # the table: the same without settings; two columns more, the settings, with them
    plain, listed = to_csv(without).splitlines(), to_csv(only_full).splitlines()
    assert "setting" not in plain[0]
    assert listed[0] == plain[0] + ",prefill_setting,decode_setting"
    assert all(b == a + ",1980MHz,1980MHz" for a, b in zip(plain[1:], listed[1:], strict=True))


def random_deployments(rng: np.random.Generator, n_dep: int, periods: int) -> list[dict[str, Any]]:
    """``n_dep`` deployments with demands of 0.5 to 12 req/s per period and 2 to 6 GPUs."""
    return [
        deployment(
            f"d{m}",
            [round(float(x), 3) for x in rng.uniform(0.5, 12.0, periods)],
            int(rng.integers(2, 7)),
        )
        for m in range(n_dep)
    ]


def random_site(seed: int, method: str) -> tuple[dict[str, Any], list[str], list[str]]:
    rng = np.random.default_rng(seed)
    n_dep = int(rng.integers(1, 3))
    periods = 3
    deps = random_deployments(rng, n_dep, periods)
    inventory = int(rng.integers(4, 11))
    cap = [round(float(x), 1) for x in rng.uniform(1500.0, 7000.0, periods)]
    price = [round(float(x), 2) for x in rng.uniform(20.0, 300.0, periods)]
    body = request(deps, cap, price, inventory, method, changes=int(rng.integers(1, 4)))
    pool = CLOCKS + ["550W", "400W"]
    prefill = [pool[int(i)] for i in rng.choice(len(pool), 2, replace=False)]
    decode = [pool[int(i)] for i in rng.choice(len(pool), 2, replace=False)]
    return body, ["1980MHz", *prefill], ["default", *decode]


@pytest.mark.parametrize("seed", range(6))
def test_settings_never_cost_more_and_every_path_agrees(seed: int) -> None:
    body, prefill, decode = random_site(seed, "compact")
    without = plan(body)
    with_compact = plan(with_settings_listed(body, prefill, decode))
    auto = copy.deepcopy(with_settings_listed(body, prefill, decode))
    auto["solver"]["method"] = "auto"
    with_auto = plan(auto)
    tol = 1e-7 * max(1.0, without["objective_usd"])
    assert with_compact["objective_usd"] <= without["objective_usd"] + tol
    # the phased solve (DPs over shared cells, pricing, windows) finds the same optimum
    assert with_auto["objective_usd"] == pytest.approx(with_compact["objective_usd"], abs=tol)
    assert with_auto["lower_bound_usd"] <= with_compact["objective_usd"] + tol


def max_load_within(loads: list[float], powers: list[float], budget: float) -> float:
    """Largest load on the piecewise-linear increasing curve with power <= budget."""
    if budget < powers[0]:
        return -1.0
    best = 0.0
    for x0, x1, y0, y1 in zip(loads, loads[1:], powers, powers[1:], strict=False):
        if y0 <= budget:
            best = max(best, x1 if y1 <= budget else x0 + (budget - y0) / (y1 - y0) * (x1 - x0))
    return best


def brute_force_one_period(
    demand: float, cap: float, price: float, max_gpus: int, inventory: int, settings: list[str]
) -> float:
    """SPEC 5's least cost of one period over every (n_P, n_D, s_P, s_D), from (0, 0)
    with start costs 0.01 per instance."""
    spec = resolve_spec(SpecRequest("qwen3-32b", "h200", WORKLOAD, {}))
    tp = spec.serving.tensor_parallel
    pairs = [(p, d) for p in range(1, max_gpus + 1) for d in range(1, max_gpus + 1)]
    pairs = [(p, d) for p, d in pairs if (p + d) * tp <= max_gpus]
    usd_per_w = DT_H * PUE * price / 1e6
    usd_per_rps = 0.5 * 3600.0 * DT_H

    def cost(site_it_w: float, served: float, started: int) -> float:
        return site_it_w * usd_per_w + usd_per_rps * (demand - served) + 0.01 * started

    best = cost(IDLE_W * inventory, 0.0, 0) if PUE * IDLE_W * inventory <= cap else np.inf
    for sp, sd in itertools.product(settings, settings):
        table = build_table(
            with_settings(spec, sp, sd), [p for p, _ in pairs], [d for _, d in pairs]
        )
        for i, (n_p, n_d) in enumerate(pairs):
            gpus = (n_p + n_d) * tp
            if gpus > inventory:
                continue
            loads, powers = table.breakpoints(i)
            idle = IDLE_W * (inventory - gpus)
            top = max_load_within(loads, powers, cap / PUE - idle)
            if top < 0:
                continue
            for s in (0.0, min(top, demand, loads[-1])):
                p_w = float(np.interp(s, loads, powers))
                best = min(best, cost(p_w + idle, s, n_p + n_d))
    return float(best)


@pytest.mark.parametrize(
    ("demand", "cap", "price"),
    [(9.0, 4000.0, 80.0), (14.0, 3000.0, 300.0), (4.0, 8000.0, 40.0), (20.0, 5200.0, 150.0)],
)
@pytest.mark.parametrize("method", ["auto", "compact"])
def test_one_period_choice_equals_brute_force(
    demand: float, cap: float, price: float, method: str
) -> None:
    settings = ["1980MHz", "1185MHz", "450W"]
    body = request([deployment("a", [demand], 8)], [cap], [price], inventory=8, method=method)
    got = plan(with_settings_listed(body, settings, settings))
    want = brute_force_one_period(demand, cap, price, 8, 8, settings)
    assert got["objective_usd"] == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_a_change_of_setting_is_not_an_instance_change() -> None:
    # no instance may change (limit 0, from 2P1D); a cheap, loose first period and a
    # tight cap in the second: the same instances run at two different settings
    body = request(
        [deployment("a", [30.0, 30.0], 6, initial={"n_p": 2, "n_d": 1})],
        cap=[8000.0, 2000.0],
        price=[20.0, 20.0],
        inventory=6,
        changes=0,
    )
    for method in ("compact", "auto"):
        body["solver"]["method"] = method
        resp = plan(with_settings_listed(body, CLOCKS, CLOCKS))
        runs = [p["deployments"]["a"] for p in resp["periods"]]
        assert [(r["n_p"], r["n_d"]) for r in runs] == [(2, 1), (2, 1)]
        assert (runs[0]["prefill_setting"], runs[0]["decode_setting"]) != (
            runs[1]["prefill_setting"],
            runs[1]["decode_setting"],
        )
        assert all(r["instances_started"] == r["instances_stopped"] == 0 for r in runs)
        assert resp["totals"]["transition_cost_usd"] == 0.0
        assert resp["totals"]["instance_starts"] == resp["totals"]["instance_stops"] == 0


@pytest.mark.parametrize(
    ("prefill", "field", "reason"),
    [
        (["1980MHz", "5000MHz"], "deployments[1].settings.prefill[1]", "345-1980 MHz"),
        (["1980MHz", "150W"], "deployments[1].settings.prefill[1]", "200-700 W"),
        (["fast"], "deployments[1].settings.prefill[0]", "'<N>MHz'"),
    ],
)
def test_a_setting_the_gpu_does_not_take_names_its_field(
    prefill: list[str], field: str, reason: str
) -> None:
    body = small_site("auto")
    body["deployments"][1]["settings"] = {"prefill": prefill}
    problem = problem_from_dict(body)
    for check in (check_memory, build_data):  # refused before any table is built
        with pytest.raises(InputError) as err:
            check(problem)
        assert err.value.field == field
        assert reason in err.value.reason


def test_the_settings_field_is_checked_by_the_schema() -> None:
    body = small_site("auto")
    body["deployments"][0]["settings"] = {"prefill": ["1980MHz", 1500]}
    with pytest.raises(InputError) as err:
        problem_from_dict(body)
    assert err.value.field == "deployments[0].settings.prefill[1]"
    body["deployments"][0]["settings"] = {"prefill": []}
    with pytest.raises(InputError) as err:
        problem_from_dict(body)
    assert err.value.field == "deployments[0].settings.prefill"
    body["deployments"][0]["settings"] = {"prefil": ["1980MHz"]}
    with pytest.raises(InputError) as err:
        problem_from_dict(body)
    assert err.value.field == "deployments[0].settings.prefil"


def test_a_site_request_takes_the_settings() -> None:
    body = with_settings_listed(small_site("auto"), CLOCKS, ["550W"])
    body["plan_start"] = "2026-01-01T00:00:00Z"
    body["name"] = "small"
    site = parse_model(SiteRequest, body)
    assert site.deployments[0].settings is not None
    assert site.deployments[0].settings.decode == ["550W"]


def test_a_choice_left_out_of_a_period_has_one_at_least_as_good() -> None:
    body = with_settings_listed(small_site("auto"), [*CLOCKS, "450W"], [*CLOCKS, "300W"])
    data = build_data(problem_from_dict(body))
    for d in data.deployments:
        assert d.dominator is not None and d.useful is not None
        t_idx, k_idx = np.nonzero(~d.useful)
        assert t_idx.size > 0  # something is left out
        for t, k in zip(t_idx.tolist(), k_idx.tolist(), strict=True):
            a = int(d.dominator[t, k])
            while not d.useful[t, a]:  # a chain ends at a choice that is kept
                a = int(d.dominator[t, a])
            assert (d.n_p[a], d.n_d[a]) == (d.n_p[k], d.n_d[k]) and a != k
            assert d.smax_rps[t, a] >= d.smax_rps[t, k]
            loads = np.linspace(0.0, float(d.smax_rps[t, k]), 41)
            assert np.all(d.power_w(a, loads) <= d.power_w(k, loads) * (1 + 1e-12))
        # every configuration keeps a choice in every period
        for t in range(data.n_periods):
            on = d.useful[t]
            kept = {(int(p), int(q)) for p, q in zip(d.n_p[on], d.n_d[on], strict=True)}
            assert kept == {(int(p), int(q)) for p, q in zip(d.n_p, d.n_d, strict=True)}
