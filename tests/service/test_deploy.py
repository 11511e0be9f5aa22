"""The compose file (no Docker engine runs here, so it is read, not started): two API
replicas and two workers on PostgreSQL and Redis, each with a health check; every
``PDWATT_`` variable it sets is a setting the service reads, and every command it runs
is one the CLI has. The same processes run for real in ``test_queue.py``."""

from __future__ import annotations

from typing import Any

import yaml

from service.cli.app import build_parser
from service.runtime.settings import Settings
from tests.service.conftest import REPO


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
    return doc


def test_two_apis_and_two_workers_on_postgres_and_redis_with_health_checks() -> None:
    services = compose()["services"]
    assert set(services) == {"api", "worker", "postgres", "redis"}
    for name in ("api", "worker"):
        svc = services[name]
        assert svc["deploy"]["replicas"] == 2, name
        assert svc["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
        }
        env = svc["environment"]
        assert env["PDWATT_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["PDWATT_DATABASE_URL"].endswith("@postgres:5432/pdwatt")
        assert env["PDWATT_REDIS_URL"] == "redis://redis:6379/0"
    for svc in services.values():
        assert svc["healthcheck"]["test"], svc
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["api"]["command"] == ["pdwatt", "serve"]
    assert services["worker"]["command"] == ["pdwatt", "worker"]
    # loopback only while no API key is set
    assert all(p.startswith("127.0.0.1:") for p in services["api"]["ports"])


def test_what_the_compose_file_sets_is_what_the_service_reads() -> None:
    fields = {f"PDWATT_{name.upper()}" for name in Settings.model_fields}
    parser = build_parser()
    for name, svc in compose()["services"].items():
        for var in svc.get("environment", {}):
            if var.startswith("PDWATT_"):
                assert var in fields, f"{name}: {var} is not a setting"
        command = svc.get("command")
        if command and command[0] == "pdwatt":
            parser.parse_args(command[1:])  # exits (fails the test) if the CLI lacks it
