"""Sites that persist: register, plan, OpenADR events, forecasts, rolling re-plan,
replica targets, a server restart and concurrent updates."""

from __future__ import annotations

import copy
import csv
import io
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.runtime.records import Site, Update
from service.runtime.store import store_for
from tests.service.conftest import Servers, small_schedule, stop_server
from tests.service.test_openadr import oadr_event

PLAN_START = "2026-07-01T12:00:00Z"
BASE_CAP_W = 20_000.0


def site_body(**extra: Any) -> dict[str, Any]:
    """small_schedule (2 deployments, 4 hourly periods, fixed workloads) as a site."""
    body = small_schedule(time_limit_s=10)
    body.update({"name": "dc-east", "plan_start": PLAN_START, **extra})
    return body


def cap_event(start: str, kw: list[list[float]], name: str = "peak") -> dict[str, Any]:
    """An OpenADR 3.1.0 event with one IMPORT_CAPACITY_LIMIT payload per hourly interval."""
    return {
        "programID": "dr-program-1",
        "eventName": name,
        "payloadDescriptors": [{"payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
        "intervalPeriod": {"start": start, "duration": "PT1H"},
        "intervals": [
            {"id": i, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": v}]}
            for i, v in enumerate(kw)
        ],
    }


def caps(plan: dict[str, Any]) -> list[float]:
    return [p["power_cap_w"] for p in plan["schedule"]["periods"]]


def assert_within_caps(plan: dict[str, Any]) -> None:
    for p in plan["schedule"]["periods"]:
        assert p["power_w"] <= p["power_cap_w"] * (1 + 1e-6), p


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'pdwatt.db'}"


@pytest.fixture
def client(make_client: Callable[..., TestClient], db_url: str) -> TestClient:
    return make_client(workers=2, database_url=db_url)


def register(client: TestClient, **extra: Any) -> str:
    r = client.post("/v1/sites", json=site_body(**extra))
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


# ---------------------------------------------------------------- CRUD


def test_register_get_put_delete(client: TestClient) -> None:
    r = client.post("/v1/sites", json=site_body())
    assert r.status_code == 201
    doc = r.json()
    site_id = doc["id"]
    assert r.headers["location"] == f"/v1/sites/{site_id}"
    assert doc["version"] == 1 and doc["name"] == "dc-east"
    assert doc["plan_start"] == PLAN_START
    assert doc["deployments"][0]["demand_rps"] == [1.0, 3.0, 5.0, 2.0]

    got = client.get(f"/v1/sites/{site_id}")
    assert got.json() == doc
    assert got.headers["etag"] == '"1"'
    assert [s["id"] for s in client.get("/v1/sites").json()["sites"]] == [site_id]

    new = site_body()
    new["name"] = "dc-east-2"
    new["grid"]["power_cap_w"] = 15_000
    assert (
        client.put(f"/v1/sites/{site_id}", json=new, headers={"If-Match": '"7"'}).status_code == 412
    )
    r = client.put(f"/v1/sites/{site_id}", json=new, headers={"If-Match": '"1"'})
    assert r.status_code == 200
    assert r.json()["version"] == 2 and r.json()["name"] == "dc-east-2"
    assert client.get(f"/v1/sites/{site_id}").json()["grid"]["power_cap_w"] == 15_000

    assert client.delete(f"/v1/sites/{site_id}").status_code == 204
    r = client.get(f"/v1/sites/{site_id}")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")
    assert client.delete(f"/v1/sites/{site_id}").status_code == 404


def test_invalid_site_is_refused_naming_the_field(client: TestClient) -> None:
    body = site_body()
    body["grid"]["price_usd_per_mwh"] = [50, 60]  # 2 values, 4 periods
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "grid.price_usd_per_mwh"

    body = site_body()
    body["plan_start"] = "2026-07-01T12:00:00"  # no offset
    r = client.post("/v1/sites", json=body)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "plan_start"
    assert client.get("/v1/sites").json()["sites"] == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("replan_each_period", 0),
        ("replan_each_period", 1),
        ("replan_each_period", "true"),
        ("replan_each_period", None),
        ("plan_start", 1782907200),  # seconds since 1970, which pydantic would read
        ("plan_start", 1782907200.5),
        ("plan_start", "1782907200"),  # the same as text
        ("plan_start", None),
        ("plan_start", ["2026-07-01T12:00:00Z"]),
    ],
)
def test_a_site_takes_its_options_only_as_their_json_types(
    client: TestClient, field: str, value: Any
) -> None:
    """Found by an adversarial test: ``"replan_each_period": 0`` and a number as
    ``plan_start`` were taken (read as false and as seconds since 1970)."""
    r = client.post("/v1/sites", json=site_body(**{field: value}))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    (error,) = r.json()["errors"]
    assert error["field"] == field and error["reason"]
    assert client.get("/v1/sites").json()["sites"] == []
    ok = client.post("/v1/sites", json=site_body(replan_each_period=True))
    assert ok.status_code == 201 and ok.json()["replan_each_period"] is True


# ---------------------------------------------------------------- plan, event, targets


@pytest.mark.slow
def test_openadr_event_drives_a_replan_with_its_caps(client: TestClient) -> None:
    site_id = register(client)
    assert client.get(f"/v1/sites/{site_id}/plan").status_code == 404  # no plan yet

    r = client.post(f"/v1/sites/{site_id}/plan")
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["status"] in {"optimal", "time_limit"} and not first["stale"]
    assert caps(first) == [BASE_CAP_W] * 4
    assert client.get(f"/v1/sites/{site_id}/plan").json() == first

    # the OpenADR 3.1.0 example: 13:00-14:00 at 2.6 kW; 14:00-15:00 split in two
    # halves at 2.8 and 2.4 kW (the period takes 2.4); PRICE 0.25 $/kWh; GHG 420
    ev = oadr_event()
    r = client.post(f"/v1/sites/{site_id}/events", json={"event": ev})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["site_version"] == 2
    assert out["event"]["periods"] == [1, 2] and out["event"]["duplicate"] is False
    plan = out["plan"]
    assert caps(plan) == [BASE_CAP_W, 2600.0, 2400.0, BASE_CAP_W]
    assert_within_caps(plan)
    periods = plan["schedule"]["periods"]
    assert [p["price_usd_per_mwh"] for p in periods] == [50, 250.0, 80, 40]
    assert [p["carbon_g_per_kwh"] for p in periods] == [300, 300, 420.0, 300]
    # the caps bind: the site draws less than before in those periods
    assert periods[2]["power_w"] < first["schedule"]["periods"][2]["power_w"]

    stored = client.get(f"/v1/sites/{site_id}").json()
    assert stored["grid"]["power_cap_w"] == [BASE_CAP_W, 2600.0, 2400.0, BASE_CAP_W]
    assert client.get(f"/v1/sites/{site_id}/plan").json() == plan
    logged = client.get(f"/v1/sites/{site_id}/events").json()["events"]
    assert len(logged) == 1 and logged[0]["event"]["eventName"] == "afternoon-peak"

    # the same event again: merged once, not logged twice, and (the latest plan made
    # with it) not re-planned: answered with that plan
    again = client.post(f"/v1/sites/{site_id}/events", json={"event": ev}).json()
    assert again["event"]["duplicate"] is True and again["site_version"] == 2
    assert again["replanned"] is False and again["plan"] == plan
    assert len(client.get(f"/v1/sites/{site_id}/events").json()["events"]) == 1


@pytest.mark.slow
def test_infeasible_event_is_stored_and_reported(client: TestClient) -> None:
    site_id = register(client)
    client.post(f"/v1/sites/{site_id}/plan")
    # 0.5 kW is below the idle draw of the site's GPUs (8 x 120 W x PUE 1.2)
    r = client.post(
        f"/v1/sites/{site_id}/events", json={"event": cap_event("2026-07-01T13:00:00Z", [[0.5]])}
    )
    assert r.status_code == 422
    body = r.json()
    assert body["type"] == "/problems/infeasible" and body["stored"] is True
    assert body["conflicts"]
    latest = client.get(f"/v1/sites/{site_id}/plan").json()
    assert latest["stale"] is True  # the previous plan stays, marked stale
    assert client.get(f"/v1/sites/{site_id}").json()["version"] == 2


@pytest.mark.slow
def test_targets_json_csv_and_now(client: TestClient) -> None:
    site_id = register(client)
    assert client.get(f"/v1/sites/{site_id}/targets").status_code == 404
    assert client.get(f"/v1/sites/{site_id}/targets/now").status_code == 404
    plan = client.post(f"/v1/sites/{site_id}/plan").json()

    doc = client.get(f"/v1/sites/{site_id}/targets").json()
    assert doc["plan_id"] == plan["plan_id"] and doc["stale"] is False
    targets = doc["targets"]
    assert len(targets) == 4 * 2
    by_key = {(t["deployment"], t["period"]): t for t in targets}
    for p in plan["schedule"]["periods"]:
        for name, d in p["deployments"].items():
            t = by_key[(name, p["index"])]
            assert (t["num_prefill"], t["num_decode"]) == (d["n_p"], d["n_d"])
            assert t["replicas"] == {"prefill": d["n_p"], "decode": d["n_d"]}
            assert t["gpus"] == d["gpus"]
    assert by_key[("a", 2)]["start"] == "2026-07-01T14:00:00+00:00"
    assert by_key[("a", 2)]["end"] == "2026-07-01T15:00:00+00:00"

    r = client.get(f"/v1/sites/{site_id}/targets", params={"format": "csv"})
    assert r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert len(rows) == 8
    assert rows[0].keys() >= {"deployment", "period", "start", "num_prefill", "num_decode"}
    assert [(int(x["num_prefill"]), int(x["num_decode"])) for x in rows] == [
        (t["num_prefill"], t["num_decode"]) for t in targets
    ]

    now = client.get(f"/v1/sites/{site_id}/targets/now", params={"at": "2026-07-01T14:59:59Z"})
    assert now.status_code == 200
    assert now.json()["period"] == 2
    assert now.json()["targets"] == [t for t in targets if t["period"] == 2]
    late = client.get(f"/v1/sites/{site_id}/targets/now", params={"at": "2026-07-01T16:00:00Z"})
    assert late.status_code == 404
    naive = client.get(f"/v1/sites/{site_id}/targets/now", params={"at": "2026-07-01T13:00:00"})
    assert naive.status_code == 422 and naive.json()["errors"][0]["field"] == "at"
    # seconds since 1970 (which pydantic would read) are no date-time
    unix = client.get(f"/v1/sites/{site_id}/targets/now", params={"at": "1782910000"})
    assert unix.status_code == 422 and unix.json()["errors"][0]["field"] == "at"


# ---------------------------------------------------------------- rolling re-plan


@pytest.mark.slow
def test_rolling_replan_honours_the_transition_limit_from_the_state(client: TestClient) -> None:
    body = site_body()
    body["transitions"] = {"max_instance_changes_per_period": 1}
    for d in body["deployments"]:
        d["demand_rps"] = [0.1] * 4  # little demand: the plan wants (1, 1)
    r = client.post("/v1/sites", json=body)
    site_id = r.json()["id"]
    state = {"a": {"n_p": 2, "n_d": 2}, "b": {"n_p": 2, "n_d": 2}}
    r = client.post(f"/v1/sites/{site_id}/plan", json={"current": {"period": 1, "state": state}})
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["first_period"] == 1 and plan["current"]["period"] == 1
    periods = plan["schedule"]["periods"]
    assert [p["index"] for p in periods] == [1, 2, 3]
    assert periods[0]["start"] == "2026-07-01T13:00:00+00:00"
    for name in ("a", "b"):
        prev = (2, 2)
        for p in periods:
            d = p["deployments"][name]
            assert abs(d["n_p"] - prev[0]) + abs(d["n_d"] - prev[1]) <= 1, (name, p["index"])
            prev = (d["n_p"], d["n_d"])
        # it steps down from the state, one instance per period, to (1, 1)
        first = periods[0]["deployments"][name]
        assert (first["n_p"], first["n_d"]) in {(2, 1), (1, 2)}
        last = periods[-1]["deployments"][name]
        assert (last["n_p"], last["n_d"]) == (1, 1)
    # targets/now of a period before the re-planned ones: not in this plan
    r = client.get(f"/v1/sites/{site_id}/targets/now", params={"at": "2026-07-01T12:30:00Z"})
    assert r.status_code == 404


@pytest.mark.slow
def test_rolling_replan_checks_the_state(client: TestClient) -> None:
    site_id = register(client)
    cases = [
        (
            {"period": 4, "state": {"a": {"n_p": 1, "n_d": 1}, "b": {"n_p": 0, "n_d": 0}}},
            "current.period",
        ),
        ({"period": 1, "state": {"a": {"n_p": 1, "n_d": 1}}}, "current.state"),
        (
            {
                "period": 1,
                "state": {
                    "a": {"n_p": 1, "n_d": 1},
                    "b": {"n_p": 0, "n_d": 0},
                    "x": {"n_p": 0, "n_d": 0},
                },
            },
            "current.state.x",
        ),
        (
            {"period": 1, "state": {"a": {"n_p": 1, "n_d": 0}, "b": {"n_p": 0, "n_d": 0}}},
            "current.state.a",
        ),
        (
            {"period": 1, "state": {"a": {"n_p": 4, "n_d": 4}, "b": {"n_p": 0, "n_d": 0}}},
            "current.state.a",
        ),
    ]
    for current, field in cases:
        r = client.post(f"/v1/sites/{site_id}/plan", json={"current": current})
        assert r.status_code == 422, (current, r.text)
        assert r.json()["errors"][0]["field"] == field, r.json()


def post_forecast(client: TestClient, site_id: str, query: str = "") -> httpx.Response:
    """Deployment a's demand from period 2 on is 0.5 rps, with every deployment at 1P1D."""
    state = {"a": {"n_p": 1, "n_d": 1}, "b": {"n_p": 1, "n_d": 1}}
    return client.post(
        f"/v1/sites/{site_id}/forecast{query}",
        json={"demand_rps": {"a": [0.5, 0.5]}, "current": {"period": 2, "state": state}},
    )


def assert_forecast_from_period_2(periods: list[dict[str, Any]]) -> None:
    """The re-plan of :func:`post_forecast`: periods 2 and 3, at a's new demand."""
    assert [p["index"] for p in periods] == [2, 3]
    assert [p["deployments"]["a"]["demand_rps"] for p in periods] == [0.5, 0.5]


@pytest.mark.slow
def test_forecast_replaces_the_remaining_demand_and_replans(client: TestClient) -> None:
    site_id = register(client)
    r = post_forecast(client, site_id)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["from_period"] == 2 and out["site_version"] == 2
    stored = client.get(f"/v1/sites/{site_id}").json()
    assert stored["deployments"][0]["demand_rps"] == [1.0, 3.0, 0.5, 0.5]
    assert stored["deployments"][1]["demand_rps"] == [2.0, 2.0, 6.0, 1.0]
    periods = out["plan"]["schedule"]["periods"]
    assert_forecast_from_period_2(periods)

    bad = client.post(f"/v1/sites/{site_id}/forecast", json={"demand_rps": {"zz": [1.0]}})
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "demand_rps.zz"
    bad = client.post(
        f"/v1/sites/{site_id}/forecast", json={"demand_rps": {"a": [1.0] * 3}, "from_period": 2}
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "demand_rps.a"


@pytest.mark.slow
def test_a_refused_forecast_or_event_changes_nothing(client: TestClient) -> None:
    """Found by fuzzing: a demand above the schedule request's limit (1e6 req/s) was
    stored before the 422, so every later plan of the site failed."""
    site_id = register(client)
    before = client.get(f"/v1/sites/{site_id}").json()
    bad = client.post(
        f"/v1/sites/{site_id}/forecast", json={"demand_rps": {"a": [2e6]}, "from_period": 3}
    )
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"].startswith("demand_rps.a")
    assert client.get(f"/v1/sites/{site_id}").json() == before
    assert client.post(f"/v1/sites/{site_id}/plan", json={}).status_code == 200


# ---------------------------------------------------------------- concurrency


def test_store_retries_a_lost_race_and_keeps_both_writes(db_url: str) -> None:
    """Both updates read version 1 before either writes: one must retry, none is lost."""
    store = store_for(db_url)
    site = store.create_site("s", {"grid": {"marks": []}})
    barrier = threading.Barrier(2)
    calls = {"x": 0, "y": 0}

    def change_for(mark: str) -> Callable[[Site], Update]:
        def change(s: Site) -> Update:
            calls[mark] += 1
            if calls[mark] == 1:
                barrier.wait(timeout=10)  # both have read the same version
            body = copy.deepcopy(s.body)
            body["grid"]["marks"].append(mark)
            return Update(s.name, body, {"mark": mark})

        return change

    threads = [
        threading.Thread(target=store.update_site, args=(site.id, change_for(m)))
        for m in ("x", "y")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    final = store.get_site(site.id)
    assert sorted(final.body["grid"]["marks"]) == ["x", "y"]
    assert final.version == 3
    assert sorted(calls.values()) == [1, 2]  # exactly one retry
    assert len(store.list_events(site.id)) == 2


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], str]]]:
    """``servers(**settings)`` -> (process, base URL) of a real server; clean shutdown
    asserted."""
    servers = Servers(tmp_path)
    yield servers.start_process
    failures = servers.stop_all()
    assert not failures, "\n".join(failures)


@pytest.mark.servers
def test_site_and_plan_survive_a_server_restart(
    servers: Callable[..., tuple[subprocess.Popen[bytes], str]], db_url: str
) -> None:
    proc, base = servers(database_url=db_url)
    r = httpx.post(f"{base}/v1/sites", json=site_body(), timeout=30)
    assert r.status_code == 201, r.text
    site_id = r.json()["id"]
    r = httpx.post(
        f"{base}/v1/sites/{site_id}/events",
        json={"event": cap_event("2026-07-01T14:00:00Z", [[2.5]])},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    site = httpx.get(f"{base}/v1/sites/{site_id}").json()
    plan = httpx.get(f"{base}/v1/sites/{site_id}/plan").json()
    targets = httpx.get(f"{base}/v1/sites/{site_id}/targets").json()
    assert stop_server(proc) == 0  # SIGTERM: a clean shutdown

    _, base2 = servers(database_url=db_url)
    assert httpx.get(f"{base2}/v1/sites/{site_id}").json() == site
    assert httpx.get(f"{base2}/v1/sites/{site_id}/plan").json() == plan
    assert httpx.get(f"{base2}/v1/sites/{site_id}/targets").json() == targets
    assert caps(plan) == [BASE_CAP_W, BASE_CAP_W, 2500.0, BASE_CAP_W]
    assert len(httpx.get(f"{base2}/v1/sites/{site_id}/events").json()["events"]) == 1


@pytest.mark.servers
def test_two_concurrent_event_posts_both_take_effect(
    servers: Callable[..., tuple[subprocess.Popen[bytes], str]], db_url: str
) -> None:
    _, base = servers(database_url=db_url, workers=2)
    site_id = httpx.post(f"{base}/v1/sites", json=site_body(), timeout=30).json()["id"]
    events = [
        cap_event("2026-07-01T13:00:00Z", [[2.6]], name="first"),  # period 1
        cap_event("2026-07-01T14:00:00Z", [[2.4]], name="second"),  # period 2
    ]
    barrier = threading.Barrier(2)
    answers: list[httpx.Response] = []

    def post(ev: dict[str, Any]) -> None:
        with httpx.Client(timeout=60) as c:
            barrier.wait(timeout=10)
            answers.append(c.post(f"{base}/v1/sites/{site_id}/events", json={"event": ev}))

    threads = [threading.Thread(target=post, args=(ev,)) for ev in events]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert sorted(a.json()["site_version"] for a in answers) == [2, 3]

    expected = [BASE_CAP_W, 2600.0, 2400.0, BASE_CAP_W]
    site = httpx.get(f"{base}/v1/sites/{site_id}").json()
    assert site["version"] == 3
    assert site["grid"]["power_cap_w"] == expected  # both events' caps are stored
    latest = httpx.get(f"{base}/v1/sites/{site_id}/plan").json()
    assert latest["site_version"] == 3 and latest["stale"] is False
    assert caps(latest) == expected  # the latest plan is the one that saw both
    assert_within_caps(latest)
    logged = httpx.get(f"{base}/v1/sites/{site_id}/events").json()["events"]
    assert sorted(e["event"]["eventName"] for e in logged) == ["first", "second"]


@pytest.mark.slow
def test_plan_start_is_a_clock(client: TestClient) -> None:
    """targets/now follows the wall clock when `at` is not given."""
    body = site_body()
    body["plan_start"] = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()
    site_id = client.post("/v1/sites", json=body).json()["id"]
    client.post(f"/v1/sites/{site_id}/plan")
    r = client.get(f"/v1/sites/{site_id}/targets/now")
    assert r.status_code == 200, r.text
    assert r.json()["period"] == 0


# ---------------------------------------------------------------- plans as jobs


@pytest.mark.slow
def test_a_site_plan_job_keeps_the_plan_the_route_would(client: TestClient) -> None:
    """``{"kind": "site_plan"}`` runs the same use case as POST /v1/sites/{id}/plan in
    the background: the job's result is the stored plan, GET .../plan answers it, and a
    rolling re-plan from a state works as on the route; an unknown site is a 404 at
    submission naming ``request.site_id``."""
    from tests.service.test_jobs import wait_final

    site_id = register(client)
    r = client.post("/v1/jobs", json={"kind": "site_plan", "request": {"site_id": site_id}})
    assert r.status_code == 202, r.text
    doc = wait_final(client, r.json()["id"])
    assert doc["status"] == "succeeded", doc
    assert doc["kind"] == "site_plan"
    latest = client.get(f"/v1/sites/{site_id}/plan").json()
    assert doc["result"] == latest
    assert latest["first_period"] == 0 and len(latest["schedule"]["periods"]) == 4
    sync = client.post(f"/v1/sites/{site_id}/plan").json()
    assert sync["schedule"]["objective_usd"] == pytest.approx(
        latest["schedule"]["objective_usd"], rel=1e-6
    )
    state = {"a": {"n_p": 1, "n_d": 1}, "b": {"n_p": 1, "n_d": 1}}
    job = {
        "kind": "site_plan",
        "request": {"site_id": site_id, "current": {"period": 2, "state": state}},
    }
    doc = wait_final(client, client.post("/v1/jobs", json=job).json()["id"])
    assert doc["status"] == "succeeded" and doc["result"]["first_period"] == 2
    assert [p["index"] for p in doc["result"]["schedule"]["periods"]] == [2, 3]
    # a state the deployment cannot run (6 GPUs for a deployment of at most 4) is
    # refused at submission, named after the entry the client sent
    bad = {"a": {"n_p": 3, "n_d": 3}, "b": {"n_p": 1, "n_d": 1}}
    job["request"]["current"] = {"period": 2, "state": bad}
    r = client.post("/v1/jobs", json=job)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "request.current.state.a"
    r = client.post("/v1/jobs", json={"kind": "site_plan", "request": {"site_id": "nope"}})
    assert r.status_code == 404
    assert r.json()["errors"][0]["field"] == "request.site_id"


def test_a_cancelled_site_plan_is_not_kept(client: TestClient, db_url: str) -> None:
    """A plan job cancelled while it solved returns its schedule but stores no plan:
    a plan cut short never becomes the one the site dispatches."""
    from service.runtime.store import store_for
    from service.sites.plans import plan_site
    from service.usecases import runs as work

    site_id = register(client)
    doc = plan_site(store_for(db_url), site_id, None, work.schedule, keep=lambda: False)
    assert doc["plan_id"] is None and len(doc["schedule"]["periods"]) == 4
    assert client.get(f"/v1/sites/{site_id}/plan").status_code == 404


def test_an_event_re_planned_in_a_job(client: TestClient) -> None:
    """``?replan=job``: the event is merged at once and the re-plan runs as a
    ``site_plan`` job (202 with its id and Location), whose result is the site's new
    latest plan, of the event's version; ``replan`` takes only ``now`` or ``job``."""
    from tests.service.test_jobs import wait_final

    site_id = register(client)
    ev = oadr_event()
    r = client.post(f"/v1/sites/{site_id}/events?replan=job", json={"event": ev})
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["plan"] is None and out["site_version"] == 2
    assert out["event"]["periods"] == [1, 2]
    job_id = out["job"]["id"]
    assert r.headers["Location"] == f"/v1/jobs/{job_id}"
    doc = wait_final(client, job_id)
    assert doc["status"] == "succeeded" and doc["kind"] == "site_plan", doc
    assert doc["progress"]["phase"] == "done" and doc["progress"]["objective_usd"] is not None
    latest = client.get(f"/v1/sites/{site_id}/plan").json()
    assert doc["result"] == latest and not latest["stale"]
    assert caps(latest) == [BASE_CAP_W, 2600.0, 2400.0, BASE_CAP_W]
    assert_within_caps(latest)
    r = client.post(f"/v1/sites/{site_id}/events?replan=later", json={"event": ev})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "replan"


def test_a_forecast_re_planned_in_a_job_from_the_running_state(client: TestClient) -> None:
    """``?replan=job`` on a forecast: the job re-plans from ``current`` as the route
    would (the periods from ``current.period`` on, at the new demand)."""
    from tests.service.test_jobs import wait_final

    site_id = register(client)
    r = post_forecast(client, site_id, "?replan=job")
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["plan"] is None and out["from_period"] == 2 and out["site_version"] == 2
    doc = wait_final(client, out["job"]["id"])
    assert doc["status"] == "succeeded", doc
    periods = doc["result"]["schedule"]["periods"]
    assert_forecast_from_period_2(periods)
    assert client.get(f"/v1/sites/{site_id}/plan").json() == doc["result"]


@pytest.mark.slow
def test_an_infeasible_event_fails_its_re_plan_job(client: TestClient) -> None:
    """With ``?replan=job`` an event no schedule meets is stored and its job fails with
    the conflicts the route's 422 would name; the previous plan stays, stale."""
    from tests.service.test_jobs import wait_final

    site_id = register(client)
    client.post(f"/v1/sites/{site_id}/plan")
    # 0.5 kW is below the idle draw of the site's GPUs (8 x 120 W x PUE 1.2)
    event = cap_event("2026-07-01T13:00:00Z", [[0.5]])
    r = client.post(f"/v1/sites/{site_id}/events?replan=job", json={"event": event})
    assert r.status_code == 202, r.text
    doc = wait_final(client, r.json()["job"]["id"])
    assert doc["status"] == "failed" and doc["error"]["conflicts"], doc
    assert client.get(f"/v1/sites/{site_id}").json()["version"] == 2
    assert client.get(f"/v1/sites/{site_id}/plan").json()["stale"] is True
