"""The server's limits on what a solve may ask for (settings ``PDWATT_MAX_*``, and the
flexibility curve's evaluation count), checked before any work: the one place where
each route and the job of the same kind find them, so that a job refuses exactly what
its synchronous route refuses.

* :func:`check_schedule`: a schedule request (``POST /v1/schedule``, and the request
  inside every other kind): the limits (:func:`check_schedule_limits`), the rules
  across fields and the memory budget its solver worker applies;
* :func:`check_demand_response`, :func:`check_flexibility`: ``POST
  /v1/demand-response`` and ``POST /v1/flexibility``.

The use-case table (:mod:`service.usecases`) gives each kind its check, for its route
and its jobs alike.

The time limit: :func:`time_limit` is this server's ``solver.time_limit_s``, the
schedule's own (:data:`formulation.request.TIME_LIMIT`, the one definition of its
least, default and maximum) at most ``PDWATT_MAX_TIME_LIMIT_S``; the checks below, the
OpenAPI document (generated with it, :mod:`service.main`) and the jobs read it there.
A request that leaves ``solver.time_limit_s`` out gets the default
(:func:`fill_server_defaults`); a value the client sent is never changed: above the
maximum it is refused.
"""

from __future__ import annotations

from formulation.data import check_memory
from formulation.problem import Host, problem_from_request
from formulation.request import TIME_LIMIT, TimeLimit
from model.engine import NO_KERNEL_PACKAGE, installed_kernels
from model.errors import InputError
from service.schemas import ScheduleRequest
from service.schemas_dr import DemandResponseRequest, FlexibilityRequest
from service.settings import Settings

#: Most one-period solves one flexibility curve may ask for (periods x (points + 1)).
MAX_FLEX_EVALUATIONS = 10_000


def time_limit(s: Settings) -> TimeLimit:
    """This server's time limit: the schedule's own
    (:data:`~formulation.request.TIME_LIMIT`) at most ``PDWATT_MAX_TIME_LIMIT_S``; a
    request that gives none gets the schedule's default, or that maximum when it is
    lower."""
    return TIME_LIMIT.at_most(s.max_time_limit_s)


def fill_server_defaults(req: ScheduleRequest, s: Settings) -> None:
    """Give ``req`` this server's defaults where the client left a field out (only
    ``solver.time_limit_s``); what the client sent is left as it is."""
    if "time_limit_s" not in req.solver.model_fields_set:
        solver = req.solver.model_copy(update={"time_limit_s": time_limit(s).default_s})
        solver.model_fields_set.discard("time_limit_s")  # still the server's choice
        req.solver = solver


def check_performance(performance: str, s: Settings, field: str = "performance") -> None:
    """InputError naming ``field`` when ``performance`` asks for measured kernels and this
    server has no kernel database (``PDWATT_KERNELS``, else the installed
    aiconfigurator-core package's tables)."""
    if performance == "kernels" and s.kernels is None and installed_kernels() is None:
        raise InputError(
            field,
            "'kernels' needs a kernel database and this server has none (PDWATT_KERNELS is "
            f"not set and {NO_KERNEL_PACKAGE}); use 'spec'",
        )


def check_front(max_gpus: int, pairs: int, s: Settings) -> None:
    """InputError naming ``max_gpus`` when a front of ``max_gpus`` GPUs over ``pairs``
    setting pairs evaluates more configurations than the largest front this server
    answers, the one of ``max_front_gpus`` GPUs at one setting (every ``(n_P, n_D)``
    with ``n_P + n_D <= G``: ``G (G - 1) / 2`` of them, one GPU per instance)."""
    if max_gpus > s.max_front_gpus:
        raise InputError("max_gpus", f"must be <= {s.max_front_gpus} on this server")

    def count(g: int) -> int:
        return g * (g - 1) // 2

    budget = count(s.max_front_gpus)
    if pairs * count(max_gpus) > budget:
        most = max(g for g in range(2, s.max_front_gpus + 1) if pairs * count(g) <= budget)
        raise InputError(
            "max_gpus",
            f"must be <= {most} on this server with {pairs} setting pairs (a front "
            f"evaluates at most the configurations of {s.max_front_gpus} GPUs at one setting)",
        )


def check_schedule_limits(req: ScheduleRequest, s: Settings, prefix: str = "") -> None:
    """InputError naming the field (under ``prefix``, e.g. ``request.``) that exceeds a
    limit of this server, or asks for what it does not have (a kernel database); ``req``
    first gets this server's defaults (:func:`fill_server_defaults`)."""
    fill_server_defaults(req, s)
    for i, d in enumerate(req.deployments):
        check_performance(d.performance, s, f"{prefix}deployments[{i}].performance")
    if s.max_deployments is not None and len(req.deployments) > s.max_deployments:
        raise InputError(
            f"{prefix}deployments", f"at most {s.max_deployments} deployments on this server"
        )
    if len(req.deployments[0].demand_rps) > s.max_periods:
        raise InputError(
            f"{prefix}deployments[0].demand_rps", f"at most {s.max_periods} periods on this server"
        )
    if sum(req.site.gpu_inventory.values()) > s.max_site_gpus:
        raise InputError(f"{prefix}site.gpu_inventory", f"at most {s.max_site_gpus} GPUs per site")
    most = time_limit(s).max_s
    if req.solver.time_limit_s > most:
        raise InputError(f"{prefix}solver.time_limit_s", f"must be <= {most:g} on this server")


def solve_host(s: Settings) -> Host:
    """What this server's solves allow (its memory budget and kernel database)."""
    return Host(memory_budget_mb=s.max_solve_memory_mb, kernels=s.kernels)


def check_memory_budget(req: ScheduleRequest, s: Settings, prefix: str = "") -> None:
    """The memory budget of a schedule request, estimated (no table built): InputError
    naming the field under ``prefix``, before the request reaches a solver worker (which
    applies the same budget before it builds a table)."""
    try:
        check_memory(problem_from_request(req, solve_host(s)))
    except InputError as exc:
        exc.field = prefix + exc.field
        exc.args = (f"{exc.field}: {exc.reason}",)
        raise


def check_schedule(req: ScheduleRequest, s: Settings, prefix: str = "") -> None:
    """Everything a schedule request is checked for before any solve, on a route and in
    a job alike: the server's limits, the rules across fields and the memory budget (no
    table built). InputError names the field under ``prefix``."""
    check_schedule_limits(req, s, prefix)
    check_memory_budget(req, s, prefix)


def check_demand_response(req: DemandResponseRequest, s: Settings, prefix: str = "") -> None:
    """Everything ``POST /v1/demand-response`` refuses before any solve: its schedule
    request's (:func:`check_schedule`)."""
    check_schedule(req.request, s, f"{prefix}request.")


def check_flexibility(req: FlexibilityRequest, s: Settings, prefix: str = "") -> None:
    """Everything ``POST /v1/flexibility`` refuses before any solve: its schedule
    request's limits, at most :data:`MAX_FLEX_EVALUATIONS` one-period solves, and its
    schedule request's memory budget."""
    check_schedule_limits(req.request, s, f"{prefix}request.")
    periods = 1 if req.period is not None else len(req.request.deployments[0].demand_rps)
    if periods * (req.points + 1) > MAX_FLEX_EVALUATIONS:
        raise InputError(
            f"{prefix}points",
            f"{periods} period(s) x {req.points} points is more than {MAX_FLEX_EVALUATIONS} "
            "one-period solves; ask for one period or fewer points",
        )
    check_memory_budget(req.request, s, f"{prefix}request.")
