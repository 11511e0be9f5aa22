"""Job webhooks: a real HTTP receiver on loopback gets one signed POST per ended job,
whose body is the job document; refused targets (schemes, private addresses) are 422
naming ``webhook.url``; failed deliveries are retried and recorded on the job."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from service.runtime import webhooks
from tests.service.conftest import small_schedule
from tests.service.test_jobs import long_request, wait_final, wait_status
from tests.service.test_routes import assert_problem

SECRET = "a-shared-secret-of-some-length"


class Receiver:
    """An HTTP server on loopback recording every POST; answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.posts: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.posts.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n: int, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.posts) < n:
            assert time.monotonic() < deadline, f"{len(self.posts)} posts, wanted {n}"
            time.sleep(0.05)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


def test_signatures_verify_and_tampering_or_replay_fails() -> None:
    body = b'{"id":"x","status":"succeeded"}'
    now = int(time.time())
    header = webhooks.sign(SECRET, now, body)
    assert webhooks.verify(SECRET, header, body, now)
    assert not webhooks.verify(SECRET, header, body + b" ", now)
    assert not webhooks.verify("another-secret-of-some-length", header, body, now)
    assert not webhooks.verify(SECRET, header, body, now + 3600)  # a replay an hour later
    assert not webhooks.verify(SECRET, "t=x,v1=00", body, now)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.org/x",
        "gopher://127.0.0.1:6379/_INFO",
        "http://user:pw@example.org/hook",
        "http:///nohost",
        "http://127.0.0.1:6379/",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_targets_that_are_not_public_http_are_refused(url: str) -> None:
    assert webhooks.target_error(url, allow_private=False) is not None
    private_host = url.startswith("http://") and "@" not in url and "///" not in url
    assert (webhooks.target_error(url, allow_private=True) is None) == private_host


def test_a_public_address_is_accepted() -> None:
    # an address literal: no name lookup, so this holds without a network
    assert webhooks.target_error("https://93.184.216.34/hook", allow_private=False) is None


def test_a_webhook_needs_the_servers_secret_and_a_permitted_target(make_client: Any) -> None:
    job = {"kind": "schedule", "request": small_schedule(), "webhook": {"url": "http://x/"}}
    r = make_client(workers=1).post("/v1/jobs", json=job)
    assert_problem(r, 422, field="webhook")
    client = make_client(workers=1, webhook_secret=SECRET)
    job["webhook"] = {"url": "http://169.254.169.254/latest/meta-data"}
    r = client.post("/v1/jobs", json=job)
    assert_problem(r, 422, field="webhook.url")
    assert "169.254.169.254" in r.json()["detail"]
    assert client.get("/v1/jobs/none").status_code == 404


@pytest.mark.slow
def test_an_ended_job_is_posted_once_signed_with_its_document(
    make_client: Any, receiver: Receiver
) -> None:
    client = make_client(workers=1, webhook_secret=SECRET, webhook_allow_private=True)
    job = {"kind": "schedule", "request": small_schedule(), "webhook": {"url": receiver.url}}
    job_id = client.post("/v1/jobs", json=job).json()["id"]
    doc = wait_final(client, job_id)
    receiver.wait(1)
    deadline = time.monotonic() + 10
    while client.get(f"/v1/jobs/{job_id}").json()["webhook"]["state"] != "delivered":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    assert len(receiver.posts) == 1
    headers, body = receiver.posts[0]
    assert webhooks.verify(SECRET, headers["pdwatt-signature"], body, time.time())
    assert headers["pdwatt-job"] == job_id
    sent = json.loads(body)
    assert sent["id"] == job_id and sent["status"] == "succeeded"
    assert sent["result"] == doc["result"]
    after = client.get(f"/v1/jobs/{job_id}").json()["webhook"]
    assert after == {"url": receiver.url, "state": "delivered", "attempts": 1, "status_code": 200}


@pytest.mark.slow
def test_a_refusing_receiver_is_retried_and_the_failure_recorded(make_client: Any) -> None:
    receiver = Receiver(status=500)
    try:
        client = make_client(workers=1, webhook_secret=SECRET, webhook_allow_private=True)
        job = {"kind": "schedule", "request": small_schedule(), "webhook": {"url": receiver.url}}
        job_id = client.post("/v1/jobs", json=job).json()["id"]
        wait_final(client, job_id)
        receiver.wait(webhooks.ATTEMPTS)
        deadline = time.monotonic() + 10
        while (hook := client.get(f"/v1/jobs/{job_id}").json()["webhook"])["state"] != "failed":
            assert time.monotonic() < deadline, hook
            time.sleep(0.05)
        assert hook["attempts"] == webhooks.ATTEMPTS and hook["status_code"] == 500
        assert "500" in hook["error"]
    finally:
        receiver.server.shutdown()


@pytest.mark.slow
def test_a_cancelled_queued_job_is_notified_as_cancelled(
    make_client: Any, receiver: Receiver
) -> None:
    client = make_client(workers=1, webhook_secret=SECRET, webhook_allow_private=True)
    running = client.post("/v1/jobs", json={"kind": "schedule", "request": long_request(20)})
    queued = {"kind": "schedule", "request": small_schedule(), "webhook": {"url": receiver.url}}
    queued_id = client.post("/v1/jobs", json=queued).json()["id"]
    wait_status(client, running.json()["id"], "running")
    assert client.delete(f"/v1/jobs/{queued_id}").json()["status"] == "cancelled"
    receiver.wait(1)
    assert json.loads(receiver.posts[0][1])["status"] == "cancelled"
    client.delete(f"/v1/jobs/{running.json()['id']}")
