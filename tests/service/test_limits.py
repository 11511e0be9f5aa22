"""The server's limits: a job refuses exactly what its synchronous route refuses, for
every limit; each limit has one source (the formulation's hard limits, which settings
may only tighten); the default time limit follows the server's maximum; invalid
settings stop the server at start, naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from formulation import request as schedule_request
from formulation.problem import problem_from_dict, validate
from model.errors import InputError
from service.requests.limits import MAX_FLEX_EVALUATIONS
from service.runtime.settings import Settings, get_settings
from tests.service.conftest import REPO, small_schedule
from tests.service.test_jobs import wait_final
from tests.service.test_routes import assert_problem

EVENT = {"start_period": 1, "end_period": 3, "reduction_pct": 20}


def long_horizon(n: int) -> dict[str, Any]:
    """``small_schedule`` over ``n`` periods."""
    body = small_schedule()
    for d in body["deployments"]:
        d["demand_rps"] = (d["demand_rps"] * n)[:n]
    body["grid"]["price_usd_per_mwh"] = (body["grid"]["price_usd_per_mwh"] * n)[:n]
    return body


def one_site_fleet(req: dict[str, Any]) -> dict[str, Any]:
    """A schedule request as a fleet of its one site."""
    site = {k: req[k] for k in ("site", "deployments", "grid", "transitions") if k in req}
    return {
        "period_minutes": req["period_minutes"],
        "sites": [{"name": "only", **site}],
        "solver": req.get("solver", {}),
    }


# kind -> (synchronous route, its body around a schedule request, where the request's
# field is named in the kind's body)
KINDS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]], Callable[[str], str]]] = {
    "schedule": ("/v1/schedule", lambda req: req, lambda f: f),
    "fleet_schedule": (
        "/v1/fleet/schedule",
        one_site_fleet,
        lambda f: f if f.startswith("solver.") else "sites[0]." + f,
    ),
    "fleet_demand_response": (
        "/v1/fleet/demand-response",
        lambda req: {"request": one_site_fleet(req), "event": {**EVENT, "site": "only"}},
        lambda f: "request." + (f if f.startswith("solver.") else "sites[0]." + f),
    ),
    "demand_response": (
        "/v1/demand-response",
        lambda req: {"request": req, "event": EVENT},
        lambda f: "request." + f,
    ),
    "flexibility": (
        "/v1/flexibility",
        lambda req: {"request": req, "period": 0, "points": 5},
        lambda f: "request." + f,
    ),
}

# every limit a route applies to the schedule request it takes: the settings that set
# it, a request past it, the field named
SCHEDULE_LIMITS: dict[str, tuple[dict[str, Any], Callable[[], dict[str, Any]], str]] = {
    "max_periods": ({"max_periods": 3}, small_schedule, "deployments[0].demand_rps"),
    "max_deployments": ({"max_deployments": 1}, small_schedule, "deployments"),
    "max_site_gpus": ({"max_site_gpus": 4}, small_schedule, "site.gpu_inventory"),
    "max_time_limit_s": (
        {"max_time_limit_s": 10},
        lambda: small_schedule(time_limit_s=11),
        "solver.time_limit_s",
    ),
    # below the fixed part of any solve: refused before a table is built, by a route
    # and a job alike before the request reaches a solver worker
    "max_solve_memory_mb": (
        {"max_solve_memory_mb": 100},
        small_schedule,
        "deployments[0].max_gpus",
    ),
}
#: settings that bound no job: the body size applies to every request before any
#: route (one middleware), and no job draws a Pareto front
NOT_JOB_LIMITS = {"max_body_bytes", "max_front_gpus"}


def test_every_limit_setting_is_checked_for_jobs_below() -> None:
    """A new ``max_*`` setting must be added to SCHEDULE_LIMITS (or said not to bound
    a job), so that the parity test below covers it."""
    settings = {name for name in Settings.model_fields if name.startswith("max_")}
    assert settings == set(SCHEDULE_LIMITS) | NOT_JOB_LIMITS


@pytest.mark.slow
@pytest.mark.parametrize("limit", sorted(SCHEDULE_LIMITS))
def test_a_job_refuses_what_its_route_refuses(make_client: Any, limit: str) -> None:
    settings, past, field = SCHEDULE_LIMITS[limit]
    client = make_client(workers=1, **settings)
    for kind, (route, wrap, inner) in KINDS.items():
        sync = assert_problem(client.post(route, json=wrap(past())), 422, inner(field))
        job = client.post("/v1/jobs", json={"kind": kind, "request": wrap(past())})
        body = assert_problem(job, 422, "request." + inner(field))
        assert body["errors"][0]["reason"] == sync["errors"][0]["reason"], kind
    assert client.get("/openapi.json").json()["info"]["x-pdwatt-limits"][limit] == next(
        iter(settings.values())
    )


@pytest.mark.slow
def test_a_flexibility_job_refuses_the_routes_evaluation_limit(client: TestClient) -> None:
    """Found by review: the count of one-period solves was checked by the route only, so
    2,016 periods x 201 points (about 405,000 solves) were accepted as a job."""
    n = MAX_FLEX_EVALUATIONS // 201 + 1  # every period at 200 points: one too many
    over = {"request": long_horizon(n), "period": None, "points": 200}
    sync = assert_problem(client.post("/v1/flexibility", json=over), 422, "points")
    job = client.post("/v1/jobs", json={"kind": "flexibility", "request": over})
    body = assert_problem(job, 422, "request.points")
    assert body["errors"][0]["reason"] == sync["errors"][0]["reason"]
    assert str(MAX_FLEX_EVALUATIONS) in sync["errors"][0]["reason"]
    # one period of the same horizon is within it: the job is taken and answers
    one = {"request": long_horizon(n), "period": 0, "points": 3}
    r = client.post("/v1/jobs", json={"kind": "flexibility", "request": one})
    assert r.status_code == 202, r.text
    doc = wait_final(client, r.json()["id"])
    assert doc["status"] == "succeeded", doc
    assert [p["period"] for p in doc["result"]["periods"]] == [0]
    limits = client.get("/openapi.json").json()["info"]["x-pdwatt-limits"]
    assert limits["max_flex_evaluations"] == MAX_FLEX_EVALUATIONS


def test_a_site_plan_job_refuses_what_its_route_refuses(client: TestClient) -> None:
    assert_problem(client.post("/v1/sites/nosuchsite/plan"), 404)
    job = client.post("/v1/jobs", json={"kind": "site_plan", "request": {"site_id": "nosuchsite"}})
    assert_problem(job, 404, "request.site_id")


# ---------------------------------------------------------------- one source per limit


def test_settings_default_to_the_formulations_limits_and_may_only_tighten() -> None:
    s = Settings()
    assert s.max_periods == schedule_request.MAX_PERIODS == 2016
    assert s.max_deployments is None  # no fixed number: the memory estimate decides
    assert s.max_time_limit_s <= schedule_request.TIME_LIMIT.max_s
    for name, above in (
        ("max_periods", schedule_request.MAX_PERIODS + 1),
        ("max_time_limit_s", schedule_request.TIME_LIMIT.max_s * 2),
    ):
        with pytest.raises(ValidationError, match=name):
            Settings.model_validate({name: above})
    assert Settings(max_deployments=3).max_deployments == 3
    with pytest.raises(ValidationError, match="max_deployments"):
        Settings.model_validate({"max_deployments": 0})


def test_the_formulation_refuses_past_its_own_limits() -> None:
    """The hard limits hold without any server (the command line's problems); the
    number of deployments is not one of them (the memory estimate decides,
    tests/formulation/test_memory.py)."""
    many = small_schedule()
    many["deployments"] = [{**many["deployments"][0], "name": f"d{i}"} for i in range(65)]
    validate(problem_from_dict(many))
    with pytest.raises(InputError) as e:
        validate(problem_from_dict(long_horizon(schedule_request.MAX_PERIODS + 1)))
    assert e.value.field == "deployments[0].demand_rps"


# ---------------------------------------------------------------- the default time limit


@pytest.mark.slow
def test_the_default_time_limit_follows_the_servers_maximum(make_client: Any) -> None:
    """Found by an adversarial test: with PDWATT_MAX_TIME_LIMIT_S=5 a request with
    ``"solver": {}`` was refused (the default, 30, above the maximum) while OpenAPI
    published default 30 with maximum 5."""
    client = make_client(workers=1, max_time_limit_s=5)
    doc = client.get("/openapi.json").json()
    comps = doc["components"]["schemas"]
    field = comps["SolverIn"]["properties"]["time_limit_s"]
    assert (field["default"], field["maximum"]) == (5, 5)
    assert comps["ScheduleRequest"]["properties"]["solver"]["default"]["time_limit_s"] == 5
    for schema in ("ScheduleRequest", "SiteRequest"):
        for example in comps[schema]["examples"]:
            assert example["solver"]["time_limit_s"] <= 5
    solvers: list[dict[str, Any] | None] = [{}, None]
    for solver in solvers:
        body = small_schedule()
        if solver is None:
            del body["solver"]
        else:
            body["solver"] = solver
        r = client.post("/v1/schedule", json=body)
        assert r.status_code == 200, r.text
        job = client.post("/v1/jobs", json={"kind": "schedule", "request": body})
        assert job.status_code == 202, job.text
        assert wait_final(client, job.json()["id"])["status"] == "succeeded"
    # a site keeps the time limit it will be planned with
    site = {**small_schedule(), "name": "s", "plan_start": "2026-07-01T12:00:00Z", "solver": {}}
    r = client.post("/v1/sites", json=site)
    assert r.status_code == 201, r.text
    assert r.json()["solver"]["time_limit_s"] == 5
    # a value the client sent is never changed: above the maximum it is refused
    body = small_schedule(time_limit_s=30)
    assert_problem(client.post("/v1/schedule", json=body), 422, "solver.time_limit_s")
    job = client.post("/v1/jobs", json={"kind": "schedule", "request": body})
    assert_problem(job, 422, "request.solver.time_limit_s")


def test_the_default_time_limit_is_the_schedules_under_a_higher_maximum(
    make_client: Any,
) -> None:
    client = make_client(workers=1, max_time_limit_s=60)
    field = client.get("/openapi.json").json()["components"]["schemas"]["SolverIn"]
    assert field["properties"]["time_limit_s"]["default"] == schedule_request.TIME_LIMIT.default_s
    site = {**small_schedule(), "name": "s", "plan_start": "2026-07-01T12:00:00Z", "solver": {}}
    r = client.post("/v1/sites", json=site)
    assert r.json()["solver"]["time_limit_s"] == schedule_request.TIME_LIMIT.default_s


def test_the_time_limit_has_one_definition_that_schemas_are_generated_from() -> None:
    """The request schema's bounds and default are TIME_LIMIT's; a schema generated
    while another limit is published carries that one (default, maximum, the solver
    default objects, the examples), and the model's own schema is TIME_LIMIT's again
    afterwards."""
    own = schedule_request.TIME_LIMIT
    req = schedule_request.ScheduleRequest
    given = req.model_validate({**small_schedule(), "solver": {}})
    assert given.solver.time_limit_s == own.default_s
    for bad in (own.least_s / 2, own.max_s * 2):
        with pytest.raises(ValidationError, match="time_limit_s"):
            schedule_request.SolverIn(time_limit_s=bad)
    server = own.at_most(4.0)
    assert (server.least_s, server.default_s, server.max_s) == (own.least_s, 4.0, 4.0)
    assert own.at_most(1e9) == own

    def published(doc: dict[str, Any]) -> tuple[float, float, float, list[float]]:
        field = doc["$defs"]["SolverIn"]["properties"]["time_limit_s"]
        times = [e["solver"]["time_limit_s"] for e in doc["examples"] if "solver" in e]
        return (
            field["default"],
            field["maximum"],
            doc["properties"]["solver"]["default"]["time_limit_s"],
            times,
        )

    with schedule_request.publishing(server):
        default, most, solver_default, times = published(req.model_json_schema())
    assert (default, most, solver_default) == (4.0, 4.0, 4.0)
    assert times and max(times) <= 4.0
    default, most, solver_default, times = published(req.model_json_schema())
    assert (default, most, solver_default) == (own.default_s, own.max_s, own.default_s)
    assert max(times) > 4.0  # the example as written: only a published limit caps it


def test_two_servers_in_one_process_publish_their_own_time_limits(make_client: Any) -> None:
    docs = [
        make_client(workers=1, max_time_limit_s=m).get("/openapi.json").json() for m in (7.0, 120.0)
    ]
    fields = [d["components"]["schemas"]["SolverIn"]["properties"]["time_limit_s"] for d in docs]
    assert [(f["default"], f["maximum"]) for f in fields] == [(7.0, 7.0), (30.0, 120.0)]
    for doc, most in zip(docs, (7.0, 120.0), strict=True):
        for example in doc["components"]["schemas"]["DemandResponseRequest"]["examples"]:
            assert example["request"]["solver"]["time_limit_s"] <= most


# ---------------------------------------------------------------- settings at start


def _serve(env_extra: dict[str, str], tmp: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDWATT_")}
    env |= {"PDWATT_DATABASE_URL": f"sqlite:///{tmp}/pdwatt.db", "PDWATT_PORT": "1"}
    env |= env_extra
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve"],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("key", "why"),
    [(" ", "is blank"), ("\t\t", "is blank"), ("secret ", "has whitespace around it")],
)
@pytest.mark.servers
def test_a_key_no_client_can_send_stops_the_server_at_start(
    tmp_path: Any, key: str, why: str
) -> None:
    """Found by an adversarial test: PDWATT_API_KEY=' ' started a server no client could
    use (HTTP drops the whitespace around a header value)."""
    done = _serve({"PDWATT_API_KEY": key}, str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert f"error: PDWATT_API_KEY: the key {why}" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.servers
def test_invalid_settings_are_named_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    get_settings.cache_clear()
    monkeypatch.setenv("PDWATT_MAX_TIME_LIMIT_S", "100000")
    try:
        with pytest.raises(InputError) as e:
            get_settings()
    finally:
        get_settings.cache_clear()
    assert e.value.field == "PDWATT_MAX_TIME_LIMIT_S"
    assert "may only set a lower one" in e.value.reason
    done = _serve({"PDWATT_MAX_PERIODS": "5000"}, str(tmp_path))
    assert done.returncode == 2 and "error: PDWATT_MAX_PERIODS:" in done.stderr
    assert "Traceback" not in done.stderr
