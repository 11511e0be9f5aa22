"""Route tests of the HTTP service (FastAPI TestClient, lifespan included): the happy
paths against the analytical core, and every error path as an RFC 9457 problem."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from model.operations import SpecRequest, capacity_report, front_report, resolve_spec
from tests.conftest import kernel_tables
from tests.service.conftest import small_schedule
from tests.service.contract import CAPACITY_KEYS, TOTALS_KEYS

PROBLEM = "application/problem+json"
CAPACITY_BODY = {
    "model": "qwen3-32b",
    "gpu": "h200",
    "workload": "fixed:4096:256",
    "n_p": 3,
    "n_d": 1,
}
SCHEDULE_KEYS = {"status", "mip_gap", "solve_time_s", "objective_usd", "periods", "totals"}
DEPLOYMENT_PERIOD_KEYS = {"n_p", "n_d", "demand_rps", "served_rps", "capacity_rps", "power_w"}


def assert_problem(r: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    """Status, media type and RFC 9457 members; ``field`` must be named in the body."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].split(";")[0] == PROBLEM, r.headers
    body = r.json()
    assert {"type", "title", "status", "detail"} <= set(body), body
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert "Traceback" not in r.text
    if field is not None:
        fields = [e["field"] for e in body.get("errors", [])]
        assert field in fields or body["detail"].startswith(f"{field}:"), body
    return body


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


# ------------------------------------------------------------------ core


def test_capacity_matches_the_core(client):
    r = client.post("/v1/capacity", json=CAPACITY_BODY)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    got = r.json()
    assert set(got) >= CAPACITY_KEYS
    spec = resolve_spec(SpecRequest(model="qwen3-32b", gpu="h200", workload="fixed:4096:256"))
    want = capacity_report(spec, 3, 1)
    assert (got["n_p"], got["n_d"]) == (3, 1)
    for k in CAPACITY_KEYS - {"n_p", "n_d"}:
        assert close(got[k], want[k]), (k, got[k], want[k])
    assert got["capacity_rps"] > 0 and got["power_w"] > 0
    assert got["calibration"]["measured"] is True


def test_capacity_power_at_load(client):
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "load_rps": 0.5})
    assert r.status_code == 200, r.text
    spec = resolve_spec(SpecRequest(model="qwen3-32b", gpu="h200", workload="fixed:4096:256"))
    want = capacity_report(spec, 3, 1, 0.5)
    assert close(r.json()["power_w"], want["power_w"])
    assert r.json()["power_w"] < capacity_report(spec, 3, 1)["power_w"]
    assert "requested_load_rps" not in r.json()  # served whole


def test_capacity_says_what_of_a_load_it_does_not_serve(client):
    """A load above the capacity is served at the capacity (SPEC 2.6): the answer says
    what was asked and how much of it is not served (it answered load_rps 5.14 for 100
    without a word)."""
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "load_rps": 100.0})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["load_rps"] == pytest.approx(got["capacity_rps"], rel=1e-12)
    assert got["requested_load_rps"] == 100.0
    assert got["unserved_rps"] == pytest.approx(100.0 - got["capacity_rps"], rel=1e-12)


def test_front_sorted_by_capacity(client):
    r = client.post("/v1/front", json={"model": "qwen3-32b", "gpu": "h200", "max_gpus": 8})
    assert r.status_code == 200, r.text
    got = r.json()
    front = got["front"]
    assert len(front) >= 2
    caps = [c["capacity_rps"] for c in front]
    assert caps == sorted(caps)
    assert all(c["n_p"] + c["n_d"] <= 8 for c in got["configs"])
    # on a capacity-power front, more capacity costs more power
    powers = [c["power_w"] for c in front]
    assert powers == sorted(powers)
    want = front_report(resolve_spec(SpecRequest()), 8)
    assert [(c["n_p"], c["n_d"]) for c in front] == [(c["n_p"], c["n_d"]) for c in want["front"]]
    assert len(got["configs"]) == len(want["configs"])


def test_catalog(client):
    r = client.get("/v1/catalog")
    assert r.status_code == 200, r.text
    cat = r.json()
    assert "qwen3-32b" in cat["models"]
    assert "h200" in cat["gpus"]
    cals = cat["calibrations"]
    assert all(isinstance(c["measured"], bool) for c in cals)
    measured = {(c["model"], c["gpu"]) for c in cals if c["measured"]}
    assert ("qwen3-32b", "h200") in measured
    assert any(not c["measured"] for c in cals)  # estimated pairs are flagged as such
    presets = cat["workloads"]["presets"]["presets"]
    assert {"azure-conv-2023", "azure-code-2023", "mooncake"} <= set(presets)


def test_health_ready_metrics(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["busy_workers"] == 0 and ready["workers"] == 1
    assert client.post("/v1/capacity", json=CAPACITY_BODY).status_code == 200
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    lines = [ln for ln in r.text.splitlines() if ln.startswith("pdwatt_requests_total{")]
    assert any(
        'route="/v1/capacity"' in ln and 'status="200"' in ln and float(ln.split()[-1]) >= 1
        for ln in lines
    ), lines
    assert "pdwatt_request_seconds_bucket" in r.text


def test_openapi_and_docs(client):
    spec = client.get("/openapi.json").json()
    assert {"/v1/capacity", "/v1/front", "/v1/schedule", "/v1/catalog"} <= set(spec["paths"])
    assert client.get("/docs").status_code == 200
    # error bodies are documented as what they are: problem details
    for path in ("/v1/capacity", "/v1/front", "/v1/schedule"):
        responses = spec["paths"][path]["post"]["responses"]
        for code in ("401", "413", "422"):
            assert list(responses[code]["content"]) == [PROBLEM], (path, code)
    assert "Retry-After" in spec["paths"]["/v1/schedule"]["post"]["responses"]["429"]["headers"]
    assert list(spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]


# ------------------------------------------------------------------ core errors


def test_unknown_model(client):
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "model": "gpt-9"})
    body = assert_problem(r, 422, "model")
    assert "qwen3-32b" in body["known"]
    assert "gpt-9" in body["detail"]


def test_unknown_gpu(client):
    r = client.post("/v1/front", json={"gpu": "tpu-v9"})
    body = assert_problem(r, 422, "gpu")
    assert "h200" in body["known"]


def test_negative_n_p(client):
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "n_p": -1})
    assert_problem(r, 422, "n_p")


def test_a_configuration_without_instances(client):
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "n_p": 0, "n_d": 0})
    assert "needs instances" in assert_problem(r, 422, "n_p")["detail"]


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/v1/capacity", {**CAPACITY_BODY, "load_rps": False}, "load_rps"),
        ("/v1/capacity", {**CAPACITY_BODY, "n_p": True}, "n_p"),
        ("/v1/front", {"workload": "fixed:4096:256", "budget_w": False}, "budget_w"),
    ],
)
def test_booleans_are_not_numbers(client, route, body, field):
    detail = assert_problem(client.post(route, json=body), 422, field)["detail"]
    assert "true or false" in detail


def _set(body: dict, path: tuple, value: object) -> dict:
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("route", "path", "field"),
    [
        ("/v1/capacity", ("n_p",), "n_p"),
        ("/v1/capacity", ("load_rps",), "load_rps"),
        ("/v1/schedule", ("period_minutes",), "period_minutes"),
        ("/v1/schedule", ("deployments", 0, "max_gpus"), "deployments[0].max_gpus"),
        ("/v1/schedule", ("deployments", 0, "demand_rps", 1), "deployments[0].demand_rps"),
        ("/v1/schedule", ("site", "gpu_inventory", "h200"), "site.gpu_inventory"),
        ("/v1/schedule", ("grid", "power_cap_w"), "grid.power_cap_w"),
        ("/v1/schedule", ("solver", "time_limit_s"), "solver.time_limit_s"),
    ],
)
def test_strings_are_not_numbers(client, route, path, field):
    """A number sent as a string ("60") was taken as the number: refused like true/false."""
    body = _set(dict(CAPACITY_BODY) if route == "/v1/capacity" else small_schedule(), path, "4")
    detail = assert_problem(client.post(route, json=body), 422, field)["detail"]
    assert "not a string" in detail


def test_an_integer_is_a_number(client):
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "load_rps": 2})
    assert r.status_code == 200, r.text


def test_options_and_405_name_every_method_of_the_path(client):
    r = client.options("/v1/sites")
    assert r.status_code == 204
    assert set(r.headers["allow"].split(", ")) == {"GET", "POST", "OPTIONS"}
    r = client.options("/v1/sites/some-site")
    assert set(r.headers["allow"].split(", ")) == {"GET", "PUT", "DELETE", "OPTIONS"}
    r = client.delete("/v1/sites")
    body = assert_problem(r, 405)
    assert set(r.headers["allow"].split(", ")) == {"GET", "POST", "OPTIONS"}
    assert "DELETE" in body["detail"]
    assert client.options("/v1/no-such-path").status_code == 404


def test_missing_n_d(client):
    body = {k: v for k, v in CAPACITY_BODY.items() if k != "n_d"}
    assert_problem(client.post("/v1/capacity", json=body), 422, "n_d")


def test_unknown_field(client):
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "colour": "red"})
    assert_problem(r, 422, "colour")


def test_trace_workload_refused(client):
    r = client.post("/v1/capacity", json={**CAPACITY_BODY, "workload": "trace:/etc/passwd"})
    body = assert_problem(r, 422, "workload")
    assert "never read" in body["detail"]


def test_moments_with_and_without_the_third_moments(client):
    """Explicit moments carry the optional third moments (all three or none): with them
    the admission variant's one-prefill-server form applies, exactly as for the preset
    they came from; a partial set is refused, naming the missing moment."""
    preset = resolve_spec(SpecRequest(workload="mooncake")).workload
    full = {k: v for k, v in preset.to_dict().items() if k not in ("name", "source")}
    body = {**CAPACITY_BODY, "workload": "azure-conv-2023", "n_p": 1, "n_d": 1}
    r = client.post("/v1/capacity", json={**body, "moments": full})
    assert r.status_code == 200, r.text
    expected = capacity_report(resolve_spec(SpecRequest(workload="mooncake")), 1, 1)
    assert close(r.json()["capacity_rps"], expected["capacity_rps"])
    bare = {k: v for k, v in full.items() if k not in ("e_in2_out", "e_in_out2", "e_out3")}
    r2 = client.post("/v1/capacity", json={**body, "moments": bare})
    assert r2.status_code == 200, r2.text
    # one prefill server: the loop's balance without them, section 6 with them
    assert r2.json()["capacity_rps"] < r.json()["capacity_rps"]
    partial = {**bare, "e_out3": full["e_out3"]}
    r = client.post("/v1/capacity", json={**body, "moments": partial})
    assert_problem(r, 422, "moments.e_in2_out")


def test_front_max_gpus_above_server_limit(make_client):
    c = make_client(max_front_gpus=8)
    assert c.post("/v1/front", json={"max_gpus": 8}).status_code == 200
    body = assert_problem(c.post("/v1/front", json={"max_gpus": 16}), 422, "max_gpus")
    assert "8" in body["detail"]


def test_body_too_large(make_client):
    c = make_client(max_body_bytes=2048)
    assert c.post("/v1/capacity", json=CAPACITY_BODY).status_code == 200
    big = {**CAPACITY_BODY, "moments": {"source": "x" * 4000}}
    assert_problem(c.post("/v1/capacity", json=big), 413)


def test_body_too_large_streamed_without_length(make_client):
    c = make_client(max_body_bytes=2048)

    def chunks():
        yield b'{"n_p": 1, "n_d": 1, "workload": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'

    r = c.post("/v1/capacity", content=chunks(), headers={"content-type": "application/json"})
    assert_problem(r, 413)


@pytest.mark.parametrize(
    ("content", "ctype"),
    [
        (b"{not json", "application/json"),
        (b"\xff\xfe{\x00", "application/json"),  # not UTF-8
        (b"", "application/json"),
        (b"[1, 2, 3]", "application/json"),
        (b'"text"', "application/json"),
    ],
)
def test_non_json_body(client, content, ctype):
    r = client.post("/v1/capacity", content=content, headers={"content-type": ctype})
    body = assert_problem(r, 422)
    assert body["errors"][0]["field"] == "body", body


def test_a_form_body_is_415(client):
    r = client.post(
        "/v1/capacity",
        content=b"n_p=1&n_d=1",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert assert_problem(r, 415)["errors"][0]["field"] == "content-type"


def test_not_found_route_is_a_problem(client):
    assert_problem(client.get("/v1/nothing"), 404)


def test_wrong_method_is_a_problem(client):
    assert_problem(client.get("/v1/capacity"), 405)


# ------------------------------------------------------------------ api key


def test_api_key(make_client):
    c = make_client(api_key="k")
    r = c.post("/v1/capacity", json=CAPACITY_BODY)
    assert_problem(r, 401)
    assert r.headers.get("www-authenticate")
    assert_problem(c.post("/v1/capacity", json=CAPACITY_BODY, headers={"X-API-Key": "x"}), 401)
    assert_problem(c.post("/v1/schedule", json=small_schedule()), 401)
    assert_problem(c.post("/v1/front", json={}), 401)
    r = c.post("/v1/capacity", json=CAPACITY_BODY, headers={"X-API-Key": "k"})
    assert r.status_code == 200, r.text
    assert c.get("/healthz").status_code == 200
    assert c.get("/readyz").status_code == 200
    assert c.get("/metrics").status_code == 200


def test_no_api_key_configured_needs_no_header(client):
    assert client.post("/v1/capacity", json=CAPACITY_BODY).status_code == 200


# ------------------------------------------------------------------ schedule


def _solves_counted(client) -> float:
    """pdwatt_solve_seconds_count (the registry is per process: other tests count too)."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("pdwatt_solve_seconds_count "):
            return float(line.split()[1])
    return 0.0


def test_small_schedule_json(client):
    req = small_schedule()
    before = _solves_counted(client)
    r = client.post("/v1/schedule", json=req)
    assert r.status_code == 200, r.text
    got = r.json()
    assert set(got) >= SCHEDULE_KEYS
    assert got["status"] in {"optimal", "time_limit"}
    assert set(got["totals"]) >= TOTALS_KEYS
    assert [p["index"] for p in got["periods"]] == [0, 1, 2, 3]
    for p, d_a, d_b in zip(
        got["periods"],
        req["deployments"][0]["demand_rps"],
        req["deployments"][1]["demand_rps"],
        strict=True,
    ):
        assert p["power_w"] <= p["power_cap_w"] * (1 + 1e-9)
        assert set(p["deployments"]) == {"a", "b"}
        for name, demand in (("a", d_a), ("b", d_b)):
            dp = p["deployments"][name]
            assert set(dp) >= DEPLOYMENT_PERIOD_KEYS
            assert dp["n_p"] + dp["n_d"] <= 4
            assert dp["demand_rps"] == pytest.approx(demand)
            assert dp["served_rps"] <= dp["demand_rps"] + 1e-9
    for name in ("static_peak", "greedy"):
        base = got["baselines"][name]
        assert set(base) >= TOTALS_KEYS
        assert "cap_violations" in base
        if base["cap_violations"] == 0 and base.get("limit_violations", 0) == 0:
            assert got["objective_usd"] <= base["objective_usd"] * (1 + 1e-6) + 1e-9
    # solver metrics recorded
    text = client.get("/metrics").text
    assert 'pdwatt_solver_outcomes_total{status="' in text
    assert _solves_counted(client) == before + 1


@pytest.mark.slow
def test_small_schedule_csv(client):
    r = client.post("/v1/schedule", params={"format": "csv"}, json=small_schedule())
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/csv")
    lines = r.text.strip().splitlines()
    header = lines[0].split(",")
    assert header[0] == "period"
    assert {"deployment", "n_p", "n_d", "served_rps", "power_cap_w"} <= set(header)
    assert len(lines) == 1 + 4 * 2  # one row per period and deployment


@pytest.mark.slow
def test_small_schedule_png(client):
    r = client.post("/v1/schedule", params={"format": "png"}, json=small_schedule())
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    assert r.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(r.content) > 1000


def test_schedule_unknown_format(client):
    r = client.post("/v1/schedule", params={"format": "xml"}, json=small_schedule())
    assert_problem(r, 422, "format")


def test_schedule_mismatched_series(client):
    req = small_schedule()
    req["grid"]["power_cap_w"] = [20_000, 20_000, 20_000]
    body = assert_problem(client.post("/v1/schedule", json=req), 422, "grid.power_cap_w")
    assert "grid.power_cap_w" in body["detail"]


def test_schedule_mismatched_demand(client):
    req = small_schedule()
    req["deployments"][1]["demand_rps"] = [1.0, 2.0]
    assert_problem(client.post("/v1/schedule", json=req), 422, "deployments[1].demand_rps")


@pytest.mark.slow
def test_schedule_cap_below_idle_load(client):
    req = small_schedule()
    req["grid"]["power_cap_w"] = [20_000, 100, 20_000, 100]
    body = assert_problem(client.post("/v1/schedule", json=req), 422)
    assert body["type"] == "/problems/infeasible"
    periods = sorted(c["period"] for c in body["conflicts"])
    assert periods == [1, 3]
    assert all(c["constraint"] for c in body["conflicts"])


def test_schedule_time_limit_above_server_max(make_client):
    c = make_client(workers=1, max_time_limit_s=10)
    req = small_schedule(time_limit_s=11)
    body = assert_problem(c.post("/v1/schedule", json=req), 422, "solver.time_limit_s")
    assert "10" in body["detail"]


def test_schedule_trace_workload_refused(client):
    req = small_schedule()
    req["deployments"][0]["workload"] = "trace:/etc/passwd"
    assert_problem(client.post("/v1/schedule", json=req), 422, "deployments[0].workload")


def test_schedule_unknown_model(client):
    req = small_schedule()
    req["deployments"][1]["model"] = "gpt-9"
    body = assert_problem(client.post("/v1/schedule", json=req), 422)
    assert "qwen3-32b" in body.get("known", []) or "gpt-9" in body["detail"]


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"max_periods": 3}, "deployments[0].demand_rps"),
        ({"max_deployments": 1}, "deployments"),
        ({"max_site_gpus": 4}, "site.gpu_inventory"),
    ],
)
def test_schedule_server_limits(make_client, settings, field):
    c = make_client(workers=1, **settings)
    assert_problem(c.post("/v1/schedule", json=small_schedule()), 422, field)


def test_schedule_validation_names_nested_field(client):
    req = small_schedule()
    req["deployments"][0]["demand_rps"][2] = -1
    assert_problem(client.post("/v1/schedule", json=req), 422, "deployments[0].demand_rps[2]")


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("deployments", 0, "demand_rps", 2), 1e308, "deployments[0].demand_rps[2]"),
        (("deployments", 1, "unserved_penalty_usd_per_request"), 1e300, None),
        (("grid", "power_cap_w"), 2e154, "grid.power_cap_w"),
        (("grid", "price_usd_per_mwh", 0), 1e200, None),
    ],
)
def test_schedule_extreme_values_are_refused_not_500(client, path, value, field):
    """Found by schemathesis: finite inputs near the float limit overflowed the totals,
    and the response could not be written as JSON (500)."""
    req = small_schedule()
    target = req
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    body = assert_problem(client.post("/v1/schedule", json=req), 422, field)
    assert body["type"] == "/problems/validation"


# ------------------------------------------------------------------ performance source

KERNEL_BODY = {**CAPACITY_BODY, "gpu": "h100-sxm", "performance": "kernels"}


def test_kernels_on_a_server_without_a_kernel_database_are_a_422(client, no_kernel_package):
    for route, body in (
        ("/v1/capacity", KERNEL_BODY),
        ("/v1/front", {k: v for k, v in KERNEL_BODY.items() if k not in ("n_p", "n_d")}),
    ):
        problem = assert_problem(client.post(route, json=body), 422, "performance")
        assert "this server has none" in problem["detail"]
    schedule = small_schedule()
    schedule["deployments"][1]["performance"] = "kernels"
    problem = assert_problem(
        client.post("/v1/schedule", json=schedule), 422, "deployments[1].performance"
    )
    assert "PDWATT_KERNELS" in problem["detail"]
    job = {"kind": "schedule", "request": schedule}
    assert_problem(client.post("/v1/jobs", json=job), 422, "request.deployments[1].performance")


def test_a_bad_performance_or_framework_is_a_422_naming_it(client):
    assert_problem(
        client.post("/v1/capacity", json={**CAPACITY_BODY, "performance": "roofline"}),
        422,
        "performance",
    )
    assert_problem(
        client.post("/v1/capacity", json={**KERNEL_BODY, "framework": "tensorflow"}),
        422,
        "framework",
    )
    # a framework is only read with kernels: sent with spec it is refused, not ignored
    problem = assert_problem(
        client.post("/v1/capacity", json={**CAPACITY_BODY, "framework": "vllm"}), 422, "framework"
    )
    assert "only used with performance 'kernels'" in problem["detail"]
    schedule = small_schedule()
    schedule["deployments"][0]["performance"] = "measured"
    assert_problem(client.post("/v1/schedule", json=schedule), 422, "deployments[0].performance")


def test_capacity_names_its_performance_source(client):
    r = client.post("/v1/capacity", json=CAPACITY_BODY)
    assert r.status_code == 200, r.text
    assert r.json()["performance"]["source"] == "spec"


def test_kernels_on_a_server_with_a_kernel_database(make_client):
    root = str(kernel_tables())
    client = make_client(workers=1, kernels=root)
    r = client.post("/v1/capacity", json={**KERNEL_BODY, "framework": "vllm"})
    assert r.status_code == 200, r.text
    perf = r.json()["performance"]
    assert perf["source"] == "kernels"
    assert perf["kernels"]["folder"] == "aiconfigurator"
    assert perf["kernels"]["framework"] == "vllm"
    assert perf["engine_calibration"]["source"]
    assert perf["decode_line"]["worst_deviation"] >= 0
    assert root not in r.text  # the server's folder is named, not its path
    spec = client.post("/v1/capacity", json={**CAPACITY_BODY, "gpu": "h100-sxm"}).json()
    assert spec["performance"]["source"] == "spec"
    assert spec["capacity_rps"] != r.json()["capacity_rps"]
    # a prompt beyond the tables: 422 naming the workload, with the table's shape
    long = {**KERNEL_BODY, "workload": "fixed:17000:16"}
    problem = assert_problem(client.post("/v1/capacity", json=long), 422, "workload")
    assert "beyond the kernel tables" in problem["detail"]
    # a pair no measurement covers: its transferred calibration, named as such
    moved = client.post("/v1/capacity", json={**KERNEL_BODY, "gpu": "h200", "framework": "vllm"})
    assert moved.status_code == 200, moved.text
    eng = moved.json()["performance"]["engine_calibration"]
    assert eng["transferred_from"] == {"gpu": "h100-sxm", "framework": "vllm", "version": "0.14.0"}
    assert eng["source"].startswith("transferred:")
    # no engine calibration shipped for this GPU and framework: 422 naming performance
    other = {**KERNEL_BODY, "gpu": "a100-80gb", "framework": "vllm"}
    assert_problem(client.post("/v1/capacity", json=other), 422, "performance")


def test_the_kernel_database_setting_is_checked_at_start(monkeypatch, tmp_path):
    from model.errors import InputError
    from service.runtime.settings import get_settings

    monkeypatch.setenv("PDWATT_KERNELS", str(tmp_path))
    get_settings.cache_clear()
    try:
        with pytest.raises(InputError) as err:
            get_settings()
    finally:
        monkeypatch.delenv("PDWATT_KERNELS")
        get_settings.cache_clear()
    assert err.value.field == "PDWATT_KERNELS"
    assert "is not a kernel database" in err.value.reason


@pytest.mark.parametrize(
    ("targets", "field"),
    [
        ({"tpot_p99_s": 0}, "deployments[0].latency_targets.tpot_p99_s"),
        ({"ttft_p99_s": "2"}, "deployments[0].latency_targets.ttft_p99_s"),
        ({"tpot_p99_s": 0.05, "at_load": 0.8}, "deployments[0].latency_targets.at_load"),
    ],
)
def test_a_deployments_bad_latency_targets_are_a_422_naming_the_field(client, targets, field):
    body = small_schedule()
    body["deployments"][0]["latency_targets"] = targets
    assert_problem(client.post("/v1/schedule", json=body), 422, field)


def test_phase_shapes_over_http_take_their_gpus_and_bad_ones_are_a_422(client):
    body = {**CAPACITY_BODY, "n_p": 1, "n_d": 2}
    over = {"serving": {"prefill_shape": "tp2", "decode_shape": "tp4"}}
    r = client.post("/v1/capacity", json={**body, "overrides": over})
    assert r.status_code == 200, r.text
    assert r.json()["gpus"] == 1 * 2 + 2 * 4
    bad = {"serving": {"decode_shape": "tp3"}}
    assert_problem(
        client.post("/v1/capacity", json={**body, "overrides": bad}), 422, "decode_shape"
    )
    schedule = small_schedule()
    schedule["deployments"][0]["overrides"] = {"serving": {"prefill_shape": "tp2,tp2"}}
    assert_problem(
        client.post("/v1/schedule", json=schedule), 422, "deployments[0].serving.prefill_shape"
    )
