"""Re-planning sites at each period boundary (``service/sites/replan.py``): which boundary is
due from a site's clock and latest plan, once per boundary whatever the number of
processes checking, and the loop of a real app re-planning a site whose clock moves."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.runtime.database import utc_now
from service.runtime.jobstore import job_store
from service.runtime.records import Site
from service.runtime.store import store_for
from service.sites import replan
from tests.service.test_sites import site_body

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def site(**body: Any) -> Site:
    b = site_body(replan_each_period=True, **body)
    b.pop("name")
    return Site("s1", "dc", b, 3, T0, T0)


def plan_doc(first: int, n: int, config: dict[str, tuple[int, int]]) -> dict[str, Any]:
    periods = [
        {"index": t, "deployments": {k: {"n_p": p, "n_d": d} for k, (p, d) in config.items()}}
        for t in range(first, n)
    ]
    return {"schedule": {"periods": periods}}


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)  # site_body: hourly periods from T0, four of them


def test_what_is_due_follows_the_clock_and_the_latest_plan() -> None:
    s = site(plan_start=T0.isoformat())
    running = {"a": (2, 1), "b": (1, 1)}
    # no plan yet: a full plan, in whichever period the clock is
    assert replan.due(s, None, None, at(0.5)) == replan.Due("s1", 3, 0, None)
    # a plan from period 0, clock in period 2: from 2, in the configuration of period 1
    d = replan.due(s, 0, plan_doc(0, 4, running), at(2.1))
    assert d is not None and d.period == 2
    assert d.current == {
        "period": 2,
        "state": {"a": {"n_p": 2, "n_d": 1}, "b": {"n_p": 1, "n_d": 1}},
    }
    assert d.key == "replan:s1:v3:p2"
    # already planned from this period, or the clock outside the horizon: nothing
    assert replan.due(s, 2, plan_doc(2, 4, running), at(2.9)) is None
    assert replan.due(s, 0, plan_doc(0, 4, running), at(-0.1)) is None
    assert replan.due(s, 0, plan_doc(0, 4, running), at(4.0)) is None
    # in period 0 with a plan from 0: nothing to re-plan
    assert replan.due(s, 0, plan_doc(0, 4, running), at(0.2)) is None
    # a site that did not ask
    quiet = Site("s2", "dc", {**s.body, "replan_each_period": False}, 1, T0, T0)
    assert replan.due(quiet, None, None, at(2.1)) is None


def test_each_boundary_is_planned_once_by_concurrent_checkers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store = store_for(url)
    body = site_body(
        replan_each_period=True, plan_start=(utc_now() - timedelta(minutes=90)).isoformat()
    )
    name = body.pop("name")
    created = store.create_site(name, body)
    now = utc_now()
    made: list[list[str]] = []

    def check() -> None:
        made.append(replan.create_jobs(store_for(url), job_store(url), now))

    threads = [threading.Thread(target=check) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for m in made for i in m]
    assert len(ids) == 1  # one job, for the boundary the clock is in
    job = job_store(url).get(ids[0])
    assert job.kind == "site_plan" and job.request == {"site_id": created.id, "current": None}
    assert replan.create_jobs(store, job_store(url), now) == []  # and never again


@pytest.mark.slow
def test_a_running_app_replans_a_site_as_its_clock_enters_a_new_period(
    make_client: Any, tmp_path: Path
) -> None:
    client: TestClient = make_client(workers=1, replan_check_s=0.2)
    # long enough for a loaded machine to plan within a period (a 6 s period missed the
    # re-plan from period 1 once, its plan coming after the clock had entered period 2)
    period_s = 12.0
    body = site_body(
        replan_each_period=True,
        period_minutes=period_s / 60,
        plan_start=(utc_now() - timedelta(seconds=1)).isoformat(),
    )
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 201, r.text
    site_id = r.json()["id"]
    assert r.json()["replan_each_period"] is True
    deadline = time.monotonic() + 3 * period_s + 20
    plans: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline and 1 not in plans:
        got = client.get(f"/v1/sites/{site_id}/plan")
        if got.status_code == 200:
            plans.setdefault(got.json()["first_period"], got.json())
        time.sleep(0.1)
    assert 0 in plans, "no full plan in period 0"
    assert 1 in plans, f"no re-plan from period 1; plans from {sorted(plans)}"
    # the re-plan started from the configuration the first plan ran in period 0
    period0 = plans[0]["schedule"]["periods"][0]["deployments"]
    assert plans[1]["current"] == {
        "period": 1,
        "state": {k: {"n_p": d["n_p"], "n_d": d["n_d"]} for k, d in period0.items()},
    }
    assert plans[1]["schedule"]["periods"][0]["index"] == 1
