"""The database (SQLAlchemy Core; SQLite by default): its tables, its engines and its
migrations. What is read and written in it: :mod:`service.runtime.store` (sites, plans,
events) and :mod:`service.runtime.jobstore` (jobs).

The database comes from the setting ``PDWATT_DATABASE_URL`` (default
``sqlite:///pdwatt.db``, a file in the working directory); any SQLAlchemy URL works
(``postgresql+psycopg://...``). The schema is migrated with Alembic
(``service/migrations``) on a process's first use of a database, under a lock on
PostgreSQL so that replicas starting together migrate once; a database made before
migrations existed is recognised and brought to the current schema. Engines are cached
per URL for the life of the process.

Tables:

* ``sites``: ``id``, ``name``, ``body`` (the site's request template: ``period_minutes``,
  ``site``, ``deployments`` with their demand forecasts, ``grid``, ``transitions``,
  ``solver``, and ``plan_start``), ``version`` (optimistic concurrency), timestamps,
  and the grid of its last registration (POST or PUT) with the version that made it
  (``registered_grid``, ``registered_version``: the grid is recomputed from them when
  an event is retracted);
* ``plans``: ``site_id``, ``site_version`` (the site version it was computed from),
  ``created``, ``status``, ``first_period`` (0, or the period a rolling re-plan starts
  at), ``response`` (the plan document), and what asked for it (``trigger``), the job
  that made it (``job_id``, null for a synchronous request) and ``duration_s``;
* ``events``: ``site_id``, ``received``, ``digest`` (SHA-256 of the event's canonical
  JSON, unique per site: the same event posted twice is merged once), ``site_version``
  (the version its merge produced), ``event`` (the OpenADR event as received), and
  once retracted ``retracted`` (when) and ``retracted_version`` (the version the
  retraction produced);
* ``fleets``: ``id``, ``name``, ``body`` (the fleet's regions, routing and solver;
  docs/fleet.md, section 6), ``version``, timestamps; ``fleet_sites`` its member sites
  (``fleet_id``, ``site_id``, ``position``: a site in a fleet is not deleted);
  ``fleet_plans``: ``fleet_id``, ``fleet_version``, ``site_versions`` (each member's
  version it was computed from), ``plan_start`` (the members' clock), ``created``,
  ``status``, ``duration_s``, ``response`` (the fleet's schedule document);
* ``jobs``: solves run in the background (:mod:`service.runtime.jobstore`): ``kind``, ``request``,
  its ``digest``, an optional unique ``idempotency_key``, ``status``, ``progress``,
  ``result`` or ``error``, ``cancel_requested``, ``attempts``, the ``worker`` running it,
  its ``heartbeat``, its ``webhook_url`` with the delivery's state and outcome, what
  asked for it (``trigger``), and timestamps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    create_engine,
    event,
    inspect,
    text,
)
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import StaticPool

log = logging.getLogger(__name__)

metadata = MetaData()


sites = Table(
    "sites",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("body", JSON, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("updated", DateTime(timezone=True), nullable=False),
    # the grid of the last registration (POST or PUT) and the version it made: the
    # site's grid is it with every event merged since that is not retracted
    Column("registered_grid", JSON(none_as_null=True), nullable=True),
    Column("registered_version", Integer, nullable=True),
)


plans = Table(
    "plans",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("site_id", String(32), ForeignKey("sites.id"), nullable=False, index=True),
    Column("site_version", Integer, nullable=False),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("status", String(32), nullable=False),
    Column("first_period", Integer, nullable=False),
    Column("response", JSON, nullable=False),
    # what asked for it (TRIGGERS), the job that made it (null: a synchronous
    # request) and how long it took to make, solve and storing (null before 0006)
    Column("trigger", String(16), nullable=True),
    Column("job_id", String(32), nullable=True),
    Column("duration_s", Float, nullable=True),
)


events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("site_id", String(32), ForeignKey("sites.id"), nullable=False, index=True),
    Column("received", DateTime(timezone=True), nullable=False),
    Column("digest", String(64), nullable=False),
    Column("site_version", Integer, nullable=False),
    Column("event", JSON, nullable=False),
    Column("retracted", DateTime(timezone=True), nullable=True),
    Column("retracted_version", Integer, nullable=True),  # the version it made
    UniqueConstraint("site_id", "digest", name="uq_events_site_digest"),
)


fleets = Table(
    "fleets",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("body", JSON, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("updated", DateTime(timezone=True), nullable=False),
)


fleet_sites = Table(
    "fleet_sites",
    metadata,
    Column("fleet_id", String(32), ForeignKey("fleets.id"), primary_key=True),
    Column("site_id", String(32), ForeignKey("sites.id"), primary_key=True, index=True),
    Column("position", Integer, nullable=False),
)


fleet_plans = Table(
    "fleet_plans",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("fleet_id", String(32), ForeignKey("fleets.id"), nullable=False, index=True),
    Column("fleet_version", Integer, nullable=False),
    Column("site_versions", JSON, nullable=False),
    Column("plan_start", DateTime(timezone=True), nullable=False),  # the members' clock
    Column("created", DateTime(timezone=True), nullable=False),
    Column("status", String(32), nullable=False),
    Column("duration_s", Float, nullable=True),
    Column("response", JSON, nullable=False),
)


jobs = Table(
    "jobs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("request", JSON, nullable=False),
    Column("digest", String(64), nullable=False),  # of kind and request
    Column("idempotency_key", String(128), nullable=True, unique=True),
    Column("status", String(16), nullable=False, index=True),
    Column("progress", JSON, nullable=True),
    Column("result", JSON, nullable=True),
    Column("error", JSON, nullable=True),
    Column("cancel_requested", Integer, nullable=False, default=0),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("started", DateTime(timezone=True), nullable=True),
    Column("finished", DateTime(timezone=True), nullable=True),
    Column("attempts", Integer, nullable=False, default=0),  # runs started, retries included
    Column("worker", String(128), nullable=True),  # host:pid of the process running it
    Column("heartbeat", DateTime(timezone=True), nullable=True),  # its last sign of life
    Column("webhook_url", String(2048), nullable=True),  # notified when the job ends
    Column("webhook_state", String(16), nullable=True),  # sending, delivered, failed
    Column("webhook_outcome", JSON(none_as_null=True), nullable=True),
    # re-plans of one site coalesce (service.runtime.jobstore.JobStore.create): the scope, and the
    # same while queued (null otherwise), unique: at most one queued job per scope
    Column("coalesce", String(128), nullable=True, index=True),
    Column("queued_for", String(128), nullable=True),
    UniqueConstraint("queued_for", name="uq_jobs_queued_for"),
    Column("trigger", String(16), nullable=True),  # what asked for it (TRIGGERS)
)


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(t: datetime) -> datetime:
    """A timestamp read back from the database, in UTC (SQLite drops the zone)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def digest(doc: Any) -> str:
    """SHA-256 of a JSON document in canonical form (sorted keys, no spaces)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


_engines: dict[str, Engine] = {}


_lock = threading.Lock()


def make_engine(url: str) -> Engine:
    """A new engine of ``url``, its schema as it is (:func:`engine_for` migrates it)."""
    if url.startswith("sqlite"):
        memory = url in {"sqlite://", "sqlite:///:memory:"} or "mode=memory" in url
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
        if memory:
            kwargs["poolclass"] = StaticPool
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _: Any) -> None:
            cur = dbapi_conn.cursor()
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


#: the schema revision that :data:`metadata` describes (the newest migration)
SCHEMA_REVISION = "0007"


#: the Alembic scripts (service/migrations)
MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


#: a database created before migrations existed holds this revision's tables
_FIRST_REVISION = "0001"


#: PostgreSQL advisory lock held while migrating (any constant shared by all replicas)
_MIGRATION_LOCK = 0x7064776174


def migrate(engine: Engine) -> str:
    """Bring the database of ``engine`` to :data:`SCHEMA_REVISION`; returns the revision
    it was at before (``"none"`` for an empty database)."""
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    for attempt in range(5):
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
                before = MigrationContext.configure(conn).get_current_revision()
                cfg.attributes["connection"] = conn
                if before is None and inspect(conn).has_table("sites"):
                    command.stamp(cfg, _FIRST_REVISION)
                    before = _FIRST_REVISION
                command.upgrade(cfg, "head")
            return before or "none"
        except OperationalError:  # SQLite: another process created the tables meanwhile
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def engine_for(url: str) -> Engine:
    """The engine of ``url`` (created once per process), its schema migrated."""
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = make_engine(url)
            migrate(engine)
            _engines[url] = engine
        return engine


def release(url: str) -> None:
    """Close the pooled connections of ``url``'s engine, if this process made one (an
    application's shutdown): the engine stays, and opens connections again when used."""
    with _lock:
        engine = _engines.get(url)
    if engine is not None:
        engine.dispose()
