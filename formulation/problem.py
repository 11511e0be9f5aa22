"""The site scheduling problem of SPEC 4, as validated frozen dataclasses.

A request of SPEC 6.1 is validated by its one schema (:mod:`formulation.request`, which
the HTTP API publishes) and turned into these by :func:`problem_from_request`; the
rules that span fields are checked here before any model is built, and every error
names the field (``deployments[1].demand_rps[7]``) and the reason.

Choices where SPEC is silent:

* ``max_instance_changes_per_period`` limits, per deployment and period, the number of
  instances started plus stopped over both phases: ``|dn_P| + |dn_D| <= limit``.
* A deployment's candidates are "off" ``(0, 0)`` and every ``(n_P, n_D)`` with both
  ``>= 1`` within its bounds and ``max_gpus``; a phase alone has no capacity, so
  ``(n, 0)`` and ``(0, n)`` are never candidates.
* Energy prices must be >= 0: with a non-negative price of energy, cost is concave in
  the served load of a configuration, which the decomposition relies on (negative
  prices are refused with a clear error rather than solved approximately).
* ``initial`` defaults to off; it must be a candidate (within bounds and
  ``max_gpus``), or be off.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from formulation.request import (
    MAX_PERIODS,
    Bounds,
    DeploymentIn,
    Initial,
    ScheduleRequest,
    SiteIn,
    SolverIn,
    TransitionsIn,
    parse_request,
)
from model.catalog import list_gpus
from model.errors import InputError
from model.workload import check_no_file


def _default(schema: type[BaseModel], name: str) -> Any:
    """The request schema's default of field ``name``: the one source of each default
    (:mod:`formulation.request`), which these dataclasses take for theirs."""
    return schema.model_fields[name].default


class Method(StrEnum):
    """How the schedule MILP is solved (see formulation.solve)."""

    #: the phased pipeline; multipliers by column generation (stabilised cutting planes)
    AUTO = "auto"
    #: the same pipeline; multipliers by the volume algorithm (subgradient, Polyak steps)
    VOLUME = "volume"
    #: the compact MILP over every candidate, as one HiGHS solve (the exact reference)
    COMPACT = "compact"


@dataclass(frozen=True)
class DeploymentInput:
    name: str
    model: str
    gpu: str
    workload: str
    demand_rps: tuple[float, ...]
    #: each phase's GPU type where it is not ``gpu`` (docs/mixed-gpus.md)
    prefill_gpu: str | None = None
    decode_gpu: str | None = None
    unserved_penalty_usd_per_request: float = _default(
        DeploymentIn, "unserved_penalty_usd_per_request"
    )
    headroom: float = _default(DeploymentIn, "headroom")
    max_gpus: int = _default(DeploymentIn, "max_gpus")
    min_n_p: int = _default(Bounds, "min_n_p")
    max_n_p: int | None = _default(Bounds, "max_n_p")
    min_n_d: int = _default(Bounds, "min_n_d")
    max_n_d: int | None = _default(Bounds, "max_n_d")
    initial_n_p: int = _default(Initial, "n_p")
    initial_n_d: int = _default(Initial, "n_d")
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    model_variant: str = _default(DeploymentIn, "model_variant")
    performance: str = _default(DeploymentIn, "performance")
    framework: str | None = _default(DeploymentIn, "framework")
    #: the settings the deployment may use per phase (None: the full clock only, and
    #: the response names none); validated against the GPU when the tables are built
    prefill_settings: tuple[str, ...] | None = None
    decode_settings: tuple[str, ...] | None = None
    #: p99 targets the capacities are taken under (None: no target)
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None

    @property
    def phase_gpus(self) -> tuple[str, str]:
        """The GPU types (inventory keys) of the prefill and the decode instances."""
        return (self.prefill_gpu or self.gpu, self.decode_gpu or self.gpu)


@dataclass(frozen=True)
class SiteInput:
    gpu_inventory: Mapping[str, int]
    pue: float = _default(SiteIn, "pue")
    idle_gpu_power_w: float = _default(SiteIn, "idle_gpu_power_w")
    carbon_price_usd_per_tonne: float = _default(SiteIn, "carbon_price_usd_per_tonne")
    interconnect: str | None = _default(SiteIn, "interconnect")
    interconnect_gb_per_s: float | None = _default(SiteIn, "interconnect_gb_per_s")


@dataclass(frozen=True)
class GridInput:
    power_cap_w: tuple[float, ...]
    price_usd_per_mwh: tuple[float, ...]
    carbon_g_per_kwh: tuple[float, ...]


@dataclass(frozen=True)
class TransitionInput:
    start_cost_usd: float = _default(TransitionsIn, "start_cost_usd")
    stop_cost_usd: float = _default(TransitionsIn, "stop_cost_usd")
    max_instance_changes_per_period: int | None = _default(
        TransitionsIn, "max_instance_changes_per_period"
    )


@dataclass(frozen=True)
class SolverOptions:
    time_limit_s: float = _default(SolverIn, "time_limit_s")
    mip_gap: float = _default(SolverIn, "mip_gap")
    threads: int | None = _default(SolverIn, "threads")
    method: Method = Method(_default(SolverIn, "method"))


@dataclass(frozen=True)
class Host:
    """What the machine running a solve allows; set by the caller, never by a request."""

    #: resolve `trace:`/`moments:` workload files (the command line on the user's own
    #: files); False everywhere else, so a request never reads a server file
    read_files: bool = False
    #: refuse, before any table is built, a problem whose solve is estimated to need
    #: more memory than this (MB); None: no limit
    memory_budget_mb: float | None = None
    #: the kernel database deployments with ``performance: kernels`` read (a server's
    #: setting, the command line's ``--kernels``); None: such deployments are refused
    kernels: str | None = None
    #: the kernel tables' version per catalog GPU (the command line's
    #: ``--kernel-version``); a GPU not listed uses its engine calibration's version
    kernel_versions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ScheduleProblem:
    period_minutes: float
    site: SiteInput
    deployments: tuple[DeploymentInput, ...]
    grid: GridInput
    transitions: TransitionInput = field(default_factory=TransitionInput)
    solver: SolverOptions = field(default_factory=SolverOptions)
    host: Host = field(default_factory=lambda: Host())

    @property
    def n_periods(self) -> int:
        return len(self.deployments[0].demand_rps)

    @property
    def period_hours(self) -> float:
        return self.period_minutes / 60.0


def _finite(path: str, v: float, lo: float | None = None, hi: float | None = None) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InputError(path, f"must be a finite number, got {v!r}")
    if lo is not None and v < lo:
        raise InputError(path, f"must be >= {lo:g}, got {v:g}")
    if hi is not None and v > hi:
        raise InputError(path, f"must be <= {hi:g}, got {v:g}")


def expand_series(path: str, value: float | Sequence[float], n: int) -> tuple[float, ...]:
    """A constant or a per-period series, as ``n`` values (lengths must agree)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        _finite(path, value)
        return (float(value),) * n
    if isinstance(value, str | bytes | bool) or not isinstance(value, Sequence):
        raise InputError(path, "must be a number or a list with one value per period")
    vals = tuple(value)
    if len(vals) != n:
        raise InputError(path, f"has {len(vals)} values but the horizon has {n} periods")
    for i, v in enumerate(vals):
        _finite(f"{path}[{i}]", v)
    return tuple(float(v) for v in vals)


def horizon(req: ScheduleRequest) -> int:
    """The number of periods: the length every per-period series of the request shares
    (each deployment's ``demand_rps`` and each grid series given as a list). When they
    differ, the length most of them have (``deployments[0].demand_rps``'s on a tie) is
    the horizon, and the error names the first series of another length."""
    series = [
        (f"deployments[{i}].demand_rps", len(d.demand_rps)) for i, d in enumerate(req.deployments)
    ]
    for fld in ("power_cap_w", "price_usd_per_mwh", "carbon_g_per_kwh"):
        value = getattr(req.grid, fld)
        if isinstance(value, list):
            series.append((f"grid.{fld}", len(value)))
    counts = Counter(n for _, n in series)
    first = series[0][1]
    n = max(counts, key=lambda k: (counts[k], k == first))
    odd = [(path, k) for path, k in series if k != n]
    if odd:
        path, k = odd[0]
        agree = [p for p, m in series if m == n]
        named = ", ".join(agree[:2]) + (f" and {len(agree) - 2} more" if len(agree) > 2 else "")
        raise InputError(
            path,
            f"has {k} values but the horizon has {n} periods "
            f"({named} {'has' if len(agree) == 1 else 'have'} {n})",
        )
    return n


def validate(p: ScheduleProblem) -> None:
    """The rules the request schema cannot state, checked before the catalog's models and
    calibrations are read: the inventory's GPU types (the catalog's list), across fields
    (series lengths, names, inventories, bounds, initial states) and the
    formulation's own limits; ranges of single fields are the schema's
    (:mod:`formulation.request`). Raises InputError naming the field."""
    n = len(p.deployments[0].demand_rps)
    if n > MAX_PERIODS:
        raise InputError("deployments[0].demand_rps", f"at most {MAX_PERIODS} periods")
    s = p.site
    known = list_gpus()
    for gpu in s.gpu_inventory:  # an unknown type would stand idle, costed without a word
        if gpu not in known:
            raise InputError(
                f"site.gpu_inventory.{gpu}",
                f"unknown GPU type {gpu!r}; the catalog has {', '.join(known)}",
            )
    names: set[str] = set()
    for i, d in enumerate(p.deployments):
        at = f"deployments[{i}]"
        if d.name in names:
            raise InputError(f"{at}.name", f"must be non-empty and unique, got {d.name!r}")
        names.add(d.name)
        if not p.host.read_files:
            check_no_file(d.workload, f"{at}.workload")
        if len(d.demand_rps) != n:
            raise InputError(
                f"{at}.demand_rps",
                f"has {len(d.demand_rps)} periods but deployments[0] has {n}",
            )
        for fld in ("prefill_gpu", "decode_gpu"):
            gpu = getattr(d, fld) or d.gpu
            if gpu not in s.gpu_inventory:
                raise InputError(
                    f"{at}.{fld if getattr(d, fld) else 'gpu'}",
                    f"GPU type {gpu!r} is not in site.gpu_inventory "
                    f"({', '.join(sorted(s.gpu_inventory))})",
                )
        for fld, lo_fld in (("max_n_p", "min_n_p"), ("max_n_d", "min_n_d")):
            v = getattr(d, fld)
            if v is not None and v < getattr(d, lo_fld):
                raise InputError(f"{at}.{fld}", f"must be >= {lo_fld}")
        if (d.initial_n_p == 0) != (d.initial_n_d == 0):
            raise InputError(
                f"{at}.initial",
                "a running deployment needs both phases: n_p and n_d both 0 or both >= 1",
            )
    grid = p.grid
    for fld in ("power_cap_w", "price_usd_per_mwh", "carbon_g_per_kwh"):
        vals = getattr(grid, fld)
        if len(vals) != n:
            raise InputError(f"grid.{fld}", f"has {len(vals)} values, horizon has {n}")
    for t in range(n):  # a cap has no lower bound in the schema (a number or a list)
        _finite(f"grid.power_cap_w[{t}]", grid.power_cap_w[t], 0.0)


def deployment_dicts(body: Any) -> list[dict[str, Any]]:
    """The deployments of a request document: a site schedule's, or every site's of a
    fleet's (``sites[i].deployments``); anything malformed is left out, for the
    request's validation to name."""
    if not isinstance(body, dict):
        return []
    groups = [body.get("deployments")]
    sites = body.get("sites")
    if isinstance(sites, list):
        groups += [site.get("deployments") for site in sites if isinstance(site, dict)]
    return [d for g in groups if isinstance(g, list) for d in g if isinstance(d, dict)]


def _fill(body: Any, key: str, value: str) -> Any:
    """``body`` (a schedule or fleet request) with ``key`` set to ``value`` on each
    deployment that does not name its own; anything malformed is left for the
    request's validation."""
    for dep in deployment_dicts(body):
        dep.setdefault(key, value)
    return body


def fill_model_variant(body: Any, variant: str) -> Any:
    """``body`` with ``model_variant`` set on each deployment that names none."""
    return _fill(body, "model_variant", variant)


def fill_performance(body: Any, performance: str) -> Any:
    """``body`` with ``performance`` set on each deployment that names none."""
    return _fill(body, "performance", performance)


def problem_from_dict(body: Any, host: Host | None = None) -> ScheduleProblem:
    """Parse and validate a schedule request document (SPEC 6.1) with the request schema
    (:mod:`formulation.request`; unknown fields are errors), then build the problem.
    A problem parsed already (a :class:`ScheduleProblem`, checked where it was parsed)
    is taken as it is, on ``host`` when one is given.

    Workload files (`trace:`, `moments:`) are refused unless ``host.read_files``."""
    if isinstance(body, ScheduleProblem):
        return body if host is None else dataclasses.replace(body, host=host)
    host = host or Host()
    return problem_from_request(parse_request(body, host.read_files), host)


def problem_from_request(req: ScheduleRequest, host: Host | None = None) -> ScheduleProblem:
    """The problem of a validated request, checked across fields (:func:`validate`)."""
    deps = tuple(
        DeploymentInput(
            name=d.name,
            model=d.model,
            gpu=d.gpu,
            workload=d.workload,
            demand_rps=tuple(float(x) for x in d.demand_rps),
            prefill_gpu=d.prefill_gpu,
            decode_gpu=d.decode_gpu,
            unserved_penalty_usd_per_request=d.unserved_penalty_usd_per_request,
            headroom=d.headroom,
            max_gpus=d.max_gpus,
            min_n_p=d.bounds.min_n_p,
            max_n_p=d.bounds.max_n_p,
            min_n_d=d.bounds.min_n_d,
            max_n_d=d.bounds.max_n_d,
            initial_n_p=d.initial.n_p,
            initial_n_d=d.initial.n_d,
            overrides={k: dict(v) for k, v in d.overrides.items()},
            model_variant=d.model_variant,
            performance=d.performance,
            framework=d.framework,
            prefill_settings=None if d.settings is None else tuple(d.settings.prefill),
            decode_settings=None if d.settings is None else tuple(d.settings.decode),
            ttft_p99_s=None if d.latency_targets is None else d.latency_targets.ttft_p99_s,
            tpot_p99_s=None if d.latency_targets is None else d.latency_targets.tpot_p99_s,
        )
        for d in req.deployments
    )
    n = horizon(req)
    site = SiteInput(
        gpu_inventory=dict(req.site.gpu_inventory),
        pue=req.site.pue,
        idle_gpu_power_w=req.site.idle_gpu_power_w,
        carbon_price_usd_per_tonne=req.site.carbon_price_usd_per_tonne,
        interconnect=req.site.interconnect,
        interconnect_gb_per_s=req.site.interconnect_gb_per_s,
    )
    g = req.grid
    grid = GridInput(
        power_cap_w=expand_series("grid.power_cap_w", g.power_cap_w, n),
        price_usd_per_mwh=expand_series("grid.price_usd_per_mwh", g.price_usd_per_mwh, n),
        carbon_g_per_kwh=expand_series("grid.carbon_g_per_kwh", g.carbon_g_per_kwh, n),
    )
    tr = TransitionInput(
        start_cost_usd=req.transitions.start_cost_usd,
        stop_cost_usd=req.transitions.stop_cost_usd,
        max_instance_changes_per_period=req.transitions.max_instance_changes_per_period,
    )
    so = SolverOptions(
        time_limit_s=req.solver.time_limit_s,
        mip_gap=req.solver.mip_gap,
        threads=req.solver.threads,
        method=Method(req.solver.method),
    )
    prob = ScheduleProblem(
        period_minutes=req.period_minutes,
        site=site,
        deployments=deps,
        grid=grid,
        transitions=tr,
        solver=so,
        host=host or Host(),
    )
    validate(prob)
    return prob
