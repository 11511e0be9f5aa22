"""The server's limits on a schedule request (settings ``PDWATT_MAX_*``), checked
before any work; one place for every route and job that takes a schedule request."""

from __future__ import annotations

from formulation.data import check_memory
from formulation.problem import Host, problem_from_request
from model.errors import InputError
from service.schemas import ScheduleRequest
from service.settings import Settings


def check_schedule_limits(req: ScheduleRequest, s: Settings, prefix: str = "") -> None:
    """InputError naming the field (under ``prefix``, e.g. ``request.``) that exceeds a
    limit of this server."""
    if len(req.deployments) > s.max_deployments:
        raise InputError(
            f"{prefix}deployments", f"at most {s.max_deployments} deployments on this server"
        )
    if len(req.deployments[0].demand_rps) > s.max_periods:
        raise InputError(f"{prefix}deployments[0].demand_rps", f"at most {s.max_periods} periods")
    if sum(req.site.gpu_inventory.values()) > s.max_site_gpus:
        raise InputError(f"{prefix}site.gpu_inventory", f"at most {s.max_site_gpus} GPUs per site")
    if req.solver.time_limit_s > s.max_time_limit_s:
        raise InputError(
            f"{prefix}solver.time_limit_s", f"must be <= {s.max_time_limit_s:g} on this server"
        )


def check_schedule(req: ScheduleRequest, s: Settings, prefix: str = "") -> None:
    """Everything a schedule request is checked for before any solve, as the synchronous
    routes check it: the server's limits, the rules across fields and the memory budget
    (no table built). InputError names the field under ``prefix``."""
    check_schedule_limits(req, s, prefix)
    try:
        check_memory(problem_from_request(req, Host(memory_budget_mb=s.max_solve_memory_mb)))
    except InputError as exc:
        exc.field = prefix + exc.field
        exc.args = (f"{exc.field}: {exc.reason}",)
        raise
