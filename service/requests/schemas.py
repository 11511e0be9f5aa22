"""Request and response schemas of the HTTP API (SPEC 6.1), with limits and examples.

The schedule request is :mod:`formulation.request`'s, the one schema the command line
validates with too (its names are re-exported here for the routes); cross-field
checks (series lengths, inventories, initial states) are those of
:func:`formulation.problem.validate`, so the CLI and the API accept exactly the same
documents.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from formulation.request import (
    Distinct,
    Framework,
    Interconnect,
    LatencyTargetsIn,
    LinkGbPerS,
    ModelVariant,
    Name,
    NonNeg,
    Overrides,
    Performance,
    ScheduleRequest,
    SettingList,
    Strict,
    WorkloadText,
)
from formulation.results import ScheduleResponse
from model.operations import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_WORKLOAD
from model.queueing.slo import SloTargets
from model.spec import DEFAULT_PERFORMANCE, DEFAULT_VARIANT

__all__ = ["NonNeg", "ScheduleRequest", "ScheduleResponse", "Strict"]

#: the character no text of PostgreSQL can hold
NUL = "\x00"


def _storable(v: str) -> str:
    if NUL in v:
        raise ValueError("must not contain the NUL character (U+0000)")
    return v


#: text the service stores in a text column as it was sent: refused, on every database,
#: when it holds a NUL character (which PostgreSQL's text cannot hold)
StorableText = Annotated[str, AfterValidator(_storable)]

#: how an ISO 8601 date-time begins (its date, then the time); a text that does not, such
#: as "1782910000", is no date-time here even where pydantic would read it
_DATE_TIME_START = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ]", re.ASCII)


def date_time_text(v: Any) -> Any:
    """An ISO 8601 date-time is text in JSON: a number, or a text of digits (which
    pydantic would both read as seconds since 1970), or anything else is refused."""
    if isinstance(v, datetime) or (isinstance(v, str) and _DATE_TIME_START.match(v)):
        return v
    got = f"{v!r}" if isinstance(v, str) else type(v).__name__
    raise ValueError(
        f"must be an ISO 8601 date-time string with offset (e.g. 2026-07-01T12:00:00Z), got {got}"
    )


#: a date-time the client sends: ISO 8601 text with a UTC offset (:func:`date_time_text`)
DateTimeText = Annotated[AwareDatetime, BeforeValidator(date_time_text)]

#: the deepest a free-form field (JSON the service stores without typing its content,
#: such as an OpenADR event's ``targets``) may nest lists and objects within one another;
#: deeper documents could not be written out again (serialisers stop at a few hundred)
MAX_JSON_DEPTH = 32


def json_depth(value: Any, stop: int = MAX_JSON_DEPTH + 1) -> int:
    """How many lists and objects ``value`` nests within one another (0 for a number
    or text, 1 for ``[1, 2]``), measured without recursion; the count stops at ``stop``."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        depth += 1
        if depth >= stop:
            return stop
        deepest = max(deepest, depth)
        todo.extend((child, depth) for child in children)
    return deepest


def _shallow(v: Any) -> Any:
    if json_depth(v) > MAX_JSON_DEPTH:
        raise ValueError(
            f"nests lists and objects more than {MAX_JSON_DEPTH} levels deep, "
            "deeper than the service stores"
        )
    return v


#: a free-form JSON field's validator (``Annotated[list[Any], SHALLOW]``): its value is
#: refused, naming the field, when it nests deeper than :data:`MAX_JSON_DEPTH`
SHALLOW = BeforeValidator(_shallow)


class Moments(Strict):
    """Explicit workload moments (SPEC 2.8); replaces ``workload`` when given."""

    mean_in: float = Field(ge=1, allow_inf_nan=False)
    e_in2: float = Field(ge=1, allow_inf_nan=False)
    e_in3: float = Field(ge=1, allow_inf_nan=False)
    e_in4: float = Field(ge=1, allow_inf_nan=False)
    mean_out: float = Field(ge=1, allow_inf_nan=False)
    e_out2: float = Field(ge=1, allow_inf_nan=False)
    e_in_out: float = Field(ge=1, allow_inf_nan=False)
    max_tokens: float = Field(ge=2, allow_inf_nan=False)
    # optional third moments (all three or none): E[l_in^2 l_out], E[l_in l_out^2],
    # E[l_out^3]; the admission variant's one-prefill-server form needs them
    e_in2_out: float | None = Field(None, ge=1, allow_inf_nan=False)
    e_in_out2: float | None = Field(None, ge=1, allow_inf_nan=False)
    e_out3: float | None = Field(None, ge=1, allow_inf_nan=False)
    name: Name = "moments"
    n_requests: int | None = Field(None, ge=1)
    source: str = Field("", max_length=500)


class SpecFields(Strict):
    model: Name = DEFAULT_MODEL
    gpu: Name = DEFAULT_GPU
    prefill_gpu: Name | None = Field(
        None, description="the prefill instances' GPU type (default: gpu; docs/mixed-gpus.md)"
    )
    decode_gpu: Name | None = Field(
        None, description="the decode instances' GPU type, whose memory holds the KV pool "
        "(default: gpu)"
    )  # fmt: skip
    interconnect: Interconnect | None = None
    interconnect_gb_per_s: LinkGbPerS | None = None
    workload: WorkloadText = DEFAULT_WORKLOAD
    moments: Moments | None = None
    overrides: Overrides = Field(default_factory=dict)
    model_variant: ModelVariant = DEFAULT_VARIANT
    performance: Performance = DEFAULT_PERFORMANCE
    framework: Framework | None = None


class CapacityRequest(SpecFields):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": "qwen3-32b",
                    "gpu": "h200",
                    "workload": "fixed:4096:256",
                    "n_p": 3,
                    "n_d": 1,
                }
            ]
        },
    )
    n_p: int = Field(ge=0, le=4096)
    n_d: int = Field(ge=0, le=4096)
    load_rps: NonNeg | None = Field(None, description="served load for power_w (default: capacity)")
    prefill_setting: str | None = Field(
        None,
        max_length=32,
        description="the prefill GPUs' setting: '<N>MHz' (locked SM clock) or '<N>W' (power "
        "limit per GPU); default: the full clock (docs/clocks.md)",
    )
    decode_setting: str | None = Field(
        None, max_length=32, description="the decode GPUs' setting, as prefill_setting"
    )
    latency_targets: LatencyTargetsIn | None = Field(
        None,
        description="p99 TTFT/TPOT targets: the capacity is the highest rate at which the "
        "configuration meets them (docs/admission.md, section 8)",
    )


class SloIn(LatencyTargetsIn):
    """Latency targets the front is restricted to (:func:`model.queueing.slo.slo_restricted_front`):
    the analytic p99s of docs/latency.md at ``at_load`` times each configuration's
    capacity, at its own GPU settings in a front over settings (docs/clocks.md); where
    admission waits for KV pool memory matter the analytic TTFT is optimistic and is
    used anyway (``pdwatt front`` simulates those). Needs
    per-request lengths: a ``fixed:IN:OUT`` workload or a trace preset the server holds,
    not moments. The answer then has ``slo`` (the targets, how many configurations were
    checked and met them, the rule) and each configuration its verdict."""

    at_load: float = Field(
        SloTargets.at_load, gt=0, le=1, description="fraction of each configuration's capacity"
    )


#: the most shapes a front searches per phase
MAX_SHAPES_PER_PHASE = 16
ShapeList = Annotated[
    list[Annotated[str, Field(max_length=32)]],
    Field(min_length=1, max_length=MAX_SHAPES_PER_PHASE),
    Distinct,
]


class FrontRequest(SpecFields):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"model": "qwen3-32b", "gpu": "h200", "max_gpus": 16}]},
    )
    max_gpus: int = Field(16, ge=2, le=4096)
    required_rps: NonNeg | None = None
    headroom: float = Field(1.0, gt=0, le=1)
    budget_w: NonNeg | None = None
    slo: SloIn | None = Field(
        None, description="keep only the configurations meeting these latency targets"
    )
    prefill_settings: SettingList | None = Field(
        None,
        description="the prefill GPUs' settings to search ('<N>MHz', '<N>W' or 'default'); "
        "with decode_settings, a configuration is (n_P, n_D, setting_P, setting_D) and "
        "each point names its settings (docs/clocks.md). Default: the full clock only",
    )
    decode_settings: SettingList | None = Field(
        None, description="the decode GPUs' settings to search, as prefill_settings"
    )
    prefill_shapes: ShapeList | None = Field(
        None,
        description="the prefill instance shapes to search, each tp<T>[,dp<D>][,ep<E>], or "
        "['auto'] (tp 1-8, and for a mixture of experts expert-parallel and "
        "data-parallel-attention shapes); each point names its shapes (docs/shapes.md). "
        "Default: the deployment's own shape",
    )
    decode_shapes: ShapeList | None = Field(
        None, description="the decode instance shapes to search, as prefill_shapes"
    )
    mtp_draft_tokens: (
        Annotated[
            list[Annotated[int, Field(ge=0, le=16)]], Field(min_length=1, max_length=8), Distinct
        ]
        | None
    ) = Field(
        None,
        description="the MTP draft depths to search (speculative decoding with the model's "
        "next-token-prediction module, under performance 'kernels'; 0: none); each point "
        "names its depth (docs/kernels.md). Default: the deployment's own",
    )
    gpus: Annotated[list[Name], Field(min_length=1, max_length=8), Distinct] | None = Field(
        None,
        description="search each phase on each of these GPU types (every pair, e.g. "
        "H100 prefill with H200 decode); each point names its prefill_gpu and decode_gpu "
        "(docs/mixed-gpus.md). Default: the deployment's own",
    )


class ConfigRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    n_p: int
    n_d: int
    gpus: int
    capacity_rps: float
    power_w: float
    load_rps: float
    mu_p_rps: float | None
    mu_d_rps: float | None
    mu_d_max_rps: float | None
    batch: float | None
    ctx_tokens: float | None
    kv_pool_tokens: int
    rho_star: float | None
    bottleneck: Literal["prefill", "decode", "kv_transfer"]


class Calibration(BaseModel):
    measured: bool
    overridden: bool
    source: str


class PerformanceOut(BaseModel):
    """Where the times come from (``performance_report``): ``spec`` or ``kernels``, with
    the kernel tables, the engine calibration and the forms' worst deviations."""

    model_config = ConfigDict(extra="allow")
    source: Literal["spec", "kernels"]
    power: str


class CapacityResponse(ConfigRecord):
    model: str
    gpu: str
    workload: str
    calibration: Calibration
    performance: PerformanceOut


class FrontResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    gpu: str
    workload: str
    calibration: Calibration
    performance: PerformanceOut
    max_gpus: int
    configs: list[ConfigRecord]
    front: list[ConfigRecord]


# ---------------------------------------------------------------- schedule
# the schedule's answer: formulation.results builds it and describes it
# (ScheduleResponse, checked on every answer of the routes that return one)


def dump(model: BaseModel) -> dict[str, Any]:
    """The request as plain JSON data, defaults included."""
    return model.model_dump(mode="json")
