"""Persistent sites, plans and events (SQLAlchemy Core; SQLite by default).

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
* ``jobs``: solves run in the background (:mod:`service.runtime.jobstore`): ``kind``, ``request``,
  its ``digest``, an optional unique ``idempotency_key``, ``status``, ``progress``,
  ``result`` or ``error``, ``cancel_requested``, ``attempts``, the ``worker`` running it,
  its ``heartbeat``, its ``webhook_url`` with the delivery's state and outcome, what
  asked for it (``trigger``), and timestamps.

Concurrent updates of one site never lose a write: every update reads the site, computes
the new body, and writes it with ``UPDATE ... WHERE version = <read version>`` in the
same transaction as its event row; when another writer got there first, nothing is
written and the update starts again from the new version. This works the same on every
backend (SQLite waits on its file lock for up to 30 s; WAL mode lets readers go on).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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
    delete,
    event,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.pool import StaticPool

from formulation.problem import fill_model_variant

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

#: what asks for a plan or a job: a posted event, a retraction, a demand forecast, a
#: shed, the site's clock entering a new period, or a user (a plan or job request)
TRIGGERS = ("event", "retraction", "forecast", "shed", "period", "user")

MAX_ATTEMPTS = 50


class SiteNotFound(LookupError):
    def __init__(self, site_id: str) -> None:
        self.site_id = site_id
        super().__init__(f"no site {site_id!r}")


class VersionConflict(Exception):
    """The site is not at the version the client said it was (If-Match)."""

    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"site is at version {actual}, not {expected}")


class _Lost(Exception):
    """The version read is no longer current (inside an update's transaction)."""


class Contention(Exception):
    """An update lost the race ``MAX_ATTEMPTS`` times in a row."""


class EventNotFound(LookupError):
    def __init__(self, site_id: str, event_id: int) -> None:
        self.site_id = site_id
        self.event_id = event_id
        super().__init__(f"site {site_id!r} has no event {event_id}")


class EventRetracted(Exception):
    """The event was retracted: it is not retracted again, nor merged again."""

    def __init__(self, record: EventRecord, hint: str = "") -> None:
        self.record = record
        when = record.retracted.isoformat() if record.retracted else "?"
        super().__init__(
            f"event {record.id} of site {record.site_id!r} was retracted at {when} "
            f"(site version {record.retracted_version}){hint}"
        )


#: the memory balance of deployments stored before requests named one
VARIANT_BEFORE_FIELD = "paper"


@dataclass(frozen=True)
class Site:
    id: str
    name: str
    body: dict[str, Any]
    version: int
    created: datetime
    updated: datetime
    #: the grid of the last registration (POST or PUT) and the version it made; None
    #: for a site registered before they were kept and changed by an event since
    registered_grid: dict[str, Any] | None = None
    registered_version: int | None = None


@dataclass(frozen=True)
class Plan:
    id: int
    site_id: str
    site_version: int
    created: datetime
    status: str
    first_period: int
    response: dict[str, Any]


@dataclass(frozen=True)
class PlanHead:
    """A stored plan without its document: when and from what it was made, what asked
    for it (``trigger``, :data:`TRIGGERS`), the job that made it (None: a synchronous
    request) and how long that took (``duration_s``); the last three None for a plan
    stored before they were kept."""

    id: int
    site_id: str
    site_version: int
    created: datetime
    status: str
    first_period: int
    trigger: str | None = None
    job_id: str | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Origin:
    """What asked for a plan (:data:`TRIGGERS`) and the job that makes it (None: a
    synchronous request)."""

    trigger: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class EventRecord:
    id: int
    site_id: str
    received: datetime
    site_version: int
    event: dict[str, Any]
    retracted: datetime | None = None
    retracted_version: int | None = None  # the site version its retraction made


@dataclass(frozen=True)
class Update:
    """What an update function returns: the new name and body, an event to log, and
    whether it is a registration (a PUT: its grid becomes the registered one)."""

    name: str
    body: dict[str, Any]
    event: dict[str, Any] | None = None
    registers: bool = False


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(t: datetime) -> datetime:
    """A timestamp read back from the database, in UTC (SQLite drops the zone)."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _key(key: Any) -> Any:
    if key is None:
        raise RuntimeError("the database returned no primary key")
    return key[0]


def digest(doc: Any) -> str:
    """SHA-256 of a JSON document in canonical form (sorted keys, no spaces)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- engines


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
SCHEMA_REVISION = "0006"
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


def store_for(url: str) -> Store:
    return Store(engine_for(url))


# ---------------------------------------------------------------- the store


class Store:
    """Sites, plans and events; every method is one short transaction (or a retry loop)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # sites ------------------------------------------------------------------

    def create_site(self, name: str, body: dict[str, Any]) -> Site:
        now = utc_now()
        site = Site(secrets.token_hex(8), name, body, 1, now, now, body["grid"], 1)
        with self.engine.begin() as conn:
            conn.execute(
                insert(sites).values(
                    id=site.id,
                    name=name,
                    body=body,
                    version=1,
                    created=now,
                    updated=now,
                    registered_grid=body["grid"],
                    registered_version=1,
                )
            )
        return site

    def get_site(self, site_id: str) -> Site:
        """The site as stored (deployments registered before ``model_variant`` existed keep
        the balance they were planned with: ``paper``)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(sites).where(sites.c.id == site_id)).mappings().first()
        if row is None:
            raise SiteNotFound(site_id)
        return Site(
            row["id"],
            row["name"],
            fill_model_variant(row["body"], VARIANT_BEFORE_FIELD),
            row["version"],
            as_utc(row["created"]),
            as_utc(row["updated"]),
            row["registered_grid"],
            row["registered_version"],
        )

    def list_sites(self) -> list[dict[str, Any]]:
        q = select(sites.c.id, sites.c.name, sites.c.version, sites.c.updated).order_by(
            sites.c.created
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return [
            {
                "id": r["id"],
                "name": r["name"],
                "version": r["version"],
                "updated": as_utc(r["updated"]).isoformat(),
            }
            for r in rows
        ]

    def update_site(
        self,
        site_id: str,
        change: Callable[[Site], Update | None],
        expected_version: int | None = None,
    ) -> tuple[Site, int | None]:
        """Apply ``change`` to the current site and write it; retried on a lost race.

        ``change`` gets the site as stored and returns the new name, body and optionally
        an event to log (or ``None`` to leave the site as it is). It may be called more
        than once and must not have side effects. Returns the site as written and the
        id of the logged event (``None`` when there was none, or when the very same
        event had already been merged: then the site is left unchanged).
        """
        for _ in range(MAX_ATTEMPTS):
            site = self.get_site(site_id)
            if expected_version is not None and site.version != expected_version:
                raise VersionConflict(expected_version, site.version)
            upd = change(site)
            if upd is None:
                return site, None
            now = utc_now()
            try:
                with self.engine.begin() as conn:
                    written = _write(conn, site, upd, now)
                    event_id = None
                    if upd.event is not None:
                        ins = conn.execute(
                            insert(events).values(
                                site_id=site_id,
                                received=now,
                                digest=digest(upd.event),
                                site_version=written.version,
                                event=upd.event,
                            )
                        )
                        event_id = int(_key(ins.inserted_primary_key))
            except _Lost:
                continue
            except IntegrityError:
                if upd.event is not None and self.find_event(site_id, upd.event) is not None:
                    return self.get_site(site_id), None  # already merged: idempotent
                raise
            return written, event_id
        raise Contention(f"site {site_id!r} changed {MAX_ATTEMPTS} times while updating it")

    def retract_event(
        self,
        site_id: str,
        event_id: int,
        change: Callable[[Site, list[EventRecord]], Update],
    ) -> tuple[Site, EventRecord]:
        """Retract event ``event_id`` of the site: ``change`` gets the site as stored and
        its events (that one not yet retracted among them) and returns the site without
        it; the site is written with the event marked retracted in one transaction,
        retried on a lost race (``change`` may be called more than once). The site
        as written and the event's record. :class:`EventNotFound`, or
        :class:`EventRetracted` when it already was."""
        for _ in range(MAX_ATTEMPTS):
            site = self.get_site(site_id)
            rows = self.list_events(site_id)
            record = next((r for r in rows if r.id == event_id), None)
            if record is None:
                raise EventNotFound(site_id, event_id)
            if record.retracted is not None:
                raise EventRetracted(record)
            upd = change(site, rows)
            now = utc_now()
            try:
                with self.engine.begin() as conn:
                    written = _write(conn, site, upd, now)
                    res = conn.execute(
                        update(events)
                        .where(
                            events.c.id == event_id,
                            events.c.site_id == site_id,
                            events.c.retracted.is_(None),
                        )
                        .values(retracted=now, retracted_version=written.version)
                    )
                    if res.rowcount != 1:
                        raise _Lost  # retracted meanwhile: the next round says so
            except _Lost:
                continue
            return written, dataclasses.replace(
                record, retracted=now, retracted_version=written.version
            )
        raise Contention(f"site {site_id!r} changed {MAX_ATTEMPTS} times while retracting")

    def delete_site(self, site_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(plans).where(plans.c.site_id == site_id))
            conn.execute(delete(events).where(events.c.site_id == site_id))
            res = conn.execute(delete(sites).where(sites.c.id == site_id))
            if res.rowcount != 1:
                raise SiteNotFound(site_id)

    # plans ------------------------------------------------------------------

    def add_plan(
        self,
        site_id: str,
        site_version: int,
        status: str,
        first_period: int,
        response: dict[str, Any],
        created: datetime | None = None,
        origin: Origin | None = None,
        duration_s: float | None = None,
    ) -> Plan:
        created = created or utc_now()
        origin = origin or Origin()
        with self.engine.begin() as conn:
            if conn.execute(select(sites.c.id).where(sites.c.id == site_id)).first() is None:
                raise SiteNotFound(site_id)  # deleted while it was being planned
            ins = conn.execute(
                insert(plans).values(
                    site_id=site_id,
                    site_version=site_version,
                    created=created,
                    status=status,
                    first_period=first_period,
                    response=response,
                    trigger=origin.trigger,
                    job_id=origin.job_id,
                    duration_s=duration_s,
                )
            )
            plan_id = int(_key(ins.inserted_primary_key))
        return Plan(plan_id, site_id, site_version, created, status, first_period, response)

    def latest_plan(self, site_id: str) -> Plan | None:
        """The plan of the newest site version; of those, the last stored."""
        q = (
            select(plans)
            .where(plans.c.site_id == site_id)
            .order_by(plans.c.site_version.desc(), plans.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        return None if row is None else _plan(row)

    def plan_heads(
        self, site_id: str | None = None, synchronous: bool = False, limit: int | None = None
    ) -> list[PlanHead]:
        """The stored plans without their documents, newest first: a site's (or every
        site's), only those a synchronous request made (``synchronous``: no job, and
        a trigger recorded), at most ``limit``."""
        q = select(*(plans.c[f.name] for f in dataclasses.fields(PlanHead)))
        if site_id is not None:
            q = q.where(plans.c.site_id == site_id)
        if synchronous:
            q = q.where(plans.c.job_id.is_(None), plans.c.trigger.is_not(None))
        q = q.order_by(plans.c.id.desc())
        if limit is not None:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return [PlanHead(**{**r, "created": as_utc(r["created"])}) for r in rows]

    def get_plan(self, site_id: str, plan_id: int) -> Plan:
        """Plan ``plan_id`` of the site (:class:`LookupError` when it has none)."""
        q = select(plans).where(plans.c.site_id == site_id, plans.c.id == plan_id)
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        if row is None:
            raise LookupError(f"site {site_id!r} has no plan {plan_id}")
        return _plan(row)

    # events -----------------------------------------------------------------

    def find_event(self, site_id: str, doc: dict[str, Any]) -> int | None:
        q = select(events.c.id).where(events.c.site_id == site_id, events.c.digest == digest(doc))
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return None if row is None else int(row[0])

    def list_events(self, site_id: str) -> list[EventRecord]:
        q = select(events).where(events.c.site_id == site_id).order_by(events.c.id)
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return [_event_record(r) for r in rows]

    def get_event(self, site_id: str, event_id: int) -> EventRecord:
        q = select(events).where(events.c.site_id == site_id, events.c.id == event_id)
        with self.engine.connect() as conn:
            row = conn.execute(q).mappings().first()
        if row is None:
            raise EventNotFound(site_id, event_id)
        return _event_record(row)


def _plan(row: Any) -> Plan:
    return Plan(
        row["id"],
        row["site_id"],
        row["site_version"],
        as_utc(row["created"]),
        row["status"],
        row["first_period"],
        row["response"],
    )


def _event_record(r: Any) -> EventRecord:
    return EventRecord(
        r["id"],
        r["site_id"],
        as_utc(r["received"]),
        r["site_version"],
        r["event"],
        None if r["retracted"] is None else as_utc(r["retracted"]),
        r["retracted_version"],
    )


def _write(conn: Any, site: Site, upd: Update, now: datetime) -> Site:
    """Write ``upd`` over ``site`` at the version it was read at (a registration's grid
    becomes the registered one); :class:`_Lost` when another writer got there first.
    The site as written."""
    new_version = site.version + 1
    values: dict[str, Any] = {
        "name": upd.name,
        "body": upd.body,
        "version": new_version,
        "updated": now,
    }
    grid, registered = site.registered_grid, site.registered_version
    if upd.registers:
        grid, registered = upd.body["grid"], new_version
        values |= {"registered_grid": grid, "registered_version": registered}
    res = conn.execute(
        update(sites).where(sites.c.id == site.id, sites.c.version == site.version).values(values)
    )
    if res.rowcount != 1:
        raise _Lost  # another writer won: roll back, start again
    return Site(site.id, upd.name, upd.body, new_version, site.created, now, grid, registered)
