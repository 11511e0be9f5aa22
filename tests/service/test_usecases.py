"""The use-case table (service.usecases) is the one place a kind of work is registered:
the jobs API's kinds and request union, the synchronous routes and the runner's
dispatch all come from it."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.jobs import run_kind
from service.usecases import USE_CASES
from tests.service.test_limits import KINDS


def _ref(schema: dict[str, Any]) -> str:
    return schema["$ref"].rsplit("/", 1)[-1]


def test_every_use_case_is_a_job_kind(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    comps = doc["components"]["schemas"]
    body = doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    mapping = body["schema"]["discriminator"]["mapping"]
    assert set(mapping) == set(USE_CASES)
    for kind, uc in USE_CASES.items():
        job = comps[mapping[kind].rsplit("/", 1)[-1]]
        assert job["properties"]["kind"]["const"] == kind
        assert _ref(job["properties"]["request"]) == uc.request.__name__
    assert comps["JobDocument"]["properties"]["kind"]["enum"] == list(USE_CASES)


def test_every_use_case_with_a_route_has_it(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    routes = {uc.route.path: uc for uc in USE_CASES.values() if uc.route is not None}
    assert len(routes) == 3
    for path, uc in routes.items():
        post = paths[f"/v1{path}"]["post"]
        assert _ref(post["requestBody"]["content"]["application/json"]["schema"]) == (
            uc.request.__name__
        )
        (fmt,) = [p for p in post["parameters"] if p["name"] == "format"]
        assert fmt["schema"]["enum"] == list(uc.formats)
        assert set(post["responses"]["200"]["content"]) == {
            "application/json",
            *(["text/csv"] if uc.csv else []),
            *(["image/png"] if uc.chart else []),
        }


def test_the_parity_tests_cover_every_route() -> None:
    """A use case with a route is in test_limits.KINDS, so that its job is shown to
    refuse every limit its route refuses."""
    assert set(KINDS) == {k for k, uc in USE_CASES.items() if uc.route is not None}


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown job kind 'nope'"):
        run_kind("nope", {}, None)


def test_an_answer_unlike_the_routes_response_model_is_refused(monkeypatch: Any) -> None:
    """The response model a route publishes is checked on every answer (in the solver
    worker): an answer that lost a field the model requires does not go out."""
    from pydantic import ValidationError

    from service import usecases, work
    from service.schemas import ScheduleRequest
    from tests.service.conftest import small_schedule

    monkeypatch.setattr(work, "schedule", lambda *_args: {"status": "optimal"})
    req = ScheduleRequest.model_validate(small_schedule())
    with pytest.raises(ValidationError, match="periods"):
        usecases.run("schedule", req, usecases.Context())
