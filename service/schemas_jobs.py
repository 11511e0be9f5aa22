"""Schemas of the jobs API (``/v1/jobs``): a job is a kind and the request its
synchronous route takes, validated by that route's own schema."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas import ScheduleRequest, StorableText, Strict
from service.schemas_dr import DemandResponseRequest, FlexibilityRequest
from service.site_plans import Current


class Webhook(Strict):
    """Where the job's end is POSTed, signed (see :mod:`service.webhooks`)."""

    url: StorableText = Field(
        min_length=1,
        max_length=2048,
        description="http(s) URL of a public host (unless the server allows private ones); "
        "receives the job document when the job ends, signed in `Pdwatt-Signature`",
    )


class _Job(BaseModel):
    # not ``Strict``: its field validator would shadow the discriminator ``kind``
    # (the requests inside are ``Strict``)
    model_config = ConfigDict(extra="forbid")
    webhook: Webhook | None = None


class ScheduleJob(_Job):
    kind: Literal["schedule"]
    request: ScheduleRequest


class DemandResponseJob(_Job):
    kind: Literal["demand_response"]
    request: DemandResponseRequest


class FlexibilityJob(_Job):
    kind: Literal["flexibility"]
    request: FlexibilityRequest


class SitePlanRequest(Strict):
    """What ``POST /v1/sites/{site_id}/plan`` takes, with the site named."""

    site_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    current: Current | None = None


class SitePlanJob(_Job):
    kind: Literal["site_plan"]
    request: SitePlanRequest


JobRequest = Annotated[
    ScheduleJob | DemandResponseJob | FlexibilityJob | SitePlanJob, Field(discriminator="kind")
]
JobKind = Literal["schedule", "demand_response", "flexibility", "site_plan"]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class JobAccepted(BaseModel):
    id: str
    status: JobStatus


class JobProgress(BaseModel):
    phase: str | None = None
    objective_usd: float | None = None
    lower_bound_usd: float | None = None
    gap: float | None = None
    elapsed_s: float | None = None


class JobDocument(BaseModel):
    id: str
    kind: JobKind
    status: JobStatus
    progress: JobProgress | None = None
    created: str
    started: str | None = None
    finished: str | None = None
    webhook: dict[str, Any] | None = Field(
        None,
        description="the webhook and its delivery: url, state (pending, sending, delivered, "
        "failed), attempts, status_code, error",
    )
    attempts: int = Field(
        0, description="runs started; above 1 when a lost worker's job was run again"
    )
    result: dict[str, Any] | None = Field(
        None,
        description="once succeeded (or cancelled after a start): what the "
        "synchronous route answers for the same request",
    )
    error: dict[str, Any] | None = Field(None, description="once failed: why")
