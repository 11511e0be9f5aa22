"""The service's use cases, one row each: a kind of work (a configuration's capacity, a
front, a schedule, a demand-response what-if, a flexibility curve, a site plan) with
its request schema, its check, its run and its outputs.

Everything that wires a kind is made from this table, so a kind is registered once:

* the synchronous routes (:mod:`service.routers.solves`: ``POST /v1/capacity``,
  ``/v1/front``, ``/v1/schedule``, ``/v1/demand-response``, ``/v1/flexibility``,
  ``/v1/fleet/schedule``, ``/v1/fleet/demand-response``; a site plan's route is
  ``POST /v1/sites/{id}/plan``, :mod:`service.routers.sites`), their
  request and response schemas, and whether they run in the solver pool;
* the jobs API: its kinds (the rows with ``job``) and its request union
  (:mod:`service.jobs.schemas`), the checks at submission (:mod:`service.routers.jobs`)
  and the runner's dispatch (:func:`service.jobs.runner.run_kind`);
* the solver metrics (:func:`observed`, for the rows ``counted``).

A request is parsed once per process: a route's body by FastAPI, a job's stored
document by :func:`parse` in the worker. The row's ``check`` runs in the API process
before any work (the server's limits, the rules across fields, the memory estimate) and
returns a :class:`Checked`: a new request with the server's defaults (the client's is
never changed) and the schedule problem it parsed, which the synchronous route hands to
the solver worker as it is (a job's worker parses the stored request itself). A route
and a job of the same kind run the same ``check`` and the same ``run``, so a job refuses
exactly what its route refuses and answers what its route answers. A row with a route
answers its response model's document (:func:`run`): the run's answer validated by that
model and dumped from it, so what a route says it answers is what it answers.

The shed (``POST /v1/sites/{id}/shed``, :mod:`service.sites.shed`) is not a row: it
answers from the API process at once and hands its one solve, when it needs one, to
the pool itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO, Any

from formulation.fleet.problem import FleetProblem
from formulation.fleet.request import FleetRequest
from formulation.fleet.results import FleetScheduleResponse
from formulation.problem import ScheduleProblem
from model.errors import InputError
from service.requests.dr import (
    FLEET_DR_DOC,
    FLEET_SCHEDULE_DOC,
    DemandResponseRequest,
    DemandResponseResponse,
    FleetDemandResponseRequest,
    FleetDemandResponseResponse,
    FlexibilityRequest,
    FlexibilityResponse,
)
from service.requests.limits import (
    check_demand_response,
    check_fleet,
    check_fleet_demand_response,
    check_flexibility,
    check_front,
    check_performance,
    check_schedule,
    solve_host,
)
from service.requests.schemas import (
    CapacityRequest,
    CapacityResponse,
    FrontRequest,
    FrontResponse,
    ScheduleRequest,
    ScheduleResponse,
)
from service.runtime.metrics import solve_seconds, solver_outcomes_total
from service.runtime.settings import Settings
from service.runtime.store import store_for
from service.sites.plans import SitePlanRequest, check_current, plan_site
from service.usecases import runs
from service.usecases.rows import Checked, Context, Route, UseCase

#: the field a what-if's schedule request is named under in its errors
REQUEST = "request."

# ---------------------------------------------------------------- checks, runs, outputs


def _check_capacity(req: CapacityRequest, s: Settings, prefix: str = "") -> Checked:
    check_performance(req.performance, s, f"{prefix}performance")
    return Checked(req)


def _check_front(req: FrontRequest, s: Settings, prefix: str = "") -> Checked:
    check_front(req, s)
    check_performance(req.performance, s, f"{prefix}performance")
    return Checked(req)


def _check_schedule(req: ScheduleRequest, s: Settings, prefix: str = "") -> Checked:
    return Checked(*check_schedule(req, s, prefix))


def _checked(check: Callable[[Any, Settings, str], tuple[Any, Any]]) -> Callable[..., Checked]:
    """A check of service.requests.limits that returns the request and its problem, as a
    row's check."""
    return lambda req, s, prefix="": Checked(*check(req, s, prefix))


def _check_demand_response(req: DemandResponseRequest, s: Settings, prefix: str = "") -> Checked:
    return Checked(*check_demand_response(req, s, prefix))


def _check_flexibility(req: FlexibilityRequest, s: Settings, prefix: str = "") -> Checked:
    return Checked(*check_flexibility(req, s, prefix))


def _capacity(c: Checked, ctx: Context) -> dict[str, Any]:
    return runs.capacity(c.request, ctx.kernels)


def _front(c: Checked, ctx: Context) -> dict[str, Any]:
    return runs.front(c.request, ctx.kernels)


def _schedule(c: Checked, ctx: Context) -> dict[str, Any]:
    body = c.request if c.problem is None else c.problem
    assert not isinstance(body, FleetProblem)
    return runs.schedule(body, ctx.solve_host(), ctx.monitor, ctx.progress)


def _fleet(c: Checked, ctx: Context) -> dict[str, Any]:
    problem = c.problem if c.problem is not None else c.request  # a job's: its request
    assert not isinstance(problem, ScheduleProblem)
    return runs.fleet(problem, ctx.solve_host(), ctx.monitor, ctx.progress)


def _fleet_demand_response(c: Checked, ctx: Context) -> dict[str, Any]:
    req: FleetDemandResponseRequest = c.request
    problem = c.problem if c.problem is not None else req.request
    assert not isinstance(problem, ScheduleProblem)
    event = req.event.model_dump(mode="json")
    return runs.fleet_demand_response(problem, event, ctx.solve_host(), ctx.progress)


def _schedule_of(c: Checked) -> Any:
    """The schedule request inside a what-if: the problem its check parsed, else the
    request (a job's, parsed in its worker)."""
    return c.request.request if c.problem is None else c.problem


def _demand_response(c: Checked, ctx: Context) -> dict[str, Any]:
    from formulation.whatif.dr import demand_response

    event = c.request.event.model_dump(mode="json")
    host, monitor = ctx.solve_host(), ctx.monitor
    return demand_response(_schedule_of(c), event, None, REQUEST, host, monitor)


def _flexibility(c: Checked, ctx: Context) -> dict[str, Any]:
    from formulation.whatif.flex import flexibility_curve

    req: FlexibilityRequest = c.request
    host, monitor = ctx.solve_host(), ctx.monitor
    return flexibility_curve(_schedule_of(c), req.period, req.points, REQUEST, host, monitor)


def _site_plan(c: Checked, ctx: Context) -> dict[str, Any]:
    if ctx.url is None:
        raise ValueError("a site plan needs the database url")
    req: SitePlanRequest = c.request
    cancelled = ctx.cancelled
    return plan_site(
        store_for(ctx.url),
        req.site_id,
        req.current,
        lambda body: runs.schedule(body, ctx.solve_host(), ctx.monitor),
        keep=lambda: cancelled is None or not cancelled(),
        applied=req.applied,
        origin=ctx.origin,
    )


def _site_exists(req: SitePlanRequest, s: Settings, prefix: str = "") -> Checked:
    """The site must exist (raises :class:`service.runtime.records.SiteNotFound`), and
    ``current`` fit it (:func:`service.sites.plans.check_current`, the field named under
    ``prefix``); ``applied`` is a shed's record, never a client's."""
    if req.applied is not None:
        raise InputError(prefix + "applied", "is recorded by a shed, not taken from a request")
    site = store_for(s.database_url).get_site(req.site_id)
    try:
        check_current(site.body, req.current, solve_host(s))
    except InputError as e:
        raise InputError(prefix + e.field, e.reason) from None
    return Checked(req)


def _schedule_chart(result: dict[str, Any], out: IO[bytes]) -> None:
    from service.charts.schedule import schedule_chart

    schedule_chart(result, out)  # type: ignore[arg-type]


def _dr_chart(result: dict[str, Any], out: IO[bytes]) -> None:
    from service.charts.dr import dr_chart

    dr_chart(result, out)


def _flex_chart(result: dict[str, Any], out: IO[bytes]) -> None:
    from service.charts.dr import flex_chart

    flex_chart(result, out)


def _csv(result: dict[str, Any]) -> str:
    from formulation.results import to_csv

    return to_csv(result)


# ---------------------------------------------------------------- the table

USE_CASES: dict[str, UseCase] = {
    uc.kind: uc
    for uc in (
        UseCase(
            "capacity",
            CapacityRequest,
            _check_capacity,
            _capacity,
            Route(
                "/capacity",
                "core",
                "capacity",
                CapacityResponse,
                "Capacity (req/s) and power (W) of one (n_P, n_D) configuration (SPEC 2).",
                runs_in="thread",
                given_fields_only=False,
            ),
            job=False,
        ),
        UseCase(
            "front",
            FrontRequest,
            _check_front,
            _front,
            Route(
                "/front",
                "core",
                "front",
                FrontResponse,
                "Every configuration with n_P + n_D <= max_gpus and the capacity-power "
                "Pareto front.",
                given_fields_only=False,
            ),
            job=False,
        ),
        UseCase(
            "schedule",
            ScheduleRequest,
            _check_schedule,
            _schedule,
            Route(
                "/schedule",
                "schedule",
                "schedule",
                ScheduleResponse,
                "Choose (n_P, n_D) per deployment and period under the site cap; with "
                "baselines.\n\nA solve that reaches its time limit is not an error: 200 "
                "with status `time_limit`\nand the proven gap.",
            ),
            counted=True,
            chart=_schedule_chart,
            csv=_csv,
        ),
        UseCase(
            "fleet_schedule",
            FleetRequest,
            _checked(check_fleet),
            _fleet,
            Route(
                "/fleet/schedule",
                "schedule",
                "fleet_schedule",
                FleetScheduleResponse,
                FLEET_SCHEDULE_DOC,
            ),
            counted=True,
        ),
        UseCase(
            "demand_response",
            DemandResponseRequest,
            _check_demand_response,
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
            "fleet_demand_response",
            FleetDemandResponseRequest,
            _checked(check_fleet_demand_response),
            _fleet_demand_response,
            Route(
                "/fleet/demand-response",
                "demand response",
                "fleet_demand_response",
                FleetDemandResponseResponse,
                FLEET_DR_DOC,
            ),
        ),
        UseCase(
            "flexibility",
            FlexibilityRequest,
            _check_flexibility,
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
        UseCase("site_plan", SitePlanRequest, _site_exists, _site_plan, counted=True),
    )
}


#: the kinds of the jobs API, in the table's order
JOB_KINDS = tuple(kind for kind, uc in USE_CASES.items() if uc.job)


def use_case(kind: str) -> UseCase:
    try:
        return USE_CASES[kind]
    except KeyError:
        raise ValueError(f"unknown job kind {kind!r}") from None


def job_kind(kind: str) -> UseCase:
    """The row of a job kind; ValueError naming any other kind."""
    if kind not in JOB_KINDS:
        raise ValueError(f"unknown job kind {kind!r}")
    return USE_CASES[kind]


def run(kind: str, checked: Checked, ctx: Context) -> dict[str, Any]:
    """Run the checked request as its kind does, in a solver worker (or a thread, for a
    route that runs there). The answer of a kind with a route is its response model's
    document: the run's answer validated by that model, and dumped from it (only the
    fields the run gave, unless the route answers every field of the model), so that
    what the route says it answers is what it answers."""
    return answer(kind, use_case(kind).run(checked, ctx))


def answer(kind: str, out: dict[str, Any]) -> dict[str, Any]:
    """What a kind answers for its run's answer ``out``: with a route, its response
    model's document (``out`` validated by that model and dumped from it); else ``out``.
    The command line prints the same (``pdwatt plan``, ``dr``, ``flex``)."""
    uc = use_case(kind)
    if uc.route is None:
        return out
    model = uc.route.response.model_validate(out)
    return model.model_dump(mode="json", exclude_unset=uc.route.given_fields_only)


def observed(uc: UseCase, started: float, answer: dict[str, Any]) -> None:
    """Count a synchronous run of ``uc`` begun at ``started`` (``time.perf_counter``) in
    the solver metrics, when its row is ``counted``."""
    if uc.counted:
        solve_seconds.observe(time.perf_counter() - started)
        solver_outcomes_total.labels(answer["status"]).inc()


def parse(kind: str, document: dict[str, Any]) -> Checked:
    """A stored request of job kind ``kind`` (it was checked when submitted) as its
    schema, in the worker that runs it; :class:`InputError` naming the field under
    ``request.`` if it no longer is one."""
    from formulation.request import parse_model

    try:
        return Checked(parse_model(job_kind(kind).request, document))
    except InputError as exc:
        raise InputError(f"request.{exc.field}", exc.reason) from None
