"""The records of the stores (:mod:`service.runtime.store`,
:mod:`service.runtime.fleetstore`): a site, a plan and its head, an event's record, an
update of a site and what asked for a plan or a job, a fleet and its plan, with the
stores' errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: what asks for a plan or a job: a posted event, a retraction, a demand forecast, a
#: shed, the site's clock entering a new period, or a user (a plan or job request)
TRIGGERS = ("event", "retraction", "forecast", "shed", "period", "user")


class SiteNotFound(LookupError):
    def __init__(self, site_id: str) -> None:
        self.site_id = site_id
        super().__init__(f"no site {site_id!r}")


class FleetNotFound(LookupError):
    def __init__(self, fleet_id: str) -> None:
        self.fleet_id = fleet_id
        super().__init__(f"no fleet {fleet_id!r}")


class SiteInFleet(Exception):
    """A site a fleet plans with is not deleted while the fleet is."""

    def __init__(self, site_id: str, fleets: list[tuple[str, str]]) -> None:
        self.site_id = site_id
        self.fleets = fleets
        named = ", ".join(f"{name!r} ({fid})" for fid, name in fleets)
        super().__init__(
            f"site {site_id!r} belongs to fleet {named}: delete the fleet first"
        )


class VersionConflict(Exception):
    """The site is not at the version the client said it was (If-Match)."""

    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(f"site is at version {actual}, not {expected}")


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


@dataclass(frozen=True)
class Fleet:
    """Registered sites planned together: their ids in order (``site_ids``) and the
    fleet's ``body`` (regions, routing, solver; docs/fleet.md, section 6)."""

    id: str
    name: str
    body: dict[str, Any]
    version: int
    created: datetime
    updated: datetime
    site_ids: tuple[str, ...]


@dataclass(frozen=True)
class FleetPlan:
    """A fleet's plan, with the fleet's and each member site's version it was computed
    from (``site_versions``: site id -> version)."""

    id: int
    fleet_id: str
    fleet_version: int
    site_versions: dict[str, int]
    plan_start: datetime
    created: datetime
    status: str
    duration_s: float | None
    response: dict[str, Any]
