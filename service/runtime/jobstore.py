"""The jobs in the database: submitted, persisted, polled, cancelled, and the webhooks
sent when they end.

A job is a ``kind`` (a job kind of the use-case table, :mod:`service.usecases.table`:
``schedule``, ``demand_response``, ``flexibility``, ``site_plan``) and the ``request``
its synchronous route takes; its ``result``, once ``succeeded``, is what that route
answers for the same request. Jobs live in the database (table ``jobs`` of
:mod:`service.runtime.store`), so they survive an API restart; they are run by
:mod:`service.jobs.runner` (in this process's solver pool) or by ``pdwatt worker``
processes (:mod:`service.jobs.queue`).

States: ``queued`` -> ``running`` -> ``succeeded`` | ``failed`` | ``cancelled``
(``queued`` -> ``cancelled`` directly when cancelled before it starts).
"""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from service.runtime.database import digest, engine_for, jobs, utc_now
from service.runtime.job import FINAL, IdempotencyConflict, Job, JobNotFound, job_of_row

log = logging.getLogger(__name__)

#: a coalesced job is queued anew at most this many times while the queued one of its
#: scope keeps starting under it
MAX_COALESCE_ATTEMPTS = 20


class JobStore:
    """The ``jobs`` table; every method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self,
        kind: str,
        request: dict[str, Any],
        key: str | None = None,
        webhook_url: str | None = None,
        coalesce: str | None = None,
        trigger: str | None = None,
    ) -> tuple[Job, bool]:
        """A new queued job, or (with an idempotency ``key`` already used for the same
        request and webhook) the existing one; ``(job, created)``.

        With ``coalesce`` (a scope such as ``site_plan:<site id>``), at most one job of
        the scope is queued: while one is, it takes this ``request`` (and ``key``) in
        place of its own and is answered, not created (a newer update of a site
        replaces its queued re-plan, and its ``trigger``); a running job of the scope
        goes on and a queued one starts once it ends (:meth:`start`). ``trigger``:
        what asked for the job (:data:`service.runtime.records.TRIGGERS`)."""
        doc: dict[str, Any] = {"kind": kind, "request": request}
        if webhook_url is not None:
            doc["webhook"] = webhook_url
        doc_digest = digest(doc)
        for _ in range(MAX_COALESCE_ATTEMPTS):
            if key is not None:
                old = self._by_key(key)
                if old is not None:
                    return self._same(old, key, doc_digest), False
            job_id = secrets.token_hex(8)
            row = {
                "id": job_id,
                "kind": kind,
                "request": request,
                "digest": doc_digest,
                "idempotency_key": key,
                "status": "queued",
                "webhook_url": webhook_url,
                "cancel_requested": 0,
                "created": utc_now(),
                "coalesce": coalesce,
                "queued_for": coalesce,
                "trigger": trigger,
            }
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(jobs).values(**row))
            except IntegrityError:
                old = self._by_key(key) if key is not None else None
                if old is not None:  # the same key, posted concurrently
                    return self._same(old, key or "", doc_digest), False
                if coalesce is None:
                    raise
                replaced = self._replace_queued(coalesce, request, doc_digest, key, trigger)
                if replaced is not None:
                    return replaced, False
                continue  # the queued one started meanwhile: queue this one
            return self.get(job_id), True
        raise RuntimeError(f"jobs of {coalesce!r} kept starting while one was queued")

    def _replace_queued(
        self,
        scope: str,
        request: dict[str, Any],
        doc_digest: str,
        key: str | None,
        trigger: str | None = None,
    ) -> Job | None:
        """The queued job of ``scope`` with ``request`` (and ``trigger``) in place of its
        own; None when none is queued any more."""
        values: dict[str, Any] = {"request": request, "digest": doc_digest, "trigger": trigger}
        if key is not None:
            values["idempotency_key"] = key
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.queued_for == scope, jobs.c.status == "queued")
                .values(**values)
            )
            if res.rowcount != 1:
                return None
            row = conn.execute(select(jobs).where(jobs.c.queued_for == scope)).first()
        return None if row is None else job_of_row(row)

    def set_trigger(self, job_id: str, trigger: str) -> None:
        """Record what asked for job ``job_id`` (one created without it)."""
        with self.engine.begin() as conn:
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(trigger=trigger))

    def _same(self, row: Any, key: str, doc_digest: str) -> Job:
        if row.digest != doc_digest:
            raise IdempotencyConflict(key, row.id)
        return job_of_row(row)

    def _by_key(self, key: str) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(select(jobs).where(jobs.c.idempotency_key == key)).first()

    def get(self, job_id: str) -> Job:
        with self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        if row is None:
            raise JobNotFound(job_id)
        return job_of_row(row)

    def with_status(self, status: str) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(jobs.c.id).where(jobs.c.status == status).order_by(jobs.c.created)
            )
            return [r.id for r in rows]

    def start(self, job_id: str, worker: str | None = None) -> bool:
        """``queued`` -> ``running`` (one more attempt, held by ``worker``); False if the
        job is no longer queued (another worker took it, or it was cancelled), or, for
        a job of a coalescing scope, while another job of the scope runs: it stays
        queued (:meth:`waits`), so that a site's re-plans run one at a time, each
        newer one after the one before it ends."""
        now = utc_now()
        other = jobs.alias("other")
        running_in_scope = (
            select(other.c.id)
            .where(
                other.c.coalesce == jobs.c.coalesce,
                other.c.status == "running",
                other.c.id != jobs.c.id,
            )
            .exists()
        )
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.status == "queued",
                    jobs.c.coalesce.is_(None) | ~running_in_scope,
                )
                .values(
                    status="running",
                    started=now,
                    attempts=jobs.c.attempts + 1,
                    worker=worker,
                    heartbeat=now,
                    queued_for=None,
                )
            )
        return res.rowcount == 1

    def active(self, scope: str) -> Job | None:
        """The newest queued or running job of coalescing scope ``scope``; None when no
        job of it is queued or running."""
        q = (
            select(jobs)
            .where(jobs.c.coalesce == scope, jobs.c.status.in_(("queued", "running")))
            .order_by(jobs.c.created.desc())
            .limit(1)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return None if row is None else job_of_row(row)

    def waits(self, job_id: str) -> bool:
        """Whether job ``job_id`` is still queued (:meth:`start` left it so)."""
        return self.get(job_id).status == "queued"

    def blocked(self, job_id: str) -> bool:
        """Whether job ``job_id`` is of a coalescing scope in which another job runs
        (:meth:`start` would leave it queued)."""
        other = jobs.alias("other")
        q = (
            select(other.c.id)
            .select_from(jobs.join(other, other.c.coalesce == jobs.c.coalesce))
            .where(jobs.c.id == job_id, other.c.status == "running", other.c.id != job_id)
            .limit(1)
        )
        with self.engine.connect() as conn:
            return conn.execute(q).first() is not None

    def beat(self, job_ids: list[str], worker: str) -> None:
        """``worker`` is alive and still runs ``job_ids``."""
        if not job_ids:
            return
        with self.engine.begin() as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.id.in_(job_ids), jobs.c.status == "running", jobs.c.worker == worker)
                .values(heartbeat=utc_now())
            )

    def queued(self) -> list[tuple[str, int]]:
        """``(id, attempts)`` of every queued job, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(jobs.c.id, jobs.c.attempts)
                .where(jobs.c.status == "queued")
                .order_by(jobs.c.created)
            )
            return [(r.id, r.attempts) for r in rows]

    def stale(self, older_than_s: float) -> list[tuple[str, int, str]]:
        """``(id, attempts, worker)`` of the jobs held by a queue worker that has given no
        heartbeat for ``older_than_s`` seconds (it died, or lost its database)."""
        cutoff = utc_now() - timedelta(seconds=older_than_s)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(jobs.c.id, jobs.c.attempts, jobs.c.worker).where(
                    jobs.c.status == "running",
                    jobs.c.worker.is_not(None),
                    jobs.c.heartbeat < cutoff,
                )
            )
            return [(r.id, r.attempts, r.worker) for r in rows]

    def release(self, job_id: str, worker: str) -> bool:
        """A running job goes back to ``queued`` for another worker (its worker stopped
        or died); False if ``worker`` no longer holds it."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.status == "running", jobs.c.worker == worker)
                .values(status="queued", worker=None, heartbeat=None, progress=None)
            )
        return res.rowcount == 1

    def _held(self, job_id: str, worker: str | None) -> Any:
        cond = [jobs.c.id == job_id, jobs.c.status == "running"]
        if worker is not None:
            cond.append(jobs.c.worker == worker)
        return cond

    def progress(self, job_id: str, state: dict[str, Any], worker: str | None = None) -> bool:
        """Record a running job's progress; True when the solve should stop: its
        cancellation was requested, or (with ``worker``) that worker no longer holds it."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs).where(*self._held(job_id, worker)).values(progress=state)
            )
            if res.rowcount != 1:
                return True
            row = conn.execute(select(jobs.c.cancel_requested).where(jobs.c.id == job_id)).first()
        return bool(row is not None and row.cancel_requested)

    def finish(
        self,
        job_id: str,
        status: str,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        worker: str | None = None,
    ) -> bool:
        """End the job (unless it ended already, or, with ``worker``, unless that worker
        no longer holds it); True when this call ended it."""
        cond = (
            self._held(job_id, worker)
            if worker is not None
            else [jobs.c.id == job_id, jobs.c.status.not_in(FINAL)]
        )
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(*cond)
                .values(
                    status=status,
                    result=result,
                    error=error,
                    finished=utc_now(),
                    queued_for=None,
                )
            )
        return res.rowcount == 1

    def claim_webhook(self, job_id: str) -> bool:
        """Claim the delivery of an ended job's webhook (True for one caller only)."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.status.in_(FINAL),
                    jobs.c.webhook_url.is_not(None),
                    jobs.c.webhook_state.is_(None),
                )
                .values(webhook_state="sending")
            )
        return res.rowcount == 1

    def record_webhook(self, job_id: str, outcome: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id)
                .values(webhook_state=outcome["state"], webhook_outcome=outcome)
            )

    def unnotified(self) -> list[str]:
        """Ended jobs whose webhook has not been claimed (their process stopped first)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(jobs.c.id).where(
                    jobs.c.status.in_(FINAL),
                    jobs.c.webhook_url.is_not(None),
                    jobs.c.webhook_state.is_(None),
                )
            )
            return [r.id for r in rows]

    def stop_running(self, job_id: str) -> bool:
        """Ask job ``job_id`` to stop if it is running (it keeps its best schedule, as a
        cancelled job); a queued job stays queued. True when it was asked."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.status == "running")
                .values(cancel_requested=1)
            )
        return res.rowcount == 1

    def cancel(self, job_id: str) -> Job:
        """Cancel a queued job at once; ask a running one to stop (it keeps its best
        schedule); a finished job is left as it is."""
        with self.engine.begin() as conn:
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.status == "queued")
                .values(status="cancelled", finished=utc_now(), cancel_requested=1, queued_for=None)
            )
            conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.status == "running")
                .values(cancel_requested=1)
            )
        return self.get(job_id)


def job_store(url: str) -> JobStore:
    return JobStore(engine_for(url))
