"""``pdwatt serve``, ``pdwatt worker`` and ``pdwatt db``: the HTTP service, the job
workers of its Redis queue, and its database."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any

from model.errors import InputError


def register(sub: Any) -> None:
    """Add ``serve``, ``worker`` and ``db`` to an ``add_subparsers()`` object."""
    sv = sub.add_parser(
        "serve", help="run the HTTP service (the console at /ui/, OpenAPI docs at /docs)"
    )
    sv.add_argument("--host", help="bind address (default: PDWATT_HOST or 127.0.0.1)")
    sv.add_argument("--port", type=int, help="port (default: PDWATT_PORT or 8000)")
    sv.add_argument("--workers", type=int, help="concurrent solves (default: PDWATT_WORKERS or 2)")
    sv.set_defaults(func=cmd_serve)

    wk = sub.add_parser(
        "worker",
        help="run queued jobs from Redis (PDWATT_REDIS_URL), as many machines as wanted",
    )
    wk.add_argument("--workers", type=int, help="concurrent solves (default: PDWATT_WORKERS or 2)")
    wk.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    wk.set_defaults(func=cmd_worker)

    db = sub.add_parser("db", help="the service's database")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser(
        "upgrade",
        help="migrate PDWATT_DATABASE_URL to the current schema (the service does "
        "this on start too)",
    )
    up.set_defaults(func=cmd_db_upgrade)


def cmd_worker(a: argparse.Namespace) -> None:
    from service.runtime.settings import get_settings

    if a.workers is not None:
        os.environ["PDWATT_WORKERS"] = str(a.workers)
    settings = get_settings()
    if settings.redis_url is None:
        raise InputError("PDWATT_REDIS_URL", "not set: a worker takes its jobs from Redis")
    from service.jobs.queue import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(f"pdwatt worker: {settings.workers} solver processes", file=sys.stderr)
    run_worker(settings, burst=a.burst)


def cmd_db_upgrade(a: argparse.Namespace) -> None:
    from service.runtime.database import SCHEMA_REVISION, make_engine, migrate
    from service.runtime.settings import get_settings

    before = migrate(make_engine(get_settings().database_url))
    print(f"database schema: {before} -> {SCHEMA_REVISION}")


def start_line(host: str, port: int) -> str:
    """What ``pdwatt serve`` says when it starts: where the service, its console and its
    API documentation are."""
    from service.console import CONSOLE_PATH, DOCS_PATH

    base = f"http://{host}:{port}"
    return f"pdwatt service on {base} (console: {base}{CONSOLE_PATH}/, docs: {base}{DOCS_PATH})"


def cmd_serve(a: argparse.Namespace) -> None:
    import uvicorn

    from service.runtime.settings import get_settings

    if a.workers is not None:
        os.environ["PDWATT_WORKERS"] = str(a.workers)
    settings = get_settings()
    host = a.host or settings.host
    port = a.port or settings.port
    print(start_line(host, port), file=sys.stderr)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal with the handler
    # that was in place before it started; make that one a normal exit (status 0, atexit
    # hooks run so the solver worker processes are joined) instead of death by signal.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    config = uvicorn.Config(
        "service.main:app", host=host, port=port, log_level="info", timeout_graceful_shutdown=10
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # running solves answer with their best schedule at once, instead of
            # holding the shutdown until their time limits
            from service.main import app, begin_shutdown

            if not self.should_exit:
                begin_shutdown(app)
            super().handle_exit(sig, frame)

    Server(config).run()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)
