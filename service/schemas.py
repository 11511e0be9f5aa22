"""Request and response schemas of the HTTP API (SPEC 6.1), with limits and examples.

These describe and bound what a client may send; the authoritative checks of a
schedule request (series lengths, inventories, initial states) are those of
:func:`formulation.problem.problem_from_dict`, which the router applies to the same
body, so the CLI and the API accept exactly the same documents.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from formulation.demo import demo_request
from model.capacity import DEFAULT_VARIANT, MODEL_VARIANTS, check_variant
from model.errors import InputError
from model.workload import check_no_file

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:\-]+$")]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Scalar = float | int | str | bool
Overrides = dict[Literal["model", "gpu", "calibration", "serving"], dict[str, Scalar]]


def _types_in(annotation: Any) -> set[Any]:
    """Every plain type named anywhere in ``annotation`` (unions, lists, dicts, ...)."""
    args = typing.get_args(annotation)
    if not args:
        return {annotation}
    out: set[Any] = set()
    for a in args:
        out |= _types_in(a)
    return out


def _has_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, list):
        return any(isinstance(v, bool) for v in value)
    if isinstance(value, dict):
        return any(isinstance(v, bool) for v in value.values())
    return False


class Strict(BaseModel):
    """Unknown fields are refused, and so is ``true``/``false`` where a number is
    expected (JSON booleans are not numbers, though Python would take them as 1/0)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None or not _has_bool(value):
            return value
        kinds = _types_in(cls.model_fields[info.field_name].annotation)
        if bool not in kinds and kinds & {int, float}:
            raise ValueError("must be a number, not true or false")
        return value


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
    name: Name = "moments"
    n_requests: int | None = Field(None, ge=1)
    source: str = Field("", max_length=500)


WORKLOAD_DOC = (
    "fixed:IN:OUT or a preset name (azure-conv-2023, azure-code-2023, mooncake); "
    "files (trace:, moments:, in any spelling) are never read over HTTP: send `moments`"
)


def _no_file(v: str) -> str:
    check_no_file(v)  # InputError is a ValueError: pydantic reports it at the field
    return v


WorkloadText = Annotated[
    str, Field(min_length=1, max_length=64, description=WORKLOAD_DOC), AfterValidator(_no_file)
]


def _known_variant(v: str) -> str:
    try:
        return check_variant(v)
    except InputError as e:
        raise ValueError(e.reason) from e


ModelVariant = Annotated[
    str,
    Field(
        description="memory balance: paper (SPEC 2.5) or admission (docs/admission.md)",
        json_schema_extra={"enum": list(MODEL_VARIANTS)},
    ),
    AfterValidator(_known_variant),
]


class SpecFields(Strict):
    model: Name = "qwen3-32b"
    gpu: Name = "h200"
    workload: WorkloadText = "azure-conv-2023"
    moments: Moments | None = None
    overrides: Overrides = Field(default_factory=dict)
    model_variant: ModelVariant = DEFAULT_VARIANT


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


class FrontRequest(SpecFields):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"model": "qwen3-32b", "gpu": "h200", "max_gpus": 16}]},
    )
    max_gpus: int = Field(16, ge=2, le=4096)
    required_rps: NonNeg | None = None
    headroom: float = Field(1.0, gt=0, le=1)
    budget_w: NonNeg | None = None


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
    bottleneck: Literal["prefill", "decode"]


class Calibration(BaseModel):
    measured: bool
    overridden: bool
    source: str


class CapacityResponse(ConfigRecord):
    model: str
    gpu: str
    workload: str
    calibration: Calibration


class FrontResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    gpu: str
    workload: str
    calibration: Calibration
    max_gpus: int
    configs: list[ConfigRecord]
    front: list[ConfigRecord]


# ---------------------------------------------------------------- schedule


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


class DeploymentIn(Strict):
    name: Name
    model: Name
    gpu: Name
    workload: WorkloadText
    demand_rps: list[Rate] = Field(min_length=1)
    unserved_penalty_usd_per_request: Usd = 0.01
    headroom: float = Field(1.0, gt=0, le=1)
    max_gpus: int = Field(16, ge=0, le=512)
    bounds: Bounds = Bounds()
    initial: Initial = Initial()
    overrides: Overrides = Field(default_factory=dict)
    model_variant: ModelVariant = DEFAULT_VARIANT


class SiteIn(Strict):
    gpu_inventory: dict[Name, Annotated[int, Field(ge=0)]] = Field(min_length=1)
    pue: float = Field(1.0, ge=1, le=5)
    idle_gpu_power_w: float = Field(120.0, ge=0, le=1e5)
    carbon_price_usd_per_tonne: float = Field(0.0, ge=0, le=1e5)


class GridIn(Strict):
    power_cap_w: PowerW | Annotated[list[PowerW], Field(min_length=1)]
    price_usd_per_mwh: PriceMWh | Annotated[list[PriceMWh], Field(min_length=1)] = 0.0
    carbon_g_per_kwh: CarbonKWh | Annotated[list[CarbonKWh], Field(min_length=1)] = 0.0


class TransitionsIn(Strict):
    start_cost_usd: Usd = 0.0
    stop_cost_usd: Usd = 0.0
    max_instance_changes_per_period: int | None = Field(None, ge=0)


class SolverIn(Strict):
    time_limit_s: float = Field(30.0, gt=0, le=86400)
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
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [demo_request()]})
    period_minutes: float = Field(gt=0, le=1440)
    site: SiteIn
    deployments: list[DeploymentIn] = Field(min_length=1)
    grid: GridIn
    transitions: TransitionsIn = TransitionsIn()
    solver: SolverIn = SolverIn()


class DeploymentPeriod(BaseModel):
    model_config = ConfigDict(extra="allow")
    n_p: int
    n_d: int
    demand_rps: float
    served_rps: float
    capacity_rps: float
    power_w: float


class PeriodOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: int
    power_w: float
    power_cap_w: float
    deployments: dict[str, DeploymentPeriod]


class Totals(BaseModel):
    model_config = ConfigDict(extra="allow")
    objective_usd: float
    energy_kwh: float
    cost_usd: float
    carbon_kg: float
    served_requests: float
    unserved_requests: float
    unserved_value_usd: float
    transition_cost_usd: float


class BaselineOut(Totals):
    cap_violations: int
    limit_violations: int


class ScheduleResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["optimal", "time_limit", "stopped"]
    mip_gap: float
    lower_bound_usd: float
    solve_time_s: float
    objective_usd: float
    periods: list[PeriodOut]
    totals: Totals
    baselines: dict[str, BaselineOut]


def dump(model: BaseModel) -> dict[str, Any]:
    """The request as plain JSON data, defaults included."""
    return model.model_dump(mode="json")
