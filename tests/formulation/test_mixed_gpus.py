"""Schedules of deployments whose phases run on different GPU types (docs/mixed-gpus.md):
each phase's GPUs from its own type's inventory, today's schedule when both phases name
the deployment's GPU, and the inputs refused, naming the field."""

from __future__ import annotations

import copy
import typing
from typing import Any

import numpy as np
import pytest

from formulation.data import build_data
from formulation.evaluate import price_schedule
from formulation.problem import problem_from_dict
from formulation.solve import solve
from model.errors import InputError

WORKLOAD = "fixed:1024:256"


def deployment(name: str, gpu: str, demand: list[float], **phases: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": "qwen3-32b",
        "gpu": gpu,
        "workload": WORKLOAD,
        "demand_rps": demand,
        "unserved_penalty_usd_per_request": 1.0,
        "max_gpus": 8,
        **phases,
    }


def request(deps: list[dict[str, Any]], inventory: dict[str, int], cap: Any) -> dict[str, Any]:
    return {
        "period_minutes": 15,
        "site": {"gpu_inventory": inventory, "pue": 1.2, "idle_gpu_power_w": 120},
        "deployments": deps,
        "grid": {"power_cap_w": cap, "price_usd_per_mwh": [40, 90, 150, 90]},
        "transitions": {"max_instance_changes_per_period": 2},
        "solver": {"time_limit_s": 20, "threads": 1},
    }


def today() -> dict[str, Any]:
    """Two H200 deployments on 8 GPUs under a cap that binds in the third period."""
    return request(
        [
            deployment("chat", "h200", [2.0, 6.0, 9.0, 4.0]),
            deployment("code", "h200", [1.0, 3.0, 5.0, 2.0]),
        ],
        {"h200": 8},
        [9000, 9000, 4500, 9000],
    )


@pytest.mark.parametrize("method", ["auto", "compact"])
def test_both_phases_on_the_deployments_gpu_give_todays_schedule(method):
    """``prefill_gpu == decode_gpu == gpu`` on every deployment: the same tables and the
    same schedule, objective and bound as the request without them, bit for bit."""
    base = today()
    named = copy.deepcopy(base)
    for d in named["deployments"]:
        d["prefill_gpu"] = d["decode_gpu"] = d["gpu"]
    for body in (base, named):
        body["solver"]["method"] = method
    a, b = build_data(problem_from_dict(base)), build_data(problem_from_dict(named))
    assert b.prefill_pool_of is None
    for da, db in zip(a.deployments, b.deployments, strict=True):
        assert da.prefill_gpus is None and db.prefill_gpus is None
        for name in ("capacity_rps", "bp_load_rps", "bp_power_w", "gpus"):
            assert np.array_equal(getattr(da, name), getattr(db, name), equal_nan=True)
    ra, rb = solve(problem_from_dict(base)), solve(problem_from_dict(named))
    assert ra.priced.objective_usd == rb.priced.objective_usd
    assert np.array_equal(ra.priced.schedule.config, rb.priced.schedule.config)
    assert np.array_equal(ra.priced.schedule.served_rps, rb.priced.schedule.served_rps)
    assert ra.lower_bound_usd == rb.lower_bound_usd


def mixed_site() -> dict[str, Any]:
    """``split`` prefills on H100 and decodes on H200; ``h100`` runs both phases on
    H100; 3 H100s and 2 H200s (tp1: an instance is one GPU). Demand beyond what the
    GPUs serve, so every schedule fills what the inventories allow."""
    return request(
        [
            deployment("split", "h200", [30.0] * 4, prefill_gpu="h100-sxm"),
            deployment("h100", "h100-sxm", [30.0] * 4),
        ],
        {"h100-sxm": 3, "h200": 2},
        [40_000] * 4,
    )


@pytest.mark.parametrize("method", ["auto", "compact"])
def test_each_phase_draws_from_its_own_types_inventory(method):
    body = mixed_site()
    body["solver"]["method"] = method
    p = problem_from_dict(body)
    data = build_data(p)
    split = data.deployments[0]
    assert (split.pool, split.prefill_pool) == ("h200", "h100-sxm")
    assert data.pools == ("h100-sxm", "h200")
    # the prefill pool's GPUs and the decode pool's, per candidate (tp1: n_P and n_D)
    assert [(g, u.tolist()) for g, u in data.pool_use(0)] == [
        (0, split.n_p.tolist()),
        (1, split.n_d.tolist()),
    ]
    r = solve(p)
    sched = r.priced.schedule
    assert r.priced.violation_free and not r.priced.inventory_violations
    n_p = [data.deployments[m].n_p[sched.config[m]] for m in range(2)]
    n_d = [data.deployments[m].n_d[sched.config[m]] for m in range(2)]
    # H100s: split's prefill plus both phases of h100; H200s: split's decode alone
    assert np.all(n_p[0] + n_p[1] + n_d[1] <= 3)
    assert np.all(n_d[0] <= 2)
    # demand beyond capacity: the H200s, which only split can use, all decode once
    # the change limit (2 per period from off) lets them start
    assert n_d[0][0] == 1 and np.all(n_d[0][1:] == 2)
    # the same schedule priced by hand: each period's H100s and H200s in use
    again = price_schedule(data, sched)
    assert np.array_equal(again.gpus_used[0], n_p[0] + n_p[1] + n_d[1])
    assert np.array_equal(again.gpus_used[1], n_d[0])


def test_the_phased_solve_meets_the_compact_milps_optimum_across_pools():
    """The Lagrangian pipeline prices each phase's GPUs in its own pool: its schedule's
    cost is the exact optimum within the requested gap. Reference: 163,035.15 USD, the
    compact MILP over every candidate of this site solved to optimality by HiGHS
    (``formulation.milp.compact.solve_compact`` on its data, gap 0)."""
    body = mixed_site()
    body["grid"]["power_cap_w"] = [4000, 2500, 1800, 4000]  # the cap binds as well
    r = solve(problem_from_dict(body))
    assert r.priced.violation_free
    assert r.lower_bound_usd <= 163_035.152858 * (1 + 1e-9)
    assert r.priced.objective_usd == pytest.approx(163_035.152858, rel=2e-3)


def test_the_response_names_each_phases_gpu_and_the_link():
    from formulation.results import response

    r = response(solve(problem_from_dict(mixed_site())))
    split, h100 = r["deployments"]
    assert (split["prefill_gpu"], split["decode_gpu"]) == ("h100-sxm", "h200")
    assert split["interconnect"] == "infiniband" and split["interconnect_gb_per_s"] == 50.0
    assert "prefill_gpu" not in h100 and "interconnect" not in h100


def test_the_schemas_links_are_the_models():
    from formulation.request import Interconnect
    from model.performance.interconnect import INTERCONNECTS

    assert typing.get_args(typing.get_args(Interconnect)[0]) == tuple(INTERCONNECTS)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda b: b["deployments"][0].update(prefill_gpu="b200"),
         "deployments[0].prefill_gpu", "not in site.gpu_inventory"),
        (lambda b: b["deployments"][1].update(decode_gpu="a100-80gb"),
         "deployments[1].decode_gpu", "not in site.gpu_inventory"),
        (lambda b: (b["site"]["gpu_inventory"].update({"h900": 4}),
                    b["deployments"][0].update(prefill_gpu="h900")),
         "site.gpu_inventory.h900", "unknown GPU type 'h900'"),
        # a type no deployment runs stood idle, costed at idle power without a word
        (lambda b: b["site"]["gpu_inventory"].update({"zz9": 8}),
         "site.gpu_inventory.zz9", "unknown GPU type 'zz9'"),
        (lambda b: b["site"].update(interconnect="nvlink"), "site.interconnect", "one board"),
        (lambda b: b["site"].update(interconnect="token-ring"), "site.interconnect",
         "'nvlink', 'infiniband' or 'ethernet'"),
        (lambda b: b["site"].update(interconnect_gb_per_s=0), "site.interconnect_gb_per_s",
         "greater than 0"),
    ],
)  # fmt: skip
def test_bad_phase_gpus_name_the_field(change, field, words):
    body = mixed_site()
    change(body)
    with pytest.raises(InputError) as e:
        build_data(problem_from_dict(body))
    assert e.value.field == field
    assert words in e.value.reason
