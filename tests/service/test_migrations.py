"""Schema migrations (Alembic) on SQLite and on a real PostgreSQL server: an empty
database and one created before migrations existed both end at the schema that
``service.runtime.database.metadata`` describes (Alembic's own comparison finds no difference),
their rows kept; replicas that start together migrate once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Engine,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    insert,
    text,
)

from service.runtime.database import (
    MIGRATIONS,
    SCHEMA_REVISION,
    make_engine,
    metadata,
    migrate,
    utc_now,
)
from service.runtime.jobstore import JobStore
from tests.servers import postgres_server


def schema_before_migrations() -> MetaData:
    """The tables as the service created them (``metadata.create_all``) before it had
    migrations: the jobs table without ``attempts``, ``worker`` and ``heartbeat``."""
    md = MetaData()
    Table(
        "sites",
        md,
        Column("id", String(32), primary_key=True),
        Column("name", String(128), nullable=False),
        Column("body", JSON, nullable=False),
        Column("version", Integer, nullable=False),
        Column("created", DateTime(timezone=True), nullable=False),
        Column("updated", DateTime(timezone=True), nullable=False),
    )
    Table(
        "plans",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("site_id", String(32), ForeignKey("sites.id"), nullable=False, index=True),
        Column("site_version", Integer, nullable=False),
        Column("created", DateTime(timezone=True), nullable=False),
        Column("status", String(32), nullable=False),
        Column("first_period", Integer, nullable=False),
        Column("response", JSON, nullable=False),
    )
    Table(
        "events",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("site_id", String(32), ForeignKey("sites.id"), nullable=False, index=True),
        Column("received", DateTime(timezone=True), nullable=False),
        Column("digest", String(64), nullable=False),
        Column("site_version", Integer, nullable=False),
        Column("event", JSON, nullable=False),
        UniqueConstraint("site_id", "digest", name="uq_events_site_digest"),
    )
    Table(
        "jobs",
        md,
        Column("id", String(32), primary_key=True),
        Column("kind", String(32), nullable=False),
        Column("request", JSON, nullable=False),
        Column("digest", String(64), nullable=False),
        Column("idempotency_key", String(128), nullable=True, unique=True),
        Column("status", String(16), nullable=False, index=True),
        Column("progress", JSON, nullable=True),
        Column("result", JSON, nullable=True),
        Column("error", JSON, nullable=True),
        Column("cancel_requested", Integer, nullable=False, default=0),
        Column("created", DateTime(timezone=True), nullable=False),
        Column("started", DateTime(timezone=True), nullable=True),
        Column("finished", DateTime(timezone=True), nullable=True),
    )
    return md


def differences(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), metadata))


def revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def fresh(kind: str, tmp_path: Path, pg_url_factory: Any) -> Engine:
    if kind == "sqlite":
        return make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    engine = make_engine(pg_url_factory())
    with engine.begin() as conn:  # each test starts from an empty database
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    return engine


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.servers)])
def empty_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    return fresh(request.param, tmp_path, lambda: request.getfixturevalue("pg_url"))


def test_an_empty_database_is_migrated_to_the_schema_of_the_code(empty_engine: Engine) -> None:
    assert migrate(empty_engine) == "none"
    assert revision(empty_engine) == SCHEMA_REVISION
    assert differences(empty_engine) == []
    assert migrate(empty_engine) == SCHEMA_REVISION  # again: nothing to do


def test_a_database_from_before_migrations_keeps_its_rows(empty_engine: Engine) -> None:
    schema_before_migrations().create_all(empty_engine)
    now = utc_now()
    with empty_engine.begin() as conn:
        conn.execute(
            insert(schema_before_migrations().tables["jobs"]).values(
                id="j1",
                kind="schedule",
                request={"a": 1},
                digest="d",
                status="succeeded",
                result={"objective_usd": 1.5},
                cancel_requested=0,
                created=now,
            )
        )
    assert differences(empty_engine) != []  # the new columns are missing
    assert migrate(empty_engine) == "0001"
    assert differences(empty_engine) == []
    job = JobStore(empty_engine).get("j1")
    assert (job.status, job.result, job.attempts) == ("succeeded", {"objective_usd": 1.5}, 0)


@pytest.mark.servers
def test_replicas_starting_together_migrate_once(pg_url: str) -> None:
    engine = fresh("postgresql", Path("."), lambda: pg_url)
    engines = [make_engine(pg_url) for _ in range(4)]
    results: list[str] = []
    errors: list[BaseException] = []

    def run(e: Engine) -> None:
        try:
            results.append(migrate(e))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # the advisory lock serialises them: exactly one found the database empty
    assert sorted(results) == sorted(["none"] + [SCHEMA_REVISION] * 3)
    assert differences(engine) == []


def test_an_application_that_stops_leaves_its_database_closed(tmp_path: Path) -> None:
    """An application's shutdown closes its database connections (the engine stays, for
    whoever uses it next): a process that starts and stops applications, as a test run
    does, does not gather open files."""
    import contextlib
    import os

    from fastapi.testclient import TestClient

    from service.main import create_app
    from tests.service.conftest import app_settings

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to list this process's open files")
    db = tmp_path / "pdwatt.db"

    def open_on_db() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile
                n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(db))
        return n

    for _ in range(3):
        with TestClient(create_app(app_settings(tmp_path, workers=1))) as tc:
            assert tc.get("/v1/sites").status_code == 200
            assert open_on_db() > 0  # the database (and its write-ahead log) in use
        assert open_on_db() == 0


def test_sites_from_before_retractions_get_their_registered_grid_when_known(
    empty_engine: Engine,
) -> None:
    """Revision 0004 keeps each site's registered grid: a site of revision 0003 with no
    event merged has its grid as registered (its grid as stored); one with events
    merged has it unknown (its events cannot be told apart from its registration)."""
    from alembic import command
    from alembic.config import Config

    from service.runtime.store import Store

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with empty_engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0003")
    now = utc_now()
    grid = {"power_cap_w": [20_000.0, 2_500.0], "price_usd_per_mwh": 50}
    old = MetaData()
    sites = Table("sites", old, autoload_with=empty_engine)
    events = Table("events", old, autoload_with=empty_engine)
    with empty_engine.begin() as conn:
        for site_id in ("quiet", "busy"):
            conn.execute(
                insert(sites).values(
                    id=site_id,
                    name=site_id,
                    body={"grid": grid},
                    version=3,
                    created=now,
                    updated=now,
                )
            )
        conn.execute(
            insert(events).values(
                site_id="busy", received=now, digest="d", site_version=2, event={"x": 1}
            )
        )
    assert migrate(empty_engine) == "0003"
    assert differences(empty_engine) == []
    store = Store(empty_engine)
    quiet, busy = store.get_site("quiet"), store.get_site("busy")
    assert (quiet.registered_grid, quiet.registered_version) == (grid, 3)
    assert (busy.registered_grid, busy.registered_version) == (None, None)
    (event,) = store.list_events("busy")
    assert (event.retracted, event.retracted_version, event.event) == (None, None, {"x": 1})
