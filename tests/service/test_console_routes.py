"""The console's read-only routes (/ui/api/...) against the /v1 routes they summarise:
a site's page holds the site and its latest plan as /v1 answers them, the brief's peak
and periods at the cap are those of the plan, events are dated on the site's periods,
and the jobs list gives each job's trace from its result."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.console.summary import AT_CAP_RTOL
from tests.service.conftest import small_schedule

PLAN_START = "2026-07-01T12:00:00Z"


def _site(client: TestClient) -> str:
    body = small_schedule() | {"name": "small", "plan_start": PLAN_START}
    # period 2 draws 3.1 kW under a 9 kW cap: 2.8 kW binds there
    body["grid"]["power_cap_w"] = [20_000, 20_000, 2_800, 20_000]
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _event(start: str, minutes: int, kw: float) -> dict[str, Any]:
    return {
        "programID": "test",
        "eventName": "cut",
        "payloadDescriptors": [{"payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
        "intervalPeriod": {"start": start, "duration": f"PT{minutes}M"},
        "intervals": [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [kw]}]}],
    }


def test_site_page_and_brief(client: TestClient) -> None:
    site_id = _site(client)
    page = client.get(f"/ui/api/sites/{site_id}/page").json()
    assert page["plan"] is None and page["summary"]["plan"] is None
    assert page["site"] == client.get(f"/v1/sites/{site_id}").json()

    assert client.post(f"/v1/sites/{site_id}/plan").status_code == 200
    page = client.get(f"/ui/api/sites/{site_id}/page").json()
    plan = client.get(f"/v1/sites/{site_id}/plan").json()
    assert page["plan"] == plan
    periods = plan["schedule"]["periods"]
    brief = page["summary"]["plan"]
    peak = max(periods, key=lambda p: p["power_w"])
    assert (brief["peak_power_w"], brief["peak_period"], brief["cap_at_peak_w"]) == (
        peak["power_w"],
        peak["index"],
        peak["power_cap_w"],
    )
    at_cap = [p["index"] for p in periods if p["power_w"] >= p["power_cap_w"] * (1 - AT_CAP_RTOL)]
    assert 2 in at_cap and brief["periods_at_cap"] == len(at_cap)
    assert brief["objective_usd"] == plan["schedule"]["objective_usd"]
    assert brief["status"] == plan["status"] and brief["stale"] is False
    assert page["summary"]["gpu_inventory"] == {"h200": 8}
    assert [d["name"] for d in page["summary"]["deployments"]] == ["a", "b"]
    assert client.get("/ui/api/sites").json()["sites"] == [page["summary"]]
    assert page["targets_now"] is None  # the plan lies in the past


def test_site_page_holds_the_targets_now(client: TestClient) -> None:
    """A plan whose clock covers now: the page's targets now are those of
    /v1/sites/{id}/targets/now (the period and every deployment's counts)."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    body = small_schedule() | {"name": "now", "plan_start": start.isoformat()}
    site_id = client.post("/v1/sites", json=body).json()["id"]
    assert client.post(f"/v1/sites/{site_id}/plan").status_code == 200
    for _ in range(2):  # once more if an hour boundary fell between the two requests
        before = (datetime.now(UTC) - start) // timedelta(hours=1)
        page = client.get(f"/ui/api/sites/{site_id}/page").json()
        now = client.get(f"/v1/sites/{site_id}/targets/now").json()
        after = (datetime.now(UTC) - start) // timedelta(hours=1)
        if before == after:
            break
    assert page["targets_now"]["period"] == now["period"] == after  # 1, or 2 past the hour
    assert page["targets_now"]["targets"] == now["targets"]
    assert page["targets_now"]["plan_id"] == now["plan_id"]


def test_events_dated_on_the_site_periods(client: TestClient) -> None:
    site_id = _site(client)
    # 13:30 for 60 minutes on hourly periods from 12:00: touches periods 1 and 2
    r = client.post(
        f"/v1/sites/{site_id}/events", json={"event": _event("2026-07-01T13:30:00Z", 60, 15)}
    )
    assert r.status_code == 200, r.text
    summary = client.get(f"/ui/api/sites/{site_id}").json()
    (ev,) = summary["events"]
    assert (ev["first_period"], ev["end_period"]) == (1, 3)
    assert (ev["start"], ev["end"]) == ("2026-07-01T13:00:00+00:00", "2026-07-01T15:00:00+00:00")
    assert ev["types"] == ["IMPORT_CAPACITY_LIMIT"]
    assert summary["next_event"] is None  # that day is past
    assert summary["plan"]["stale"] is False  # the event re-planned the site


def test_next_event(client: TestClient) -> None:
    """The next event is the one that starts first of those not yet over."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    body = small_schedule() | {"name": "now", "plan_start": now.isoformat()}
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 201, r.text
    site_id = r.json()["id"]
    assert client.get(f"/ui/api/sites/{site_id}").json()["next_event"] is None
    later = (now + timedelta(hours=2)).isoformat()
    sooner = (now + timedelta(hours=1)).isoformat()
    for start, name in ((later, "later"), (sooner, "sooner")):
        ev = _event(start, 60, 15) | {"eventName": name}
        assert client.post(f"/v1/sites/{site_id}/events", json={"event": ev}).status_code == 200
    summary = client.get(f"/ui/api/sites/{site_id}").json()
    assert [e["eventName"] for e in summary["events"]] == ["later", "sooner"]
    assert summary["next_event"]["eventName"] == "sooner"
    assert summary["next_event"]["first_period"] == 1


def test_jobs_listed_with_their_trace(client: TestClient) -> None:
    site_id = _site(client)
    r = client.post("/v1/jobs", json={"kind": "site_plan", "request": {"site_id": site_id}})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    for _ in range(600):
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] not in ("queued", "running"):
            break
        time.sleep(0.05)  # the job runs in the application's own thread
    assert job["status"] == "succeeded", job
    (listed,) = client.get("/ui/api/jobs").json()["jobs"]
    assert listed["id"] == job_id and listed["site_id"] == site_id
    assert "result" not in listed
    assert listed["trace"] == job["result"]["schedule"]["solver"]["trace"]


def test_now_next_cut_and_money(client: TestClient) -> None:
    """A plan covering now: the brief's ``now`` is the period ``/targets/now`` gives, with
    the plan's draw, cap, headroom, price and carbon there; the next event is the cut
    the site's own grid signals make ahead (no event posted), with its cap; the plan's
    objective comes with its terms, which sum to it."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    body = small_schedule() | {"name": "now", "plan_start": start.isoformat()}
    body["grid"]["power_cap_w"] = [20_000, 20_000, 2_800, 20_000]  # a cut in period 2
    site_id = client.post("/v1/sites", json=body).json()["id"]
    assert client.post(f"/v1/sites/{site_id}/plan").status_code == 200
    summary = client.get(f"/ui/api/sites/{site_id}").json()
    plan = client.get(f"/v1/sites/{site_id}/plan").json()
    targets = client.get(f"/v1/sites/{site_id}/targets/now").json()
    now = summary["now"]
    assert now["period"] == targets["period"] == 1
    p = plan["schedule"]["periods"][1]
    assert (now["power_w"], now["cap_w"]) == (p["power_w"], p["power_cap_w"])
    assert now["headroom_w"] == p["power_cap_w"] - p["power_w"]
    assert now["headroom_pct"] == 100 * now["headroom_w"] / p["power_cap_w"]
    assert (now["price_usd_per_mwh"], now["carbon_g_per_kwh"]) == (
        p["price_usd_per_mwh"],
        p["carbon_g_per_kwh"],
    )
    assert {n: (d["n_p"], d["n_d"]) for n, d in now["deployments"].items()} == {
        t["deployment"]: (t["num_prefill"], t["num_decode"]) for t in targets["targets"]
    }
    nxt = summary["next_event"]
    assert nxt["source"] == "grid" and nxt["cap_w"] == 2_800
    assert (nxt["first_period"], nxt["end_period"]) == (2, 3)
    assert nxt["start"] == (start + timedelta(hours=2)).isoformat()
    brief, totals = summary["plan"], plan["schedule"]["totals"]
    assert brief["energy_cost_usd"] == totals["cost_usd"]
    assert brief["carbon_cost_usd"] == totals["carbon_cost_usd"]
    assert brief["unserved_value_usd"] == totals["unserved_value_usd"]
    terms = ("energy_cost_usd", "carbon_cost_usd", "unserved_value_usd", "transition_cost_usd")
    assert sum(brief[k] for k in terms) == pytest.approx(brief["objective_usd"], rel=1e-9)
    # an event posted over the cut comes first, with its own cap
    r = client.post(
        f"/v1/sites/{site_id}/events",
        json={"event": _event((start + timedelta(hours=2)).isoformat(), 60, 2.5)},
    )
    assert r.status_code == 200, r.text
    nxt = client.get(f"/ui/api/sites/{site_id}").json()["next_event"]
    assert (nxt["source"], nxt["eventName"], nxt["cap_w"]) == ("event", "cut", 2_500)
