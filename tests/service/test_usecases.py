"""The use-case table (service.usecases.table) is the one place a kind of work is registered:
the jobs API's kinds and request union, the synchronous routes, the solver metrics and
the runner's dispatch all come from it; a check never changes the request it is given,
and the synchronous route's worker runs the problem the check parsed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.jobs.runner import run_kind
from service.usecases.table import JOB_KINDS, USE_CASES
from tests.service.test_limits import KINDS


def _ref(schema: dict[str, Any]) -> str:
    return schema["$ref"].rsplit("/", 1)[-1]


def test_every_job_kind_is_a_row_of_the_table(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    comps = doc["components"]["schemas"]
    body = doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    mapping = body["schema"]["discriminator"]["mapping"]
    assert JOB_KINDS == (
        "schedule", "fleet_schedule", "demand_response", "fleet_demand_response",
        "flexibility", "site_plan"
    )  # fmt: skip
    assert set(mapping) == set(JOB_KINDS)
    for kind in JOB_KINDS:
        job = comps[mapping[kind].rsplit("/", 1)[-1]]
        assert job["properties"]["kind"]["const"] == kind
        assert _ref(job["properties"]["request"]) == USE_CASES[kind].request.__name__
    assert comps["JobDocument"]["properties"]["kind"]["enum"] == list(JOB_KINDS)


def test_a_kind_that_is_no_job_is_refused_as_one(client: TestClient) -> None:
    r = client.post("/v1/jobs", json={"kind": "capacity", "request": {"n_p": 1, "n_d": 1}})
    assert r.status_code == 422, r.text
    with pytest.raises(ValueError, match="unknown job kind 'front'"):
        run_kind("front", {}, None)


def test_every_use_case_with_a_route_has_it(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    routes = {uc.route.path: uc for uc in USE_CASES.values() if uc.route is not None}
    assert set(routes) == {
        "/capacity", "/front", "/schedule", "/fleet/schedule", "/fleet/demand-response",
        "/demand-response", "/flexibility"
    }  # fmt: skip
    for path, uc in routes.items():
        assert uc.route is not None
        post = paths[f"/v1{path}"]["post"]
        assert _ref(post["requestBody"]["content"]["application/json"]["schema"]) == (
            uc.request.__name__
        )
        assert _ref(post["responses"]["200"]["content"]["application/json"]["schema"]) == (
            uc.route.response.__name__
        )
        assert ("429" in post["responses"]) == (uc.route.runs_in == "pool")
        formats = [p for p in post.get("parameters", []) if p["name"] == "format"]
        if uc.formats == ("json",):
            assert not formats
        else:
            assert formats[0]["schema"]["enum"] == list(uc.formats)
        assert set(post["responses"]["200"]["content"]) == {
            "application/json",
            *(["text/csv"] if uc.csv else []),
            *(["image/png"] if uc.chart else []),
        }


def test_the_parity_tests_cover_every_job_with_a_route() -> None:
    """A job kind with a route is in test_limits.KINDS, so that its job is shown to
    refuse every limit its route refuses."""
    assert set(KINDS) == {k for k in JOB_KINDS if USE_CASES[k].route is not None}


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown job kind 'nope'"):
        run_kind("nope", {}, None)


def test_an_answer_unlike_the_routes_response_model_is_refused(monkeypatch: Any) -> None:
    """The response model a route publishes is checked on every answer (in the solver
    worker): an answer that lost a field the model requires does not go out."""
    from pydantic import ValidationError

    from service.requests.schemas import ScheduleRequest
    from service.usecases import rows
    from service.usecases import runs as work
    from service.usecases import table as usecases
    from tests.service.conftest import small_schedule

    monkeypatch.setattr(work, "schedule", lambda *_args: {"status": "optimal"})
    req = ScheduleRequest.model_validate(small_schedule())
    with pytest.raises(ValidationError, match="periods"):
        usecases.run("schedule", rows.Checked(req), rows.Context())


def test_a_check_fills_the_servers_defaults_into_a_new_request(make_client: Any) -> None:
    """limits.check_schedule never changes the request it is given: the server's default
    time limit is in the request it returns, with the problem parsed from that one."""
    from service.requests.dr import FlexibilityRequest
    from service.requests.schemas import ScheduleRequest
    from service.usecases import rows
    from tests.service.conftest import small_schedule

    settings = make_client(workers=1, max_time_limit_s=5).app.state.settings
    body = small_schedule()
    del body["solver"]
    req = ScheduleRequest.model_validate(body)
    before = req.model_dump()
    checked = USE_CASES["schedule"].check(req, settings, "")
    assert req.model_dump() == before and req.solver.time_limit_s == 30.0
    assert checked.request is not req
    server_default = 5.0  # the server's maximum, below the schedule's default
    assert checked.request.solver.time_limit_s == server_default
    assert "time_limit_s" not in checked.request.solver.model_fields_set  # the server's
    assert checked.problem is not None
    assert checked.problem.solver.time_limit_s == server_default
    flex = FlexibilityRequest.model_validate({"request": body, "period": 0, "points": 3})
    done = USE_CASES["flexibility"].check(flex, settings, "")
    assert "time_limit_s" not in flex.request.solver.model_fields_set
    assert flex.request.solver.time_limit_s == 30.0  # the request given, unchanged
    assert done.request.request.solver.time_limit_s == server_default
    assert isinstance(done, rows.Checked) and done.problem is not None


def test_the_worker_runs_the_problem_the_check_parsed(client: TestClient, monkeypatch: Any) -> None:
    """The synchronous route hands the worker the problem parsed in the API process: the
    worker converts no request (problem_from_request is not called there)."""
    from formulation import problem as problem_module
    from service.requests.schemas import ScheduleRequest
    from service.usecases import rows
    from service.usecases import table as usecases
    from tests.service.conftest import small_schedule

    settings = client.app.state.settings  # type: ignore[attr-defined]
    req = ScheduleRequest.model_validate(small_schedule())
    checked = USE_CASES["schedule"].check(req, settings, "")
    conversions: list[object] = []
    real = problem_module.problem_from_request

    def counted(*args: Any, **kwargs: Any) -> Any:
        conversions.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(problem_module, "problem_from_request", counted)
    answer = usecases.run("schedule", checked, rows.Context(settings.max_solve_memory_mb))
    assert answer["status"] in ("optimal", "time_limit") and conversions == []
    # a job's stored document is parsed in its worker, once
    stored = usecases.parse("schedule", checked.request.model_dump(mode="json"))
    assert stored.problem is None
    usecases.run("schedule", stored, rows.Context(settings.max_solve_memory_mb))
    assert len(conversions) == 1


def _paths(node: Any, at: str = "") -> list[str]:
    """Every key of a JSON document, in the order it is written."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in [f"{at}/{k}", *_paths(v, f"{at}/{k}")]]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _paths(v, f"{at}[{i}]")]
    return []


def test_the_command_line_prints_what_the_route_answers(
    client: TestClient, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pdwatt plan --json` runs the schedule row: the same document as `POST
    /v1/schedule`, key for key in the same order (an exact solve, so the same values
    but for the times)."""
    import json

    from service.cli.app import main
    from tests.service.conftest import small_schedule

    body = small_schedule()
    body["solver"] = {"time_limit_s": 20, "mip_gap": 1e-9, "method": "compact"}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    assert main(["plan", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    r = client.post("/v1/schedule", json=body)
    assert r.status_code == 200, r.text
    answered = r.json()

    def shape(doc: dict[str, Any]) -> list[str]:  # the solver's trace grows with time
        return _paths({k: v for k, v in doc.items() if k != "solver"}) + list(doc["solver"])

    assert shape(printed) == shape(answered)
    assert printed["periods"] == answered["periods"]
    assert printed["objective_usd"] == answered["objective_usd"]
