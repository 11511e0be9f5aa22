"""A stop request ends a running HiGHS MILP at its next interrupt callback, and the
MILP answers with the incumbent it holds (appsi does not know HiGHS's "interrupted"
status: formulation.milp takes the incumbent from HiGHS itself)."""

from __future__ import annotations

import pytest

import formulation.milp as milp
from formulation.baselines import greedy_ramped
from formulation.data import build_data
from formulation.evaluate import price_schedule
from formulation.interrupt import interruptible
from formulation.problem import problem_from_dict
from tests.service.conftest import small_schedule


def larger() -> dict[str, object]:
    """small_schedule over 24 periods, up to 12 GPUs each, under a tighter cap: a MILP
    that branches."""
    body = small_schedule(mip_gap=0.0)
    for d, base in zip(
        body["deployments"], ([1.0, 3.0, 5.0, 2.0], [2.0, 2.0, 6.0, 1.0]), strict=True
    ):
        d["demand_rps"] = [x * f for f in (1.0, 1.3, 0.7, 1.6, 0.9, 1.2) for x in base]
        d["max_gpus"] = 12
    body["site"]["gpu_inventory"] = {"h200": 20}
    body["grid"] = {"power_cap_w": 9_000, "price_usd_per_mwh": 60, "carbon_g_per_kwh": 300}
    return body


def test_an_interrupted_milp_keeps_its_incumbent(monkeypatch: pytest.MonkeyPatch) -> None:
    data = build_data(problem_from_dict(larger()))
    start = greedy_ramped(data)
    assert start.violation_free
    monkeypatch.setattr(milp, "STOP_CHECK_S", 0.0)  # ask at the first callback
    asked: list[bool] = []

    def stop() -> bool:
        asked.append(True)
        return True

    with interruptible(stop):
        r = milp.solve_compact(data, 30.0, 0.0, start=start.schedule)
    if not asked:
        pytest.skip("HiGHS solved this MILP before its first interrupt callback")
    assert r.termination == "interrupted"
    assert r.status == "time_limit" and r.schedule is not None
    p = price_schedule(data, r.schedule)
    assert p.violation_free
    assert p.objective_usd <= start.objective_usd + 1e-6
    assert r.bound_usd is not None and r.bound_usd <= p.objective_usd + 1e-6


def test_a_failing_stop_check_ends_the_milp_with_what_it_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = build_data(problem_from_dict(small_schedule(mip_gap=0.0)))
    start = greedy_ramped(data)
    monkeypatch.setattr(milp, "STOP_CHECK_S", 0.0)

    def broken() -> bool:
        raise RuntimeError("database is locked")

    with interruptible(broken):
        r = milp.solve_compact(data, 30.0, 0.0, start=start.schedule)
    assert r.schedule is not None  # interrupted with the start, or solved before asking
