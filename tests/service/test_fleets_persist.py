"""Fleets that persist (``/v1/fleets``): registered sites planned together, an OpenADR
event at one member moving the regions' demand to another, the plan's staleness, a
member kept while its fleet is, the console's shares now, and bad input named by
field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import small_schedule
from tests.service.test_sites import PLAN_START, cap_event

#: one region of Qwen3-32B demand (deployment "a" of small_schedule) served at home by
#: "east" and by "west" at a penalty
REGION = {
    "name": "r1",
    "model": "qwen3-32b",
    "demand_rps": [1.0, 2.0, 3.0, 1.0],
    "served_by": [
        {"site": "east", "deployment": "a"},
        {"site": "west", "deployment": "a", "penalty_usd_per_request": 0.001},
    ],
}


@pytest.fixture
def client(make_client: Callable[..., TestClient], tmp_path: Path) -> TestClient:
    return make_client(workers=1, database_url=f"sqlite:///{tmp_path / 'fleets.db'}")


def register(client: TestClient, name: str, plan_start: str = PLAN_START) -> str:
    body = small_schedule(time_limit_s=10) | {"name": name, "plan_start": plan_start}
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def fleet_body(ids: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": "two",
        "sites": ids,
        "regions": [copy.deepcopy(REGION)],
        "routing": {"max_share_change_per_period": 0.5},
        "solver": {"time_limit_s": 20},
        **extra,
    }


def make_fleet(client: TestClient, plan_start: str = PLAN_START) -> tuple[str, list[str]]:
    ids = [register(client, "east", plan_start), register(client, "west", plan_start)]
    r = client.post("/v1/fleets", json=fleet_body(ids))
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == f"/v1/fleets/{r.json()['id']}"
    return str(r.json()["id"]), ids


def shares(plan: dict[str, Any], site: str) -> list[float]:
    """The share of region r1 site ``site`` serves, per period."""
    (region,) = plan["regions"]
    return [x for s in region["shares"] if s["site"] == site for x in s["share"]]


def test_plan_the_members_as_they_are_and_after_an_event(client: TestClient) -> None:
    fid, (east, west) = make_fleet(client)
    r = client.get(f"/v1/fleets/{fid}/plan")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"

    r = client.post(f"/v1/fleets/{fid}/plan")
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["stale"] is False and first["changed_sites"] == []
    assert first["site_versions"] == {east: 1, west: 1}
    assert first["plan_start"] == "2026-07-01T12:00:00+00:00"
    # served at home where nothing binds: the penalty makes west dearer
    assert shares(first["plan"], "east") == pytest.approx([1.0] * 4)

    # the same fleet as one POST /v1/fleet/schedule request: the same solve
    direct = {
        "period_minutes": 60,
        "sites": [
            {"name": n, **{k: small_schedule()[k] for k in ("site", "deployments", "grid")}}
            for n in ("east", "west")
        ],
        "regions": [REGION],
        "routing": {"max_share_change_per_period": 0.5},
        "solver": {"time_limit_s": 20},
    }
    r = client.post("/v1/fleet/schedule", json=direct)
    assert r.status_code == 200, r.text
    assert r.json()["objective_usd"] == pytest.approx(first["plan"]["objective_usd"], rel=1e-6)

    # an OpenADR event at east (3 kW from 13:00 to 15:00): the fleet plan is stale...
    event = cap_event("2026-07-01T13:00:00Z", [[3.0], [3.0]])
    r = client.post(f"/v1/sites/{east}/events", json={"event": event})
    assert r.status_code == 200, r.text
    stale = client.get(f"/v1/fleets/{fid}/plan").json()
    assert stale["plan_id"] == first["plan_id"]
    assert stale["stale"] is True and stale["changed_sites"] == [east]

    # ...and planned again it takes the event: east's cap in the window, part of the
    # region's demand moved to west (within the ramp of 0.5 per period)
    r = client.post(f"/v1/fleets/{fid}/plan")
    assert r.status_code == 200, r.text
    after = r.json()
    assert after["stale"] is False and after["site_versions"] == {east: 2, west: 1}
    (east_doc, west_doc) = after["plan"]["sites"]
    assert [p["power_cap_w"] for p in east_doc["periods"]] == [20_000.0, 3000.0, 3000.0, 20_000.0]
    for p in east_doc["periods"]:
        assert p["power_w"] <= p["power_cap_w"] * (1 + 1e-6)
    moved = shares(after["plan"], "west")
    assert max(moved[1:3]) > 0.0
    for a, b in zip(moved, moved[1:], strict=False):
        assert abs(b - a) <= 0.5 + 1e-6
    region = after["plan"]["regions"][0]
    for t in range(4):
        served = sum(s["served_rps"][t] for s in region["shares"])
        assert served + region["unserved_rps"][t] == pytest.approx(region["demand_rps"][t])
    assert after["plan"]["objective_usd"] > first["plan"]["objective_usd"]


def test_a_member_is_kept_while_its_fleet_is(client: TestClient) -> None:
    fid, (east, _west) = make_fleet(client)
    r = client.delete(f"/v1/sites/{east}")
    assert r.status_code == 409
    body = r.json()
    assert body["type"] == "/problems/site-in-fleet"
    assert body["fleets"] == [{"id": fid, "name": "two"}]
    assert client.get(f"/v1/sites/{east}").status_code == 200
    listed = client.get("/v1/fleets").json()["fleets"]
    assert [f["id"] for f in listed] == [fid]
    got = client.get(f"/v1/fleets/{fid}").json()
    assert got["site_names"] == {east: "east", _west: "west"}
    assert got["regions"][0]["served_by"][1]["penalty_usd_per_request"] == 0.001
    assert client.delete(f"/v1/fleets/{fid}").status_code == 204
    assert client.get(f"/v1/fleets/{fid}").status_code == 404
    assert client.post(f"/v1/fleets/{fid}/plan").status_code == 404
    assert client.delete(f"/v1/sites/{east}").status_code == 204


def error_field(r: Any) -> str:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    return str(r.json()["errors"][0]["field"])


def test_bad_fleets_are_refused_naming_the_field(client: TestClient) -> None:
    east, west = register(client, "east"), register(client, "west")
    assert error_field(client.post("/v1/fleets", json=fleet_body([east, "nope"]))) == "sites[1]"
    assert error_field(client.post("/v1/fleets", json=fleet_body([east, east]))) == "sites"
    bad = fleet_body([east, west])
    bad["regions"][0]["served_by"][0]["site"] = "north"
    assert error_field(client.post("/v1/fleets", json=bad)) == "regions[0].served_by[0].site"
    assert error_field(client.post("/v1/fleets", json=fleet_body([east, west], extra=1))) == "extra"
    later = register(client, "later", "2026-07-02T12:00:00Z")
    r = client.post("/v1/fleets", json=fleet_body([east, later]))
    assert error_field(r) == "sites[1]"
    assert "share their clock" in r.json()["errors"][0]["reason"]
    twin = register(client, "east")
    r = client.post("/v1/fleets", json=fleet_body([east, twin]))
    assert error_field(r) == "sites[1]" and "named apart" in r.json()["errors"][0]["reason"]
    spaced = register(client, "dc east")
    r = client.post("/v1/fleets", json=fleet_body([spaced, west]))
    assert error_field(r) == "sites[0]" and "cannot name a fleet's site" in r.json()["detail"]
    assert client.get("/v1/fleets").json() == {"fleets": []}  # nothing was stored


def test_the_console_lists_each_sites_shares_now(client: TestClient) -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = (now - timedelta(hours=1)).isoformat()
    fid, (east, west) = make_fleet(client, start)
    before = {s["id"]: s["fleets"] for s in client.get("/ui/api/sites").json()["sites"]}
    assert before[east] == [{"id": fid, "name": "two", "plan": None}]
    (listed,) = client.get("/ui/api/fleets").json()["fleets"]
    assert listed["plan"] is None
    assert listed["sites"] == [{"id": east, "name": "east"}, {"id": west, "name": "west"}]
    plan = client.post(f"/v1/fleets/{fid}/plan").json()
    hour = (datetime.now(UTC) - now) // timedelta(hours=1) + 1  # the period now
    sites = {s["id"]: s for s in client.get("/ui/api/sites").json()["sites"]}
    later = (datetime.now(UTC) - now) // timedelta(hours=1) + 1
    for sid, name in ((east, "east"), (west, "west")):
        (entry,) = sites[sid]["fleets"]
        brief = entry["plan"]
        assert brief["plan_id"] == plan["plan_id"] and brief["stale"] is False
        t = brief["period"]
        assert t in {hour, later}
        assert brief["shares"] == {"r1": pytest.approx(shares(plan["plan"], name)[t])}
    (listed,) = client.get("/ui/api/fleets").json()["fleets"]
    assert listed["plan"]["plan_id"] == plan["plan_id"] and listed["plan"]["stale"] is False
    assert listed["plan"]["objective_usd"] == plan["plan"]["objective_usd"]


def test_an_event_posted_to_a_fleets_site_replans_the_fleet(client: TestClient) -> None:
    """``POST /v1/fleets/{id}/sites/{site}/events``: the event merged into that member
    (as the site's own route merges it) and the fleet planned again in one answer; the
    same event again is merged once; a site outside the fleet is 404."""
    fid, (east, west) = make_fleet(client)
    event = cap_event("2026-07-01T13:00:00Z", [[3.0], [3.0]])
    r = client.post(f"/v1/fleets/{fid}/sites/{east}/events", json={"event": event})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["event"]["duplicate"] is False and answer["event"]["periods"] == [1, 2]
    assert answer["stale"] is False and answer["site_versions"] == {east: 2, west: 1}
    assert max(shares(answer["plan"], "west")[1:3]) > 0.0  # demand moved to west
    assert [e["id"] for e in client.get(f"/v1/sites/{east}/events").json()["events"]] == [
        answer["event"]["id"]
    ]
    again = client.post(f"/v1/fleets/{fid}/sites/{east}/events", json={"event": event}).json()
    assert again["event"]["duplicate"] is True and again["site_versions"] == {east: 2, west: 1}
    assert again["plan"]["objective_usd"] == pytest.approx(answer["plan"]["objective_usd"])
    other = register(client, "north")
    r = client.post(f"/v1/fleets/{fid}/sites/{other}/events", json={"event": event})
    assert r.status_code == 404 and "not a member" in r.json()["detail"]
    assert client.get(f"/v1/sites/{other}/events").json()["events"] == []
    r = client.post(f"/v1/fleets/{fid}/sites/{east}/events", json={"event": {"programID": 1}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"].startswith("event")
