"""Persistent sites, plans and events: the :class:`Store` over the database
(:mod:`service.runtime.database`), its records in :mod:`service.runtime.records`.

Concurrent updates of one site never lose a write: every update reads the site, computes
the new body, and writes it with ``UPDATE ... WHERE version = <read version>`` in the
same transaction as its event row; when another writer got there first, nothing is
written and the update starts again from the new version. This works the same on every
backend (SQLite waits on its file lock for up to 30 s; WAL mode lets readers go on).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Engine,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from formulation.problem import fill_model_variant
from service.runtime.database import (
    as_utc,
    digest,
    engine_for,
    events,
    plans,
    sites,
    utc_now,
)
from service.runtime.fleetstore import member_of
from service.runtime.records import (
    Contention,
    EventNotFound,
    EventRecord,
    EventRetracted,
    Origin,
    Plan,
    PlanHead,
    Site,
    SiteInFleet,
    SiteNotFound,
    Update,
    VersionConflict,
)

log = logging.getLogger(__name__)


MAX_ATTEMPTS = 50


class _Lost(Exception):
    """The version read is no longer current (inside an update's transaction)."""


#: the memory balance of deployments stored before requests named one
VARIANT_BEFORE_FIELD = "paper"


def store_for(url: str) -> Store:
    return Store(engine_for(url))


def _key(key: Any) -> Any:
    if key is None:
        raise RuntimeError("the database returned no primary key")
    return key[0]


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
        """Delete the site, its plans and its events; :class:`SiteInFleet` while a fleet
        plans with it."""
        with self.engine.begin() as conn:
            owners = member_of(conn, site_id)
            if owners:
                raise SiteInFleet(site_id, owners)
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
