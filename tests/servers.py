"""Real Redis and PostgreSQL servers for the tests that need them, started on free
loopback ports in a temporary directory and stopped at the end.

The binaries come from Debian's ``redis-server`` and ``postgresql`` packages (``.ci/run``
installs them when missing). A test that needs one is skipped, naming the package, when
the binary is absent. PostgreSQL refuses to run as root: under root the cluster is
created and run as the ``postgres`` user that the package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes] | None, what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise RuntimeError(f"{what} did not start on port {port}:\n{tail}")


class RedisServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server not installed (Debian package redis-server)")
        log = self.workdir / f"redis-{self.port}.log"
        with open(log, "ab") as fh:
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
                + ["--appendonly", "no", "--dir", str(self.workdir)],
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
        _wait_port(self.port, self.proc, "redis-server", log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A running ``redis-server`` (no persistence); ``.url`` to connect."""
    with tempfile.TemporaryDirectory(prefix="pdwatt-redis-") as d:
        server = RedisServer(Path(d))
        server.start()
        try:
            yield server
        finally:
            server.stop()


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found is not None:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL cluster with a database ``pdwatt``; yields its SQLAlchemy
    URL (``postgresql+psycopg://``, trust authentication on loopback)."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server not installed (Debian package postgresql)")
    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="pdwatt-pg-"))
    data, log = root / "data", root / "postgres.log"
    if as_user:
        shutil.chown(root, "postgres")
    port = free_port()
    try:
        subprocess.run(
            as_user + [initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8"],
            check=True,
            capture_output=True,
        )
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            as_user + [pg_ctl, "-D", str(data), "-l", str(log), "-o", opts, "-w", "start"],
            check=True,
            capture_output=True,
        )
        _wait_port(port, None, "PostgreSQL", log)
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE pdwatt")
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/pdwatt"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                as_user + [pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
            )
        shutil.rmtree(root, ignore_errors=True)
