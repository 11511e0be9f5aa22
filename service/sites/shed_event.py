"""The event a shed records (:mod:`service.sites.shed`): what ``POST
/v1/sites/{site_id}/shed`` takes, the shed as an OpenADR capacity limit from when it
starts, held at the least the site can draw where the target is below it, and its
errors named after the shed's own fields. No HTTP here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import Field

from formulation.data import ScheduleData, build_data
from formulation.infeasible import min_site_power_w
from formulation.subproblems.dp import transition_cost
from model.errors import InputError
from service.requests.schemas import DateTimeText, Strict
from service.runtime.records import Site
from service.runtime.settings import Settings
from service.sites.openadr import Iso8601Duration, OadrEvent, parse_duration
from service.sites.plans import n_periods, period, plan_start
from service.sites.registry import event_signals
from service.sites.shed import running_counts, site_problem
from service.sites.signals import event_to_signals

PROGRAM = "pdwatt-shed"


class ShedBody(Strict):
    """What ``POST /v1/sites/{site_id}/shed`` takes."""

    target_kw: float = Field(
        ge=0, le=1e9, allow_inf_nan=False, description="site power target (kW, after PUE)"
    )
    at: DateTimeText | None = Field(
        None, description="when the target starts: ISO 8601 date-time with offset (default: now)"
    )
    duration: Iso8601Duration = Field(
        "P9999Y",
        description="how long the target holds, ISO 8601 as an OpenADR event's "
        "(default: to the horizon's end)",
    )
    dry_run: bool = Field(
        False,
        strict=True,  # "yes" and 1 are not true: only JSON's own true and false
        description="answer what the shed would do now and what it would record, "
        "recording nothing: no event, no re-plan",
    )


def shed_event(
    body: ShedBody, when: datetime, limits: Sequence[tuple[datetime, float]] | None = None
) -> OadrEvent:
    """The shed as an OpenADR 3.1.0 event: a capacity limit of ``target_kw`` from
    ``when`` for ``duration``; or, with ``limits`` (``(start, kW)`` steps, the first
    at ``when``), each step's limit from its start to the next one's, the last to the
    shed's end (``event.duration`` bounds them all)."""
    steps = list(limits) if limits else [(when, body.target_kw)]
    name = f"shed to {body.target_kw:g} kW"
    doc: dict[str, Any] = {
        "programID": PROGRAM,
        "eventName": name,
        "payloadDescriptors": [{"payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
        "intervalPeriod": {"start": when.isoformat(), "duration": body.duration},
    }
    if steps == [(when, body.target_kw)]:
        doc["intervals"] = [_interval(0, body.target_kw)]
        return OadrEvent.model_validate(doc)
    doc["eventName"] = f"{name}, held at the least the site can draw"
    doc["duration"] = body.duration  # the last step runs to the shed's end
    intervals = []
    for i, (start, kw) in enumerate(steps):
        length = (
            body.duration
            if i == len(steps) - 1
            else f"PT{(steps[i + 1][0] - start).total_seconds():.6f}S"
        )
        intervals.append(
            {**_interval(i, kw), "intervalPeriod": {"start": start.isoformat(), "duration": length}}
        )
    doc["intervals"] = intervals
    return OadrEvent.model_validate(doc)


def _interval(i: int, kw: float) -> dict[str, Any]:
    return {"id": i, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [kw]}]}


def reachable_floors_w(data: ScheduleData, running: Sequence[tuple[int, int]]) -> list[float]:
    """The least site power (W, after PUE) of the period in which each deployment runs
    its ``running`` counts (those counts, at the least-power setting the data lists)
    and of each period after it (any counts each deployment can reach in as many moves
    as the transition limit allows), every other GPU idle: the floor that
    :func:`formulation.infeasible.min_site_power_w` checks a cap against, from where the
    site is. The list ends at the site's least draw, or once no deployment can reach
    further counts (a transition limit keeps one from its least-power counts for
    good): later periods have its last floor."""
    deps = []  # per deployment: its allowed candidates, their (n_P, n_D) cells, moves
    reach = []  # the cells within reach
    for d, (n_p, n_d) in zip(data.deployments, running, strict=True):
        ok = np.flatnonzero(d.allowed)
        counts = np.stack([d.n_p[ok], d.n_d[ok]], axis=1)
        cells, first, cell_of = np.unique(counts, axis=0, return_index=True, return_inverse=True)
        reps = ok[first]  # a candidate of each cell: a move's cost is on the counts alone
        moves = np.isfinite(transition_cost(data, d, reps[:, None], reps[None, :]))
        deps.append((ok, cell_of.ravel(), moves))
        here = (cells[:, 0] == n_p) & (cells[:, 1] == n_d)
        reach.append(here if here.any() else np.ones(len(cells), dtype=bool))
    least = float(min_site_power_w(data)[0])
    out: list[float] = []
    while True:
        among = []
        for d, (ok, cell_of, _), r in zip(data.deployments, deps, reach, strict=True):
            mask = np.zeros(d.n_configs, dtype=bool)
            mask[ok] = r[cell_of]
            among.append(mask)
        out.append(float(min_site_power_w(data, among)[0]))
        if out[-1] <= least:
            return out  # nothing draws less
        grown = [r | moves[r].any(axis=0) for r, (_, _, moves) in zip(reach, deps, strict=True)]
        if all(np.array_equal(g, r) for g, r in zip(grown, reach, strict=True)):
            return out
        reach = grown


def stored_event(
    site: Site, body: ShedBody, when: datetime, settings: Settings, shed: dict[str, Any]
) -> tuple[OadrEvent, dict[str, Any]]:
    """The event a shed stores, and what the answer says of it. The capacity limit is
    the target, or, in each period where that is lower, the least the site can draw
    there from the counts its plan runs in the shed's period ``shed`` (the immediate
    answer: ``period`` and each deployment's ``n_p``, ``n_d``;
    :func:`reachable_floors_w`): a cap below it leaves no schedule, and every later
    re-plan of the site would fail. ``stored_limits`` (each step's ``start`` and
    ``limit_kw``) and, when a step is not the target, ``stored_target_reason``.
    InputError (named after the shed's own fields) when the shed lies outside the
    site's horizon."""
    try:
        event_signals(site.body, shed_event(body, when))  # within the horizon
        end = parse_duration("duration", body.duration).after(when)
    except InputError as e:
        raise shed_error(e) from None
    problem = site_problem(site, settings)
    t = int(shed["period"])
    running = running_counts(problem, shed)  # the counts the shed answered for
    floors = reachable_floors_w(build_data(problem), running)
    start, step = plan_start(site.body), period(site.body)
    target_w = body.target_kw * 1000.0
    limits: list[tuple[datetime, float]] = []
    for k in range(n_periods(site.body) - t):
        at = when if k == 0 else start + step * (t + k)
        if at >= end:
            break
        w = max(target_w, floors[min(k, len(floors) - 1)])
        kw = body.target_kw if w == target_w else math.ceil(w) / 1000.0  # never below it
        if not limits or limits[-1][1] != kw:
            limits.append((at, kw))
        if k >= len(floors) - 1:
            break  # no later period lowers the floor: the last step holds to the end
    answer: dict[str, Any] = {
        "stored_limits": [{"start": a.isoformat(), "limit_kw": kw} for a, kw in limits]
    }
    if any(kw != body.target_kw for _, kw in limits):
        answer["stored_target_reason"] = (
            f"target_kw {body.target_kw:g} is below the least the site can draw in "
            "some of the periods the shed covers (idle GPUs and each deployment at its "
            "least draw within reach of the counts it runs now, at PUE): the capacity "
            "limit stored is that least draw there, so that the site stays plannable"
        )
    return shed_event(body, when, limits), answer


def shed_error(e: InputError) -> InputError:
    """An error about the shed's event (:func:`shed_event`), named after the field of
    the shed's body at fault: ``duration`` for its length, ``at`` for where it lies in
    time (the event's other fields are the shed's own making)."""
    if e.field in ("event.duration", "event.intervalPeriod.duration"):
        return InputError("duration", e.reason)
    if e.field == "event" or e.field.startswith("event.") or e.field.startswith("event["):
        return InputError("at", f"the shed from at for duration: {e.reason}")
    return e


def caps_now(event: OadrEvent, when: datetime) -> bool:
    """Whether ``event`` limits the site's power at ``when`` (a capacity limit whose
    interval holds that instant)."""
    try:
        sig = event_to_signals(event, when, 1.0 / 60.0, 1)  # the one second from when
    except InputError:  # every interval lies outside that second
        return False
    return sig["power_cap_w"]["values"][0] is not None
