"""Jobs on a real Redis queue, run by real ``pdwatt worker`` processes, with the jobs kept
in a real PostgreSQL database; API servers are real ``pdwatt serve`` processes. All are
started here on loopback and stopped at the end.

What must hold (see ``service/jobs/queue.py``): a job's result equals the synchronous route's;
a worker killed mid-job leads to a retry, or to a failed job with its reason, never a
lost one; a worker stopped with SIGTERM gives its job back and exits 0; jobs survive an
API restart and a Redis outage; two APIs and two workers complete 100 concurrent
submissions, none lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.runtime import webhooks
from tests.servers import RedisServer, postgres_server, redis_server
from tests.service.conftest import REPO, Servers, small_schedule
from tests.service.processes import busy_solver, descendants, left, linux_only, tree
from tests.service.test_jobs import long_request
from tests.service.test_webhooks import SECRET, Receiver

pytestmark = pytest.mark.servers

FINAL = ("succeeded", "failed", "cancelled")

__all__ = ["tree"]  # the fixture, used by name


class Workers:
    """``pdwatt worker`` processes; each one's exit status is checked at stop."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, workers: int = 1, **settings: Any) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PDWATT_")}
        env.update(self.env)
        env.update({f"PDWATT_{k.upper()}": str(v) for k, v in settings.items()})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        log = self.workdir / f"worker-{len(self.procs)}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "worker", "--workers", str(workers)],
                cwd=REPO,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        self.procs.append((proc, log))
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        for p, log in self.procs:
            if p is proc:
                return log.read_text(errors="replace")
        return ""

    def stop_all(self) -> list[str]:
        failures = []
        for proc, log in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    failures.append(f"worker ignored SIGTERM:\n{log.read_text()[-2000:]}")
                    continue
                if proc.returncode != 0:
                    failures.append(f"worker exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        self.procs.clear()
        return failures


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
def cluster(
    tmp_path: Path, pg_url: str, redis: RedisServer
) -> Iterator[tuple[Callable[..., str], Workers]]:
    """``(start_api, workers)`` on one PostgreSQL database and one Redis queue; every
    process stops cleanly (SIGTERM -> status 0) at the end."""
    from sqlalchemy import text

    from service.runtime.database import engine_for

    with engine_for(pg_url).begin() as conn:  # each test starts with no jobs
        conn.execute(text("DELETE FROM jobs"))
    shared = {
        "database_url": pg_url,
        "redis_url": redis.url,
        "webhook_secret": SECRET,
        "webhook_allow_private": "true",
    }
    servers = Servers(tmp_path)
    workers = Workers(tmp_path, {f"PDWATT_{k.upper()}": v for k, v in shared.items()})

    def start_api(**settings: Any) -> str:
        return servers.start(**(shared | settings))

    yield start_api, workers
    failures = workers.stop_all() + servers.stop_all()
    assert not failures, "\n".join(failures)


def submit(base: str, kind: str, request: dict[str, Any], **extra: Any) -> str:
    job = {"kind": kind, "request": request, **extra}
    r = httpx.post(f"{base}/v1/jobs", json=job, timeout=30)
    assert r.status_code == 202, r.text
    assert r.headers["location"] == f"/v1/jobs/{r.json()['id']}"
    return str(r.json()["id"])


def job(base: str, job_id: str) -> dict[str, Any]:
    r = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def wait_for(
    base: str, job_id: str, ok: Callable[[dict[str, Any]], bool], timeout_s: float = 90
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        doc = job(base, job_id)
        if ok(doc):
            return doc
        assert time.monotonic() < deadline, f"job never reached the state wanted: {doc}"
        time.sleep(0.1)


def final(base: str, job_id: str, timeout_s: float = 90) -> dict[str, Any]:
    return wait_for(base, job_id, lambda d: d["status"] in FINAL, timeout_s)


def test_a_job_runs_on_a_worker_and_answers_what_the_route_answers(
    cluster: tuple[Callable[..., str], Workers],
) -> None:
    start_api, workers = cluster
    base = start_api(workers=1)
    ready = httpx.get(f"{base}/readyz", timeout=10).json()
    assert (ready["status"], ready["database"], ready["queue"]) == ("ready", "ok", "ok")
    body = small_schedule(mip_gap=1e-9)
    receiver = Receiver()
    try:
        job_id = submit(base, "schedule", body, webhook={"url": receiver.url})
        time.sleep(0.5)
        assert job(base, job_id)["status"] == "queued"  # the API runs no jobs itself
        workers.start()
        doc = final(base, job_id)
        assert doc["status"] == "succeeded" and doc["attempts"] == 1
        sync = httpx.post(f"{base}/v1/schedule", json=body, timeout=60).json()
        assert doc["result"]["objective_usd"] == sync["objective_usd"]
        assert doc["result"]["periods"] == sync["periods"]
        # the worker that ended it sent its webhook, signed, once
        receiver.wait(1)
        headers, sent = receiver.posts[0]
        assert webhooks.verify(SECRET, headers["pdwatt-signature"], sent, time.time())
        assert json.loads(sent)["result"] == doc["result"]
        wait_for(base, job_id, lambda d: d["webhook"]["state"] == "delivered", 10)
        assert len(receiver.posts) == 1
    finally:
        receiver.server.shutdown()


def test_a_worker_killed_mid_job_leads_to_a_retry_then_to_a_failure_with_its_reason(
    cluster: tuple[Callable[..., str], Workers],
) -> None:
    start_api, workers = cluster
    base = start_api(workers=1)
    lost = {"job_heartbeat_timeout_s": 2, "job_max_attempts": 2}
    job_id = submit(base, "schedule", long_request(60))
    first = workers.start(**lost)
    wait_for(base, job_id, lambda d: d["status"] == "running")
    first.kill()  # what the out-of-memory killer does
    first.wait()
    second = workers.start(**lost)  # its sweep finds the silent job and queues it again
    doc = wait_for(base, job_id, lambda d: d["attempts"] == 2 and d["status"] == "running", 60)
    assert doc["status"] == "running"
    second.kill()
    second.wait()
    workers.start(**lost)  # a third worker: the job has had its two attempts
    doc = final(base, job_id, 60)
    assert doc["status"] == "failed" and doc["attempts"] == 2
    assert doc["error"]["title"] == "Worker lost"
    assert "no heartbeat for 2 s" in doc["error"]["detail"]
    assert "attempt 2 of 2" in doc["error"]["detail"]


def test_sigterm_to_a_worker_gives_its_job_back_to_another(
    cluster: tuple[Callable[..., str], Workers],
) -> None:
    start_api, workers = cluster
    base = start_api(workers=1)
    job_id = submit(base, "schedule", long_request(6))
    first = workers.start()
    wait_for(base, job_id, lambda d: d["status"] == "running")
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0, workers.log(first)  # a guard against a hang, not a timing
    doc = job(base, job_id)
    assert doc["status"] == "queued" and doc["attempts"] == 1
    workers.start()
    doc = final(base, job_id)
    assert doc["status"] == "succeeded" and doc["attempts"] == 2
    assert len(doc["result"]["periods"]) == len(long_request(6)["deployments"][0]["demand_rps"])


def test_jobs_survive_an_api_restart_and_a_redis_outage(
    cluster: tuple[Callable[..., str], Workers], redis: RedisServer
) -> None:
    start_api, workers = cluster
    base = start_api(workers=1)
    before = submit(base, "schedule", small_schedule())
    redis.stop()
    ready = httpx.get(f"{base}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["queue"] == "unavailable"
    during = submit(base, "schedule", small_schedule(mip_gap=1e-3))  # kept in the database
    assert job(base, during)["status"] == "queued"
    redis.start()  # empty: the message of `during` is gone, `before`'s too
    again = start_api(workers=1)  # another API process, same database
    workers.start(job_heartbeat_timeout_s=3)
    for job_id in (before, during):
        doc = final(again, job_id)
        assert doc["status"] == "succeeded" and doc["attempts"] == 1, doc
    assert httpx.get(f"{again}/readyz", timeout=10).status_code == 200


def test_two_apis_and_two_workers_complete_100_concurrent_jobs(
    cluster: tuple[Callable[..., str], Workers],
) -> None:
    start_api, workers = cluster
    apis = [start_api(workers=1), start_api(workers=1)]
    workers.start()
    workers.start()
    bodies = []
    for i in range(100):
        body = small_schedule()
        body["deployments"][0]["demand_rps"] = [1.0 + 0.01 * i, 3.0, 5.0, 2.0]
        bodies.append(body)

    def post(i: int) -> tuple[int, str]:
        return i, submit(apis[i % 2], "schedule", bodies[i])

    with ThreadPoolExecutor(32) as ex:
        ids = dict(ex.map(post, range(100)))
    assert len(set(ids.values())) == 100
    docs = {i: final(apis[(i + 1) % 2], job_id, 300) for i, job_id in ids.items()}
    assert [i for i, d in docs.items() if d["status"] != "succeeded"] == []
    assert all(d["attempts"] == 1 for d in docs.values())
    # each job solved its own request: the demand it served is the one it was sent
    for i, doc in docs.items():
        first = doc["result"]["periods"][0]["deployments"]["a"]
        assert first["demand_rps"] == pytest.approx(1.0 + 0.01 * i)


@linux_only
def test_a_solver_process_killed_mid_job_fails_the_job_at_once_and_the_worker_goes_on(
    tree: str, cluster: tuple[Callable[..., str], Workers]
) -> None:
    """What the out-of-memory killer does to the big process: the job fails with the
    reason within seconds (its heartbeat does not keep it running), the solve's pool and
    HiGHS process end with it, and the same worker runs the next job."""
    start_api, workers = cluster
    base = start_api(workers=1)
    job_id = submit(base, "schedule", long_request(120))
    worker = workers.start()
    solver, children = busy_solver(tree, worker.pid)
    os.kill(solver, signal.SIGKILL)

    doc = final(base, job_id, 30)
    assert (doc["status"], doc["attempts"]) == ("failed", 1)
    assert doc["error"]["title"] == "Worker lost" and "killed" in doc["error"]["detail"]
    assert left(tree, [c.pid for c in children]) == []
    r = httpx.delete(f"{base}/v1/jobs/{job_id}", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "failed"
    later = submit(base, "schedule", small_schedule())
    assert final(base, later)["status"] == "succeeded"
    assert worker.poll() is None, workers.log(worker)


@linux_only
@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_a_worker_stopped_mid_solve_leaves_no_process_behind(
    tree: str, cluster: tuple[Callable[..., str], Workers], stop: str
) -> None:
    start_api, workers = cluster
    base = start_api(workers=1)
    job_id = submit(base, "schedule", long_request(120))
    worker = workers.start()
    busy_solver(tree, worker.pid)
    below = [p.pid for p in descendants(tree, worker.pid)]
    if stop == "sigterm":
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0, workers.log(worker)  # a guard, not a timing
        doc = job(base, job_id)
        assert (doc["status"], doc["attempts"]) == ("queued", 1)  # given back
    else:
        worker.kill()
        worker.wait()
    assert left(tree, below) == []
