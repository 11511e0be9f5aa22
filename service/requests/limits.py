"""The server's limits on what a solve may ask for (settings ``PDWATT_MAX_*``, and the
flexibility curve's evaluation count), checked before any work: the one place where
each route and the job of the same kind find them, so that a job refuses exactly what
its synchronous route refuses.

* :func:`check_schedule`: a schedule request (``POST /v1/schedule``, and the request
  inside every other kind): the limits (:func:`check_schedule_limits`), the rules
  across fields and the memory budget its solver worker applies;
* :func:`check_demand_response`, :func:`check_flexibility`: ``POST
  /v1/demand-response`` and ``POST /v1/flexibility``;
* :func:`check_fleet`: a fleet request (``POST /v1/fleet/schedule``), each of its sites
  held to a site schedule's limits.

The use-case table (:mod:`service.usecases.table`) gives each kind its check, for its route
and its jobs alike.

The time limit: :func:`time_limit` is this server's ``solver.time_limit_s``, the
schedule's own (:data:`formulation.request.TIME_LIMIT`, the one definition of its
least, default and maximum) at most ``PDWATT_MAX_TIME_LIMIT_S``; the checks below, the
OpenAPI document (generated with it, :mod:`service.main`) and the jobs read it there.
A request that leaves ``solver.time_limit_s`` out gets the default
(:func:`with_server_defaults`, in a new request: the client's is never changed); a value
the client sent is kept: above the maximum it is refused.

Each check returns what it made: the request with this server's defaults and the
schedule problem it parsed (once, in the process that checks), which the solver worker
runs without parsing the request again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

from formulation import memory
from formulation.data import candidate_counts, check_memory
from formulation.fleet.problem import FleetProblem, fleet_from_request
from formulation.fleet.request import FleetRequest, FleetSiteIn
from formulation.problem import Host, ScheduleProblem, problem_from_request
from formulation.request import TIME_LIMIT, TimeLimit
from model.errors import InputError
from model.performance.engine import NO_KERNEL_PACKAGE, installed_kernels
from model.shapes import parse_shape
from service.requests.dr import (
    DemandResponseRequest,
    FleetDemandResponseRequest,
    FlexibilityRequest,
)
from service.requests.schemas import FrontRequest, ScheduleRequest
from service.runtime.settings import Settings

#: a schedule request, or one that extends it (a site's registration)
R = TypeVar("R", bound=ScheduleRequest)

#: Most one-period solves one flexibility curve may ask for (periods x (points + 1)).
MAX_FLEX_EVALUATIONS = 10_000


def time_limit(s: Settings) -> TimeLimit:
    """This server's time limit: the schedule's own
    (:data:`~formulation.request.TIME_LIMIT`) at most ``PDWATT_MAX_TIME_LIMIT_S``; a
    request that gives none gets the schedule's default, or that maximum when it is
    lower."""
    return TIME_LIMIT.at_most(s.max_time_limit_s)


def with_server_defaults(req: R, s: Settings) -> R:
    """``req`` with this server's defaults where the client left a field out (only
    ``solver.time_limit_s``), as a new request: ``req`` itself is never changed, and
    what the client sent is kept."""
    if "time_limit_s" in req.solver.model_fields_set:
        return req
    solver = req.solver.model_copy(update={"time_limit_s": time_limit(s).default_s})
    solver.model_fields_set.discard("time_limit_s")  # still the server's choice
    return req.model_copy(update={"solver": solver})


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


#: the GPUs of each shape ``auto`` may search for a phase (model.operations.auto_shapes:
#: tp1, and for G = 2, 4 and 8 tp<G>, tp<G>,ep<G> and tp1,dp<G>,ep<G>)
AUTO_SHAPE_GPUS = (1, 2, 2, 2, 4, 4, 4, 8, 8, 8)


def _instance_pairs(g: int, a: int, b: int) -> int:
    """The configurations ``(n_P, n_D)``, each at least 1, of prefill instances of ``a``
    GPUs and decode instances of ``b`` within ``g`` GPUs: ``n_P a + n_D b <= g``."""
    return sum((g - n * a) // b for n in range(1, (g - b) // a + 1)) if g >= a + b else 0


def _shape_gpus(shapes: Sequence[str] | None, field: str) -> list[int]:
    """The GPUs of each shape a front searches for a phase: the listed ones (the schema
    refuses a repeat), every shape ``auto`` may give, or one GPU for the deployment's
    own (at most the configurations of any shape)."""
    if shapes is None:
        return [1]
    if list(shapes) == ["auto"]:
        return list(AUTO_SHAPE_GPUS)
    return [parse_shape(t, f"{field}[{j}]").gpus for j, t in enumerate(shapes)]


def check_front(req: FrontRequest, s: Settings) -> None:
    """InputError naming ``max_gpus`` when the front evaluates more configurations than
    the largest front this server answers, the one of ``max_front_gpus`` GPUs at one
    setting (every ``(n_P, n_D)`` with ``n_P + n_D <= G``: ``G (G - 1) / 2`` of them,
    one GPU per instance). A front multiplies its configurations by its pairs of
    settings, by every pair of the shapes it searches (each pair's configurations within
    ``max_gpus``) and by its other variants (GPU-type pairs, draft depths)."""
    max_gpus = req.max_gpus
    if max_gpus > s.max_front_gpus:
        raise InputError("max_gpus", f"must be <= {s.max_front_gpus} on this server")
    pairs = len(req.prefill_settings or [""]) * len(req.decode_settings or [""])
    variants = len(req.gpus or [""]) ** 2 * len(req.mtp_draft_tokens or [0])
    shapes_p = _shape_gpus(req.prefill_shapes, "prefill_shapes")
    shapes_d = _shape_gpus(req.decode_shapes, "decode_shapes")

    def count(g: int) -> int:
        return pairs * variants * sum(_instance_pairs(g, a, b) for a in shapes_p for b in shapes_d)

    budget = _instance_pairs(s.max_front_gpus, 1, 1)
    if count(max_gpus) > budget:
        lo, hi = 1, max_gpus  # the most GPUs within the budget: count rises with them
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if count(mid) <= budget else (lo, mid - 1)
        many = len(shapes_p) * len(shapes_d)
        parts = [f"{pairs} setting pair{'s' * (pairs > 1)}"]
        parts += [f"{many} shape pairs"] if many > 1 else []
        parts += [f"{variants} GPU-type pairs times draft depths"] if variants > 1 else []
        raise InputError(
            "max_gpus",
            f"must be <= {lo} on this server with {', '.join(parts)} (a front evaluates at "
            f"most the configurations of {s.max_front_gpus} GPUs at one setting)",
        )


def check_schedule_limits(req: R, s: Settings, prefix: str = "") -> R:
    """``req`` with this server's defaults (:func:`with_server_defaults`), once it
    exceeds no limit of this server and asks for nothing it does not have (a kernel
    database); InputError naming the field (under ``prefix``, e.g. ``request.``)
    otherwise."""
    req = with_server_defaults(req, s)
    check_site_limits(req, s, prefix)
    check_time_limit(req.solver.time_limit_s, s, prefix)
    return req


def check_site_limits(site: ScheduleRequest | FleetSiteIn, s: Settings, prefix: str) -> None:
    """One site's deployments, periods and GPUs within this server's limits, and the
    kernel database its deployments ask for (a site schedule's, or a fleet's site)."""
    for i, d in enumerate(site.deployments):
        check_performance(d.performance, s, f"{prefix}deployments[{i}].performance")
    if s.max_deployments is not None and len(site.deployments) > s.max_deployments:
        raise InputError(
            f"{prefix}deployments", f"at most {s.max_deployments} deployments on this server"
        )
    if len(site.deployments[0].demand_rps) > s.max_periods:
        raise InputError(
            f"{prefix}deployments[0].demand_rps", f"at most {s.max_periods} periods on this server"
        )
    if sum(site.site.gpu_inventory.values()) > s.max_site_gpus:
        raise InputError(f"{prefix}site.gpu_inventory", f"at most {s.max_site_gpus} GPUs per site")


def check_time_limit(limit_s: float, s: Settings, prefix: str) -> None:
    """A request's ``solver.time_limit_s`` within this server's maximum."""
    most = time_limit(s).max_s
    if limit_s > most:
        raise InputError(f"{prefix}solver.time_limit_s", f"must be <= {most:g} on this server")


def solve_host(s: Settings) -> Host:
    """What this server's solves allow (its memory budget and kernel database)."""
    return Host(memory_budget_mb=s.max_solve_memory_mb, kernels=s.kernels)


def check_memory_budget(req: ScheduleRequest, s: Settings, prefix: str = "") -> ScheduleProblem:
    """The problem of a schedule request, checked across fields and against the memory
    budget, estimated (no table built): InputError naming the field under ``prefix``,
    before the request reaches a solver worker (which applies the same budget before it
    builds a table)."""
    try:
        problem = problem_from_request(req, solve_host(s))
        check_memory(problem)
        return problem
    except InputError as exc:
        exc.field = prefix + exc.field
        exc.args = (f"{exc.field}: {exc.reason}",)
        raise


def check_schedule(req: R, s: Settings, prefix: str = "") -> tuple[R, ScheduleProblem]:
    """Everything a schedule request is checked for before any solve, on a route and in
    a job alike: the server's limits, the rules across fields and the memory budget (no
    table built). InputError names the field under ``prefix``. The request with this
    server's defaults, and its problem."""
    req = check_schedule_limits(req, s, prefix)
    return req, check_memory_budget(req, s, prefix)


def check_demand_response(
    req: DemandResponseRequest, s: Settings, prefix: str = ""
) -> tuple[DemandResponseRequest, ScheduleProblem]:
    """Everything ``POST /v1/demand-response`` refuses before any solve: its schedule
    request's (:func:`check_schedule`). The request with this server's defaults, and its
    schedule request's problem."""
    inner, problem = check_schedule(req.request, s, f"{prefix}request.")
    return req.model_copy(update={"request": inner}), problem


def check_flexibility(
    req: FlexibilityRequest, s: Settings, prefix: str = ""
) -> tuple[FlexibilityRequest, ScheduleProblem]:
    """Everything ``POST /v1/flexibility`` refuses before any solve: its schedule
    request's limits, at most :data:`MAX_FLEX_EVALUATIONS` one-period solves, and its
    schedule request's memory budget. The request with this server's defaults, and its
    schedule request's problem."""
    req = req.model_copy(
        update={"request": check_schedule_limits(req.request, s, f"{prefix}request.")}
    )
    periods = 1 if req.period is not None else len(req.request.deployments[0].demand_rps)
    if periods * (req.points + 1) > MAX_FLEX_EVALUATIONS:
        raise InputError(
            f"{prefix}points",
            f"{periods} period(s) x {req.points} points is more than {MAX_FLEX_EVALUATIONS} "
            "one-period solves; ask for one period or fewer points",
        )
    return req, check_memory_budget(req.request, s, f"{prefix}request.")


def check_fleet(
    req: FleetRequest, s: Settings, prefix: str = ""
) -> tuple[FleetRequest, FleetProblem]:
    """Everything a fleet request is checked for before any solve: each site held to a
    site schedule's limits (deployments, GPUs, periods, kernels; named under
    ``sites[i].``), the time limit, the rules across sites and regions, and each site's
    memory budget (its sites solved alone run one after another). The request with this
    server's defaults, and its problem."""
    if "time_limit_s" not in req.solver.model_fields_set:
        solver = req.solver.model_copy(update={"time_limit_s": time_limit(s).default_s})
        solver.model_fields_set.discard("time_limit_s")  # still the server's choice
        req = req.model_copy(update={"solver": solver})
    for i, site in enumerate(req.sites):
        check_site_limits(site, s, f"{prefix}sites[{i}].")
    check_time_limit(req.solver.time_limit_s, s, prefix)
    try:
        problem = fleet_from_request(req, solve_host(s))
        for i, site_problem in enumerate(problem.sites):
            try:
                check_memory(site_problem)
            except InputError as exc:
                raise InputError(f"sites[{i}].{exc.field}", exc.reason) from None
        if problem.coupled:
            check_fleet_memory(problem)
    except InputError as exc:
        raise InputError(prefix + exc.field, exc.reason) from None
    return req, problem


def check_fleet_memory(problem: FleetProblem) -> memory.MemoryEstimate:
    """Sites that share demand are solved together, their tables held at once: the
    memory of all their deployments (the estimate, returned) within the budget;
    InputError naming the
    deployment that needs the most (``sites[i].deployments[j].max_gpus``), or ``sites``
    when it is their number that does not fit."""
    where = [(i, j) for i, sp in enumerate(problem.sites) for j in range(len(sp.deployments))]
    counts = [c for sp in problem.sites for c in candidate_counts(sp)]
    solver = problem.sites[0].solver
    try:
        return memory.check(
            problem.n_periods,
            counts,
            problem.host.memory_budget_mb,
            memory.workers(solver.threads),
            solver.time_limit_s,
            memory.builds_milp(len(counts), solver.method),
        )
    except InputError as exc:
        m = re.fullmatch(r"deployments\[(\d+)\](.*)", exc.field)
        if m is None:  # their number: plan fewer sites or deployments together
            sites = f"deployments of {len(problem.sites)} sites sharing demand ("
            raise InputError("sites", exc.reason.replace("deployments (", sites, 1)) from None
        i, j = where[int(m.group(1))]
        raise InputError(f"sites[{i}].deployments[{j}]{m.group(2)}", exc.reason) from None


def check_fleet_demand_response(
    req: FleetDemandResponseRequest, s: Settings, prefix: str = ""
) -> tuple[FleetDemandResponseRequest, FleetProblem]:
    """Everything ``POST /v1/fleet/demand-response`` refuses before any solve: its fleet
    request's (:func:`check_fleet`, under ``request.``) and the event's site and window
    (under ``event.``). The request with this server's defaults, and its fleet's
    problem."""
    from formulation.whatif.dr import parse_event

    inner, problem = check_fleet(req.request, s, f"{prefix}request.")
    ev = req.event
    if ev.site not in problem.site_names:
        raise InputError(
            f"{prefix}event.site",
            f"must name a site of the fleet ({', '.join(problem.site_names)}), got {ev.site!r}",
        )
    site = problem.sites[problem.site_names.index(ev.site)]
    try:
        parse_event(ev.model_dump(mode="json", exclude={"site"}), site)
    except InputError as exc:
        raise InputError(prefix + exc.field, exc.reason) from None
    return req.model_copy(update={"request": inner}), problem
