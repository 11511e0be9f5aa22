"""Benchmark: latency of POST /v1/schedule over HTTP on loopback, alone and under load.

Starts a real server (``python -m service.cli serve`` on a free 127.0.0.1 port, like the
tests' live server), warms one solver worker, then POSTs the built-in demo
(``formulation.demo.demo_request()``, its default time limit unless ``--time-limit``):

* alone: one client, ``--requests`` requests one after another;
* loaded: ``--clients`` concurrent clients (threads, one HTTP connection each), each
  sending requests back to back for ``--duration`` seconds (at most ``--requests`` each).
  A 429 (every solver worker busy) is counted apart from errors; the client then waits
  the Retry-After seconds, as a well-behaved client would.

Prints p50/p99 latency of the 200 responses, the solver status counts, the 429s and the
errors (any other status or a transport failure) per phase; ``--json`` prints the same
figures as JSON. Traffic goes to 127.0.0.1 only; every loop is bounded in count and time.

``--jobs N`` measures job throughput instead: N demo schedule jobs submitted at once
through ``POST /v1/jobs`` to a server with 1, then 2, solver workers, polled until all
have ended. With ``--queue`` the jobs go through a Redis queue (a ``redis-server``
started here on loopback) to 1, then 2, ``pdwatt worker`` processes of one solver each;
the API runs none (``--database-url`` for a database server; SQLite otherwise).

    python benchmarks/bench_service.py [--clients 20] [--requests 5] [--duration 120]
                                       [--workers 2] [--time-limit S] [--json]
    python benchmarks/bench_service.py --jobs 12 --time-limit 3 [--queue]
    python benchmarks/bench_service.py --sigterm

``--sigterm`` measures shutdown instead: SIGTERM while a synchronous solve runs, the
seconds to exit, the exit status and what the client got.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from formulation.demo import demo_request

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def service_env(workers: int, logdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDWATT_")}
    env |= {"PDWATT_WORKERS": str(workers), "MPLCONFIGDIR": str(logdir / "mpl")}
    env["PDWATT_DATABASE_URL"] = f"sqlite:///{logdir / 'pdwatt.db'}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env | (extra or {})


def start_redis(logdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--appendonly", "no", "--dir", str(logdir)],
        stdout=open(logdir / "redis.log", "wb"),  # noqa: SIM115 (kept open for its life)
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("redis-server did not start")


def start_workers(n: int, env: dict[str, str], logdir: Path) -> list[subprocess.Popen[bytes]]:
    """``n`` ``pdwatt worker`` processes of one solver each."""
    return [
        subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--workers", "1"],
            cwd=REPO,
            env=env,
            stdout=open(logdir / f"worker-{i}.log", "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        for i in range(n)
    ]


def start_server(
    workers: int, logdir: Path, extra: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = service_env(workers, logdir, extra)
    log = open(logdir / "server.log", "wb")  # noqa: SIM115 (kept open for the server's life)
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with status {proc.returncode}; see {log.name}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not become healthy within 30 s")


def stop_server(proc: subprocess.Popen[bytes]) -> int | None:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.refusal_latencies: list[float] = []
        self.solver: Counter[str] = Counter()
        self.too_many = 0
        self.errors: Counter[str] = Counter()
        self.solve_times: list[float] = []

    def record(self, r: httpx.Response | None, dt: float, exc: Exception | None) -> None:
        with self.lock:
            if exc is not None:
                self.errors[type(exc).__name__] += 1
            elif r is None:
                self.errors["no response"] += 1
            elif r.status_code == 200:
                body = r.json()
                self.latencies.append(dt)
                self.solver[body["status"]] += 1
                self.solve_times.append(body["solve_time_s"])
            elif r.status_code == 429:
                self.too_many += 1
                self.refusal_latencies.append(dt)
            else:
                self.errors[f"HTTP {r.status_code}"] += 1

    def summary(self, wall_s: float) -> dict[str, Any]:
        return {
            "ok": len(self.latencies),
            "p50_s": percentile(self.latencies, 50),
            "p99_s": percentile(self.latencies, 99),
            "max_s": max(self.latencies, default=None),
            "solve_time_p50_s": percentile(self.solve_times, 50),
            "solver_status": dict(self.solver),
            "http_429": self.too_many,
            "http_429_p50_s": percentile(self.refusal_latencies, 50),
            "errors": sum(self.errors.values()),
            "error_kinds": dict(self.errors),
            "wall_s": wall_s,
            "throughput_rps": len(self.latencies) / wall_s if wall_s else None,
        }


def post(client: httpx.Client, url: str, body: dict[str, Any], tally: Tally) -> httpx.Response:
    t0 = time.perf_counter()
    try:
        r = client.post(url, json=body)
    except httpx.HTTPError as e:
        tally.record(None, time.perf_counter() - t0, e)
        raise
    tally.record(r, time.perf_counter() - t0, None)
    return r


def client_loop(
    base: str, body: dict[str, Any], tally: Tally, stop_at: float, max_requests: int
) -> None:
    with httpx.Client(timeout=httpx.Timeout(600, connect=10)) as client:
        for _ in range(max_requests):
            if time.monotonic() >= stop_at:
                return
            try:
                r = post(client, f"{base}/v1/schedule", body, tally)
            except httpx.HTTPError:
                time.sleep(1)
                continue
            if r.status_code == 429:
                wait = float(r.headers.get("retry-after", "1"))
                time.sleep(min(wait, max(0.0, stop_at - time.monotonic())))


def phase(
    base: str, body: dict[str, Any], clients: int, duration: float, max_requests: int
) -> dict[str, Any]:
    tally = Tally()
    t0 = time.monotonic()
    threads = [
        threading.Thread(
            target=client_loop, args=(base, body, tally, t0 + duration, max_requests), daemon=True
        )
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = tally.summary(time.monotonic() - t0)
    out["clients"] = clients
    return out


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def jobs_throughput(
    workers: int,
    n_jobs: int,
    body: dict[str, Any],
    queue: bool = False,
    database_url: str | None = None,
) -> dict[str, Any]:
    """Submit ``n_jobs`` schedule jobs at once to a fresh server with ``workers`` solver
    workers (with ``queue``: ``workers`` queue workers of one solver each, behind Redis);
    poll until every one has ended. Jobs per second over the whole batch."""
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        extra: dict[str, str] = {}
        if database_url is not None:
            extra["PDWATT_DATABASE_URL"] = database_url
        others: list[subprocess.Popen[bytes]] = []
        if queue:
            redis, extra["PDWATT_REDIS_URL"] = start_redis(logdir)
            others = [redis, *start_workers(workers, service_env(1, logdir, extra), logdir)]
        proc, base = start_server(workers, logdir, extra)
        try:
            with httpx.Client(timeout=60) as c:
                t0 = time.perf_counter()
                urls = []
                for _ in range(n_jobs):
                    r = c.post(f"{base}/v1/jobs", json={"kind": "schedule", "request": body})
                    r.raise_for_status()
                    urls.append(base + r.headers["location"])
                submit_s = time.perf_counter() - t0
                statuses: Counter[str] = Counter()
                pending = list(urls)
                deadline = time.monotonic() + 30 + 4 * n_jobs * body["solver"]["time_limit_s"]
                while pending and time.monotonic() < deadline:
                    still = []
                    for u in pending:
                        st = c.get(u).json()["status"]
                        if st in ("succeeded", "failed", "cancelled"):
                            statuses[st] += 1
                        else:
                            still.append(u)
                    pending = still
                    time.sleep(0.2)
                wall = time.perf_counter() - t0
        finally:
            code = stop_server(proc)
            for p in reversed(others):  # workers first, then Redis
                stop_server(p)
    return {
        "mode": "redis queue, pdwatt worker processes" if queue else "in-process pool",
        "workers": workers,
        "jobs": n_jobs,
        "submit_s": round(submit_s, 3),
        "wall_s": round(wall, 2),
        "jobs_per_s": round(sum(statuses.values()) / wall, 3),
        "statuses": dict(statuses),
        "unfinished": len(pending),
        "server_exit_status": code,
    }


def sigterm_during_solve(body: dict[str, Any]) -> dict[str, Any]:
    """SIGTERM to a server while a synchronous schedule (120 s limit) runs: seconds from
    the signal to the process's exit, its status, and what the client got."""
    long = copy.deepcopy(body)
    long["solver"] |= {"time_limit_s": 120, "mip_gap": 1e-9}
    got: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = start_server(1, Path(tmp))

        def post() -> None:
            r = httpx.post(f"{base}/v1/schedule", json=long, timeout=180)
            got["http"] = r.status_code
            got["solve_status"] = r.json().get("status")

        t = threading.Thread(target=post)
        t.start()
        deadline = time.monotonic() + 120
        while httpx.get(f"{base}/readyz", timeout=10).json().get("busy_workers", 0) < 1:
            if time.monotonic() > deadline:
                raise SystemExit("the solve never started")
            time.sleep(0.1)
        time.sleep(5.0)  # the solve is under way, with an incumbent
        t0 = time.perf_counter()
        code = stop_server(proc)
        exit_s = time.perf_counter() - t0
        t.join(timeout=60)
    return {"exit_s": exit_s, "exit_status": code, **got}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20, help="concurrent clients (default 20)")
    ap.add_argument("--requests", type=int, default=5, help="requests per client, at most")
    ap.add_argument("--duration", type=float, default=120, help="loaded phase, seconds")
    ap.add_argument("--workers", type=int, default=2, help="PDWATT_WORKERS (default 2)")
    ap.add_argument("--time-limit", type=float, help="solver.time_limit_s (default: the demo's)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="instead: N schedule jobs of the demo through /v1/jobs, with 1 and 2 workers",
    )
    ap.add_argument(
        "--queue",
        action="store_true",
        help="with --jobs: through a Redis queue to pdwatt worker processes",
    )
    ap.add_argument("--database-url", help="with --jobs: PDWATT_DATABASE_URL (default SQLite)")
    ap.add_argument(
        "--sigterm",
        action="store_true",
        help="instead: seconds from SIGTERM to exit while a 120 s synchronous solve runs",
    )
    a = ap.parse_args()

    body = demo_request()
    if a.time_limit is not None:
        body["solver"]["time_limit_s"] = a.time_limit
    if a.sigterm:
        r = sigterm_during_solve(body)
        print(
            f"SIGTERM during a synchronous solve (120 s limit): exit {r['exit_status']} after "
            f"{r['exit_s']:.2f} s; client got HTTP {r.get('http')} with status "
            f"{r.get('solve_status')}"
        )
        return
    if a.jobs:
        rows = [jobs_throughput(w, a.jobs, body, a.queue, a.database_url) for w in (1, 2)]
        if a.json:
            print(json.dumps(rows, indent=2))
            return
        print(
            f"POST /v1/jobs x {a.jobs}, demo (time limit {body['solver']['time_limit_s']} s), "
            f"{os.cpu_count()} CPUs, {rows[0]['mode']}"
        )
        for r in rows:
            print(
                f"  {r['workers']} worker(s): {r['jobs_per_s']:.3f} jobs/s, all ended in "
                f"{r['wall_s']:.1f} s (submitted in {r['submit_s']:.2f} s), {r['statuses']}, "
                f"unfinished {r['unfinished']}, server exit {r['server_exit_status']}"
            )
        return
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = start_server(a.workers, Path(tmp))
        try:
            with httpx.Client(timeout=600) as c:  # warm one worker process (spawn + imports)
                t0 = time.perf_counter()
                warm = c.post(f"{base}/v1/schedule", json=body)
                warm_s = time.perf_counter() - t0
            alone = phase(base, body, 1, float("inf"), a.requests)
            loaded = phase(base, body, a.clients, a.duration, a.requests)
        finally:
            code = stop_server(proc)
    result = {
        "demo": {
            "periods": len(body["deployments"][0]["demand_rps"]),
            "deployments": len(body["deployments"]),
            "time_limit_s": body["solver"]["time_limit_s"],
        },
        "workers": a.workers,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "warmup": {"status": warm.status_code, "latency_s": warm_s},
        "alone": alone,
        "loaded": loaded,
        "server_exit_status": code,
    }
    if a.json:
        print(json.dumps(result, indent=2))
        return
    d = result["demo"]
    print(
        f"POST /v1/schedule, demo ({d['deployments']} deployments x {d['periods']} periods, "
        f"time limit {d['time_limit_s']} s), {a.workers} solver workers, "
        f"{result['cpus']} CPUs, load average {result['load_average'][0]:.2f}"
    )
    print(f"warm-up (spawns a worker): HTTP {warm.status_code} in {warm_s:.2f} s")
    cols = ["clients", "ok", "p50_s", "p99_s", "max_s", "solve_time_p50_s", "http_429", "errors"]
    print("  ".join(c.rjust(16) for c in ["phase", *cols]))
    for name, row in (("alone", alone), ("loaded", loaded)):
        print("  ".join([name.rjust(16), *(fmt(row[c]).rjust(16) for c in cols)]))
    for name, row in (("alone", alone), ("loaded", loaded)):
        print(
            f"{name}: solver status {row['solver_status']}; 429 answered in "
            f"p50 {fmt(row['http_429_p50_s'])} s; errors {row['error_kinds'] or 'none'}; "
            f"{row['ok']} schedules in {row['wall_s']:.1f} s"
        )
    print(f"server exit status after SIGTERM: {code}")


if __name__ == "__main__":
    main()
