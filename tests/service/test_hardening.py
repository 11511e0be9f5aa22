"""Holes an adversarial test of a live server found (issue 12, items 1 and 3): no
request reads a server file, whatever the spelling; a solver worker that died while
idle is replaced before the next request; readiness reflects the pool and the database.
A worker killed mid-solve, and a killed server, are in ``test_crash.py``."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from formulation.demo import demo_request
from model.errors import InputError
from model.workload import parse_workload, workload_kind
from service.runtime.metrics import HTTP_METHODS, OTHER_METHOD
from tests.service.conftest import (
    REPO,
    small_schedule,
)
from tests.service.test_routes import assert_problem

SECRET = "pdwatt-secret-content-7f3a"
# moments of the fixed pair (10, 5): E[l^k] = l^k
INLINE = {
    "mean_in": 10, "e_in2": 100, "e_in3": 1000, "e_in4": 10000, "mean_out": 5,
    "e_out2": 25, "e_in_out": 50, "max_tokens": 15,
}  # fmt: skip


@pytest.fixture
def secret_files(tmp_path: Path) -> dict[str, Path]:
    """A readable moments file, a CSV trace (both would parse), and a FIFO, which would
    block any reader: a request that tried to open it would hang, not answer 422."""
    moments = tmp_path / "m.json"
    moments.write_text(json.dumps({**INLINE, "name": SECRET}))
    trace = tmp_path / "t.csv"
    trace.write_text(f"input_tokens,output_tokens,{SECRET}\n10,5,1\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"moments": moments, "trace": trace, "fifo": fifo}


def spellings(files: dict[str, Path]) -> list[str]:
    """The file forms in the spellings the parser accepts (case, spaces, relative paths)."""
    m, t, f = (str(files[k]) for k in ("moments", "trace", "fifo"))
    rel = os.path.relpath(m, REPO)
    return [
        f"moments:{m}",
        f"Moments:{m}",
        f" MOMENTS : {m} ",
        f"moments:{rel}",
        f"moments:../{rel}",
        f"trace:{t}",
        f"TrAcE:{t}",
        f"trace :{t}",
        f"moments:{f}",
        f"trace:{f}",
        "moments:/dev/zero",
        "Moments:/etc/passwd",
    ]


def test_parser_refuses_file_forms_unless_asked(secret_files: dict[str, Path]) -> None:
    for text in spellings(secret_files):
        assert workload_kind(text) in {"trace", "moments"}, text
        with pytest.raises(InputError, match="never read"):
            parse_workload(text)
    # the command line reads the user's own files
    w = parse_workload(f" Moments : {secret_files['moments']}", read_files=True)
    assert w.mean_in == 10
    assert workload_kind("fixed:10:5") == "fixed"
    assert workload_kind("azure-conv-2023") == "preset"


def _no_leak(r: httpx.Response) -> None:
    assert SECRET not in r.text
    assert "root:" not in r.text
    assert "not valid JSON" not in r.text and "not found" not in r.text


@pytest.mark.servers
def test_no_route_reads_a_server_file(
    live_server: Callable[..., str], secret_files: dict[str, Path]
) -> None:
    base = live_server(workers=1)
    for text in spellings(secret_files):
        cases: list[tuple[str, dict[str, Any], str]] = []
        cases.append(("/v1/capacity", {"workload": text, "n_p": 1, "n_d": 1}, "workload"))
        cases.append(("/v1/front", {"workload": text, "max_gpus": 4}, "workload"))
        # given moments replace the workload, but a file form is still refused, not ignored
        cases.append(
            ("/v1/capacity", {"workload": text, "moments": INLINE, "n_p": 1, "n_d": 1}, "workload")
        )
        req = small_schedule(time_limit_s=5)
        req["deployments"][1]["workload"] = text
        field = "deployments[1].workload"
        cases.append(("/v1/schedule", req, field))
        cases.append(
            (
                "/v1/demand-response",
                {"request": req, "event": {"start_period": 1, "end_period": 2, "cap_w": 9e3}},
                f"request.{field}",
            )
        )
        cases.append(("/v1/flexibility", {"request": req, "period": 1}, f"request.{field}"))
        site = req | {"name": "dc", "plan_start": "2026-07-01T12:00:00Z"}
        cases.append(("/v1/sites", site, field))  # refused at registration
        for path, body, want in cases:
            r = httpx.post(f"{base}{path}", json=body, timeout=10)
            assert_problem(r, 422, want)
            _no_leak(r)
    assert httpx.get(f"{base}/healthz", timeout=2).status_code == 200


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def _solver_workers(server_pid: int, want: int = 1, timeout: float = 10.0) -> list[int]:
    """The server's solver processes (spawned children that are not the resource tracker)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = []
        for c in _children(server_pid):
            try:
                cmd = Path(f"/proc/{c}/cmdline").read_bytes()
            except FileNotFoundError:
                continue
            if b"spawn_main" in cmd:
                pids.append(c)
        if len(pids) >= want or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def _server_pid(base: str) -> int:
    port = base.rsplit(":", 1)[1]
    out = subprocess.run(
        ["pgrep", "-f", f"service.cli serve --host 127.0.0.1 --port {port}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(out) == 1, out
    return int(out[0])


@pytest.mark.servers
def test_an_idle_dead_worker_does_not_fail_the_next_request(
    live_server: Callable[..., str],
) -> None:
    base = live_server(workers=1)
    assert httpx.post(f"{base}/v1/schedule", json=small_schedule(), timeout=60).status_code == 200
    (worker,) = _solver_workers(_server_pid(base))
    os.kill(worker, signal.SIGKILL)
    # at once: the pool looks at its worker before giving it the request
    r = httpx.post(f"{base}/v1/schedule", json=small_schedule(), timeout=60)
    assert r.status_code == 200, r.text
    assert httpx.get(f"{base}/readyz", timeout=5).json()["workers_replaced"] == 1


@pytest.mark.slow
def test_database_down_is_503_and_not_ready(
    make_client: Callable[..., Any], tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-dir" / "db.sqlite"  # sqlite cannot create the file
    c = make_client(workers=1, database_url=f"sqlite:///{missing}")
    r = c.get("/readyz")
    assert r.status_code == 503
    assert r.json()["database"] == "unavailable" and r.json()["status"] == "unavailable"
    r = c.get("/v1/sites")
    assert_problem(r, 503)
    assert int(r.headers["retry-after"]) >= 1
    assert c.get("/healthz").status_code == 200  # the process itself is up


@pytest.mark.slow
def test_a_solve_over_the_memory_budget_is_a_422_naming_max_gpus(
    make_client: Callable[..., Any],
) -> None:
    """max_gpus 512 on one deployment once tried to allocate 128 GiB and answered 500.
    The whole-tree estimate puts this request (96 periods, a 5 s limit) at about
    2,100 MB: a server budget of 1,500 MB refuses it, naming the deployment."""
    c = make_client(workers=1, max_solve_memory_mb=1500)
    req = small_schedule(time_limit_s=5)  # four periods, made a day of 96
    for d in req["deployments"]:
        d["demand_rps"] = d["demand_rps"] * 24
    req["grid"]["price_usd_per_mwh"] = req["grid"]["price_usd_per_mwh"] * 24
    req["deployments"][1]["max_gpus"] = 512
    req["site"]["gpu_inventory"]["h200"] = 600
    body = assert_problem(c.post("/v1/schedule", json=req), 422, "deployments[1].max_gpus")
    assert "MB" in body["detail"] and "PDWATT_MAX_SOLVE_MEMORY_MB" in body["detail"]
    dr = {"request": req, "event": {"start_period": 1, "end_period": 2, "cap_w": 9e3}}
    assert_problem(c.post("/v1/demand-response", json=dr), 422, "request.deployments[1].max_gpus")
    site = req | {"name": "dc", "plan_start": "2026-07-01T12:00:00Z"}
    assert_problem(c.post("/v1/sites", json=site), 422, "deployments[1].max_gpus")
    # a small server budget refuses even the small request; the default accepts it
    tight = make_client(workers=1, max_solve_memory_mb=100)
    assert_problem(tight.post("/v1/schedule", json=small_schedule()), 422)
    assert c.post("/v1/schedule", json=small_schedule()).status_code == 200


@pytest.mark.servers
def test_cli_memory_flag(tmp_path: Path) -> None:
    req = tmp_path / "req.json"
    req.write_text(json.dumps(small_schedule()))
    cmd = [sys.executable, "-m", "service.cli", "plan", str(req), "--json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDWATT_")}
    env["PYTHONPATH"] = str(REPO)
    refused = subprocess.run(
        [*cmd, "--max-memory-mb", "100"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert refused.returncode != 0
    assert "deployments[" in refused.stderr and "max_gpus" in refused.stderr
    assert "Traceback" not in refused.stderr
    ok = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] in {"optimal", "time_limit"}  # stdout is pure JSON


def test_api_key_edge_cases(make_client: Callable[..., Any]) -> None:
    """A non-ASCII key header once answered 500; an empty configured key accepted an
    empty header."""
    c = make_client(api_key="k3y-é")
    body = {"workload": "fixed:1024:128", "n_p": 1, "n_d": 1}
    wrong = c.post("/v1/capacity", json=body, headers={"X-API-Key": "caf\u00e9".encode()})
    assert_problem(wrong, 401)
    ok = c.post("/v1/capacity", json=body, headers={"X-API-Key": "k3y-é".encode()})
    assert ok.status_code == 200, ok.text
    with pytest.raises(ValueError, match="api_key"):
        make_client(api_key="")


def test_openapi_publishes_this_servers_limits(make_client: Any) -> None:
    """The limits a server is configured with are in its OpenAPI document, as a block
    and as the bounds of the fields they bound; a request past one is a 422 naming the
    field, as the document says."""
    client = make_client(max_time_limit_s=42, max_deployments=3, max_front_gpus=64)
    doc = client.get("/openapi.json").json()
    limits = doc["info"]["x-pdwatt-limits"]
    assert limits["max_time_limit_s"] == 42 and limits["max_deployments"] == 3
    comps = doc["components"]["schemas"]
    assert comps["SolverIn"]["properties"]["time_limit_s"]["maximum"] == 42
    assert comps["ScheduleRequest"]["properties"]["deployments"]["maxItems"] == 3
    assert comps["FrontRequest"]["properties"]["max_gpus"]["maximum"] == 64
    r = client.post("/v1/schedule", json=small_schedule(time_limit_s=43))
    assert r.status_code == 422
    assert "time_limit_s" in r.text


def _label_values(metrics: str, label: str) -> set[str]:
    return set(re.findall(rf'{label}="([^"]*)"', metrics))


def test_metrics_labels_do_not_grow_with_what_clients_send(make_client: Any) -> None:
    """Found by an adversarial test: each new method name (any token, 4 KB long) added a
    series to ``/metrics``, kept for good: 5,000 requests grew it to 41 MB. Every other
    method is now counted as ``other``, and a route by its template, not its URL."""
    client = make_client(api_key="k3y")  # /metrics answers without the key

    def send(n: int) -> list[str]:
        names = [f"X{secrets.token_hex(64).upper()}" for _ in range(n)]
        for name in names:
            assert client.request(name, "/healthz").status_code == 405
            r = client.request(name, f"/v1/sites/s{secrets.token_hex(8)}/events")
            assert r.status_code in (401, 405)
        return names

    sent = send(20)
    client.get("/metrics")  # its own series exist from here on
    before = client.get("/metrics").text
    sent += send(40)
    after = client.get("/metrics").text
    assert not any(name in after for name in sent)
    assert _label_values(after, "method") <= HTTP_METHODS | {OTHER_METHOD}
    assert "other" in _label_values(after, "method")
    assert not any("/v1/sites/s" in route for route in _label_values(after, "route"))
    # more distinct names: no new series, only higher counts
    series = [line.rsplit(" ", 1)[0] for line in after.splitlines()]
    assert series == [line.rsplit(" ", 1)[0] for line in before.splitlines()]
    assert len(after) < len(before) + 200


def test_a_key_given_twice_is_refused_not_overwritten(client: Any, tmp_path: Path) -> None:
    """Python's JSON parser keeps the last of a key given twice in one object, so
    ``{"n_p": 3, ..., "n_p": 5}`` was computed at 5 without a word. Over HTTP and in the
    command line's files the request is refused, naming the object and the key."""
    body = (
        '{"model": "qwen3-32b", "gpu": "h200", "workload": "fixed:4096:256", '
        '"n_p": 3, "n_d": 1, "n_p": 5}'
    )
    r = client.post("/v1/capacity", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    (error,) = r.json()["errors"]
    assert error["field"] == "body" and "'n_p' is given more than once" in error["reason"]
    nested = json.dumps(demo_request()).replace(
        '"initial": {', '"initial": {"n_p": 9, ', 1
    )
    r = client.post("/v1/schedule", content=nested, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "deployments[0].initial"
    # the same body without the repeat is answered
    r = client.post("/v1/capacity", json=json.loads(body))
    assert r.status_code == 200 and r.json()["n_p"] == 5

    # the command line: a request file with a key twice, and one that is not UTF-8
    twice = tmp_path / "twice.json"
    twice.write_text(nested)
    out = subprocess.run(
        [sys.executable, "-m", "service.cli", "plan", str(twice)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "deployments[0].initial: the key 'n_p' is given more than once" in out.stderr
    assert "Traceback" not in out.stderr
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe")
    for args in (["plan", str(binary)], ["capacity", "--np", "2", "--nd", "1", "--override",
                                         str(binary)]):  # fmt: skip
        out = subprocess.run(
            [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert out.returncode == 2, (args, out.stderr)
        assert "is not UTF-8 text" in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/v1/front", {"slo": {}}, "slo"),  # a restriction to no target
        # NaN (which Python's JSON reads) named as not a number, whatever the bounds
        ("/v1/front", {"headroom": "NaN"}, "headroom"),
        # a rule across the moments' fields, named under moments (it named e_in2 alone)
        ("/v1/capacity", {"moments": {
            "mean_in": 100, "e_in2": 50, "e_in3": 1e6, "e_in4": 1e8, "mean_out": 10,
            "e_out2": 200, "e_in_out": 1000, "max_tokens": 4096}}, "moments.e_in2"),
        # a repeat in a list was searched once, the other dropped without a word
        ("/v1/front", {"gpus": ["h200", "h200"]}, "gpus"),
        ("/v1/front", {"prefill_settings": ["1980MHz", "1980MHz"]}, "prefill_settings"),
        ("/v1/front", {"decode_shapes": ["tp1", "tp2", "tp1"]}, "decode_shapes"),
        ("/v1/front", {"mtp_draft_tokens": [1, 1]}, "mtp_draft_tokens"),
    ],
)
def test_requests_that_would_be_read_otherwise_than_sent_are_refused(
    client: Any, route: str, body: dict[str, Any], field: str
) -> None:
    base = {"model": "qwen3-32b", "gpu": "h200", "workload": "fixed:4096:256"}
    if route == "/v1/capacity":
        base |= {"n_p": 2, "n_d": 1}
    text = json.dumps(base | body).replace('"NaN"', "NaN")  # the bare token, as sent
    r = client.post(route, content=text, headers={"content-type": "application/json"})
    assert_problem(r, 422, field)
    assert r.json()["errors"][0]["field"] == field


def test_a_body_that_is_not_json_is_415(client: Any) -> None:
    """Every /v1 route reads JSON: a body sent as text/plain (or with no content-type)
    was answered "body: Input should be a valid dictionary"; it is 415 naming the
    content-type."""
    body = json.dumps({"model": "qwen3-32b", "gpu": "h200", "n_p": 2, "n_d": 1})
    for headers in ({"content-type": "text/plain"}, {}):
        r = client.post("/v1/capacity", content=body.encode(), headers=headers)
        assert_problem(r, 415, "content-type")
    r = client.post("/v1/capacity", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_an_unknown_query_parameter_is_refused(client: Any) -> None:
    """A /v1 route's query names only its own parameters: ``?replan_=job`` (a typo) was
    ignored and the route ran as if it were not there."""
    body = {"model": "qwen3-32b", "gpu": "h200", "n_p": 2, "n_d": 1}
    r = client.post("/v1/capacity?bogus=1", json=body)
    assert_problem(r, 422, "bogus")
    assert "unknown query parameter" in r.json()["errors"][0]["reason"]
    r = client.post("/v1/schedule?formt=csv", json=demo_request())
    assert_problem(r, 422, "formt")
    assert "format" in r.json()["errors"][0]["reason"]  # what the route takes
    assert client.get("/healthz?probe=1").status_code == 200  # outside /v1: not checked
