"""A real ``pdwatt serve`` (uvicorn) on a free loopback port: the demo schedule, health
while a long solve runs, 429 when every worker is busy, and (in the fixture) a clean
shutdown on SIGTERM."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from formulation.demo import N_PERIODS, demo_request
from tests.service.conftest import small_schedule

pytestmark = pytest.mark.servers

LONG_SOLVE_S = 15.0


def demo(time_limit_s: float, mip_gap: float | None = None) -> dict[str, Any]:
    body = demo_request()
    body["solver"]["time_limit_s"] = time_limit_s
    if mip_gap is not None:
        body["solver"]["mip_gap"] = mip_gap
    return body


def long_solve(time_limit_s: float) -> dict[str, Any]:
    """The demo's three deployments three times over on a 192-GPU site, with mip_gap 0:
    a problem the solver cannot close within ``time_limit_s``, so it runs that long."""
    body = demo(time_limit_s, mip_gap=0.0)
    deployments = []
    for i in range(3):
        for d in body["deployments"]:
            scaled = [x * (1 + 0.13 * i) for x in d["demand_rps"]]
            deployments.append(
                copy.deepcopy(d) | {"name": f"{d['name']}-{i}", "demand_rps": scaled}
            )
    body["deployments"] = deployments
    body["site"]["gpu_inventory"] = {"h200": 3 * 64}
    body["grid"]["power_cap_w"] = [3 * c for c in body["grid"]["power_cap_w"]]
    return body


class Background:
    """POST in a thread; ``result()`` joins it."""

    def __init__(self, url: str, body: dict[str, Any], timeout: float) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(url, body, timeout), daemon=True)
        self._thread.start()

    def _run(self, url: str, body: dict[str, Any], timeout: float) -> None:
        try:
            self.response = httpx.post(url, json=body, timeout=timeout)
        except BaseException as e:  # reported by result()
            self.error = e

    def result(self, timeout: float) -> httpx.Response:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "request still running"
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


def wait_busy(base: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"{base}/readyz", timeout=2).json()["busy_workers"] >= 1:
            return
        time.sleep(0.05)
    pytest.fail("the solve never occupied a worker")


def test_demo_schedule(live_server: Callable[..., str]) -> None:
    base = live_server()
    r = httpx.post(f"{base}/v1/schedule", json=demo(8), timeout=120)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["status"] in {"optimal", "time_limit"}
    assert got["mip_gap"] >= 0
    assert len(got["periods"]) == N_PERIODS
    assert set(got["periods"][0]["deployments"]) == {"chat", "code", "long-context"}
    assert all(p["power_w"] <= p["power_cap_w"] * (1 + 1e-9) for p in got["periods"])
    assert {"static_peak", "greedy"} <= set(got["baselines"])
    metrics = httpx.get(f"{base}/metrics").text
    assert 'pdwatt_requests_total{method="POST",route="/v1/schedule",status="200"} 1.0' in metrics


def test_health_answers_during_long_solve_and_pool_full_is_429(
    live_server: Callable[..., str],
) -> None:
    base = live_server(workers=1)
    long = Background(f"{base}/v1/schedule", long_solve(LONG_SOLVE_S), timeout=LONG_SOLVE_S + 60)
    wait_busy(base)
    t_busy = time.monotonic()

    # health, readiness and metrics stay responsive while the worker solves
    for _ in range(5):
        r = httpx.get(f"{base}/healthz", timeout=5)
        assert r.status_code == 200
        time.sleep(0.2)
    ready = httpx.get(f"{base}/readyz", timeout=5).json()
    assert ready["status"] == "ready" and ready["busy_workers"] == 1 and ready["workers"] == 1
    assert "pdwatt_busy_workers 1.0" in httpx.get(f"{base}/metrics", timeout=5).text

    # the only worker is busy: refused at once with Retry-After, not queued
    r = httpx.post(f"{base}/v1/schedule", json=small_schedule(), timeout=10)
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert int(r.headers["retry-after"]) >= 1
    body = r.json()
    assert body["status"] == 429 and body["title"] and body["detail"]
    # the core does not need a solver worker
    capacity = {"n_p": 1, "n_d": 1, "workload": "fixed:1024:128"}
    assert httpx.post(f"{base}/v1/capacity", json=capacity, timeout=5).status_code == 200
    assert time.monotonic() - t_busy < LONG_SOLVE_S - 2, "checks ran after the solve ended"

    first = long.result(timeout=LONG_SOLVE_S + 60)
    assert first.status_code == 200, first.text
    assert first.json()["status"] in {"optimal", "time_limit"}
    assert len(first.json()["periods"][0]["deployments"]) == 9

    # the worker is free again
    r = httpx.post(f"{base}/v1/schedule", json=small_schedule(), timeout=60)
    assert r.status_code == 200, r.text
    assert httpx.get(f"{base}/readyz", timeout=5).json()["busy_workers"] == 0
