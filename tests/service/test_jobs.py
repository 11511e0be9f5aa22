"""Jobs API (/v1/jobs) on the embedded runner: submission, polling, results equal to the
synchronous route, idempotency keys, cancellation, and jobs kept across a restart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from service.runtime.jobstore import job_store
from tests.demo_sites import demo_three_times
from tests.service.conftest import app_settings, small_schedule
from tests.service.test_routes import assert_problem


def wait_final(client: TestClient, job_id: str, timeout_s: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        doc = client.get(f"/v1/jobs/{job_id}").json()
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            return dict(doc)
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish in {timeout_s} s")


def wait_status(client: TestClient, job_id: str, status: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if client.get(f"/v1/jobs/{job_id}").json()["status"] == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never became {status}")


@pytest.mark.slow
def test_a_schedule_job_answers_what_the_route_answers(client: TestClient) -> None:
    body = small_schedule(mip_gap=1e-9)
    r = client.post("/v1/jobs", json={"kind": "schedule", "request": body})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] in ("queued", "running")
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    doc = wait_final(client, job["id"])
    assert doc["status"] == "succeeded", doc
    assert doc["kind"] == "schedule"
    assert doc["progress"]["phase"] and doc["started"] and doc["finished"]
    sync = client.post("/v1/schedule", json=body).json()
    got = doc["result"]
    assert got["status"] == sync["status"] == "optimal"
    assert got["objective_usd"] == sync["objective_usd"]
    for a, b in zip(got["periods"], sync["periods"], strict=True):
        assert {n: (d["n_p"], d["n_d"]) for n, d in a["deployments"].items()} == {
            n: (d["n_p"], d["n_d"]) for n, d in b["deployments"].items()
        }


@pytest.mark.slow
def test_idempotency_key_returns_the_same_job_or_409(client: TestClient) -> None:
    job = {"kind": "schedule", "request": small_schedule()}
    first = client.post("/v1/jobs", json=job, headers={"Idempotency-Key": "plan-42"})
    again = client.post("/v1/jobs", json=job, headers={"Idempotency-Key": "plan-42"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = {"kind": "schedule", "request": small_schedule(time_limit_s=5)}
    r = client.post("/v1/jobs", json=other, headers={"Idempotency-Key": "plan-42"})
    body = assert_problem(r, 409)
    assert body["errors"][0]["field"] == "Idempotency-Key"
    wait_final(client, first.json()["id"])


def test_invalid_jobs_are_refused_naming_the_field(client: TestClient) -> None:
    r = client.post("/v1/jobs", json={"kind": "teleport", "request": {}})
    assert_problem(r, 422)
    bad = small_schedule()
    bad["deployments"][0]["max_gpus"] = -1
    r = client.post("/v1/jobs", json={"kind": "schedule", "request": bad})
    body = assert_problem(r, 422)
    assert "max_gpus" in body["errors"][0]["field"]
    assert "request" in body["errors"][0]["field"]
    # found by fuzzing: rules across fields were checked only when the job ran, so a
    # job was accepted (202) that POST /v1/schedule refuses (422); now both refuse it
    bad = small_schedule()
    bad["grid"]["power_cap_w"] = -5.0
    sync = assert_problem(client.post("/v1/schedule", json=bad), 422)
    body = assert_problem(client.post("/v1/jobs", json={"kind": "schedule", "request": bad}), 422)
    assert body["errors"][0]["field"] == "request." + sync["errors"][0]["field"]
    event = {"start_period": 0, "end_period": 1, "reduction_pct": 10}
    dr = {"kind": "demand_response", "request": {"request": bad, "event": event}}
    r = client.post("/v1/jobs", json=dr)
    assert r.status_code == 422 and r.json()["errors"][0]["field"].startswith("request.")
    assert_problem(client.get("/v1/jobs/no-such-job"), 404)
    assert_problem(client.delete("/v1/jobs/no-such-job"), 404)


def long_request(time_limit_s: float) -> dict[str, Any]:
    """The demo site three times over, with a gap target no solve reaches: a job that
    runs to its time limit."""
    body = demo_three_times(time_limit_s)
    body["solver"]["mip_gap"] = 1e-9
    return body


@pytest.mark.slow
def test_cancel_a_queued_job_at_once_and_a_running_one_with_its_best_schedule(
    make_client: Any,
) -> None:
    client = make_client(workers=1)
    long = long_request(30)
    running = client.post("/v1/jobs", json={"kind": "schedule", "request": long}).json()
    queued = client.post("/v1/jobs", json={"kind": "schedule", "request": small_schedule()}).json()
    wait_status(client, running["id"], "running")
    # one worker: the second job waits, and cancelling it is immediate
    doc = client.delete(f"/v1/jobs/{queued['id']}").json()
    assert doc["status"] == "cancelled" and "result" not in doc
    # the running solve stops at its next check and keeps its best schedule
    time.sleep(2.0)
    client.delete(f"/v1/jobs/{running['id']}")
    doc = wait_final(client, running["id"])
    assert doc["status"] == "cancelled"
    assert doc["result"]["status"] in ("stopped", "optimal")
    assert doc["result"]["objective_usd"] >= doc["result"]["lower_bound_usd"] - 1e-6
    assert len(doc["result"]["periods"]) == len(long["deployments"][0]["demand_rps"])
    # a finished job stays as it was
    assert client.delete(f"/v1/jobs/{running['id']}").json()["status"] == "cancelled"


@pytest.mark.slow
def test_jobs_survive_a_restart_and_interrupted_ones_fail_with_a_reason(tmp_path: Path) -> None:
    settings = app_settings(tmp_path, workers=1)
    with TestClient(create_app(settings), raise_server_exceptions=False) as first:
        job = first.post("/v1/jobs", json={"kind": "schedule", "request": small_schedule()})
        job_id = job.json()["id"]
        done = wait_final(first, job_id)
    # a job whose process disappeared while it ran
    store = job_store(settings.database_url)
    lost, _ = store.create("schedule", small_schedule())
    assert store.start(lost.id)
    with TestClient(create_app(settings), raise_server_exceptions=False) as second:
        again = second.get(f"/v1/jobs/{job_id}").json()
        assert again["status"] == "succeeded"
        assert again["result"] == done["result"]
        interrupted = second.get(f"/v1/jobs/{lost.id}").json()
        assert interrupted["status"] == "failed"
        assert "stopped" in interrupted["error"]["detail"]


@pytest.mark.servers
def test_jobs_on_a_real_server_and_from_another_server_process(live_server: Any) -> None:
    """A real ``pdwatt serve``: a job submitted, polled to its result, equal to the
    synchronous route's; a second server process on the same database answers it too
    (as one started after a restart would). Both shut down cleanly on SIGTERM."""
    import httpx

    base = live_server(workers=1)
    body = small_schedule(mip_gap=1e-9)
    r = httpx.post(f"{base}/v1/jobs", json={"kind": "schedule", "request": body}, timeout=30)
    assert r.status_code == 202, r.text
    url = base + r.headers["location"]
    deadline = time.monotonic() + 60
    doc = httpx.get(url, timeout=10).json()
    while doc["status"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, doc
        time.sleep(0.2)
        doc = httpx.get(url, timeout=10).json()
    assert doc["status"] == "succeeded"
    sync = httpx.post(f"{base}/v1/schedule", json=body, timeout=60).json()
    assert doc["result"]["objective_usd"] == sync["objective_usd"]
    again = live_server(workers=1)  # same working directory, hence the same database
    assert httpx.get(again + r.headers["location"], timeout=10).json()["result"] == doc["result"]


@pytest.mark.servers
def test_sigterm_stops_a_running_job_with_its_best_schedule(tmp_path: Path) -> None:
    """SIGTERM while a long schedule job runs: the server exits with 0 within 10 s
    (asserted by ``stop_all``) and the job ends cancelled with the schedule it had."""
    import httpx

    from tests.service.conftest import Servers

    servers = Servers(tmp_path)
    base = servers.start(workers=1)
    long = long_request(120)
    r = httpx.post(f"{base}/v1/jobs", json={"kind": "schedule", "request": long}, timeout=30)
    url = r.headers["location"]
    deadline = time.monotonic() + 60
    while httpx.get(base + url, timeout=10).json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(3.0)  # past the baselines: an incumbent exists
    assert servers.stop_all() == []
    again = Servers(tmp_path)
    try:
        doc = httpx.get(again.start(workers=1) + url, timeout=10).json()
    finally:
        assert again.stop_all() == []
    assert doc["status"] == "cancelled", doc
    assert doc["result"]["status"] in ("stopped", "optimal")
    assert len(doc["result"]["periods"]) == len(long["deployments"][0]["demand_rps"])


@pytest.mark.servers
def test_sigterm_answers_a_running_synchronous_solve_with_its_best_schedule(
    tmp_path: Path,
) -> None:
    """SIGTERM while a synchronous schedule (60 s limit) runs: the request is answered
    with the best schedule so far (status ``stopped``) and the server exits with 0
    within 10 s (``stop_all``)."""
    import threading

    import httpx

    from tests.service.conftest import Servers

    servers = Servers(tmp_path)
    base = servers.start(workers=1)
    got: dict[str, Any] = {}

    def post() -> None:
        r = httpx.post(f"{base}/v1/schedule", json=long_request(60), timeout=60)
        got["status"], got["body"] = r.status_code, r.json()

    t = threading.Thread(target=post)
    t.start()
    deadline = time.monotonic() + 30
    while httpx.get(f"{base}/readyz", timeout=10).json()["busy_workers"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(3.0)  # past the baselines: an incumbent exists
    assert servers.stop_all() == []
    t.join(timeout=30)
    assert got["status"] == 200, got
    assert got["body"]["status"] == "stopped"
    assert len(got["body"]["periods"]) == len(long_request(60)["deployments"][0]["demand_rps"])
