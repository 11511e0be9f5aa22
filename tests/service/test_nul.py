"""Text holding a NUL character (U+0000), which PostgreSQL's text cannot store, is
answered the same on SQLite and PostgreSQL: a look-up finds nothing (404), a name or
key to store is refused naming the field (422). Found by an adversarial test: on
PostgreSQL both were a 503 "the database is unavailable" with Retry-After, so a client
retried forever and monitoring saw a false outage."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.servers import postgres_server
from tests.service.conftest import small_schedule
from tests.service.test_jobs import wait_final
from tests.service.test_routes import assert_problem


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.servers)])
def db_client(
    request: pytest.FixtureRequest, make_client: Callable[..., TestClient], tmp_path: Path
) -> TestClient:
    url = (
        f"sqlite:///{tmp_path / 'nul.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    return make_client(workers=1, database_url=url, webhook_secret="s" * 16)


def _site(name: str) -> dict[str, Any]:
    return {**small_schedule(), "name": name, "plan_start": "2026-07-01T12:00:00Z"}


def test_a_nul_in_a_job_id_finds_no_job(db_client: TestClient) -> None:
    for method in (db_client.get, db_client.delete):
        r = method("/v1/jobs/a%00b")
        assert_problem(r, 404)
        assert "retry-after" not in r.headers


def test_a_nul_in_text_to_store_is_refused_naming_the_field(db_client: TestClient) -> None:
    body = assert_problem(db_client.post("/v1/sites", json=_site("a\u0000b")), 422, "name")
    assert body["errors"][0]["reason"] == "must not contain the NUL character (U+0000)"
    job = {"kind": "schedule", "request": small_schedule()}
    r = db_client.post("/v1/jobs", json=job, headers={"Idempotency-Key": "a\x00b"})
    assert_problem(r, 422, "Idempotency-Key")
    hooked = {**job, "webhook": {"url": "https://example.com/a\u0000b"}}
    body = assert_problem(db_client.post("/v1/jobs", json=hooked), 422)
    assert body["errors"][0]["field"].endswith("webhook.url")
    # nothing was stored, and the database answers as before
    assert db_client.get("/v1/sites").json()["sites"] == []
    r = db_client.post("/v1/sites", json=_site("a b"))
    assert r.status_code == 201, r.text
    assert db_client.get(f"/v1/sites/{r.json()['id']}").json()["name"] == "a b"


@pytest.mark.slow
def test_a_nul_inside_a_stored_document_is_kept(db_client: TestClient) -> None:
    """Documents are stored as JSON, where a NUL is written as an escape: kept as sent."""
    event = {"name": "a\u0000b", "start_period": 1, "end_period": 3, "reduction_pct": 20}
    body = {"kind": "demand_response", "request": {"request": small_schedule(), "event": event}}
    r = db_client.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    doc = wait_final(db_client, r.json()["id"])
    assert doc["status"] == "succeeded", doc
    assert doc["result"]["event"]["name"] == "a\u0000b"
