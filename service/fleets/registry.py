"""Registered fleets: what a registration stores, the fleet request that plans its
members as they now are (events and forecasts merged), and a stored plan as answered
(its staleness, each site's shares of the regions now). No HTTP here: the router
(:mod:`service.routers.fleets`) maps these results and errors to responses."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from formulation.request import NAME_PATTERN
from model.errors import InputError
from service.fleets.schemas import FleetRegistration
from service.runtime.fleetstore import FleetStore
from service.runtime.records import Fleet, FleetPlan, Site, SiteNotFound
from service.runtime.store import Store
from service.sites.plans import n_periods, plan_start

#: what can name a site of a fleet request
SITE_NAME = re.compile(NAME_PATTERN)

#: what a member site gives the fleet request; its own solver is not used (the fleet's is)
MEMBER_FIELDS = ("site", "deployments", "grid", "transitions")


def fleet_body(req: FleetRegistration) -> tuple[str, list[str], dict[str, Any]]:
    """The name, the member ids and the stored body (regions, routing, solver) of a
    registration."""
    body = req.model_dump(mode="json", exclude={"name", "sites"})
    return req.name, list(req.sites), body


def fleet_request(body: dict[str, Any], members: Sequence[Site]) -> dict[str, Any]:
    """The fleet request (:mod:`formulation.fleet.request`) that plans ``members`` (the
    fleet's sites in order, as they now are) with the fleet's ``body``. The members must
    share their clock and horizon and be named apart by names a fleet's site can take;
    :class:`InputError` naming ``sites[i]`` otherwise."""
    first = members[0].body
    names: dict[str, str] = {}
    sites = []
    for i, m in enumerate(members):
        b, at = m.body, f"sites[{i}]"
        if plan_start(b) != plan_start(first) or b["period_minutes"] != first["period_minutes"]:
            raise InputError(
                at,
                f"site {m.id!r} ({m.name!r}) starts at {b['plan_start']} with "
                f"{b['period_minutes']:g}-minute periods, the fleet's first site at "
                f"{first['plan_start']} with {first['period_minutes']:g}: a fleet's sites "
                "share their clock",
            )
        if n_periods(b) != n_periods(first):
            raise InputError(
                at,
                f"site {m.id!r} ({m.name!r}) plans {n_periods(b)} periods, the fleet's first "
                f"site {n_periods(first)}: a fleet's sites share their horizon",
            )
        if not SITE_NAME.fullmatch(m.name):
            raise InputError(
                at,
                f"site {m.id!r} is named {m.name!r}, which cannot name a fleet's site "
                "(letters, digits and . _ : -, at most 64): rename it (PUT /v1/sites/"
                f"{m.id})",
            )
        if m.name in names:
            raise InputError(
                at,
                f"site {m.id!r} has the name {m.name!r} of site {names[m.name]!r}: a "
                "fleet's sites are named apart",
            )
        names[m.name] = m.id
        sites.append({"name": m.name, **{k: b[k] for k in MEMBER_FIELDS if k in b}})
    return {"period_minutes": first["period_minutes"], "sites": sites, **body}


def fleet_doc(fleet: Fleet, members: Sequence[Site] | None = None) -> dict[str, Any]:
    """A fleet as stored: its members by id (with their names when given)."""
    doc: dict[str, Any] = {
        "id": fleet.id,
        "name": fleet.name,
        "version": fleet.version,
        "created": fleet.created.isoformat(),
        "updated": fleet.updated.isoformat(),
        "sites": list(fleet.site_ids),
        **fleet.body,
    }
    if members is not None:
        doc["site_names"] = {m.id: m.name for m in members}
    return doc


def changed_sites(plan: FleetPlan, members: Sequence[Site]) -> list[str]:
    """The members (ids) whose version is not the one the plan was computed from."""
    now = {m.id: m.version for m in members}
    return [sid for sid, v in plan.site_versions.items() if now.get(sid) != v]


def plan_doc(fleet: Fleet, plan: FleetPlan, members: Sequence[Site]) -> dict[str, Any]:
    """A stored plan as answered: ``stale`` when a member site changed since it was
    computed (an event, a forecast, a PUT: ``changed_sites``)."""
    changed = changed_sites(plan, members)
    return {
        "fleet_id": fleet.id,
        "plan_id": plan.id,
        "created": plan.created.isoformat(),
        "plan_start": plan.plan_start.isoformat(),
        "fleet_version": plan.fleet_version,
        "site_versions": plan.site_versions,
        "stale": bool(changed),
        "changed_sites": changed,
        "duration_s": plan.duration_s,
        "plan": plan.response,
    }


def shares_at(plan: FleetPlan, when: datetime, period_minutes: float) -> dict[str, Any] | None:
    """Each site's shares of the regions in the plan's period at ``when`` (periods of
    ``period_minutes``): ``{"period": t, "sites": {site name: {region: share}}}``; None
    when the plan does not cover it."""
    doc = plan.response
    n = len(doc["sites"][0]["periods"])
    t = math.floor((when - plan.plan_start).total_seconds() / 60.0 / period_minutes)
    if not 0 <= t < n:
        return None
    out: dict[str, dict[str, float]] = {s["name"]: {} for s in doc["sites"]}
    for region in doc["regions"]:
        for share in region["shares"]:
            site = out.setdefault(share["site"], {})
            site[region["name"]] = site.get(region["name"], 0.0) + float(share["share"][t])
    return {"period": t, "sites": out}


@dataclass(frozen=True)
class _State:
    """A fleet as it now is: its members and its latest plan with its brief."""

    fleet: Fleet
    members: list[Site]
    plan: FleetPlan | None
    brief: dict[str, Any] | None


def _states(
    fleets: FleetStore, store: Store, site_id: str | None = None
) -> Iterator[_State]:
    """Every fleet (or, with ``site_id``, every fleet that site is in), its members and
    its latest plan in brief (status, gap, objective, ``stale`` and the members changed
    since; None before the first)."""
    for fleet in fleets.list_fleets(site_id):
        try:
            members = [store.get_site(sid) for sid in fleet.site_ids]
        except SiteNotFound:  # a member deleted meanwhile (with the fleet)
            continue
        plan = fleets.latest_plan(fleet.id)
        brief = None
        if plan is not None:
            changed = changed_sites(plan, members)
            doc = plan.response
            brief = {"plan_id": plan.id, "created": plan.created.isoformat(),
                     "status": plan.status, "mip_gap": doc["mip_gap"],
                     "objective_usd": doc["objective_usd"], "stale": bool(changed),
                     "changed_sites": changed}  # fmt: skip
        yield _State(fleet, members, plan, brief)


def memberships(
    fleets: FleetStore, store: Store, now: datetime, site_id: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Per member site (id; with ``site_id``, that site only), each fleet it is in with
    its latest plan in brief and the site's shares of the regions in the plan's period
    ``now`` (``shares`` null when the plan does not cover it; ``plan`` null before the
    first)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for st in _states(fleets, store, site_id):
        at = None
        if st.plan is not None:
            at = shares_at(st.plan, now, st.members[0].body["period_minutes"])
        for m in st.members:
            entry: dict[str, Any] = {"id": st.fleet.id, "name": st.fleet.name, "plan": None}
            if st.brief is not None:
                entry["plan"] = st.brief | {
                    "period": None if at is None else at["period"],
                    "shares": None if at is None else at["sites"][m.name],
                }
            out.setdefault(m.id, []).append(entry)
    return out


def fleets_brief(fleets: FleetStore, store: Store) -> list[dict[str, Any]]:
    """Every fleet in brief: its member sites (id and name) and its latest plan."""
    return [
        {"id": st.fleet.id, "name": st.fleet.name, "plan": st.brief,
         "sites": [{"id": m.id, "name": m.name} for m in st.members]}
        for st in _states(fleets, store)
    ]  # fmt: skip
