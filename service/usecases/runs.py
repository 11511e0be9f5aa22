"""The work of the use cases that are the service's own, as plain functions of validated
requests: a configuration's capacity, a front, a schedule and a fleet's plan and
what-if (a demand-response what-if and a flexibility curve are
:mod:`formulation.whatif`'s, called by their rows).

Run in worker processes for solves (CPU-bound, seconds) and in threads for a
configuration's capacity (milliseconds), as the runs of the use-case table's rows
(:mod:`service.usecases.table`), which ``pdwatt plan`` runs too. Errors of the schedule
request name their field as the request does. No workload file is read unless the
caller's host reads them (the command line's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from formulation.fleet.problem import FleetProblem, fleet_from_request
from formulation.fleet.request import FleetRequest
from formulation.problem import Host, ScheduleProblem, problem_from_dict
from formulation.request import ScheduleRequest
from model.capacity import settings_record
from model.errors import InputError
from model.operations import (
    SpecRequest,
    capacity_report,
    front_over_gpus,
    front_over_shapes,
    gpu_pair_specs,
    resolve_spec,
)
from model.queueing.slo import SloTargets, slo_restricted_front
from model.simulator import resolve_samples
from model.spec import with_settings, with_targets
from service.requests.schemas import CapacityRequest, FrontRequest, SpecFields


def _spec_request(req: SpecFields, kernels: str | None) -> SpecRequest:
    """``kernels``: the server's kernel database (its setting, never the request's)."""
    return SpecRequest(
        model=req.model,
        gpu=req.gpu,
        workload=req.workload,
        overrides={str(k): v for k, v in req.overrides.items()},
        moments=None if req.moments is None else req.moments.model_dump(mode="json"),
        model_variant=req.model_variant,
        performance=req.performance,
        framework=req.framework,
        kernels=kernels,
        prefill_gpu=req.prefill_gpu,
        decode_gpu=req.decode_gpu,
        interconnect=req.interconnect,
        interconnect_gb_per_s=req.interconnect_gb_per_s,
    )  # read_files stays False: no request reads a server file


def _spec(req: SpecFields, kernels: str | None) -> tuple[Any, bool]:
    return resolve_spec(_spec_request(req, kernels)), bool(req.overrides)


def capacity(req: CapacityRequest, kernels: str | None = None) -> dict[str, Any]:
    spec, ov = _spec(req, kernels)
    spec = with_settings(spec, req.prefill_setting, req.decode_setting)
    if req.latency_targets is not None:
        spec = with_targets(spec, req.latency_targets.ttft_p99_s, req.latency_targets.tpot_p99_s)
    rep = capacity_report(spec, req.n_p, req.n_d, req.load_rps, overridden=ov)
    rep.update(settings_record(spec))
    return rep


def front(req: FrontRequest, kernels: str | None = None) -> dict[str, Any]:
    """The front (over the listed shapes, if any), restricted to ``req.slo``'s latency
    targets when it has them (by the analytic p99s alone: no simulation runs in a
    request)."""
    spec, ov = _spec(req, kernels)
    restrict = None
    if req.slo is not None:
        slo = req.slo
        targets = SloTargets(slo.ttft_p99_s, slo.tpot_p99_s, slo.at_load, simulate_bound=False)
        if not targets.given:
            raise InputError("slo", "give ttft_p99_s and/or tpot_p99_s")
        samples = resolve_samples(spec.workload)

        def restrict(report: dict[str, Any], at: Any) -> dict[str, Any]:
            return slo_restricted_front(report, at, samples, targets)

    if req.gpus is not None:  # every pair of the listed types (docs/mixed-gpus.md)
        pairs = gpu_pair_specs(_spec_request(req, kernels), req.gpus)
        return front_over_gpus(pairs, req, ov, restrict)
    return front_over_shapes(spec, req, ov, restrict)


def schedule(
    body: ScheduleProblem | ScheduleRequest | dict[str, Any],
    host: Host | None = None,
    monitor: Any = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The schedule of a problem parsed already (the synchronous route's, checked in the
    API process; the command line's), of a validated request, or of a stored document
    (validated here), solved on ``host`` (default: the problem's own, else a host that
    reads no file); ``monitor`` (optional): see :data:`formulation.solve.Monitor` (jobs'
    progress and cancellation); ``progress``: the phases as they go (the command
    line's lines)."""
    from formulation.results import response
    from formulation.solve import solve

    return response(solve(problem_from_dict(body, host), progress, monitor=monitor))


def fleet(
    problem: FleetProblem | FleetRequest,
    host: Host,
    monitor: Callable[[dict[str, Any]], bool] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """A fleet's plan (docs/fleet.md): its problem as the check parsed it, or a job's
    request, parsed here on ``host``."""
    from formulation.fleet.results import fleet_response
    from formulation.fleet.solve import solve_fleet

    if not isinstance(problem, FleetProblem):
        problem = fleet_from_request(problem, host)
    return fleet_response(solve_fleet(problem, progress, monitor))


def fleet_demand_response(
    problem: FleetProblem | FleetRequest,
    event: dict[str, Any],
    host: Host,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """A demand-response event at one site of a fleet: the local and re-routed
    responses (:func:`formulation.fleet.dr.fleet_demand_response`)."""
    from formulation.fleet.dr import fleet_demand_response as what_if

    if not isinstance(problem, FleetProblem):
        problem = fleet_from_request(problem, host)
    return what_if(problem, event, progress, host)
