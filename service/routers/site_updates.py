"""The sites API's updates and outputs: OpenADR events posted, listed and retracted,
demand forecasts, and the replica targets an autoscaler reads (see
:mod:`service.routers.sites` for the choices they share)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse

from model.errors import InputError
from service.requests.limits import solve_host
from service.requests.schemas import DateTimeText
from service.routers.deps import PoolDep, SettingsDep
from service.routers.site_common import (
    ACCEPTED,
    Replan,
    SiteId,
    StoreDep,
    Updated,
    answer_update,
    etag,
    latest_of,
    problems,
    sites_router,
    store_call,
)
from service.sites import registry as sites
from service.sites import shed as site_shed
from service.sites import shed_event
from service.sites.schemas import (
    EventBody,
    ForecastBody,
    RetractBody,
    Targets,
)

router = sites_router()

#: the replica targets' formats, and their responses
TargetsFormat = Annotated[Literal["json", "csv"], Query(description="response format")]
TARGETS_RESPONSES = {200: {"content": {"text/csv": {}}}, **problems(404, 422)}


@router.post(
    "/{site_id}/events",
    responses={**ACCEPTED, **problems(404, 409, 413, 422)},
)
async def post_event(
    site_id: SiteId,
    body: EventBody,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    request: Request,
    replan: Replan = "now",
) -> JSONResponse:
    """Merge an OpenADR 3.1.0 event into the site's grid signals, then re-plan.

    IMPORT_CAPACITY_LIMIT (KW) lowers `power_cap_w`, PRICE (per KWH or MWH, USD) and GHG
    (g/kWh) replace price and carbon on the periods they cover. Errors name the field,
    e.g. `event.intervals[1].payloads[0].type`. A capacity limit that holds now (it
    starts now or started earlier) is also answered at once as `POST .../shed` answers
    it: `immediate` gives the GPU settings to apply now for the instances the latest
    plan runs in the current period, under the site's cap there (docs/service.md);
    where the shed would be refused (no plan, or one made for another clock or horizon)
    `immediate` is null and `immediate_reason` says why, the event stored all the same.

    The same event posted again (`event.duplicate`) while it is in force (merged, not
    retracted) and the latest plan was made from the site as it is is not re-planned:
    200 at once, with that plan, `replanned` false and `detail` saying why (its
    `current`, if any, is not used: `POST .../plan` re-plans from a state). A
    duplicate of a retracted event is a 409 problem naming `event`.
    """
    checks = sites.Replan(body.current, solve_host(settings))
    site, event = await store_call(
        sites.merge_event, store, site_id, body.event, checks, event_field="event"
    )
    answer: dict[str, Any] = {"event": event, "site_version": site.version}
    now = datetime.now(UTC)
    caps_now = shed_event.caps_now(body.event, now)
    plan = await store_call(store.latest_plan, site_id) if caps_now or event["duplicate"] else None
    if caps_now:  # a cap from now: settings at once
        answer["immediate"] = None
        if plan is None:
            answer["immediate_reason"] = f"site {site_id!r} has no plan yet"
        else:
            try:
                answer["immediate"] = await site_shed.immediate(site, plan, now, settings, pool)
            except (site_shed.NoRunningPlan, InputError) as e:  # the event stands
                answer["immediate_reason"] = str(e)
    kept = sites.in_force(site, plan, answer)
    if kept is not None:  # the same event, already planned for: no re-plan
        return JSONResponse(kept, headers=etag(site.version))
    u = Updated(site, body.current, answer, "event")
    return await answer_update(request, settings, pool, replan, u)


@router.get("/{site_id}/events", responses=problems(404, 422))
async def list_events(site_id: SiteId, store: StoreDep) -> JSONResponse:
    """The events merged into the site, oldest first; a retracted one says when
    (`retracted`) and the site version its retraction made (`retracted_version`).

    Answered as JSON directly, not through a response model: an event stored before
    the depth limit of its free-form fields (service.requests.schemas.MAX_JSON_DEPTH) may nest
    deeper than the model serialiser goes, and must still be listed."""
    await store_call(store.get_site, site_id)
    rows = await store_call(store.list_events, site_id)
    return JSONResponse(
        {
            "events": [
                {
                    "id": r.id,
                    "received": r.received.isoformat(),
                    "site_version": r.site_version,
                    "event": r.event,
                    "retracted": None if r.retracted is None else r.retracted.isoformat(),
                    "retracted_version": r.retracted_version,
                }
                for r in rows
            ]
        }
    )


@router.delete(
    "/{site_id}/events/{event_id}",
    responses={**ACCEPTED, **problems(404, 409, 413, 422)},
)
async def retract_event(
    site_id: SiteId,
    event_id: Annotated[int, PathParam(ge=1, le=2**62, description="the event's id")],
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    request: Request,
    body: RetractBody | None = None,
    replan: Replan = "now",
) -> JSONResponse:
    """Retract an event merged into the site, then re-plan.

    The event stays in `GET .../events`, marked `retracted` (with the time and the
    site version it made); the site's grid is recomputed from the grid it was
    registered with (its last POST or PUT) and every event merged since that is not
    retracted, in the order they were merged: a retracted shed's cap is lifted back to
    the cap before it. Re-planned as an event post is (`?replan=now|job`, an optional
    body with `current`), with the same answers. 404 for an unknown event, 409 for one
    already retracted: problems naming `event_id`.
    """
    current = body.current if body else None
    checks = sites.Replan(current, solve_host(settings))
    site, event = await store_call(sites.retract_event, store, site_id, event_id, checks)
    answer: dict[str, Any] = {"event": event, "site_version": site.version}
    u = Updated(site, current, answer, "retraction")
    return await answer_update(request, settings, pool, replan, u)


@router.post(
    "/{site_id}/forecast",
    responses={**ACCEPTED, **problems(404, 409, 413, 422)},
)
async def post_forecast(
    site_id: SiteId,
    body: ForecastBody,
    settings: SettingsDep,
    pool: PoolDep,
    store: StoreDep,
    request: Request,
    replan: Replan = "now",
) -> JSONResponse:
    """Replace demand forecasts from `from_period` on (per deployment), then re-plan.

    A series may be shorter than the rest of the horizon: it replaces that many periods.
    """
    site, answer = await store_call(
        sites.merge_forecast, store, site_id, body, solve_host(settings)
    )
    u = Updated(site, body.current, answer, "forecast")
    return await answer_update(request, settings, pool, replan, u)


@router.get(
    "/{site_id}/targets",
    response_model=Targets,
    responses=TARGETS_RESPONSES,
)
async def targets(
    site_id: SiteId,
    store: StoreDep,
    format: TargetsFormat = "json",  # noqa: A002
) -> Any:
    """Replica targets of the latest plan: one per deployment and period.

    `num_prefill`/`num_decode` are the pair Dynamo Planner's connector applies;
    `replicas` gives the same counts per component for a Kubernetes scaler. A
    deployment that lists GPU settings also gets each role's setting (`gpu_settings`,
    and `dynamo`: the `dynamo.nvidia.com/gpu-power-limit` pod annotation per role);
    `periods` gives each period's `total_gpu_power_limit_w` (docs/service.md).
    """
    site, plan = await latest_of(store, site_id)
    doc = sites.targets_doc(site, plan, plan.response["schedule"]["periods"])
    if format == "csv":
        return Response(sites.targets_csv(doc), media_type="text/csv")
    return JSONResponse(doc)


@router.get(
    "/{site_id}/targets/now",
    response_model=Targets,
    responses=TARGETS_RESPONSES,
)
async def targets_now(
    site_id: SiteId,
    store: StoreDep,
    at: Annotated[
        DateTimeText | None, Query(description="ISO date-time with offset (default: now)")
    ] = None,
    format: TargetsFormat = "json",  # noqa: A002
) -> Any:
    """The targets of the period the clock (or `at`) is in, from `plan_start`."""
    when = at or datetime.now(UTC)
    site, plan = await latest_of(store, site_id)
    try:
        t, periods = sites.periods_at(plan, when)
    except sites.NoPeriod as e:
        raise HTTPException(404, str(e)) from None
    doc = sites.targets_doc(site, plan, periods)
    if format == "csv":
        return Response(sites.targets_csv(doc), media_type="text/csv")
    doc["period"] = t
    doc["at"] = when.isoformat()
    return JSONResponse(doc)
