"""The schedule request (SPEC 6.1): one pydantic schema, the single source of its field
names, defaults and limits, for the HTTP API (which publishes it in OpenAPI) and the
command line alike; :func:`formulation.problem.problem_from_request` turns a validated
request into the typed problem, and :func:`parse_request` validates a plain document,
naming the field at fault.

Cross-field rules (series lengths, inventories, initial states) are checked on the
problem (:func:`formulation.problem.validate`). Workload files (``trace:``,
``moments:``) are refused unless the caller passes ``read_files`` (the command line);
``true``/``false`` are refused where a number is expected.
"""

from __future__ import annotations

import copy
import re
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from formulation.demo import demo_request
from model.errors import InputError
from model.spec import (
    DEFAULT_PERFORMANCE,
    DEFAULT_VARIANT,
    FRAMEWORKS,
    MODEL_VARIANTS,
    PERFORMANCE_SOURCES,
    check_framework,
    check_performance,
    check_variant,
)
from model.workload import check_no_file

#: the least values a schedule accepts (the schema enforces and publishes them)
MIN_PERIOD_MINUTES = 1e-3
MIN_HEADROOM = 1e-6

#: the most a schedule may hold or ask for: the hard limits of the formulation, the one
#: source of each (a server's settings, ``service.runtime.settings``, may set lower ones, never
#: higher ones). There is no fixed number of deployments: what a machine can take is its
#: solve's estimated memory against the budget (:mod:`formulation.memory`)
MAX_PERIODS = 2016  # two weeks of 10-minute periods


@dataclass(frozen=True)
class TimeLimit:
    """``solver.time_limit_s`` (seconds): the least a request may ask for, what one that
    gives none gets, and the most one may ask for.

    The one definition of the time limit: the schedule's own is :data:`TIME_LIMIT`; a
    server's is :meth:`at_most` its ``PDWATT_MAX_TIME_LIMIT_S``
    (:func:`service.requests.limits.time_limit`). The request schema's field takes its bounds
    and default from :data:`TIME_LIMIT`, and a JSON schema generated inside
    :func:`publishing` carries the limit published there instead (a server's OpenAPI
    document: the field's default and maximum, every ``solver`` default object and
    every example's time limit)."""

    least_s: float
    default_s: float
    max_s: float

    def at_most(self, max_s: float) -> TimeLimit:
        """This limit with its maximum lowered to ``max_s``: a request that gives none
        then gets the default, or that maximum when it is lower."""
        most = min(self.max_s, max_s)
        return TimeLimit(self.least_s, min(self.default_s, most), most)


#: the schedule's own time limit: at least 0.01 s, 30 s when a request gives none,
#: at most a day
TIME_LIMIT = TimeLimit(least_s=0.01, default_s=30.0, max_s=86400.0)

#: the time limit JSON schemas generated now publish (:func:`publishing`)
_PUBLISHED: ContextVar[TimeLimit] = ContextVar("published_time_limit", default=TIME_LIMIT)


@contextmanager
def publishing(limit: TimeLimit) -> Iterator[None]:
    """JSON schemas of the request models generated inside publish ``limit`` (its
    default and maximum, and examples that ask for no more)."""
    token = _PUBLISHED.set(limit)
    try:
        yield
    finally:
        _PUBLISHED.reset(token)


def _time_limit_schema(schema: dict[str, Any]) -> None:
    limit = _PUBLISHED.get()
    schema["default"] = limit.default_s
    schema["maximum"] = limit.max_s


def solver_default_schema(schema: dict[str, Any]) -> None:
    """The solver field's published default, with the time limit this server gives."""
    default = schema.get("default")
    if isinstance(default, dict):
        default["time_limit_s"] = _PUBLISHED.get().default_s


def _capped(node: Any, max_s: float) -> None:
    if isinstance(node, dict):
        solver = node.get("solver")
        if isinstance(solver, dict):
            t = solver.get("time_limit_s")
            if isinstance(t, int | float) and t > max_s:
                solver["time_limit_s"] = max_s
        for value in node.values():
            _capped(value, max_s)
    elif isinstance(node, list):
        for value in node:
            _capped(value, max_s)


def examples(*docs: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A model's ``json_schema_extra``: ``docs`` as its examples, none asking for a
    longer time limit (any ``solver.time_limit_s`` in them) than the one published
    (:func:`publishing`)."""

    def extra(schema: dict[str, Any]) -> None:
        out = copy.deepcopy(list(docs))
        _capped(out, _PUBLISHED.get().max_s)
        schema["examples"] = out

    return extra


#: what a name (of a deployment, site, region, model or GPU) may be
NAME_PATTERN = r"^[A-Za-z0-9._:\-]{1,64}$"
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=NAME_PATTERN)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Scalar = float | int | str | bool
Overrides = dict[Literal["model", "gpu", "calibration", "serving"], dict[str, Scalar]]


def _types_in(annotation: Any) -> set[Any]:
    """Every plain type a value of ``annotation`` may hold (in unions, list items,
    dict values; not dict keys, which JSON writes as strings)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if not args:
        return {annotation}
    if origin is Annotated:
        args = args[:1]  # the type; the rest is metadata
    elif origin is dict:
        args = args[1:]
    out: set[Any] = set()
    for a in args:
        out |= _types_in(a)
    return out


def _has(value: Any, kind: type | tuple[type, ...]) -> bool:
    """``value``, or one of its items or values, is a ``kind``."""
    if isinstance(value, kind):
        return True
    if isinstance(value, list):
        return any(isinstance(v, kind) for v in value)
    if isinstance(value, dict):
        return any(isinstance(v, kind) for v in value.values())
    return False


class Strict(BaseModel):
    """Unknown fields are refused, and so are ``true``/``false`` and strings where a
    number is expected: JSON booleans and strings are not numbers, though pydantic
    would take ``true`` as 1 and ``"60"`` as 60; and NaN and infinities (which Python's
    JSON reads) are not numbers either, whatever bounds a field has."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None or not _has(value, (bool, str)):
            return value
        kinds = _types_in(cls.model_fields[info.field_name].annotation)
        if not kinds & {int, float}:
            return value
        if bool not in kinds and _has(value, bool):
            raise ValueError("must be a number, not true or false")
        if str not in kinds and _has(value, str):
            raise ValueError("must be a number, not a string")
        return value


WORKLOAD_DOC = (
    "fixed:IN:OUT or a preset name (azure-conv-2023, azure-code-2023, mooncake); "
    "files (trace:, moments:, in any spelling) are never read over HTTP: send `moments`"
)


def _no_file(v: str, info: ValidationInfo) -> str:
    """File forms are refused unless the caller reads files (``context={"read_files":
    True}``: the command line, on the user's own files)."""
    if not (info.context or {}).get("read_files"):
        check_no_file(v)  # InputError is a ValueError: pydantic reports it at the field
    return v


WorkloadText = Annotated[
    str, Field(min_length=1, max_length=64, description=WORKLOAD_DOC), AfterValidator(_no_file)
]


def _reason_only(check: Callable[[str], str], v: str) -> str:
    """``check(v)``, its InputError as a ValueError of the reason alone (pydantic names
    the field itself)."""
    try:
        return check(v)
    except InputError as e:
        raise ValueError(e.reason) from e


def _known_variant(v: str) -> str:
    return _reason_only(check_variant, v)


ModelVariant = Annotated[
    str,
    Field(
        description="memory balance: paper (SPEC 2.5) or admission (docs/admission.md)",
        json_schema_extra={"enum": list(MODEL_VARIANTS)},
    ),
    AfterValidator(_known_variant),
]


def _known_performance(v: str) -> str:
    return _reason_only(check_performance, v)


def _known_framework(v: str) -> str:
    return _reason_only(check_framework, v)


Performance = Annotated[
    str,
    Field(
        description="where the times come from: spec (SPEC 2.2-2.3's rooflines with the "
        "calibration) or kernels (measured kernel tables plus the serving engine's fitted "
        "overheads, docs/kernels.md; the server's kernel database, PDWATT_KERNELS)",
        json_schema_extra={"enum": list(PERFORMANCE_SOURCES)},
    ),
    AfterValidator(_known_performance),
]
Framework = Annotated[
    str,
    Field(
        description="performance kernels only: the serving framework whose kernel tables "
        "and engine calibration are used (default vllm; the shipped engine calibrations "
        "are vLLM on H100 and B200)",
        json_schema_extra={"enum": list(FRAMEWORKS)},
    ),
    AfterValidator(_known_framework),
]


#: the links of model.performance.interconnect.INTERCONNECTS (a test holds the two lists equal)
Interconnect = Annotated[
    Literal["nvlink", "infiniband", "ethernet"],
    Field(
        description="the link a request's KV crosses from prefill to decode, charged to "
        "TTFT and capacity: nvlink (450 GB/s per GPU each way, one board only), infiniband "
        "(400 Gb/s), ethernet (100 Gb/s); default: infiniband for phases on two GPU "
        "types, not charged otherwise (docs/mixed-gpus.md)",
    ),
]

LinkGbPerS = Annotated[
    float,
    Field(
        gt=0,
        le=1e4,
        allow_inf_nan=False,
        description="the link's bandwidth per GPU and direction (GB/s), in place of the "
        "named link's",
    ),
]


# Upper bounds far beyond any real site keep every total finite (a response with an
# overflowed total cannot be written as JSON).
Rate = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]  # req/s
Usd = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
PowerW = Annotated[float, Field(le=1e10, allow_inf_nan=False)]  # lower bounds: problem.py
PriceMWh = Annotated[float, Field(ge=0, le=1e5, allow_inf_nan=False)]
CarbonKWh = Annotated[float, Field(ge=0, le=1e5, allow_inf_nan=False)]


class Initial(Strict):
    n_p: int = Field(0, ge=0, le=4096)
    n_d: int = Field(0, ge=0, le=4096)


class Bounds(Strict):
    min_n_p: int = Field(0, ge=0)
    max_n_p: int | None = Field(None, ge=0)
    min_n_d: int = Field(0, ge=0)
    max_n_d: int | None = Field(None, ge=0)


#: the most settings a deployment may list per phase (each pair of a prefill and a
#: decode setting is one more table of its configurations)
MAX_SETTINGS_PER_PHASE = 8

SettingText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=32,
        description="'<N>MHz' (a locked SM clock) or '<N>W' (a per-GPU power limit), "
        "or 'default' (the full clock); docs/clocks.md",
    ),
]
def _distinct(items: list[Any]) -> list[Any]:
    """A list whose items are each given once: a repeat would be searched once, the
    other dropped without a word."""
    seen = []
    for item in items:
        if item in seen:
            raise ValueError(f"{item!r} is listed more than once")
        seen.append(item)
    return items


#: a list whose items are each given once (:func:`_distinct`)
Distinct = AfterValidator(_distinct)

SettingList = Annotated[
    list[SettingText], Field(min_length=1, max_length=MAX_SETTINGS_PER_PHASE), Distinct
]


class SettingsIn(Strict):
    """The GPU settings a deployment may use per phase; each period of the schedule
    chooses one of each (free to change: not an instance change)."""

    prefill: SettingList = Field(default_factory=lambda: ["default"])
    decode: SettingList = Field(default_factory=lambda: ["default"])


class LatencyTargetsIn(Strict):
    """p99 latency targets (seconds). A deployment's capacity is then the highest rate
    at which its configuration meets them: decode at the largest batch whose iteration
    is within the TPOT target, prefill up to the utilisation whose p99 TTFT is within
    the TTFT target (docs/admission.md, section 8). A TTFT target needs per-request
    lengths: a ``fixed:IN:OUT`` workload or a trace preset, not moments."""

    ttft_p99_s: float | None = Field(None, gt=0, allow_inf_nan=False, description="p99 TTFT (s)")
    tpot_p99_s: float | None = Field(None, gt=0, allow_inf_nan=False, description="p99 TPOT (s)")


class DeploymentIn(Strict):
    name: Name
    model: Name
    gpu: Name
    prefill_gpu: Name | None = Field(
        None,
        description="the prefill instances' GPU type (default: gpu); drawn from its own "
        "inventory (docs/mixed-gpus.md)",
    )
    decode_gpu: Name | None = Field(
        None,
        description="the decode instances' GPU type (default: gpu); its memory holds the "
        "KV pool",
    )
    workload: WorkloadText
    demand_rps: list[Rate] = Field(min_length=1)
    unserved_penalty_usd_per_request: Usd = 0.01
    headroom: float = Field(1.0, ge=MIN_HEADROOM, le=1)
    max_gpus: int = Field(16, ge=0, le=512)
    bounds: Bounds = Bounds()
    initial: Initial = Initial()
    overrides: Overrides = Field(default_factory=dict)
    model_variant: ModelVariant = DEFAULT_VARIANT
    performance: Performance = DEFAULT_PERFORMANCE
    framework: Framework | None = None
    settings: SettingsIn | None = Field(
        None,
        description="GPU settings the deployment may use per phase (default: the full "
        "clock only); each period of the response names the ones chosen",
    )
    latency_targets: LatencyTargetsIn | None = Field(
        None,
        description="p99 TTFT/TPOT targets: each configuration's capacity is the highest "
        "rate at which it meets them (default: none, SPEC 2.5's capacity)",
    )


class SiteIn(Strict):
    gpu_inventory: dict[Name, Annotated[int, Field(ge=0)]] = Field(min_length=1)
    pue: float = Field(1.0, ge=1, le=5)
    idle_gpu_power_w: float = Field(120.0, ge=0, le=1e5)
    carbon_price_usd_per_tonne: float = Field(0.0, ge=0, le=1e5)
    interconnect: Interconnect | None = None
    interconnect_gb_per_s: LinkGbPerS | None = None


class GridIn(Strict):
    power_cap_w: PowerW | Annotated[list[PowerW], Field(min_length=1)]
    price_usd_per_mwh: PriceMWh | Annotated[list[PriceMWh], Field(min_length=1)] = 0.0
    carbon_g_per_kwh: CarbonKWh | Annotated[list[CarbonKWh], Field(min_length=1)] = 0.0


class TransitionsIn(Strict):
    start_cost_usd: Usd = 0.0
    stop_cost_usd: Usd = 0.0
    max_instance_changes_per_period: int | None = Field(None, ge=0)


class SolverIn(Strict):
    time_limit_s: float = Field(
        TIME_LIMIT.default_s,
        ge=TIME_LIMIT.least_s,
        le=TIME_LIMIT.max_s,
        json_schema_extra=_time_limit_schema,
    )
    mip_gap: float = Field(1e-3, ge=0, le=1)
    threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="HiGHS threads and worker processes for the per-deployment dynamic "
        "programs (at most the server's cores); default: every core",
    )
    method: Literal["auto", "volume", "compact"] = Field(
        "auto",
        description="auto: the phased solve with column-generation multipliers; volume: "
        "the same with volume-algorithm multipliers; compact: one MILP over every "
        "candidate (exact reference, small sites only)",
    )


class ScheduleRequest(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=examples(demo_request()))
    period_minutes: float = Field(ge=MIN_PERIOD_MINUTES, le=1440)
    site: SiteIn
    deployments: list[DeploymentIn] = Field(min_length=1)
    grid: GridIn
    transitions: TransitionsIn = TransitionsIn()
    solver: SolverIn = Field(SolverIn(), json_schema_extra=solver_default_schema)


_UNION_TAG = re.compile(
    r"^(constrained-)?(float|int|str|bool)$|^(list|dict|tuple|set|function-\w+)\[.*\]$"
)


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """A pydantic error location as a field path: ``deployments[0].demand_rps[2]`` (the
    tags pydantic adds for the members of a union left out)."""
    parts = list(loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc)
    out = ""
    for p in parts:
        if isinstance(p, str) and _UNION_TAG.match(p):
            continue
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


M = typing.TypeVar("M", bound=BaseModel)


def parse_model(model: type[M], body: Any, read_files: bool = False) -> M:
    """``body`` validated as a ``model`` (a schedule request, or a document holding
    one); :class:`InputError` naming the field at fault."""
    try:
        return model.model_validate(body, context={"read_files": read_files})
    except ValidationError as exc:
        # a union reports one error per member: the deepest one names the value at fault
        # (``[10, -1]`` for a number-or-list: ``grid.price_usd_per_mwh[1]``)
        errors = [(field_path(e.get("loc", ())), e.get("msg", "invalid")) for e in exc.errors()]
        where, why = max(errors, key=lambda fe: fe[0].count(".") + fe[0].count("["))
        raise InputError(where, why) from None


def parse_request(body: Any, read_files: bool = False) -> ScheduleRequest:
    """``body`` validated as a schedule request; :class:`InputError` naming the field at
    fault. A request validated already is taken as it is."""
    if isinstance(body, ScheduleRequest):
        return body
    return parse_model(ScheduleRequest, body, read_files)
