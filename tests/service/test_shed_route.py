"""POST /v1/sites/{id}/shed: settings at once, the shed kept as an event, the re-plan
from the next boundary as a job; bad input as problem details."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from formulation.problem import Host, problem_from_dict
from formulation.whatif.shed import boundary_cached, clear_cache, fast_response, is_cached
from model.catalog import load_gpu_clocks
from service.runtime.settings import Settings
from service.runtime.store import store_for
from service.sites.openadr import IntervalPeriod
from service.sites.plans import request_of
from service.sites.shed import warm_sites
from tests.service.test_sites import PLAN_START, cap_event, register, site_body

AT = (datetime.fromisoformat(PLAN_START) + timedelta(minutes=90)).isoformat()  # period 1


@pytest.fixture
def client(make_client: Callable[..., TestClient], tmp_path: Path) -> TestClient:
    return make_client(workers=2, database_url=f"sqlite:///{tmp_path / 'pdwatt.db'}")


def _planned(client: TestClient) -> tuple[str, dict[str, Any]]:
    site_id = register(client)
    r = client.post(f"/v1/sites/{site_id}/plan")
    assert r.status_code == 200, r.text
    return site_id, r.json()


def _job(client: TestClient, job_id: str) -> dict[str, Any]:
    for _ in range(600):
        doc: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if doc["status"] not in ("queued", "running"):
            return doc
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still running")


def test_shed_answers_the_settings_records_the_event_and_replans(client: TestClient) -> None:
    site_id, plan = _planned(client)
    period = plan["schedule"]["periods"][1]
    before = period["power_w"]
    target_kw = 0.85 * before / 1000.0
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": target_kw, "at": AT})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["period"] == 1 and doc["plan_id"] == plan["plan_id"]
    assert doc["site_power_before_w"] == before
    assert doc["met"] and doc["shortfall_w"] == 0.0
    assert doc["site_power_w"] <= target_kw * 1000.0 * (1 + 1e-7)
    assert doc["shed_w"] == pytest.approx(before - doc["site_power_w"])
    clocks = load_gpu_clocks("h200")
    assert clocks is not None
    for name, d in doc["deployments"].items():
        run = period["deployments"][name]
        assert (d["n_p"], d["n_d"]) == (run["n_p"], run["n_d"])  # no instance changes
        assert d["prefill_setting"] in clocks.settings
        assert d["decode_setting"] in clocks.settings
    # the answer is the fast response of the site as stored, for the plan's counts
    site = client.get(f"/v1/sites/{site_id}").json()
    body = _stored_request(client, site_id)
    running = _running(body, period)
    ref = fast_response(problem_from_dict(body), 1, running, target_kw * 1000.0)
    assert doc["cost_usd_per_h"] == pytest.approx(ref.cost_usd_per_h, rel=1e-9)
    assert doc["site_power_w"] == pytest.approx(ref.site_power_w, rel=1e-9)
    # beside it the plan's own cost of the period (its power and served loads), and the change
    served = [period["deployments"][d["name"]]["served_rps"] for d in body["deployments"]]
    planned = fast_response(problem_from_dict(body), 1, running, target_kw * 1000.0,
                            (before, served)).planned_cost_usd_per_h  # fmt: skip
    assert planned is not None
    assert doc["planned_cost_usd_per_h"] == pytest.approx(planned, rel=1e-9)
    assert doc["cost_change_usd_per_h"] == pytest.approx(ref.cost_usd_per_h - planned, rel=1e-9)
    # kept as an event: the cap from period 1 on is the target
    assert site["grid"]["power_cap_w"][1:] == [target_kw * 1000.0] * 3
    events = client.get(f"/v1/sites/{site_id}/events").json()["events"]
    assert events[-1]["id"] == doc["event"]["id"]
    # the re-plan from the next boundary, from the running counts
    rp = doc["replan"]
    assert rp["from_period"] == 2
    job = _job(client, rp["job_id"])
    assert job["status"] == "succeeded", job
    latest = client.get(f"/v1/sites/{site_id}/plan").json()
    assert latest["first_period"] == 2
    for p in latest["schedule"]["periods"]:
        assert p["power_w"] <= target_kw * 1000.0 * (1 + 1e-6)


def test_a_dry_run_answers_the_same_shed_and_records_nothing(client: TestClient) -> None:
    """``dry_run``: the settings, the power after and the limits that would be stored,
    equal to the applied shed's answer; no event, no re-plan, the site unchanged; then
    the same shed applied records it."""
    site_id, plan = _planned(client)
    target_kw = 0.85 * plan["schedule"]["periods"][1]["power_w"] / 1000.0
    site_before = client.get(f"/v1/sites/{site_id}").json()
    events_before = client.get(f"/v1/sites/{site_id}/events").json()["events"]
    body = {"target_kw": target_kw, "at": AT}
    r = client.post(f"/v1/sites/{site_id}/shed", json={**body, "dry_run": True})
    assert r.status_code == 200, r.text
    dry = r.json()
    assert dry["dry_run"] is True
    assert "event" not in dry and "replan" not in dry
    assert client.get(f"/v1/sites/{site_id}").json() == site_before
    assert client.get(f"/v1/sites/{site_id}/events").json()["events"] == events_before
    assert client.get(f"/v1/sites/{site_id}/plan").json()["plan_id"] == plan["plan_id"]
    applied = client.post(f"/v1/sites/{site_id}/shed", json=body).json()
    assert "dry_run" not in applied and applied["event"]["id"]
    for key in ("period", "site_power_before_w", "site_power_w", "shed_w", "met",
                "cost_usd_per_h", "deployments", "stored_limits"):  # fmt: skip
        assert dry[key] == applied[key], key
    assert _job(client, applied["replan"]["job_id"])["status"] == "succeeded"


def test_dry_run_is_a_boolean(client: TestClient) -> None:
    site_id, _ = _planned(client)
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 1.0, "dry_run": "maybe"})
    assert r.status_code == 422
    assert "dry_run" in r.text


def test_after_a_shed_the_plan_keeps_the_current_period_as_the_shed_applied_it(
    client: TestClient,
) -> None:
    """The re-plan from the next boundary keeps the shed's period as the shed runs it:
    until it ends, the targets of now, a deeper shed and an event capping now still
    find what runs (before, the plan from period 2 had no period 1: 404 and 409)."""
    site_id, plan = _planned(client)
    before = plan["schedule"]["periods"][1]["power_w"]
    target_kw = 0.85 * before / 1000.0
    doc = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": target_kw, "at": AT}).json()
    assert _job(client, doc["replan"]["job_id"])["status"] == "succeeded"
    latest = client.get(f"/v1/sites/{site_id}/plan").json()
    assert latest["first_period"] == 2  # re-planned from the next boundary
    kept = latest["schedule"]["periods"][0]
    assert kept["index"] == 1 and kept["applied"] == "shed"
    assert kept["kept_from_plan"] == plan["plan_id"]
    assert kept["power_w"] == pytest.approx(doc["site_power_w"])
    assert kept["power_cap_w"] == pytest.approx(target_kw * 1000.0)
    for name, d in doc["deployments"].items():
        k = kept["deployments"][name]
        assert (k["n_p"], k["n_d"]) == (d["n_p"], d["n_d"])
        assert (k["prefill_setting"], k["decode_setting"]) == (
            d["prefill_setting"],
            d["decode_setting"],
        )
        assert k["served_rps"] == pytest.approx(d["served_rps"])
    now = client.get(f"/v1/sites/{site_id}/targets/now", params={"at": AT})
    assert now.status_code == 200, now.text
    assert now.json()["period"] == 1
    for t in now.json()["targets"]:
        assert t["prefill_setting"] == doc["deployments"][t["deployment"]]["prefill_setting"]
    deeper = client.post(
        f"/v1/sites/{site_id}/shed", json={"target_kw": 0.9 * target_kw, "at": AT}
    )
    assert deeper.status_code == 200, deeper.text
    assert deeper.json()["period"] == 1
    assert deeper.json()["site_power_before_w"] == pytest.approx(doc["site_power_w"])


def test_a_target_below_what_settings_reach_gives_the_shortfall(client: TestClient) -> None:
    site_id, _ = _planned(client)
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 0.5, "at": AT})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert not doc["met"]
    assert doc["shortfall_w"] == pytest.approx(doc["site_power_w"] - 500.0)
    assert doc["next_boundary"]["period"] == 2


def test_bad_shed_is_a_problem_naming_the_field(client: TestClient) -> None:
    site_id, _ = _planned(client)
    for body, field in (
        ({"target_kw": -1}, "target_kw"),
        ({"target_kw": "x"}, "target_kw"),
        ({}, "target_kw"),
        ({"target_kw": 5, "at": "2026-07-01T13:00:00"}, "at"),
        ({"target_kw": 5, "duration": "1h"}, "duration"),
    ):
        r = client.post(f"/v1/sites/{site_id}/shed", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["errors"][0]["field"] == field, r.json()
    r = client.post("/v1/sites/nope/shed", json={"target_kw": 5})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    # a site with no plan, and a time the plan does not cover: nothing says what runs
    fresh = register(client)
    r = client.post(f"/v1/sites/{fresh}/shed", json={"target_kw": 5, "at": AT})
    assert r.status_code == 409
    assert "no plan" in r.json()["detail"]
    r = client.post(
        f"/v1/sites/{site_id}/shed", json={"target_kw": 5, "at": "2030-01-01T00:00:00Z"}
    )
    assert r.status_code == 409
    assert "no period" in r.json()["detail"]
    # nothing was recorded by a refused shed
    assert client.get(f"/v1/sites/{site_id}/events").json()["events"] == []


#: durations an event refuses; a shed took "P" and "PT" (then a 500 when the event it
#: is kept as refused them) and stored durations in digits other than ASCII as sent
BAD_DURATIONS = ["P", "PT", "P1DT", "PT\u0661H", "PT\uff11H", "-PT1H", "PT1H\n", "P1.5D"]


def test_a_duration_is_read_as_an_events_duration(client: TestClient) -> None:
    """One reader for a shed's and an event's duration: what the event refuses is a
    422 naming ``duration``, and nothing is recorded."""
    site_id, _ = _planned(client)
    for duration in BAD_DURATIONS:
        r = client.post(
            f"/v1/sites/{site_id}/shed", json={"target_kw": 5, "at": AT, "duration": duration}
        )
        assert r.status_code == 422, (duration, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        (error,) = r.json()["errors"]
        assert error["field"] == "duration" and repr(duration) in error["reason"], error
        with pytest.raises(ValidationError):  # the event refuses it too
            IntervalPeriod.model_validate({"start": AT, "duration": duration})
    assert client.get(f"/v1/sites/{site_id}/events").json()["events"] == []
    r = client.post(
        f"/v1/sites/{site_id}/shed", json={"target_kw": 5, "at": AT, "duration": "PT30M"}
    )
    assert r.status_code == 200, r.text
    (event,) = client.get(f"/v1/sites/{site_id}/events").json()["events"]
    assert event["event"]["intervalPeriod"]["duration"] == "PT30M"


def test_at_is_only_an_iso_date_time_text(client: TestClient) -> None:
    """``at`` as seconds since 1970 (a number or a text of digits, which pydantic would
    read) was taken as a time."""
    site_id, _ = _planned(client)
    for at in (1782910000, 1782910000.5, "1782910000", True, ["2026-07-01T13:30:00Z"]):
        r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 5, "at": at})
        assert r.status_code == 422, (at, r.text)
        (error,) = r.json()["errors"]
        assert error["field"] == "at" and "ISO 8601" in error["reason"], error
    assert client.get(f"/v1/sites/{site_id}/events").json()["events"] == []


def _stored_request(client: TestClient, site_id: str) -> dict[str, Any]:
    site = client.get(f"/v1/sites/{site_id}").json()
    drop = ("id", "version", "created", "updated", "name")
    return request_of({k: v for k, v in site.items() if k not in drop})


def _running(body: dict[str, Any], period: dict[str, Any]) -> list[tuple[int, int]]:
    """The (n_p, n_d) a plan's ``period`` runs, in the order of the request's deployments."""
    return [
        (period["deployments"][d["name"]]["n_p"], period["deployments"][d["name"]]["n_d"])
        for d in body["deployments"]
    ]


def test_an_event_capping_now_answers_the_settings_at_once(client: TestClient) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    start = (now - timedelta(minutes=30)).isoformat()  # the clock is in period 0
    site_id = register(client, plan_start=start)
    plan = client.post(f"/v1/sites/{site_id}/plan").json()
    period = plan["schedule"]["periods"][0]
    cap_kw = round(0.85 * period["power_w"] / 1000.0, 3)
    # a cap that started 10 minutes ago, within the current period
    event = cap_event((now - timedelta(minutes=10)).isoformat(), [[cap_kw]], name="now")
    r = client.post(f"/v1/sites/{site_id}/events", json={"event": event})
    assert r.status_code == 200, r.text
    imm = r.json()["immediate"]
    assert imm["period"] == 0 and imm["plan_id"] == plan["plan_id"]
    assert imm["met"] and imm["site_power_w"] <= cap_kw * 1000.0 * (1 + 1e-7)
    body = _stored_request(client, site_id)
    running = _running(body, period)
    ref = fast_response(problem_from_dict(body), 0, running, cap_kw * 1000.0)
    assert imm["cost_usd_per_h"] == pytest.approx(ref.cost_usd_per_h, rel=1e-9)
    for d, name in zip(ref.deployments, [d["name"] for d in body["deployments"]], strict=True):
        got = imm["deployments"][name]
        assert (got["prefill_setting"], got["decode_setting"]) == (
            d.prefill_setting,
            d.decode_setting,
        )
    # an event that starts later is planned for, not answered at once
    later = cap_event((now + timedelta(hours=2)).isoformat(), [[cap_kw]], name="later")
    r = client.post(f"/v1/sites/{site_id}/events", json={"event": later})
    assert r.status_code == 200, r.text
    assert "immediate" not in r.json()


def test_the_tables_of_the_running_counts_are_built_ahead(client: TestClient) -> None:
    """warm_sites builds the fast response's tables for what each site's plan runs now,
    and those of the next boundary's period from those counts, so that the first shed
    answers from them."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    site_id = register(client, plan_start=(now - timedelta(minutes=30)).isoformat())
    fresh = register(client)  # no plan: nothing to build
    plan = client.post(f"/v1/sites/{site_id}/plan").json()
    body = _stored_request(client, site_id)
    period = plan["schedule"]["periods"][0]
    running = _running(body, period)
    settings: Settings = client.app.state.settings  # type: ignore[attr-defined]
    host = Host(memory_budget_mb=settings.max_solve_memory_mb, kernels=settings.kernels)
    problem = problem_from_dict(body, host)  # as the server reads the site
    clear_cache()
    assert not is_cached(problem, running) and not boundary_cached(problem, 1, running)
    assert warm_sites(store_for(settings.database_url), settings, now) == 1
    assert is_cached(problem, running) and boundary_cached(problem, 1, running)
    assert fresh != site_id


def test_a_plan_whose_counts_no_longer_fit_the_site_is_a_conflict(client: TestClient) -> None:
    site_id, plan = _planned(client)
    used = sum(d["gpus"] for d in plan["schedule"]["periods"][1]["deployments"].values())
    assert used > 2
    new = site_body()
    new["site"]["gpu_inventory"] = {"h200": 2}  # the plan's counts no longer fit
    assert client.put(f"/v1/sites/{site_id}", json=new).status_code == 200
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 5, "at": AT})
    assert r.status_code == 409, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "no longer fit" in r.json()["detail"]


def test_a_shed_below_the_least_draw_keeps_its_period_at_the_limit_recorded(
    client: TestClient,
) -> None:
    """A shed to 0 kW records the least draw the running counts reach; the re-plan's
    kept period runs under that recorded limit, not under the unreachable target."""
    site_id, _ = _planned(client)
    doc = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 0, "at": AT}).json()
    first = doc["stored_limits"][0]["limit_kw"] * 1000.0
    assert first > 0.0
    assert _job(client, doc["replan"]["job_id"])["status"] == "succeeded"
    kept = client.get(f"/v1/sites/{site_id}/plan").json()["schedule"]["periods"][0]
    assert kept["index"] == 1 and kept["applied"] == "shed"
    assert kept["power_cap_w"] == pytest.approx(first)


def test_a_client_cannot_state_what_a_site_ran(client: TestClient) -> None:
    """``applied`` (what the site ran in the period before a re-plan) is recorded by a
    shed only: a site_plan job that states it is refused at submission, before anything
    is queued. (A forged one made a plan whose period drew 1 W against a 1 W cap, and
    replica targets with a negative GPU power limit.)"""
    site_id = register(client)
    state = {name: {"n_p": 1, "n_d": 1} for name in ("a", "b")}
    forged = {
        "period": 0,
        "power_w": 1,
        "power_cap_w": 1,
        "deployments": {
            "zzz": {
                "prefill_setting": "x",
                "decode_setting": "y",
                "served_rps": 5,
                "capacity_rps": 1e300,
                "power_w": 1,
            }
        },
    }
    request = {"site_id": site_id, "current": {"period": 1, "state": state}, "applied": forged}
    r = client.post("/v1/jobs", json={"kind": "site_plan", "request": request})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "request.applied"
    assert client.get("/ui/api/jobs").json()["jobs"] == []  # nothing queued


@pytest.mark.parametrize("flag", ["yes", 1, "true"])
def test_dry_run_is_json_true_or_false_only(client: TestClient, flag: Any) -> None:
    """``"dry_run": "yes"`` and ``1`` were read as true: a shed a client meant as
    something else previewed, or one meant as a preview applied. Only JSON's true and
    false are read."""
    site_id = register(client)
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 5.0, "dry_run": flag})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "dry_run"
    assert client.get(f"/v1/sites/{site_id}/events").json()["events"] == []
