"""Fixtures of the HTTP service tests.

* ``client``: a FastAPI ``TestClient`` over ``create_app(Settings(...))``, entered as a
  context manager so that the lifespan (and the solver pool's shutdown) runs.
* ``make_client``: the same for tests that need their own settings.
* ``live_server``: a factory that starts a real ``pdwatt serve`` (uvicorn) in a
  subprocess on a free loopback port, with settings given as ``PDWATT_*`` variables;
  it waits for ``/healthz``, returns the base URL, and on teardown sends SIGTERM and
  asserts that the server exits within 10 s with status 0.
* ``module_live_server``: the same, shared by the tests of a module.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.main import create_app
from service.runtime.settings import Settings

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0


def small_schedule(**solver: Any) -> dict[str, Any]:
    """Two deployments, four hourly periods, fixed workloads, max_gpus 4: solves in well
    under a second."""
    return {
        "period_minutes": 60,
        "site": {"gpu_inventory": {"h200": 8}, "pue": 1.2, "idle_gpu_power_w": 120},
        "deployments": [
            {
                "name": "a",
                "model": "qwen3-32b",
                "gpu": "h200",
                "workload": "fixed:2048:256",
                "demand_rps": [1.0, 3.0, 5.0, 2.0],
                "max_gpus": 4,
                "initial": {"n_p": 1, "n_d": 1},
            },
            {
                "name": "b",
                "model": "qwen3-8b",
                "gpu": "h200",
                "workload": "fixed:1024:128",
                "demand_rps": [2.0, 2.0, 6.0, 1.0],
                "max_gpus": 4,
            },
        ],
        "grid": {
            "power_cap_w": 20_000,
            "price_usd_per_mwh": [50, 60, 80, 40],
            "carbon_g_per_kwh": 300,
        },
        "solver": {"time_limit_s": 20, **solver},
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with status {proc.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server not healthy within {timeout} s")


def stop_server(proc: subprocess.Popen[bytes], timeout: float = SHUTDOWN_TIMEOUT_S) -> int | None:
    """SIGTERM, then wait; returns the exit status, or None (after killing it) on timeout."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def app_settings(tmp_path: Path, **settings: Any) -> Settings:
    """Settings for a test app: a database in ``tmp_path`` unless given."""
    settings.setdefault("database_url", f"sqlite:///{tmp_path / 'pdwatt.db'}")
    return Settings(**settings)


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Callable[..., TestClient]]:
    """``make_client(**settings)`` -> an entered TestClient (closed at teardown)."""
    stack: list[AbstractContextManager[TestClient]] = []

    def make(**settings: Any) -> TestClient:
        app = create_app(app_settings(tmp_path, **settings))
        tc = TestClient(app, raise_server_exceptions=False)
        stack.append(tc)
        return tc.__enter__()

    yield make
    for tc in reversed(stack):
        tc.__exit__(None, None, None)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(app_settings(tmp_path, workers=1))
    with TestClient(app, raise_server_exceptions=False) as tc:  # lifespan runs
        yield tc


class Servers:
    """Starts real servers (``pdwatt serve`` subprocesses) and stops them all cleanly."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, **settings: Any) -> str:
        """Base URL of a new server with these settings (``workers=1`` -> PDWATT_WORKERS)."""
        return self.start_process(**settings)[1]

    def start_process(self, **settings: Any) -> tuple[subprocess.Popen[bytes], str]:
        """:meth:`start`, with the server's process (to stop it before the others)."""
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PDWATT_")}
        env["PDWATT_DATABASE_URL"] = f"sqlite:///{self.workdir / 'pdwatt.db'}"
        env.update({f"PDWATT_{k.upper()}": str(v) for k, v in settings.items()})
        env["MPLCONFIGDIR"] = str(self.workdir / "mpl")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        log = self.workdir / f"server-{port}.log"
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1"]
                + ["--port", str(port)],
                cwd=REPO,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        self.procs.append((proc, log))
        base = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(base, proc, STARTUP_TIMEOUT_S)
        except RuntimeError as e:
            stop_server(proc)
            raise RuntimeError(f"{e}; log:\n{log.read_text(errors='replace')}") from None
        return proc, base

    def stop_all(self) -> list[str]:
        """SIGTERM each server; the failures (not exited with 0 within 10 s)."""
        failures = []
        for proc, log in self.procs:
            t0 = time.monotonic()
            code = stop_server(proc)
            took = time.monotonic() - t0
            if code != 0:
                failures.append(
                    f"server did not shut down cleanly on SIGTERM: status {code} after "
                    f"{took:.1f} s; log tail:\n{log.read_text(errors='replace')[-3000:]}"
                )
        self.procs.clear()
        return failures


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``live_server(**settings)`` -> base URL of a real server; clean shutdown asserted."""
    servers = Servers(tmp_path)
    yield servers.start
    failures = servers.stop_all()
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def module_live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., str]]:
    """``live_server`` shared by the tests of a module."""
    servers = Servers(tmp_path_factory.mktemp("live"))
    yield servers.start
    failures = servers.stop_all()
    assert not failures, "\n".join(failures)
