"""Updates of a registered site that must either take effect whole or store nothing: a
shed or an event against a plan made for another clock, a ``current`` the site refuses,
a shed below what the site can draw, and events taken back (retracted)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from model.errors import InputError
from service.sites import shed as site_shed
from service.sites import shed_event
from service.sites.shed import NoRunningPlan
from tests.service.test_sites import cap_event, site_body


@pytest.fixture
def client(make_client: Callable[..., TestClient], tmp_path: Path) -> TestClient:
    return make_client(workers=2, database_url=f"sqlite:///{tmp_path / 'pdwatt.db'}")


def now_minute() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


def body_of(n: int, plan_start: datetime, **extra: Any) -> dict[str, Any]:
    """The test site (two deployments, hourly periods) with ``n`` periods from
    ``plan_start``."""
    body = site_body(plan_start=plan_start.isoformat(), **extra)
    for d in body["deployments"]:
        d["demand_rps"] = (d["demand_rps"] * n)[:n]
    body["grid"]["price_usd_per_mwh"] = (body["grid"]["price_usd_per_mwh"] * n)[:n]
    return body


def registered(client: TestClient, body: dict[str, Any], plan: bool = True) -> str:
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 201, r.text
    site_id = str(r.json()["id"])
    if plan:
        r = client.post(f"/v1/sites/{site_id}/plan")
        assert r.status_code == 200, r.text
    return site_id


def stored(client: TestClient, site_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The site as stored and its events log."""
    site = client.get(f"/v1/sites/{site_id}").json()
    return site, client.get(f"/v1/sites/{site_id}/events").json()["events"]


# ---------------------------------------------------------------- A: a plan of another clock


def test_a_shed_against_a_plan_of_another_horizon_is_a_conflict_storing_nothing(
    client: TestClient,
) -> None:
    """Found in review: after a PUT that shortened the horizon, a shed (and an event
    capping now) gave a 500 (IndexError: the old plan's period indexed into the new
    site's cap), the event of the route stored first and every retry the same 500."""
    now = now_minute()
    site_id = registered(client, body_of(4, now - timedelta(hours=3, minutes=30)))  # period 3
    r = client.put(f"/v1/sites/{site_id}", json=body_of(2, now - timedelta(minutes=30)))
    assert r.status_code == 200, r.text
    before = stored(client, site_id)
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 5})
    assert r.status_code == 409, r.text
    doc = r.json()
    assert doc["type"] == "/problems/no-running-plan"
    assert doc["detail"].startswith("the site changed since its latest plan (")
    assert "n_periods 4 -> 2" in doc["detail"] and "re-plan first" in doc["detail"]
    assert stored(client, site_id) == before  # nothing stored

    # an event capping now is stored and re-planned; its immediate answer says why none
    ev = cap_event((now - timedelta(minutes=10)).isoformat(), [[5.0]], name="now")
    r = client.post(f"/v1/sites/{site_id}/events?replan=job", json={"event": ev})
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["immediate"] is None
    assert out["immediate_reason"].startswith("the site changed since its latest plan (")
    assert out["job"]["id"]


def test_a_shed_after_plan_start_moved_is_a_conflict_not_an_event_field(
    client: TestClient,
) -> None:
    """Found in review: after a PUT moving plan_start, a shed inside the old plan but
    before the new horizon was a 422 naming ``event.intervals[0]``, a field the shed
    body does not have."""
    now = now_minute()
    site_id = registered(client, body_of(4, now - timedelta(minutes=30)))
    r = client.put(f"/v1/sites/{site_id}", json=body_of(4, now + timedelta(hours=1)))
    assert r.status_code == 200, r.text
    before = stored(client, site_id)
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 5, "duration": "PT10M"})
    assert r.status_code == 409, r.text
    assert "plan_start" in r.json()["detail"]
    assert stored(client, site_id) == before


def test_the_shed_s_event_errors_name_the_shed_s_fields() -> None:
    outside = InputError("event.intervals[0]", "spans [a, b), wholly outside the horizon")
    assert shed_event.shed_error(outside).field == "at"
    assert "wholly outside" in shed_event.shed_error(outside).reason
    assert shed_event.shed_error(InputError("event", "a date-time lies outside")).field == "at"
    dur = InputError("event.intervalPeriod.duration", "must be positive")
    assert shed_event.shed_error(dur).field == "duration"
    other = InputError("grid.power_cap_w", "x")
    assert shed_event.shed_error(other) is other


def test_a_plan_of_another_clock_is_named_field_by_field(client: TestClient) -> None:
    from service.runtime.store import store_for

    settings = client.app.state.settings  # type: ignore[attr-defined]
    store = store_for(settings.database_url)
    start = now_minute()
    site_id = registered(client, body_of(4, start))
    body = body_of(3, start + timedelta(hours=1))
    body["period_minutes"] = 30
    body["deployments"][1]["name"] = "c"
    assert client.put(f"/v1/sites/{site_id}", json=body).status_code == 200
    site, plan = store.get_site(site_id), store.latest_plan(site_id)
    assert plan is not None
    with pytest.raises(NoRunningPlan) as e:
        site_shed.plan_of(site, plan)
    for part in ("plan_start", "period_minutes 60 -> 30", "n_periods 4 -> 3", "['a', 'b']"):
        assert part in str(e.value)


# ---------------------------------------------------------------- B: current checked first

#: ``current`` values the test site refuses, and the field each names
BAD_CURRENT = [
    (
        {"period": 4, "state": {"a": {"n_p": 1, "n_d": 1}, "b": {"n_p": 0, "n_d": 0}}},
        "current.period",
    ),
    (
        {"period": 200, "state": {"a": {"n_p": 1, "n_d": 1}, "b": {"n_p": 1, "n_d": 1}}},
        "current.period",
    ),
    ({"period": 1, "state": {"a": {"n_p": 1, "n_d": 1}}}, "current.state"),
    (
        {
            "period": 1,
            "state": {
                "a": {"n_p": 1, "n_d": 1},
                "b": {"n_p": 0, "n_d": 0},
                "x": {"n_p": 1, "n_d": 1},
            },
        },
        "current.state.x",
    ),
    (
        {"period": 1, "state": {"a": {"n_p": 0, "n_d": 2}, "b": {"n_p": 0, "n_d": 0}}},
        "current.state.a",
    ),
    # beyond the deployment's max_gpus (4): only the solve used to refuse it
    (
        {"period": 1, "state": {"a": {"n_p": 3, "n_d": 3}, "b": {"n_p": 1, "n_d": 1}}},
        "current.state.a",
    ),
]


@pytest.mark.parametrize(("current", "field"), BAD_CURRENT)
def test_an_update_whose_current_the_site_refuses_stores_nothing(
    client: TestClient, current: dict[str, Any], field: str
) -> None:
    """Found in review: a bad ``current`` on an event or forecast post was checked by
    the re-plan, after the update was stored: a 422 with the event merged (version
    bumped) and no word of it, or with ``?replan=job`` a 202 whose job then failed."""
    site_id = registered(client, site_body(), plan=False)
    before = stored(client, site_id)
    event = {"event": cap_event("2026-07-01T13:00:00Z", [[5.0]]), "current": current}
    forecast = {"demand_rps": {"a": [0.5]}, "from_period": 2, "current": current}
    for path, body in (("events", event), ("forecast", forecast)):
        for query in ("", "?replan=job"):
            r = client.post(f"/v1/sites/{site_id}/{path}{query}", json=body)
            assert r.status_code == 422, (path, query, r.text)
            assert r.json()["errors"][0]["field"] == field, r.json()
            assert stored(client, site_id) == before, (path, query)
    # a site_plan job is refused at submission the same way
    job = {"kind": "site_plan", "request": {"site_id": site_id, "current": current}}
    r = client.post("/v1/jobs", json=job)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == f"request.{field}"


def test_a_good_current_still_re_plans_from_it(client: TestClient) -> None:
    site_id = registered(client, site_body(), plan=False)
    state = {"a": {"n_p": 1, "n_d": 1}, "b": {"n_p": 1, "n_d": 1}}
    body = {
        "event": cap_event("2026-07-01T14:00:00Z", [[5.0]]),
        "current": {"period": 2, "state": state},
    }
    r = client.post(f"/v1/sites/{site_id}/events", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["plan"]["first_period"] == 2 and r.json()["site_version"] == 2


# ---------------------------------------------------------------- C: a shed below the least draw

#: the test site's least draw: 8 idle H200 at 120 W, at PUE 1.2 (every deployment may
#: be off)
LEAST_DRAW_W = 8 * 120 * 1.2
AT = "2026-07-01T13:30:00Z"  # period 1 of the test site


def test_a_shed_below_the_least_draw_stores_the_least_draw_and_the_site_stays_plannable(
    client: TestClient,
) -> None:
    """Found in review: ``target_kw: 0`` answered 200 ``met: false`` but was stored as
    the site's cap to the horizon's end, below what the site can draw: every later
    re-plan failed ("the power cap is below the site's least possible draw")."""
    from tests.service.test_jobs import wait_final

    site_id = registered(client, site_body())
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 0, "at": AT})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["met"] is False and doc["target_w"] == 0.0
    job = wait_final(client, doc["replan"]["job_id"])
    assert job["status"] == "succeeded", job
    assert client.post(f"/v1/sites/{site_id}/plan").status_code == 200
    # kept: in the shed's period the least the running counts draw, from the next
    # boundary on (no transition limit) the site's least draw
    cap = client.get(f"/v1/sites/{site_id}").json()["grid"]["power_cap_w"]
    assert cap[0] == 20_000.0 and cap[2:] == [LEAST_DRAW_W] * 2
    assert LEAST_DRAW_W < cap[1] < 20_000.0
    assert doc["site_power_w"] <= cap[1]  # the settings answered fit the kept cap
    assert doc["stored_limits"] == [
        {"start": AT.replace("Z", "+00:00"), "limit_kw": cap[1] / 1000.0},
        {"start": "2026-07-01T14:00:00+00:00", "limit_kw": LEAST_DRAW_W / 1000.0},
    ]
    assert "least the site can draw" in doc["stored_target_reason"]
    (logged,) = client.get(f"/v1/sites/{site_id}/events").json()["events"]
    values = [iv["payloads"][0]["values"] for iv in logged["event"]["intervals"]]
    assert values == [[cap[1] / 1000.0], [LEAST_DRAW_W / 1000.0]]
    # a reachable target is stored as it is, without a reason
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 15, "at": AT})
    assert r.status_code == 200, r.text
    assert r.json()["stored_limits"] == [{"start": AT.replace("Z", "+00:00"), "limit_kw": 15}]
    assert "stored_target_reason" not in r.json()


def test_a_shed_s_floor_follows_the_transition_limit(client: TestClient) -> None:
    """With at most 2 instance changes per period, the counts running now reach the
    site's least draw only step by step: the kept limit steps down with them, so that
    the shed's re-plan from those counts finds a schedule."""
    from tests.service.test_jobs import wait_final

    body = site_body()
    body["transitions"] = {"max_instance_changes_per_period": 2}
    for d in body["deployments"]:
        d["initial"] = {"n_p": 2, "n_d": 2}
        d["demand_rps"] = [10.0, 10.0, 10.0, 10.0]
    site_id = registered(client, body)
    plan = client.get(f"/v1/sites/{site_id}/plan").json()
    running = plan["schedule"]["periods"][1]["deployments"]
    assert any(d["n_p"] + d["n_d"] > 2 for d in running.values())  # off: 2 periods away
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 0, "at": AT})
    assert r.status_code == 200, r.text
    limits = [x["limit_kw"] for x in r.json()["stored_limits"]]
    assert len(limits) >= 3 and limits == sorted(limits, reverse=True)
    assert limits[-1] == LEAST_DRAW_W / 1000.0
    job = wait_final(client, r.json()["replan"]["job_id"])
    assert job["status"] == "succeeded", job


def test_the_reachable_floors_end_at_the_solver_s_least_draw(client: TestClient) -> None:
    from formulation.data import build_data
    from formulation.infeasible import min_site_power_w
    from formulation.problem import problem_from_dict
    from service.sites.plans import request_of

    body = site_body()
    body["site"]["gpu_inventory"] = {"h200": 12}
    body["transitions"] = {"max_instance_changes_per_period": 1}
    body["deployments"][0]["bounds"] = {"min_n_p": 1, "min_n_d": 1}  # a must run
    body.pop("name")
    data = build_data(problem_from_dict(request_of(body)))
    floors = shed_event.reachable_floors_w(data, [(2, 2), (1, 1)])
    assert floors == sorted(floors, reverse=True) and len(floors) == 3
    # a steps down to (1, 1) in two moves; b, one change a period, never reaches off
    # (through (0, 1) or (1, 0), which run one phase only)
    assert floors[-1] > float(min_site_power_w(data)[0]) > 12 * 120 * 1.2
    free = shed_event.reachable_floors_w(data, [(1, 1), (0, 0)])
    assert free == [float(min_site_power_w(data)[0])]


# ---------------------------------------------------------------- C: events retracted

BASE_CAP_W = 20_000.0


def retract(client: TestClient, site_id: str, event_id: int, query: str = "", **body: Any) -> Any:
    return client.request(
        "DELETE", f"/v1/sites/{site_id}/events/{event_id}{query}", json=body or None
    )


def test_a_retracted_event_is_kept_marked_and_the_grid_recomputed_without_it(
    client: TestClient,
) -> None:
    site_id = registered(client, site_body(), plan=False)
    first = cap_event("2026-07-01T13:00:00Z", [[2.6]], name="first")
    second = cap_event("2026-07-01T14:00:00Z", [[2.4]], name="second")
    price = {
        "programID": "dr-program-1",
        "eventName": "price",
        "payloadDescriptors": [{"payloadType": "PRICE", "units": "MWH", "currency": "USD"}],
        "intervalPeriod": {"start": "2026-07-01T14:00:00Z", "duration": "PT30M"},
        "intervals": [{"id": 0, "payloads": [{"type": "PRICE", "values": [100]}]}],
    }
    ids = []
    for ev in (first, second, price):
        r = client.post(f"/v1/sites/{site_id}/events", json={"event": ev})
        assert r.status_code == 200, r.text
        ids.append(r.json()["event"]["id"])
    site, _ = stored(client, site_id)
    assert site["grid"]["power_cap_w"] == [BASE_CAP_W, 2600.0, 2400.0, BASE_CAP_W]
    assert site["grid"]["price_usd_per_mwh"] == [50, 60, 90.0, 40]

    r = retract(client, site_id, ids[0])
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["site_version"] == 5 and out["event"]["id"] == ids[0]
    assert out["event"]["in_effect"] is True and out["event"]["retracted_version"] == 5
    assert [p["power_cap_w"] for p in out["plan"]["schedule"]["periods"]] == [
        BASE_CAP_W,
        BASE_CAP_W,
        2400.0,
        BASE_CAP_W,
    ]
    site, events = stored(client, site_id)
    assert site["version"] == 5
    assert site["grid"]["power_cap_w"] == [BASE_CAP_W, BASE_CAP_W, 2400.0, BASE_CAP_W]
    assert site["grid"]["price_usd_per_mwh"] == [50, 60, 90.0, 40]  # the others stay
    assert [e["id"] for e in events] == ids  # kept in the log, marked
    assert events[0]["retracted"] == out["event"]["retracted"]
    assert events[0]["retracted_version"] == 5
    assert [e["retracted"] for e in events[1:]] == [None, None]

    # again: a conflict; an unknown event or site: not found; nothing changes
    for event_id, site_of, status in (
        (ids[0], site_id, 409),
        (999, site_id, 404),
        (1, "nope", 404),
    ):
        r = retract(client, site_of, event_id)
        assert r.status_code == status, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
    assert "was retracted at" in retract(client, site_id, ids[0]).json()["detail"]
    # the retracted event posted again is not merged again without a word
    r = client.post(f"/v1/sites/{site_id}/events", json={"event": first})
    assert r.status_code == 409 and "not merged again" in r.json()["detail"]
    assert stored(client, site_id) == (site, events)

    # every event retracted: the grid as registered, constants and all
    for event_id in ids[1:]:
        assert retract(client, site_id, event_id, "?replan=job").status_code == 202
    assert stored(client, site_id)[0]["grid"] == site_body()["grid"]


def test_a_retracted_shed_restores_the_cap_before_it(client: TestClient) -> None:
    site_id = registered(client, site_body())
    r = client.post(
        f"/v1/sites/{site_id}/events?replan=job",
        json={"event": cap_event("2026-07-01T14:00:00Z", [[2.5]])},
    )
    assert r.status_code == 202, r.text
    before = stored(client, site_id)[0]["grid"]["power_cap_w"]
    assert before == [BASE_CAP_W, BASE_CAP_W, 2500.0, BASE_CAP_W]
    assert client.post(f"/v1/sites/{site_id}/plan").status_code == 200
    r = client.post(f"/v1/sites/{site_id}/shed", json={"target_kw": 0, "at": AT})
    assert r.status_code == 200, r.text
    shed = r.json()
    after = stored(client, site_id)[0]["grid"]["power_cap_w"]
    assert after[2:] == [LEAST_DRAW_W] * 2 and LEAST_DRAW_W < after[1] < BASE_CAP_W
    r = retract(client, site_id, shed["event"]["id"], "?replan=job")
    assert r.status_code == 202, r.text
    assert stored(client, site_id)[0]["grid"]["power_cap_w"] == before


def test_an_event_no_schedule_meets_is_recovered_by_retracting_it(client: TestClient) -> None:
    site_id = registered(client, site_body())
    # 0.5 kW is below the idle draw of the site's GPUs (8 x 120 W x PUE 1.2)
    r = client.post(
        f"/v1/sites/{site_id}/events",
        json={"event": cap_event("2026-07-01T13:00:00Z", [[0.5]])},
    )
    assert r.status_code == 422 and r.json()["stored"] is True
    assert client.post(f"/v1/sites/{site_id}/plan").status_code == 422  # stuck
    (event,) = stored(client, site_id)[1]
    assert r.json()["event"]["id"] == event["id"]  # the problem names what to retract
    r = retract(client, site_id, event["id"], "?replan=job")
    assert r.status_code == 202, r.text
    from tests.service.test_jobs import wait_final

    assert wait_final(client, r.json()["job"]["id"])["status"] == "succeeded"
    assert client.post(f"/v1/sites/{site_id}/plan").status_code == 200


def test_a_retraction_checks_current_and_stores_nothing_when_refused(client: TestClient) -> None:
    site_id = registered(client, site_body(), plan=False)
    r = client.post(
        f"/v1/sites/{site_id}/events?replan=job",
        json={"event": cap_event("2026-07-01T14:00:00Z", [[2.5]])},
    )
    event_id = r.json()["event"]["id"]
    before = stored(client, site_id)
    for current, field in BAD_CURRENT:
        r = retract(client, site_id, event_id, current=current)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["field"] == field
        assert stored(client, site_id) == before
    state = {"a": {"n_p": 1, "n_d": 1}, "b": {"n_p": 1, "n_d": 1}}
    r = retract(client, site_id, event_id, current={"period": 2, "state": state})
    assert r.status_code == 200, r.text
    assert r.json()["plan"]["first_period"] == 2


def test_retracting_an_event_a_put_replaced_changes_no_grid(client: TestClient) -> None:
    site_id = registered(client, site_body(), plan=False)
    r = client.post(
        f"/v1/sites/{site_id}/events?replan=job",
        json={"event": cap_event("2026-07-01T14:00:00Z", [[2.5]])},
    )
    event_id = r.json()["event"]["id"]
    body = site_body()
    body["grid"]["power_cap_w"] = 15_000
    assert client.put(f"/v1/sites/{site_id}", json=body).status_code == 200
    r = retract(client, site_id, event_id, "?replan=job")
    assert r.status_code == 202, r.text
    assert r.json()["event"]["in_effect"] is False
    assert stored(client, site_id)[0]["grid"] == body["grid"]


def test_a_site_whose_registered_grid_is_unknown_refuses_a_retraction() -> None:
    from service.runtime.records import EventRecord, Site
    from service.sites import registry as sites

    now = datetime.now(UTC)
    body = {k: v for k, v in site_body().items() if k != "name"}  # as a site stores it
    legacy = Site("s", "dc", body, 3, now, now)  # registered before grids were kept
    event = EventRecord(1, "s", now, 2, cap_event("2026-07-01T13:00:00Z", [[2.6]]))
    with pytest.raises(sites.RegisteredGridUnknown, match="PUT the site"):
        sites.without_event(legacy, [event], 1)
    kept = Site("s", "dc", body, 3, now, now, body["grid"], 1)
    assert sites.without_event(kept, [event], 1).body["grid"]["power_cap_w"] == BASE_CAP_W


def test_the_console_marks_a_retracted_event_and_no_longer_shows_it_coming(
    client: TestClient,
) -> None:
    start = now_minute() - timedelta(minutes=30)
    site_id = registered(client, body_of(4, start), plan=False)
    later = cap_event((start + timedelta(hours=2)).isoformat(), [[15.0]], name="later")
    r = client.post(f"/v1/sites/{site_id}/events?replan=job", json={"event": later})
    assert r.status_code == 202, r.text
    event_id = r.json()["event"]["id"]
    summary = client.get(f"/ui/api/sites/{site_id}").json()
    assert summary["next_event"]["id"] == event_id
    assert retract(client, site_id, event_id, "?replan=job").status_code == 202
    summary = client.get(f"/ui/api/sites/{site_id}").json()
    assert summary["next_event"] is None
    assert summary["events"][0]["retracted"] is not None
