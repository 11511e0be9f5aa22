"""Demand-response what-if and flexibility curve of validated requests, run in the
solver's worker processes, as the runs of the use-case table's rows
(:mod:`service.usecases`, whose answer ``pdwatt dr --json`` / ``pdwatt flex --json``
print too). Errors of the nested schedule request name their field
under ``request.``. No workload file is read (the host's ``read_files`` stays False)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from formulation.problem import Host, ScheduleProblem
from service.schemas_dr import DemandResponseRequest, FlexibilityRequest

REQUEST = "request."
#: sees a job's progress; returning True stops the work (the job was cancelled)
Monitor = Callable[[dict[str, Any]], bool]


def demand_response(
    req: DemandResponseRequest,
    host: Host | None = None,
    monitor: Monitor | None = None,
    problem: ScheduleProblem | None = None,
) -> dict[str, Any]:
    """``host``: what the solves may use (the server's memory budget and kernel
    database, never the request's); ``monitor``: a job's progress and cancellation;
    ``problem``: the schedule request's, parsed already where the request was checked
    (else parsed here)."""
    from formulation.whatif.dr import demand_response as run

    host = host or Host()
    event = req.event.model_dump(mode="json")
    body = req.request if problem is None else problem
    return run(body, event, request_field=REQUEST, host=host, monitor=monitor)


def flexibility(
    req: FlexibilityRequest,
    host: Host | None = None,
    monitor: Monitor | None = None,
    problem: ScheduleProblem | None = None,
) -> dict[str, Any]:
    """As :func:`demand_response`, for a flexibility curve."""
    from formulation.whatif.flex import flexibility_curve

    return flexibility_curve(
        req.request if problem is None else problem,
        req.period,
        req.points,
        request_field=REQUEST,
        host=host or Host(),
        monitor=monitor,
    )
