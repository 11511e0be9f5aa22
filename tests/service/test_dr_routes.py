"""POST /v1/demand-response, POST /v1/flexibility, ``pdwatt dr`` and ``pdwatt flex``
(issue 5: DR what-if and flexibility curve)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from formulation.demo import demo_request
from formulation.whatif.dr import DEMO_EVENT
from service.cli.app import main
from service.main import create_app
from service.runtime.settings import Settings

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PUE, IDLE_W = 1.2, 120.0


def dep(name: str, penalty: float, **kw: Any) -> dict[str, Any]:
    out = {
        "name": name,
        "model": "qwen3-32b",
        "gpu": "h200",
        "workload": "fixed:1024:256",
        "demand_rps": [6.0] * 4,
        "unserved_penalty_usd_per_request": penalty,
        "max_gpus": 4,
        "initial": {"n_p": 1, "n_d": 1},
    }
    out.update(kw)
    return out


def twins() -> dict[str, Any]:
    """Two deployments identical but for the value of their requests; exact solves."""
    return {
        "period_minutes": 60,
        "site": {"gpu_inventory": {"h200": 8}, "pue": PUE, "idle_gpu_power_w": IDLE_W},
        "deployments": [dep("cheap", 0.001), dep("dear", 0.004)],
        "grid": {"power_cap_w": 20_000, "price_usd_per_mwh": 100},
        "transitions": {"max_instance_changes_per_period": 1},
        "solver": {"time_limit_s": 20, "mip_gap": 1e-9, "method": "compact"},
    }


EVENT = {"name": "test", "start_period": 1, "end_period": 3, "cap_w": 2900.0}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One app (and one solver worker process) for the module."""
    with TestClient(create_app(Settings(workers=1)), raise_server_exceptions=False) as c:
        yield c


def problem_of(r: Any, status: int = 422) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


# --------------------------------------------------------------------------- HTTP


@pytest.mark.slow
def test_demand_response_route(client: TestClient) -> None:
    r = client.post("/v1/demand-response", json={"request": twins(), "event": EVENT})
    assert r.status_code == 200, r.text
    got = r.json()
    for key in ("event", "baseline", "response", "power_shed_w", "demand_lost", "recovery"):
        assert key in got
    assert got["event"]["cap_w"] == [2900.0, 2900.0]
    assert got["event"]["name"] == "test"
    for t in (1, 2):
        assert got["response"]["periods"][t]["power_w"] <= 2900.0 * (1 + 1e-7)
        assert got["power_shed_w"][t] > 0
    lost = got["demand_lost"]
    assert lost["cheap"]["requests"] > 0
    assert lost["cheap"]["requests"] >= lost["dear"]["requests"]
    assert got["cost_delta_usd"] >= -1e-9
    assert got["response"]["objective_usd"] - got["baseline"]["objective_usd"] == pytest.approx(
        got["cost_delta_usd"]
    )


@pytest.mark.slow
def test_demand_response_png(client: TestClient) -> None:
    r = client.post("/v1/demand-response?format=png", json={"request": twins(), "event": EVENT})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    assert r.content.startswith(PNG_MAGIC)


def test_infeasible_event_is_a_problem_with_the_deepest_cap(client: TestClient) -> None:
    event = {"start_period": 0, "end_period": 2, "cap_w": 1000.0}
    body = problem_of(client.post("/v1/demand-response", json={"request": twins(), "event": event}))
    assert body["type"] == "/problems/infeasible"
    assert [c["period"] for c in body["conflicts"]] == [0, 1]
    # with 1 change per period 1P1D cannot reach "off": 8 idle GPUs + two 1P1D at rest
    deepest = PUE * (8 * IDLE_W + 2 * (133.0 + 448.0 - 2 * IDLE_W))
    for c in body["conflicts"]:
        assert c["deepest_feasible_cap_w"] == pytest.approx(deepest)
        assert c["power_cap_w"] == 1000.0


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"start_period": 1, "end_period": 9, "cap_w": 1.0}, "event.end_period"),
        ({"start_minute": 0, "end_minute": 600, "cap_w": 1.0}, "event.end_minute"),
        ({"start_period": 0, "end_period": 1}, "event.cap_w"),
        (
            {"start_period": 0, "end_period": 1, "cap_w": 1.0, "reduction_pct": 5},
            "event.reduction_pct",
        ),
        ({"start_period": 0, "end_period": 1, "cap_w": -1.0}, "event.cap_w"),
        ({"start_period": 0, "end_period": 1, "reduction_pct": 150}, "event.reduction_pct"),
        ({"start_period": 0, "end_period": 1, "cap_w": 1.0, "extra": 1}, "event.extra"),
    ],
)
def test_invalid_event_names_the_field(
    client: TestClient, event: dict[str, Any], field: str
) -> None:
    body = problem_of(client.post("/v1/demand-response", json={"request": twins(), "event": event}))
    assert body["errors"][0]["field"] == field


def test_request_errors_are_named_under_request(client: TestClient) -> None:
    req = twins()
    req["deployments"][1]["gpu"] = "b200"
    body = problem_of(client.post("/v1/demand-response", json={"request": req, "event": EVENT}))
    assert body["errors"][0]["field"] == "request.deployments[1].gpu"
    req = twins()
    req["solver"]["time_limit_s"] = 10_000
    body = problem_of(client.post("/v1/flexibility", json={"request": req, "period": 0}))
    assert body["errors"][0]["field"] == "request.solver.time_limit_s"


def test_pool_full_is_429(client: TestClient) -> None:
    pool = client.app.state.pool  # type: ignore[attr-defined]
    pool._busy = pool.workers  # every worker busy
    try:
        for path, payload in (
            ("/v1/demand-response", {"request": twins(), "event": EVENT}),
            ("/v1/flexibility", {"request": twins(), "period": 0}),
        ):
            r = client.post(path, json=payload)
            body = problem_of(r, 429)
            assert int(r.headers["retry-after"]) >= 1, body
    finally:
        pool._busy = 0


def test_flexibility_route(client: TestClient) -> None:
    r = client.post("/v1/flexibility", json={"request": twins(), "period": 2, "points": 7})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["deployments"] == ["cheap", "dear"]
    assert "ignored" in got["transitions"]
    (per,) = got["periods"]
    assert per["period"] == 2 and len(per["points"]) == 7
    vals = [p["served_value_usd_per_h"] for p in per["points"]]
    assert vals == sorted(vals) and vals[0] == 0.0 and vals[-1] > 0
    assert per["points"][0]["cap_w"] == pytest.approx(PUE * IDLE_W * 8)
    every = client.post("/v1/flexibility", json={"request": twins(), "points": 3}).json()
    assert [p["period"] for p in every["periods"]] == [0, 1, 2, 3]
    png = client.post("/v1/flexibility?format=png", json={"request": twins(), "period": 1})
    assert png.status_code == 200 and png.content.startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"period": 4}, "period"),
        ({"period": 0, "points": 1}, "points"),
        ({"period": 0, "points": 500}, "points"),
    ],
)
def test_flexibility_validation(client: TestClient, payload: dict[str, Any], field: str) -> None:
    body = problem_of(client.post("/v1/flexibility", json={"request": twins(), **payload}))
    assert body["errors"][0]["field"] == field


def test_flexibility_refuses_too_many_solves(client: TestClient) -> None:
    req = twins()
    for d in req["deployments"]:
        d["demand_rps"] = [1.0] * 1000
    body = problem_of(client.post("/v1/flexibility", json={"request": req, "points": 50}))
    assert body["errors"][0]["field"] == "points"


def test_openapi_lists_the_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "post" in paths["/v1/demand-response"] and "post" in paths["/v1/flexibility"]


# --------------------------------------------------------------------------- CLI


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, body: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body), encoding="utf-8")
    return str(path)


def test_cli_dr_json_matches_the_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], client: TestClient
) -> None:
    req, ev = write(tmp_path, "req.json", twins()), write(tmp_path, "ev.json", EVENT)
    code, out, err = run(capsys, ["dr", req, "--event", ev, "--json"])
    assert code == 0, err
    cli = json.loads(out)
    api = client.post("/v1/demand-response", json={"request": twins(), "event": EVENT}).json()
    assert set(cli) == set(api)
    assert cli["event"] == api["event"]
    assert cli["recovery"] == api["recovery"]
    assert cli["power_shed_w"] == pytest.approx(api["power_shed_w"])
    for name, lost in api["demand_lost"].items():
        assert cli["demand_lost"][name] == pytest.approx(lost)
    assert cli["cost_delta_usd"] == pytest.approx(api["cost_delta_usd"])


def test_cli_dr_human_output_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    req, ev = write(tmp_path, "req.json", twins()), write(tmp_path, "ev.json", EVENT)
    png = tmp_path / "dr.png"
    code, out, err = run(capsys, ["dr", req, "--event", ev, "--plot", str(png)])
    assert code == 0, err
    assert "event 'test': periods 1..2" in out
    assert "cost of responding: $+" in out
    assert "cheap" in out and "recovery:" in out
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_cli_dr_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    req = write(tmp_path, "req.json", twins())
    code, _, err = run(capsys, ["dr", req])
    assert code == 2 and "--event" in err
    bad = write(tmp_path, "bad.json", {"start_period": 0, "end_period": 99, "cap_w": 1.0})
    code, _, err = run(capsys, ["dr", req, "--event", bad])
    assert code == 2 and "event.end_period" in err
    low = write(tmp_path, "low.json", {"start_period": 0, "end_period": 2, "cap_w": 1000.0})
    code, _, err = run(capsys, ["dr", req, "--event", low])
    assert code == 1 and "deepest feasible cap" in err
    # a chart that cannot be written is refused before the solves (here the event is
    # one that cannot be met: the error is the chart's), for dr and flex alike
    absent = str(tmp_path / "absent" / "dr.png")
    for argv in (["dr", req, "--event", low, "--plot", absent], ["flex", req, "--plot", absent]):
        code, out, err = run(capsys, argv)
        assert code == 2 and out == "", argv
        assert err.startswith("error: --plot: cannot write ") and "does not exist" in err


@pytest.mark.slow
def test_cli_dr_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, ["dr", "--demo", "--time-limit", "3"])
    assert code == 0, err
    assert f"'{DEMO_EVENT['name']}'" in out and "12:00-14:00" in out
    assert (tmp_path / "pdwatt-dr-demo.png").read_bytes().startswith(PNG_MAGIC)


def test_cli_flex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    req = write(tmp_path, "req.json", twins())
    code, out, err = run(capsys, ["flex", req, "--period", "1", "--points", "5", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert [len(p["points"]) for p in got["periods"]] == [5]
    code, out, err = run(capsys, ["flex", req, "--points", "4"])
    assert code == 0, err
    assert out.count("\n") >= 4 + 2  # one line per period
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, ["flex", "--demo"])
    assert code == 0, err
    assert "period 72 (18:00)" in out
    assert (tmp_path / "pdwatt-flex-demo.png").read_bytes().startswith(PNG_MAGIC)
    code, out, err = run(capsys, ["flex", req, "--period", "7"])
    assert code == 2 and "period" in err


def test_demo_body_has_a_valid_example() -> None:
    """The OpenAPI example of the DR route is the demo with the CLI's demo event."""
    from service.requests.dr import DemandResponseRequest

    req = DemandResponseRequest.model_validate({"request": demo_request(), "event": DEMO_EVENT})
    assert req.event.reduction_pct == 20
