"""Planning a registered site: the use case behind ``POST /v1/sites/{id}/plan`` and
the ``site_plan`` job, kept out of the router so that both run the same steps.

A plan solves the site's stored schedule request (or, with ``current``, the periods
from ``current.period`` on, from the deployments' running state), dates its periods
on the site's clock and is kept in the store with the site version it was made from.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field

from formulation.data import check_initial
from formulation.problem import Host, expand_series, problem_from_dict
from model.errors import InputError
from service.requests.schemas import Strict
from service.runtime.records import Origin, Plan, Site
from service.runtime.store import Store


class State(Strict):
    n_p: int = Field(ge=0, le=4096)
    n_d: int = Field(ge=0, le=4096)


class Current(Strict):
    """Where the site is now: re-plan the periods from ``period`` on, from ``state``."""

    period: int = Field(ge=0, description="first period to re-plan")
    state: dict[str, State] = Field(description="running n_p, n_d of every deployment")


class AppliedDeployment(Strict):
    """A deployment as it runs in the applied period (a shed's settings)."""

    prefill_setting: str = Field(max_length=32)
    decode_setting: str = Field(max_length=32)
    served_rps: float = Field(ge=0, allow_inf_nan=False)
    capacity_rps: float = Field(ge=0, allow_inf_nan=False)
    power_w: float = Field(ge=0, allow_inf_nan=False)


class Applied(Strict):
    """The period before ``current.period`` as the site runs it after a shed: its
    site power, the cap it runs under and each deployment's settings and load."""

    period: int = Field(ge=0)
    power_w: float = Field(ge=0, allow_inf_nan=False)
    power_cap_w: float = Field(ge=0, allow_inf_nan=False)
    deployments: dict[str, AppliedDeployment]


class SitePlanRequest(Strict):
    """What ``POST /v1/sites/{site_id}/plan`` takes, with the site named."""

    site_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    current: Current | None = None
    applied: Applied | None = Field(
        None,
        description="the period before current.period as the site runs it (a shed's "
        "settings), kept in the plan in place of the latest plan's record of it",
    )


#: what a stored site body holds besides its schedule request
SITE_ONLY = ("plan_start", "replan_each_period")


def request_of(body: dict[str, Any]) -> dict[str, Any]:
    """The schedule request a stored site body holds (its clock and options left out)."""
    return {k: v for k, v in body.items() if k not in SITE_ONLY}


def n_periods(body: dict[str, Any]) -> int:
    return len(body["deployments"][0]["demand_rps"])


def plan_start(body: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(body["plan_start"])


def period(body: dict[str, Any]) -> timedelta:
    return timedelta(minutes=body["period_minutes"])


def check_state(body: dict[str, Any], current: Current) -> None:
    """``current`` against the site ``body``: a period of its horizon and the state of
    every deployment it has, no other, each running both phases or none; InputError
    naming the ``current`` field at fault."""
    n = n_periods(body)
    if current.period >= n:
        raise InputError("current.period", f"must be < {n} (the horizon has {n} periods)")
    names = [d["name"] for d in body["deployments"]]
    unknown = sorted(set(current.state) - set(names))
    if unknown:
        raise InputError(f"current.state.{unknown[0]}", f"no such deployment; known: {names}")
    missing = [x for x in names if x not in current.state]
    if missing:
        raise InputError("current.state", f"needs every deployment; missing: {missing}")
    for name in names:
        s = current.state[name]
        if (s.n_p == 0) != (s.n_d == 0):
            raise InputError(
                f"current.state.{name}",
                "a running deployment needs both phases: n_p and n_d both 0 or both >= 1",
            )


def check_current(body: dict[str, Any], current: Current | None, host: Host) -> None:
    """Everything a re-plan of the site ``body`` from ``current`` would refuse about
    ``current`` before its solve starts (:func:`check_state`, and each state a
    configuration the deployment may run within the site's GPUs), without building a
    table: an update carrying ``current`` is checked with it before anything is stored.
    InputError naming the ``current`` field at fault."""
    if current is None:
        return
    req, _ = sub_request(body, current)
    try:
        check_initial(problem_from_dict(req, host))
    except InputError as e:
        raise name_the_state(e, req, current) from None


def sub_request(body: dict[str, Any], current: Current | None) -> tuple[dict[str, Any], int]:
    """The schedule request of the periods from ``current.period`` on, from its state
    (checked by :func:`check_state`)."""
    req = request_of(body)
    if current is None:
        return req, 0
    check_state(body, current)
    n = n_periods(body)
    p = current.period
    deps = []
    for d in req["deployments"]:
        s = current.state[d["name"]]
        deps.append(
            {**d, "demand_rps": d["demand_rps"][p:], "initial": {"n_p": s.n_p, "n_d": s.n_d}}
        )
    grid = {k: list(expand_series(f"grid.{k}", v, n))[p:] for k, v in req["grid"].items()}
    return {**req, "deployments": deps, "grid": grid}, p


_INITIAL = re.compile(r"^deployments\[(\d+)\]\.initial")


def name_the_state(e: InputError, req: dict[str, Any], current: Current | None) -> InputError:
    """An error about a deployment's initial state, re-named after the ``current.state``
    entry the client sent (the solve only sees the derived request)."""
    m = _INITIAL.match(e.field)
    if current is None or not m:
        return e
    name = req["deployments"][int(m.group(1))]["name"]
    return InputError(f"current.state.{name}", e.reason)


def plan_response(
    site: Site, resp: dict[str, Any], first: int, current: Current | None
) -> dict[str, Any]:
    """The stored plan document: the schedule with absolute period indices and times."""
    start, step = plan_start(site.body), period(site.body)
    for per in resp["periods"]:
        t = first + per["index"]
        per["index"] = t
        per["start_minute"] = t * site.body["period_minutes"]
        per["start"] = (start + step * t).isoformat()
        per["end"] = (start + step * (t + 1)).isoformat()
    return {
        "site_id": site.id,
        "site_version": site.version,
        "plan_start": site.body["plan_start"],
        "period_minutes": site.body["period_minutes"],
        "n_periods": n_periods(site.body),
        "first_period": first,
        "current": None if current is None else current.model_dump(),
        # what turns the site cap into the GPU watts the plan's instances were held to
        # (service.sites.targets.total_gpu_power_limit_w)
        "site_power": {
            "pue": site.body["site"]["pue"],
            "idle_gpu_power_w": site.body["site"]["idle_gpu_power_w"],
        },
        "schedule": resp,
    }


def plan_head(plan: Plan, site_version: int) -> dict[str, Any]:
    """A stored plan's id, time, status, and whether the site (now at ``site_version``)
    changed after it was computed (``stale``)."""
    return {
        "plan_id": plan.id,
        "created": plan.created.isoformat(),
        "status": plan.status,
        "stale": plan.site_version < site_version,
    }


def plan_doc(plan: Plan, site_version: int) -> dict[str, Any]:
    return {**plan_head(plan, site_version), **plan.response}


def plan_differs(site: Site, plan: Plan) -> str | None:
    """What of the site's clock, horizon and deployments differs from the site the plan
    was made for (its document keeps ``plan_start``, ``period_minutes``, ``n_periods``
    and the deployments' names), or None when nothing does: a plan made for another
    clock or horizon says nothing about what runs now on this one."""
    doc, body = plan.response, site.body
    was = [d["name"] for d in doc["schedule"]["deployments"]]
    now = [d["name"] for d in body["deployments"]]
    diffs = []
    if plan_start(doc) != plan_start(body):
        diffs.append(f"plan_start {doc['plan_start']} -> {body['plan_start']}")
    if float(doc["period_minutes"]) != float(body["period_minutes"]):
        diffs.append(f"period_minutes {doc['period_minutes']:g} -> {body['period_minutes']:g}")
    if int(doc["n_periods"]) != n_periods(body):
        diffs.append(f"n_periods {doc['n_periods']} -> {n_periods(body)}")
    if was != now:
        diffs.append(f"deployments {was} -> {now}")
    if not diffs:
        return None
    return f"the site changed since its latest plan ({'; '.join(diffs)}); re-plan first"


def running_period(
    latest: Plan | None, site: Site, first: int, applied: Applied | None
) -> dict[str, Any] | None:
    """The record of period ``first - 1`` as a shed ``applied`` it (its settings, loads
    and power in place of the ``latest`` plan's record of that period): a shed
    re-plans from the next boundary, and its own period runs meanwhile, so that the
    plan from ``first`` still tells what runs until ``first`` begins. None without
    ``applied``, or when the latest plan has no such period (or was made for another
    clock, horizon or deployments: :func:`plan_differs`)."""
    if latest is None or applied is None or applied.period != first - 1:
        return None
    if plan_differs(site, latest) is not None:
        return None
    rec = next((p for p in latest.response["schedule"]["periods"] if p["index"] == first - 1), None)
    if rec is None:
        return None
    rec = {**rec, "deployments": {k: dict(v) for k, v in rec["deployments"].items()}}
    rec["kept_from_plan"] = latest.id
    rec["power_w"] = applied.power_w
    rec["power_cap_w"] = min(float(rec["power_cap_w"]), applied.power_cap_w)
    for name, a in applied.deployments.items():
        d = rec["deployments"].get(name)
        if d is not None:
            d.update(a.model_dump())
    rec["applied"] = "shed"
    return rec


def plan_site(
    store: Store,
    site_id: str,
    current: Current | None,
    solve: Callable[[dict[str, Any]], dict[str, Any]],
    keep: Callable[[], bool] = lambda: True,
    applied: Applied | None = None,
    origin: Origin | None = None,
) -> dict[str, Any]:
    """Plan site ``site_id`` with ``solve`` (a schedule request -> its response) and
    keep the plan; the stored plan document (what ``GET .../plan`` answers). When
    ``keep()`` is false once solved (a cancelled job), the plan is not stored: a plan
    cut short never becomes the one the site dispatches; its document comes back
    without a ``plan_id``. A shed's re-plan keeps the shed's period as ``applied``
    (:func:`running_period`): that period is running meanwhile. The plan keeps its
    ``origin`` (what asked for it, the job making it) and how long it took."""
    t0 = time.monotonic()
    site = store.get_site(site_id)
    req, first = sub_request(site.body, current)
    if applied is not None and (current is None or applied.period != current.period - 1):
        raise InputError("applied.period", "must be the period before current.period")
    try:
        resp = solve(req)
    except InputError as e:
        raise name_the_state(e, req, current) from None
    if not keep():
        doc = plan_response(site, resp, first, current)
        return {"plan_id": None, "status": resp["status"], "stale": False, **doc}
    return keep_plan(store, site, resp, first, current, applied, origin, t0)


def keep_plan(
    store: Store,
    site: Site,
    resp: dict[str, Any],
    first: int,
    current: Current | None,
    applied: Applied | None = None,
    origin: Origin | None = None,
    began: float | None = None,
) -> dict[str, Any]:
    """Store the schedule ``resp`` of ``site`` (from period ``first``) as its latest
    plan, the running period before it kept (:func:`running_period`), with its
    ``origin`` and its duration since ``began`` (``time.monotonic``); the plan
    document."""
    doc = plan_response(site, resp, first, current)
    running = running_period(store.latest_plan(site.id), site, first, applied)
    if running is not None:
        doc["schedule"]["periods"].insert(0, running)
    took = None if began is None else time.monotonic() - began
    plan = store.add_plan(
        site.id, site.version, resp["status"], first, doc, origin=origin, duration_s=took
    )
    return plan_doc(plan, site.version)
