"""The schedule answer's settings fields in its response model
(:class:`formulation.results.ScheduleResponse`): declared in the OpenAPI document as
optional strings (never null), present only for deployments that list settings, and
the answer without settings is the document itself."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from formulation.results import ScheduleResponse
from tests.service.conftest import small_schedule


def _round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` through the response model as FastAPI's exclude_unset dump gives it."""
    return ScheduleResponse.model_validate(doc).model_dump(mode="json", exclude_unset=True)


def test_openapi_declares_the_settings_as_optional_strings(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    period = schemas["DeploymentPeriod"]
    for key in ("prefill_setting", "decode_setting"):
        assert period["properties"][key]["type"] == "string"  # no null in the schema
        assert key not in period["required"]
    offered = schemas["DeploymentOut"]["properties"]["settings"]
    assert offered["items"] == {"$ref": "#/components/schemas/SettingPair"}
    assert "settings" not in schemas["DeploymentOut"]["required"]
    assert "deployments" in schemas["ScheduleResponse"]["required"]


def test_answers_with_and_without_settings_keep_their_shape(client):
    r = client.post("/v1/schedule", json=small_schedule())
    assert r.status_code == 200, r.text
    plain = r.json()
    # the route answers the document itself: no field added, none null
    assert r.content == JSONResponse(plain).body
    assert '"prefill_setting"' not in r.text and '"settings"' not in r.text
    assert _round_trip(plain) == plain

    body = small_schedule()
    body["deployments"][0]["settings"] = {"prefill": ["1980MHz", "1185MHz"], "decode": ["500W"]}
    r = client.post("/v1/schedule", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert _round_trip(got) == got
    model = ScheduleResponse.model_validate(got)
    for p in model.periods:
        a, b = p.deployments["a"], p.deployments["b"]
        assert a.prefill_setting in ("1980MHz", "1185MHz") and a.decode_setting == "500W"
        assert b.prefill_setting is None and "prefill_setting" not in b.model_fields_set
    offered = [(s.prefill, s.decode) for s in model.deployments[0].settings or []]
    assert offered == [("1980MHz", "500W"), ("1185MHz", "500W")]
    assert model.deployments[1].settings is None
    assert "settings" not in got["deployments"][1]
