"""The fast demand response (formulation.whatif.shed) against brute force.

The brute force below shares nothing with the solver but the capacity model's tables:
it enumerates every combination of each deployment's setting pairs and, for each, the
served loads of the vertex argument (every deployment serving 0 or its most, or one of
them serving the most that fits), pricing power by linear interpolation over the
tables' breakpoints."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from formulation.problem import problem_from_dict
from formulation.whatif.shed import fast_response, next_boundary
from model.catalog import load_gpu_clocks
from model.clocks import GpuClocks
from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.spec import with_settings
from model.tables import build_table


def _h200() -> GpuClocks:
    clocks = load_gpu_clocks("h200")
    assert clocks is not None
    return clocks


CLOCKS = _h200()
FULL = CLOCKS.full_clock
OFFER = ("1590MHz", "1185MHz", "450W", "1350MHz")
WORKLOADS = ("azure-conv-2023", "azure-code-2023", "mooncake")


def _site(rng: np.random.Generator) -> tuple[dict, list[tuple[int, int]]]:
    m_count = int(rng.integers(1, 4))
    deps, running = [], []
    for m in range(m_count):
        n_p, n_d = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        dep = {
            "name": f"d{m}",
            "model": "qwen3-32b",
            "gpu": "h200",
            "workload": WORKLOADS[int(rng.integers(0, 3))],
            "demand_rps": [float(rng.uniform(0.5, 40.0))],
            "unserved_penalty_usd_per_request": float(rng.choice([0.0005, 0.005, 0.05])),
            "headroom": 0.9,
            "max_gpus": 16,
            "initial": {"n_p": n_p, "n_d": n_d},
        }
        if rng.random() < 0.8:  # else the GPU's default offer
            pick = lambda: [str(s) for s in rng.choice(OFFER, int(rng.integers(1, 3)), False)]  # noqa: E731
            dep["settings"] = {"prefill": pick(), "decode": pick()}
        deps.append(dep)
        running.append((n_p, n_d))
    body = {
        "period_minutes": 15,
        "site": {
            "gpu_inventory": {"h200": 32},
            "pue": 1.2,
            "idle_gpu_power_w": 120,
            "carbon_price_usd_per_tonne": 50,
        },
        "deployments": deps,
        "grid": {
            "power_cap_w": 40_000,
            "price_usd_per_mwh": float(rng.uniform(20, 300)),
            "carbon_g_per_kwh": float(rng.uniform(100, 500)),
        },
    }
    return body, running


def _most_within(xs: np.ndarray, ys: np.ndarray, room: float, smax: float) -> float:
    """The largest load in [0, smax] whose power (linear between the breakpoints, flat
    past the last) is at most ``room`` (given ``ys[0] <= room``)."""
    best = 0.0
    for j in range(len(xs)):
        if ys[j] <= room:
            best = max(best, float(xs[j]))
            if j + 1 == len(xs):
                best = smax  # flat past the last breakpoint
            elif ys[j + 1] > room:  # the segment crosses room
                frac = (room - ys[j]) / (ys[j + 1] - ys[j])
                best = max(best, float(xs[j] + frac * (xs[j + 1] - xs[j])))
    return min(best, smax)


def _brute(body: dict, running: list[tuple[int, int]], target_w: float) -> tuple[bool, float]:
    """(settings can meet the target, least cost per hour) by enumeration."""
    site = body["site"]
    pue, idle = site["pue"], site["idle_gpu_power_w"]
    price, carbon = body["grid"]["price_usd_per_mwh"], body["grid"]["carbon_g_per_kwh"]
    per_w_h = price / 1e6 + carbon * site["carbon_price_usd_per_tonne"] / 1e9  # USD per W h
    curves = []  # per deployment: list of (loads, powers, smax) per pair
    gpus = 0
    for dep, (n_p, n_d) in zip(body["deployments"], running, strict=True):
        spec = resolve_spec(SpecRequest(dep["model"], dep["gpu"], dep["workload"]))
        gpus += (n_p + n_d) * spec.serving.tensor_parallel
        offer = list(CLOCKS.settings)  # the GPU's default offer
        lists = dep.get("settings") or {"prefill": offer, "decode": offer}
        phases = [{FULL, *lists[ph]} for ph in ("prefill", "decode")]
        opts = []
        for sp, sd in itertools.product(*phases):
            s = with_settings(spec, None if sp == FULL else sp, None if sd == FULL else sd)
            tab = build_table(s, np.array([n_p]), np.array([n_d]))
            c = int(tab.bp_count[0])
            xs, ys = tab.bp_load_rps[0, :c], tab.bp_power_w[0, :c]
            smax = min(dep["demand_rps"][0], dep["headroom"] * tab.result.capacity_rps[0])
            opts.append((xs, ys, smax))
        curves.append(opts)
    budget = target_w / pue - idle * (site["gpu_inventory"]["h200"] - gpus)
    value = [
        d["unserved_penalty_usd_per_request"] * 3600.0 * d["demand_rps"][0]
        for d in body["deployments"]
    ]
    u = [d["unserved_penalty_usd_per_request"] * 3600.0 for d in body["deployments"]]
    best, can = np.inf, False
    for combo in itertools.product(*curves):
        p0 = [float(np.interp(0.0, xs, ys)) for xs, ys, _ in combo]
        p1 = [float(np.interp(sm, xs, ys)) for xs, ys, sm in combo]
        if sum(p0) > budget * (1 + 1e-9) + 1e-6:
            continue
        can = True
        m_count = len(combo)
        for full in itertools.product((False, True), repeat=m_count):
            loads = [combo[m][2] if full[m] else 0.0 for m in range(m_count)]
            cands = [loads]
            for f in range(m_count):  # f filled with the most that fits
                room = budget - sum(p1[m] if full[m] else p0[m] for m in range(m_count) if m != f)
                xs, ys, sm = combo[f]
                if room < p0[f]:
                    continue
                cands.append([*loads[:f], _most_within(xs, ys, room, sm), *loads[f + 1 :]])
            for ld in cands:
                power = [float(np.interp(ld[m], combo[m][0], combo[m][1])) for m in range(m_count)]
                if sum(power) > budget * (1 + 1e-9) + 1e-6:
                    continue
                site_w = pue * (sum(power) + idle * (site["gpu_inventory"]["h200"] - gpus))
                cost = site_w * per_w_h + sum(value[m] - u[m] * ld[m] for m in range(m_count))
                best = min(best, cost)
    return can, best


@pytest.mark.parametrize("seed", range(40))
def test_fast_response_equals_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    body, running = _site(rng)
    problem = problem_from_dict(body)
    # a target between the idle site and its full draw, some below what settings reach
    low = 1.2 * 120 * 32
    target = float(rng.uniform(low, low + 3_500 * len(running)))
    r = fast_response(problem, 0, running, target)
    can, best = _brute(body, running, target)
    assert r.met == can
    assert [(d.n_p, d.n_d) for d in r.deployments] == running
    if can:
        assert r.site_power_w <= target * (1 + 1e-7) + 1e-6
        assert r.shortfall_w == 0.0
        assert r.cost_usd_per_h == pytest.approx(best, rel=1e-9, abs=1e-9)
    else:
        assert r.shortfall_w > 0
        assert r.site_power_w == pytest.approx(target + r.shortfall_w)
        assert all(d.served_rps == 0.0 for d in r.deployments)


def test_no_cap_costs_no_more_than_the_full_clock() -> None:
    """Without a binding cap the choice includes the full clock, so it serves as much
    for no more cost: the settings can only help."""
    body, running = _site(np.random.default_rng(99))
    problem = problem_from_dict(body)
    r = fast_response(problem, 0, running, 1e9)
    assert r.met
    bare = problem_from_dict(
        {
            **body,
            "deployments": [
                {**d, "settings": {"prefill": [FULL], "decode": [FULL]}}
                for d in body["deployments"]
            ],
        }
    )
    full = fast_response(bare, 0, running, 1e9)
    assert r.cost_usd_per_h <= full.cost_usd_per_h + 1e-9


def test_bad_input_names_the_field() -> None:
    body, running = _site(np.random.default_rng(3))
    problem = problem_from_dict(body)
    with pytest.raises(InputError) as e:
        fast_response(problem, 0, running, -5.0)
    assert e.value.field == "target_w"
    with pytest.raises(InputError) as e:
        fast_response(problem, 0, [(1, 0)] * len(running), 1e5)
    assert e.value.field.startswith("running.")
    with pytest.raises(InputError) as e:
        fast_response(problem, 3, running, 1e5)
    assert e.value.field == "period"


@pytest.mark.slow  # 4.8 s on two cores
def test_next_boundary_stops_instances_the_settings_cannot_cover() -> None:
    """A target below what the running instances draw idle: the next boundary's
    one-period schedule stops instances and meets it."""
    body, running = _site(np.random.default_rng(5))
    body["deployments"][0]["initial"] = {"n_p": 3, "n_d": 2}
    running[0] = (3, 2)
    problem = problem_from_dict(body)
    floor = fast_response(problem, 0, running, 0.0).site_power_w
    target = 0.5 * (floor + 1.2 * 120 * 32)  # between the idle site and the floor
    assert not fast_response(problem, 0, running, target).met
    nb = next_boundary(problem, 0, running, target)
    assert nb["feasible"]
    assert nb["site_power_w"] <= target * (1 + 1e-7)
    assert nb["instance_changes"]


def test_dr_report_gives_what_settings_alone_shed() -> None:
    """``settings_only`` of the DR what-if: per window period, the fast response on the
    baseline's running counts under the event's cap, against the baseline's power."""
    from formulation.whatif.dr import demand_response
    from tests.formulation.test_dr import dep, site

    body = site([dep("a", [6.0, 8.0, 8.0, 5.0], 0.002), dep("b", [4.0, 6.0, 7.0, 3.0], 0.01)])
    event = {"start_period": 1, "end_period": 3, "reduction_w": 400}
    r = demand_response(body, event)
    so = r["settings_only"]
    base = r["baseline"]["periods"]
    problem = problem_from_dict(body)
    assert [p["period"] for p in so["periods"]] == [1, 2]
    for row, cap in zip(so["periods"], r["event"]["cap_w"], strict=True):
        t = row["period"]
        assert row["cap_w"] == cap
        assert row["baseline_power_w"] == base[t]["power_w"]
        running = [(d["n_p"], d["n_d"]) for d in base[t]["deployments"].values()]
        ref = fast_response(problem, t, running, cap)
        assert row["power_w"] == ref.site_power_w and row["met"] == ref.met
        assert row["shed_w"] == pytest.approx(base[t]["power_w"] - ref.site_power_w)
        if row["met"]:
            assert row["power_w"] <= cap * (1 + 1e-7) + 1e-6
        served = sum(d.served_rps for d in ref.deployments)
        base_served = sum(d["served_rps"] for d in base[t]["deployments"].values())
        assert row["demand_lost_requests"] == pytest.approx((base_served - served) * 3600.0)
        # the period's cost: energy and carbon at the site's power, unserved at its value
        carbon = body["grid"]["carbon_g_per_kwh"] * problem.site.carbon_price_usd_per_tonne
        price = body["grid"]["price_usd_per_mwh"] / 1e6 + carbon / 1e9
        base_cost = base[t]["power_w"] * price + sum(
            (d["demand_rps"] - d["served_rps"]) * 3600.0 * v
            for d, v in zip(base[t]["deployments"].values(), (0.002, 0.01), strict=True)
        )
        assert row["cost_delta_usd"] == pytest.approx(ref.cost_usd_per_h - base_cost, abs=1e-6)
    assert so["max_shed_w"] == max(x["shed_w"] for x in so["periods"])


def test_counts_beyond_the_inventory_are_refused() -> None:
    body, running = _site(np.random.default_rng(0))
    assert len(running) == 3  # 32 GPUs, 16 at most per deployment
    problem = problem_from_dict(body)
    with pytest.raises(InputError) as e:
        fast_response(problem, 0, [(8, 8)] * 3, 1e6)  # 48 GPUs
    assert e.value.field == "running"
    with pytest.raises(InputError) as e:
        fast_response(problem, 0, [(16, 16), *running[1:]], 1e6)  # beyond max_gpus
    assert e.value.field == "running.d0"


def test_the_change_from_the_plan_is_the_answers_cost_less_the_plans_by_the_same_terms() -> None:
    """Given the plan's site power and served loads in the period, the answer gives their
    cost per hour (energy at the period's price, carbon at its intensity and price, and
    the value of the demand left unserved, per hour) and the change the shed makes. The
    plan taken as the shed's own state changes nothing; a plan drawing more at the same
    loads costs its energy and carbon more, computed here by hand."""
    body, running = _site(np.random.default_rng(7))
    problem = problem_from_dict(body)
    target = 1e9
    r = fast_response(problem, 0, running, target)
    assert r.planned_cost_usd_per_h is None and r.cost_change_usd_per_h is None
    served = [d.served_rps for d in r.deployments]
    same = fast_response(problem, 0, running, target, (r.site_power_w, served))
    assert same.planned_cost_usd_per_h == pytest.approx(r.cost_usd_per_h, rel=1e-12)
    assert same.cost_change_usd_per_h == pytest.approx(0.0, abs=1e-9)
    extra_w = 10_000.0
    more = fast_response(problem, 0, running, target, (r.site_power_w + extra_w, served))
    price, carbon = body["grid"]["price_usd_per_mwh"], body["grid"]["carbon_g_per_kwh"]
    tonne = body["site"]["carbon_price_usd_per_tonne"]
    by_hand = extra_w * price / 1e6 + extra_w * carbon / 1e9 * tonne
    assert more.cost_change_usd_per_h == pytest.approx(-by_hand, rel=1e-9)
    with pytest.raises(InputError) as e:
        fast_response(problem, 0, running, target, (r.site_power_w, served[:-1]))
    assert e.value.field == "planned"
