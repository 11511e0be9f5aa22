"""Persistent fleets (docs/fleet.md, section 6): registered sites planned together, over
the database of :mod:`service.runtime.database`. A fleet keeps its member sites by id
(``fleet_sites``): their bodies, events merged, are read when the fleet is planned, and
a member is not deleted while the fleet is (:func:`member_of`, which
:meth:`service.runtime.store.Store.delete_site` asks)."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, insert, select

from service.runtime.database import (
    as_utc,
    engine_for,
    fleet_plans,
    fleet_sites,
    fleets,
    sites,
    utc_now,
)
from service.runtime.records import Fleet, FleetNotFound, FleetPlan, SiteNotFound


def member_of(conn: Any, site_id: str) -> list[tuple[str, str]]:
    """The fleets (id, name) site ``site_id`` is a member of, read on ``conn``."""
    q = (
        select(fleets.c.id, fleets.c.name)
        .join(fleet_sites, fleet_sites.c.fleet_id == fleets.c.id)
        .where(fleet_sites.c.site_id == site_id)
        .order_by(fleets.c.created)
    )
    return [(r[0], r[1]) for r in conn.execute(q)]


def fleet_store_for(url: str) -> FleetStore:
    return FleetStore(engine_for(url))


class FleetStore:
    """Fleets and their plans; every method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create_fleet(self, name: str, site_ids: list[str], body: dict[str, Any]) -> Fleet:
        """Store a fleet over ``site_ids`` (each a registered site: :class:`SiteNotFound`
        names the first that is not)."""
        now = utc_now()
        fleet = Fleet(secrets.token_hex(8), name, body, 1, now, now, tuple(site_ids))
        with self.engine.begin() as conn:
            known = set(conn.execute(select(sites.c.id).where(sites.c.id.in_(site_ids))).scalars())
            for sid in site_ids:
                if sid not in known:
                    raise SiteNotFound(sid)
            conn.execute(
                insert(fleets).values(
                    id=fleet.id, name=name, body=body, version=1, created=now, updated=now
                )
            )
            conn.execute(
                insert(fleet_sites),
                [
                    {"fleet_id": fleet.id, "site_id": s, "position": i}
                    for i, s in enumerate(site_ids)
                ],
            )
        return fleet

    def get_fleet(self, fleet_id: str) -> Fleet:
        found = self._read(fleets.c.id == fleet_id)
        if not found:
            raise FleetNotFound(fleet_id)
        return found[0]

    def list_fleets(self, member: str | None = None) -> list[Fleet]:
        """Every fleet, oldest first; with ``member``, those that site is in."""
        if member is None:
            return self._read()
        of = select(fleet_sites.c.fleet_id).where(fleet_sites.c.site_id == member)
        return self._read(fleets.c.id.in_(of))

    def _read(self, where: Any = None) -> list[Fleet]:
        """The fleets ``where`` selects (every one: None), oldest first, with their
        members in order: two queries on one connection."""
        q = select(fleets).order_by(fleets.c.created)
        with self.engine.connect() as conn:
            rows = conn.execute(q if where is None else q.where(where)).mappings().all()
            m = select(fleet_sites).order_by(fleet_sites.c.position)
            m = m.where(fleet_sites.c.fleet_id.in_([r["id"] for r in rows]))
            members: dict[str, list[str]] = {}
            for r in conn.execute(m).mappings():
                members.setdefault(r["fleet_id"], []).append(r["site_id"])
        return [
            Fleet(r["id"], r["name"], r["body"], r["version"], as_utc(r["created"]),
                  as_utc(r["updated"]), tuple(members.get(r["id"], ())))
            for r in rows
        ]  # fmt: skip

    def fleets_of(self, site_id: str) -> list[tuple[str, str]]:
        """The fleets (id, name) site ``site_id`` is a member of."""
        with self.engine.connect() as conn:
            return member_of(conn, site_id)

    def delete_fleet(self, fleet_id: str) -> None:
        """Delete the fleet and its plans (its member sites stay)."""
        with self.engine.begin() as conn:
            conn.execute(delete(fleet_plans).where(fleet_plans.c.fleet_id == fleet_id))
            conn.execute(delete(fleet_sites).where(fleet_sites.c.fleet_id == fleet_id))
            if conn.execute(delete(fleets).where(fleets.c.id == fleet_id)).rowcount != 1:
                raise FleetNotFound(fleet_id)

    def add_plan(
        self,
        fleet: Fleet,
        site_versions: dict[str, int],
        plan_start: datetime,
        status: str,
        response: dict[str, Any],
        duration_s: float | None = None,
    ) -> FleetPlan:
        created = utc_now()
        with self.engine.begin() as conn:
            if conn.execute(select(fleets.c.id).where(fleets.c.id == fleet.id)).first() is None:
                raise FleetNotFound(fleet.id)  # deleted while it was being planned
            ins = conn.execute(
                insert(fleet_plans).values(
                    fleet_id=fleet.id,
                    fleet_version=fleet.version,
                    site_versions=site_versions,
                    plan_start=plan_start,
                    created=created,
                    status=status,
                    duration_s=duration_s,
                    response=response,
                )
            )
            key = ins.inserted_primary_key
            if key is None:
                raise RuntimeError("the database returned no primary key")
        return FleetPlan(
            int(key[0]), fleet.id, fleet.version, site_versions, plan_start, created, status,
            duration_s, response,
        )  # fmt: skip

    def latest_plan(self, fleet_id: str) -> FleetPlan | None:
        q = (
            select(fleet_plans)
            .where(fleet_plans.c.fleet_id == fleet_id)
            .order_by(fleet_plans.c.id.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            r = conn.execute(q).mappings().first()
        if r is None:
            return None
        return FleetPlan(
            r["id"],
            r["fleet_id"],
            r["fleet_version"],
            {str(k): int(v) for k, v in r["site_versions"].items()},
            as_utc(r["plan_start"]),
            as_utc(r["created"]),
            r["status"],
            r["duration_s"],
            r["response"],
        )
