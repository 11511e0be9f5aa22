"""The server's limits on a schedule request (settings ``PDWATT_MAX_*``), checked
before any work; one place for every route and job that takes a schedule request."""

from __future__ import annotations

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
