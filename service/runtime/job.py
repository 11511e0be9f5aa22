"""A job as the database keeps it (:mod:`service.runtime.jobstore`): its record, its
document as ``GET /v1/jobs/{id}`` answers it, its final states and the errors of the
store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.runtime.database import as_utc

FINAL = ("succeeded", "failed", "cancelled")


def replan_scope(site_id: str) -> str:
    """The coalescing scope of a site's re-plans (:meth:`JobStore.create`)."""
    return f"site_plan:{site_id}"


class JobNotFound(LookupError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id!r}")


class IdempotencyConflict(Exception):
    """The idempotency key names a job of another request."""

    def __init__(self, key: str, job_id: str) -> None:
        self.key = key
        self.job_id = job_id
        super().__init__(f"idempotency key {key!r} was used for job {job_id} with another request")


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    status: str
    progress: dict[str, Any] | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    created: datetime
    started: datetime | None
    finished: datetime | None
    request: dict[str, Any]
    attempts: int = 0
    webhook_url: str | None = None
    webhook_state: str | None = None
    webhook_outcome: dict[str, Any] | None = None
    #: what asked for it (service.runtime.records.TRIGGERS); None for a job stored before
    #: it was kept
    trigger: str | None = None

    @property
    def webhook(self) -> dict[str, Any] | None:
        """The webhook and its delivery (``state``: pending, sending, delivered, failed)."""
        if self.webhook_url is None:
            return None
        out: dict[str, Any] = {"url": self.webhook_url, "state": self.webhook_state or "pending"}
        out.update({k: v for k, v in (self.webhook_outcome or {}).items() if k != "url"})
        return out

    def document(self) -> dict[str, Any]:
        """The job as ``GET /v1/jobs/{id}`` answers it."""
        doc: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "progress": self.progress,
            "created": self.created.isoformat(),
            "started": None if self.started is None else self.started.isoformat(),
            "finished": None if self.finished is None else self.finished.isoformat(),
            "attempts": self.attempts,
            "trigger": self.trigger,
        }
        if self.result is not None:
            doc["result"] = self.result
        if self.error is not None:
            doc["error"] = self.error
        if self.webhook is not None:
            doc["webhook"] = self.webhook
        return doc


def job_of_row(row: Any) -> Job:
    """The job a row of the ``jobs`` table holds."""
    return Job(
        row.id,
        row.kind,
        row.status,
        row.progress,
        row.result,
        row.error,
        as_utc(row.created),
        None if row.started is None else as_utc(row.started),
        None if row.finished is None else as_utc(row.finished),
        row.request,
        row.attempts,
        row.webhook_url,
        row.webhook_state,
        row.webhook_outcome,
        row.trigger,
    )
