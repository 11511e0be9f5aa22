"""A solver worker killed mid-solve (what the out-of-memory killer does), on a real
``pdwatt serve``, while it runs a solve with its own forked pool and its HiGHS process:
the request answers 503 at once and later ones run on a fresh worker; a job fails with
its reason and later jobs run; SIGTERM ends the server with status 0 whatever it was
doing; and no process of a solve outlives its worker or the server. Every process the
test starts is found through its environment (``tests/service/processes.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.runtime.jobstore import job_store
from tests.service.conftest import Servers, small_schedule, stop_server
from tests.service.processes import busy_solver, left, linux_only, tree
from tests.service.test_jobs import long_request
from tests.service.test_live import Background, long_solve
from tests.service.test_routes import assert_problem

pytestmark = [linux_only, pytest.mark.servers]

__all__ = ["tree"]  # the fixture, used by name

#: a guard against a hang, not a timing: the service's promise is 15 s
SIGTERM_WAIT_S = 15.0
Server = tuple[str, "subprocess.Popen[bytes]"]


@pytest.fixture
def server(tmp_path: Path, tree: str) -> Iterator[Callable[..., Server]]:
    """``server(**settings)`` -> ``(base URL, process)`` of a real ``pdwatt serve`` on
    the database in ``tmp_path``; the test stops it; one left running is killed."""
    servers = Servers(tmp_path)

    def start(**settings: Any) -> Server:
        base = servers.start(**settings)
        return base, servers.procs[-1][0]

    yield start
    for proc, _ in servers.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def final_job(base: str, job_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        doc = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10).json()
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            return dict(doc)
        assert time.monotonic() < deadline, f"job still {doc['status']}"
        time.sleep(0.1)


def submit(base: str, request: dict[str, Any]) -> str:
    r = httpx.post(f"{base}/v1/jobs", json={"kind": "schedule", "request": request}, timeout=30)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def test_a_worker_killed_mid_solve_answers_503_and_leaves_nothing_behind(
    server: Callable[..., Server], tree: str
) -> None:
    base, proc = server(workers=1)
    long = Background(f"{base}/v1/schedule", long_solve(120), timeout=200)
    worker, children = busy_solver(tree, proc.pid)
    os.kill(worker, signal.SIGKILL)

    r = long.result(timeout=30)
    assert r.status_code == 503, r.text[:300]
    body = assert_problem(r, 503)
    assert int(r.headers["retry-after"]) >= 1
    assert "replaced" in body["detail"]
    # its pool and its HiGHS process ended with it
    assert left(tree, [c.pid for c in children]) == []
    ready = httpx.get(f"{base}/readyz", timeout=5).json()
    assert (ready["status"], ready["busy_workers"], ready["workers_replaced"]) == ("ready", 0, 1)

    r = httpx.post(f"{base}/v1/schedule", json=small_schedule(), timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert stop_server(proc, SIGTERM_WAIT_S) == 0
    assert left(tree) == []


@pytest.mark.parametrize("state", ["idle", "solving"])
def test_sigterm_exits_0_and_leaves_no_process(
    server: Callable[..., Server], tree: str, state: str
) -> None:
    base, proc = server(workers=1)
    long = None
    if state == "solving":
        long = Background(f"{base}/v1/schedule", long_solve(120), timeout=200)
        busy_solver(tree, proc.pid)
    else:
        assert httpx.post(f"{base}/v1/schedule", json=small_schedule(), timeout=60).is_success
    assert stop_server(proc, SIGTERM_WAIT_S) == 0
    if long is not None:  # answered with the best schedule it had
        r = long.result(timeout=30)
        assert r.status_code == 200 and r.json()["status"] == "stopped", r.text[:300]
    assert left(tree) == []


def test_a_killed_server_takes_every_process_of_its_solves_with_it(
    server: Callable[..., Server], tree: str
) -> None:
    base, proc = server(workers=1)
    Background(f"{base}/v1/schedule", long_solve(120), timeout=200)
    busy_solver(tree, proc.pid)
    proc.kill()  # kill -9: no shutdown code runs in the server
    proc.wait()
    assert left(tree) == []


def test_a_job_whose_worker_is_killed_fails_with_its_reason_and_later_jobs_run(
    server: Callable[..., Server], tree: str
) -> None:
    base, proc = server(workers=1)
    job_id = submit(base, long_request(120))
    worker, children = busy_solver(tree, proc.pid)
    os.kill(worker, signal.SIGKILL)

    doc = final_job(base, job_id, timeout_s=30)
    assert doc["status"] == "failed", doc["status"]
    assert doc["error"]["title"] == "Worker lost" and "killed" in doc["error"]["detail"]
    assert left(tree, [c.pid for c in children]) == []
    r = httpx.delete(f"{base}/v1/jobs/{job_id}", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "failed"

    later = submit(base, small_schedule())
    assert final_job(base, later)["status"] == "succeeded"
    assert stop_server(proc, SIGTERM_WAIT_S) == 0
    assert left(tree) == []


def test_sigterm_leaves_queued_jobs_queued_and_they_run_after_a_restart(
    server: Callable[..., Server], tree: str, tmp_path: Path
) -> None:
    base, proc = server(workers=1)
    running = submit(base, long_request(120))
    queued = [submit(base, small_schedule()), submit(base, small_schedule(mip_gap=1e-3))]
    busy_solver(tree, proc.pid)  # the first job runs; the others wait for the worker
    assert stop_server(proc, SIGTERM_WAIT_S) == 0
    assert left(tree) == []

    store = job_store(f"sqlite:///{tmp_path / 'pdwatt.db'}")
    assert store.get(running).status == "cancelled"  # with the best schedule it had
    assert [(store.get(j).status, store.get(j).attempts) for j in queued] == [("queued", 0)] * 2
    again, proc = server(workers=1)
    for job_id in queued:
        doc = final_job(again, job_id)
        assert (doc["status"], doc["attempts"]) == ("succeeded", 1)
    assert stop_server(proc, SIGTERM_WAIT_S) == 0
