"""Re-planning registered sites at each period boundary, as jobs.

A site registered with ``"replan_each_period": true`` is re-planned when its clock
(``plan_start``, ``period_minutes``) enters a new period k >= 1 of its horizon: a
``site_plan`` job re-plans the periods from k on, starting from the configuration its
latest plan runs in period k - 1 (what the site is doing if it follows that plan), so
that OpenADR events and forecasts received meanwhile are planned for and transition
limits hold from the running state. A site with no plan yet gets a full plan first.

Each boundary is planned once, whatever the number of processes checking: the job's
idempotency key names the site, the site version and the period, and the database
keeps keys unique. The check runs every ``PDWATT_REPLAN_CHECK_S`` seconds in the API
process when it runs jobs itself, and in every ``pdwatt worker`` with a Redis queue.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from service.runtime.database import utc_now
from service.runtime.job import IdempotencyConflict, replan_scope
from service.runtime.jobstore import JobStore, job_store
from service.runtime.records import Site, SiteNotFound
from service.runtime.store import Store, store_for
from service.sites.plans import n_periods, period, plan_start

log = logging.getLogger(__name__)

#: the site field that asks for a re-plan at each period boundary
FIELD = "replan_each_period"


@dataclass(frozen=True)
class Due:
    """A site whose clock is in ``period`` and whose latest plan does not start there."""

    site_id: str
    site_version: int
    period: int
    current: dict[str, Any] | None  # None: a full plan

    @property
    def key(self) -> str:
        return f"replan:{self.site_id}:v{self.site_version}:p{self.period}"

    @property
    def request(self) -> dict[str, Any]:
        return {"site_id": self.site_id, "current": self.current}


def current_period(body: dict[str, Any], now: datetime) -> int | None:
    """The period of the horizon ``now`` is in (None before it starts or after it)."""
    k = math.floor((now - plan_start(body)) / period(body))
    return k if 0 <= k < n_periods(body) else None


def due(
    site: Site, latest_first: int | None, latest: dict[str, Any] | None, now: datetime
) -> Due | None:
    """What re-plan ``site`` needs now, given its latest plan (first period and
    document); None when nothing."""
    if not site.body.get(FIELD):
        return None
    k = current_period(site.body, now)
    if k is None:
        return None
    if latest is None:
        return Due(site.id, site.version, k, None)
    if latest_first is not None and latest_first >= k:
        return None  # already planned from this period (or a later one)
    if k == 0:
        return None
    running = {p["index"]: p for p in latest["schedule"]["periods"]}.get(k - 1)
    if running is None:  # the latest plan does not cover the previous period
        return Due(site.id, site.version, k, None)
    state = {name: {"n_p": d["n_p"], "n_d": d["n_d"]} for name, d in running["deployments"].items()}
    return Due(site.id, site.version, k, {"period": k, "state": state})


def find_due(store: Store, now: datetime) -> list[Due]:
    out = []
    for summary in store.list_sites():
        try:
            site = store.get_site(summary["id"])
        except SiteNotFound:  # deleted meanwhile
            continue
        if not site.body.get(FIELD):
            continue
        plan = store.latest_plan(site.id)
        d = due(
            site,
            None if plan is None else plan.first_period,
            None if plan is None else plan.response,
            now,
        )
        if d is not None:
            out.append(d)
    return out


def create_jobs(store: Store, jobs: JobStore, now: datetime) -> list[str]:
    """The ``site_plan`` jobs of the boundaries due now, created once each; their ids
    (only those created by this call)."""
    created = []
    for d in find_due(store, now):
        try:
            job, new = jobs.create(
                "site_plan",
                d.request,
                key=d.key,
                coalesce=replan_scope(d.site_id),
                trigger="period",
            )
        except IdempotencyConflict:  # another process created it from another plan read
            continue
        if new:
            log.info("site %s: re-plan from period %d (job %s)", d.site_id, d.period, job.id)
            created.append(job.id)
    return created


async def tick(
    store: Store, jobs: JobStore, now: datetime, submit: Callable[[str], Awaitable[Any]]
) -> list[str]:
    """Create the jobs due at ``now`` and hand each to ``submit`` (the job queue)."""
    ids = await asyncio.to_thread(create_jobs, store, jobs, now)
    for job_id in ids:
        await submit(job_id)
    return ids


async def run_forever(url: str, submit: Callable[[str], Awaitable[Any]], every_s: float) -> None:
    """:func:`tick` every ``every_s`` seconds (until cancelled); a database outage skips
    a check, the next one catches up."""
    while True:
        try:
            await tick(store_for(url), job_store(url), utc_now(), submit)
        except SQLAlchemyError as exc:
            log.warning("re-plan check skipped (%s)", type(exc).__name__)
        await asyncio.sleep(every_s)
