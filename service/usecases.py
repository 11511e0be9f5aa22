"""The service's use cases, one row each: a kind of work (a schedule, a demand-response
what-if, a flexibility curve, a site plan) with its request schema, its checks, its run
and its outputs.

Everything that wires a kind is made from this table, so a kind is registered once:

* the synchronous routes (:mod:`service.routers.solves`; a site plan's route is
  ``POST /v1/sites/{id}/plan``, :mod:`service.routers.sites`);
* the jobs API: its kinds and its request union (:mod:`service.schemas_jobs`), the
  checks at submission (:mod:`service.routers.jobs`) and the runner's dispatch
  (:func:`service.jobs.run_kind`).

A route and a job of the same kind run the same ``check`` before any solve (the
server's limits, the rules across fields, the memory estimate) and the same ``run``
in a solver worker, so a job refuses exactly what its route refuses and answers what
its route answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from pydantic import BaseModel

from model.errors import InputError
from service import work, work_dr
from service.limits import check_demand_response, check_flexibility, check_schedule, solve_host
from service.schemas import ScheduleRequest, ScheduleResponse
from service.schemas_dr import (
    DemandResponseRequest,
    DemandResponseResponse,
    FlexibilityRequest,
    FlexibilityResponse,
)
from service.settings import Settings
from service.site_plans import SitePlanRequest, check_current, plan_site
from service.store import Origin, store_for


@dataclass(frozen=True)
class Context:
    """What a run takes from the process that runs it, never from the request."""

    #: the solver worker's memory budget (MB; the server's ``PDWATT_MAX_SOLVE_MEMORY_MB``)
    memory_budget_mb: float | None = None
    #: the server's kernel database (``PDWATT_KERNELS``)
    kernels: str | None = None
    #: a job's progress and cancellation (:data:`formulation.solve.Monitor`)
    monitor: Any = None
    #: the database that holds the sites (a site plan)
    url: str | None = None
    #: whether the job was cancelled, asked before a site plan is stored
    cancelled: Callable[[], bool] | None = None
    #: what asked for a site plan and the job making it, kept with the plan
    origin: Origin | None = None


@dataclass(frozen=True)
class Route:
    """The synchronous route of a use case: ``POST /v1{path}``."""

    path: str
    tag: str
    #: the route's name (its OpenAPI operation id and summary come from it)
    name: str
    response: type[BaseModel]
    #: the route's OpenAPI description
    doc: str
    #: its solve time and status are counted in the solver metrics (a schedule)
    counted: bool = False


@dataclass(frozen=True)
class UseCase:
    kind: str
    #: the request the route takes and a job of this kind holds
    request: type[BaseModel]
    #: every refusal before any solve, in the API process: ``check(request, settings,
    #: prefix)`` raises InputError naming the field under ``prefix`` (or a lookup
    #: error for a thing that does not exist); it gives the request the server's
    #: defaults (:func:`service.limits.fill_server_defaults`)
    check: Callable[[Any, Settings, str], None]
    #: the work, in a solver worker: ``run(request, context)``, the route's JSON answer
    run: Callable[[Any, Context], dict[str, Any]]
    route: Route | None = None
    #: the answer as a PNG chart, written to a binary file (``?format=png``)
    chart: Callable[[dict[str, Any], IO[bytes]], None] | None = None
    #: the answer as a CSV table (``?format=csv``)
    csv: Callable[[dict[str, Any]], str] | None = None

    @property
    def formats(self) -> tuple[str, ...]:
        """The route's response formats, JSON first."""
        return ("json",) + (("csv",) if self.csv else ()) + (("png",) if self.chart else ())


# ---------------------------------------------------------------- runs and outputs


def _schedule(req: ScheduleRequest, ctx: Context) -> dict[str, Any]:
    return work.schedule(req, ctx.memory_budget_mb, ctx.monitor, ctx.kernels)


def _demand_response(req: DemandResponseRequest, ctx: Context) -> dict[str, Any]:
    return work_dr.demand_response(req, ctx.memory_budget_mb, ctx.kernels, ctx.monitor)


def _flexibility(req: FlexibilityRequest, ctx: Context) -> dict[str, Any]:
    return work_dr.flexibility(req, ctx.memory_budget_mb, ctx.kernels, ctx.monitor)


def _site_plan(req: SitePlanRequest, ctx: Context) -> dict[str, Any]:
    if ctx.url is None:
        raise ValueError("a site plan needs the database url")
    cancelled = ctx.cancelled
    return plan_site(
        store_for(ctx.url),
        req.site_id,
        req.current,
        lambda body: work.schedule(body, ctx.memory_budget_mb, ctx.monitor, ctx.kernels),
        keep=lambda: cancelled is None or not cancelled(),
        applied=req.applied,
        origin=ctx.origin,
    )


def _site_exists(req: SitePlanRequest, s: Settings, prefix: str = "") -> None:
    """The site must exist (its request was checked when it was registered; raises
    :class:`service.store.SiteNotFound`), and ``current`` fit it
    (:func:`service.site_plans.check_current`, the field named under ``prefix``)."""
    site = store_for(s.database_url).get_site(req.site_id)
    try:
        check_current(site.body, req.current, solve_host(s))
    except InputError as e:
        raise InputError(prefix + e.field, e.reason) from None


def _schedule_chart(result: dict[str, Any], out: IO[bytes]) -> None:
    from service.charts import schedule_chart

    schedule_chart(result, out)  # type: ignore[arg-type]


def _dr_chart(result: dict[str, Any], out: IO[bytes]) -> None:
    from service.charts_dr import dr_chart

    dr_chart(result, out)


def _flex_chart(result: dict[str, Any], out: IO[bytes]) -> None:
    from service.charts_dr import flex_chart

    flex_chart(result, out)


def _csv(result: dict[str, Any]) -> str:
    from formulation.results import to_csv

    return to_csv(result)


# ---------------------------------------------------------------- the table

USE_CASES: dict[str, UseCase] = {
    uc.kind: uc
    for uc in (
        UseCase(
            "schedule",
            ScheduleRequest,
            check_schedule,
            _schedule,
            Route(
                "/schedule",
                "schedule",
                "schedule",
                ScheduleResponse,
                "Choose (n_P, n_D) per deployment and period under the site cap; with "
                "baselines.\n\nA solve that reaches its time limit is not an error: 200 "
                "with status `time_limit`\nand the proven gap.",
                counted=True,
            ),
            chart=_schedule_chart,
            csv=_csv,
        ),
        UseCase(
            "demand_response",
            DemandResponseRequest,
            check_demand_response,
            _demand_response,
            Route(
                "/demand-response",
                "demand response",
                "demand_response",
                DemandResponseResponse,
                "Demand-response what-if: the baseline schedule, the response to a cap over "
                "a\nwindow, the power shed per period, the demand lost per deployment, the "
                "cost of\nresponding and the recovery after the event.\n\nTwo schedule solves "
                "(baseline and response) within one `solver.time_limit_s`:\nthe baseline ends "
                "by half of it and the response has the rest.\nAn event the "
                "site cannot meet is a 422 problem whose `conflicts` give the deepest\n"
                "feasible cap per period.",
            ),
            chart=_dr_chart,
        ),
        UseCase(
            "flexibility",
            FlexibilityRequest,
            check_flexibility,
            _flexibility,
            Route(
                "/flexibility",
                "demand response",
                "flexibility",
                FlexibilityResponse,
                "Site flexibility curve of one period (or of every period when `period` is "
                "null):\nthe configurations and served demand that are best at each site "
                "power cap, from the\nleast site draw up to the unconstrained draw. One "
                "period on its own: transitions\nare ignored, as an energy-management system "
                "bids the curve.\n\nThe curve keeps to `solver.time_limit_s`: caps not "
                "evaluated by then are listed\n(`unevaluated_caps_w`, `unevaluated_periods`) "
                "and `status` is `time_limit`.",
            ),
            chart=_flex_chart,
        ),
        UseCase("site_plan", SitePlanRequest, _site_exists, _site_plan),
    )
}


def use_case(kind: str) -> UseCase:
    try:
        return USE_CASES[kind]
    except KeyError:
        raise ValueError(f"unknown job kind {kind!r}") from None


def run(kind: str, request: BaseModel, ctx: Context) -> dict[str, Any]:
    """Run ``request`` (validated) as its kind does, in a solver worker: the answer of
    a kind with a route is checked against the route's response model (its OpenAPI
    description), so that what the route says it answers is what it answers."""
    uc = use_case(kind)
    out = uc.run(request, ctx)
    if uc.route is not None:
        uc.route.response.model_validate(out)
    return out


def parse(kind: str, document: dict[str, Any]) -> BaseModel:
    """A stored request of ``kind`` (it was checked when submitted) as its schema;
    :class:`InputError` naming the field under ``request.`` if it no longer is one."""
    from formulation.request import parse_model

    try:
        return parse_model(use_case(kind).request, document)
    except InputError as exc:
        raise InputError(f"request.{exc.field}", exc.reason) from None
