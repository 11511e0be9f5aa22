"""Schemas of the jobs API (``/v1/jobs``): a job is a kind and the request its
synchronous route takes, validated by that route's own schema; the kinds are the rows
of the use-case table that are jobs (:data:`service.usecases.table.JOB_KINDS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from service.requests.schemas import StorableText, Strict
from service.usecases.rows import UseCase
from service.usecases.table import JOB_KINDS, USE_CASES


class Webhook(Strict):
    """Where the job's end is POSTed, signed (see :mod:`service.runtime.webhooks`)."""

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
    kind: str
    request: BaseModel
    webhook: Webhook | None = None


def _job_model(uc: UseCase) -> type[_Job]:
    """``{Kind}Job``: ``kind`` and the request of that use case."""
    name = "".join(w.title() for w in uc.kind.split("_")) + "Job"
    kind: Any = Literal[uc.kind]  # one literal per row of the table
    return create_model(name, __base__=_Job, kind=(kind, ...), request=(uc.request, ...))


JOB_MODELS = tuple(_job_model(USE_CASES[kind]) for kind in JOB_KINDS)

if TYPE_CHECKING:
    JobRequest = _Job
    JobKind = str
else:
    #: a job of any kind of the table, told apart by ``kind``
    JobRequest = Annotated[Union[JOB_MODELS], Field(discriminator="kind")]  # noqa: UP007
    JobKind = Literal[JOB_KINDS]
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
    done: int | None = Field(
        None,
        description="a flexibility curve: its evaluations done (run or left out); a "
        "demand-response what-if: its solves done",
    )
    total: int | None = Field(None, description="of how many (`done`)")


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
    trigger: str | None = Field(
        None,
        description="what asked for the job: event, retraction, forecast, shed, period (the "
        "site's clock entering a new period) or user (POST /v1/jobs); null for a job "
        "stored before it was kept",
    )
    result: dict[str, Any] | None = Field(
        None,
        description="once succeeded (or cancelled after a start): what the "
        "synchronous route answers for the same request",
    )
    error: dict[str, Any] | None = Field(None, description="once failed: why")
