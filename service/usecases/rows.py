"""What a row of the use-case table is (:class:`UseCase`, with its :class:`Route`), what
its check returns (:class:`Checked`) and what its run takes from the process that runs
it (:class:`Context`). The rows are in :mod:`service.usecases.table`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, Literal

from pydantic import BaseModel

from formulation.fleet.problem import FleetProblem
from formulation.problem import Host, ScheduleProblem
from service.runtime.records import Origin
from service.runtime.settings import Settings


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
    #: the host a solve runs on when the caller gives one (the command line's, which
    #: reads the user's own workload files); else the server's, from the two above
    host: Host | None = None
    #: the phases of a solve as they go (the command line's progress lines)
    progress: Callable[[str], None] | None = None

    def solve_host(self) -> Host:
        """What the solves of this run may use: the caller's host, else the server's
        memory budget and kernel database (no file is read)."""
        if self.host is not None:
            return self.host
        return Host(memory_budget_mb=self.memory_budget_mb, kernels=self.kernels)


@dataclass(frozen=True)
class Checked:
    """A request as its row's check leaves it: ``request``, with this server's defaults
    (a new object: the client's is never changed), and ``problem``, the schedule
    problem the check parsed from it (kinds that solve one; the fleet's problem for a
    fleet), which the run takes as it is instead of parsing the request again. A job's
    stored request, parsed in the worker, has no problem yet: the run makes it there,
    once."""

    request: Any
    problem: ScheduleProblem | FleetProblem | None = None


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
    #: where it runs: in the solver pool (429 when every worker is busy, 503 when the
    #: worker died), or in a thread of the API process (milliseconds of work)
    runs_in: Literal["pool", "thread"] = "pool"
    #: the answer holds only the fields the run gave (the schedule's document as the
    #: command line prints it), not every field of the response model
    given_fields_only: bool = True


@dataclass(frozen=True)
class UseCase:
    kind: str
    #: the request the route takes and a job of this kind holds
    request: type[BaseModel]
    #: every refusal before any work, in the API process: ``check(request, settings,
    #: prefix)`` raises InputError naming the field under ``prefix`` (or a lookup
    #: error for a thing that does not exist), else returns the :class:`Checked`
    #: request (the server's defaults filled in a new object, the problem parsed)
    check: Callable[[Any, Settings, str], Checked]
    #: the work, in a solver worker (or a thread, see :attr:`Route.runs_in`):
    #: ``run(checked, context)``, the answer as JSON data
    run: Callable[[Checked, Context], dict[str, Any]]
    route: Route | None = None
    #: a kind of the jobs API (``POST /v1/jobs``)
    job: bool = True
    #: its solve time and status are counted in the solver metrics (:func:`observed`)
    counted: bool = False
    #: the answer as a PNG chart, written to a binary file (``?format=png``)
    chart: Callable[[dict[str, Any], IO[bytes]], None] | None = None
    #: the answer as a CSV table (``?format=csv``)
    csv: Callable[[dict[str, Any]], str] | None = None

    @property
    def formats(self) -> tuple[str, ...]:
        """The route's response formats, JSON first."""
        return ("json",) + (("csv",) if self.csv else ()) + (("png",) if self.chart else ())
