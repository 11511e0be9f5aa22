"""Solves as jobs: submitted, persisted, run in the background, polled, cancelled.

A job is a ``kind`` (a use case of :mod:`service.usecases`: ``schedule``,
``demand_response``, ``flexibility``, ``site_plan``) and the ``request`` its
synchronous route takes; its ``result``, once ``succeeded``, is what that
route answers for the same request. Jobs live in the database (table ``jobs`` of
:mod:`service.store`), so they survive an API restart: on start-up, jobs still
``queued`` run again and jobs that were ``running`` (their process is gone) are
``failed`` with that reason, never lost.

Without a broker the jobs run in this process's solver pool (:class:`JobRunner`),
as many at once as it has workers, the rest waiting ``queued``. The worker writes the
job's ``progress`` (phase, best objective, proven bound, gap; for a demand-response
what-if the solves done of two, for a flexibility curve the evaluations done of its
total, with the time since it started) to the database as the work goes, and reads
``cancel_requested`` there: a cancelled schedule stops at its next check (a running
MILP finishes its slice first, at most a fifth of the time limit) and its best
schedule so far is kept as the result of the ``cancelled`` job; a cancelled
demand-response what-if stops its solve the same way, and a flexibility curve after
the evaluation that runs.

States: ``queued`` -> ``running`` -> ``succeeded`` | ``failed`` | ``cancelled``
(``queued`` -> ``cancelled`` directly when cancelled before it starts).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from formulation.processes.interrupt import process_stopping
from model.errors import PdwattError
from service import webhooks
from service.pool import PoolFull, SolvePool, WorkerLost
from service.settings import Settings
from service.store import Origin, SiteNotFound, as_utc, digest, engine_for, jobs, utc_now

log = logging.getLogger(__name__)

FINAL = ("succeeded", "failed", "cancelled")
#: the error of a job whose solver process died under it
WORKER_LOST = {
    "title": "Worker lost",
    "detail": "the solver worker running this job stopped (it was killed, e.g. out of "
    "memory); submit it again",
}
#: the error of a job whose server stopped while it ran
INTERRUPTED = {
    "title": "Interrupted",
    "detail": "the server stopped while this job ran; submit it again",
}
#: seconds between two progress writes (and cancellation reads) of a running job
PROGRESS_EVERY_S = 0.5
#: a coalesced job is queued anew at most this many times while the queued one of its
#: scope keeps starting under it
MAX_COALESCE_ATTEMPTS = 20


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
    #: what asked for it (service.store.TRIGGERS); None for a job stored before it was kept
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


def _job(row: Any) -> Job:
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
        what asked for the job (:data:`service.store.TRIGGERS`)."""
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
        return None if row is None else _job(row)

    def set_trigger(self, job_id: str, trigger: str) -> None:
        """Record what asked for job ``job_id`` (one created without it)."""
        with self.engine.begin() as conn:
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(trigger=trigger))

    def _same(self, row: Any, key: str, doc_digest: str) -> Job:
        if row.digest != doc_digest:
            raise IdempotencyConflict(key, row.id)
        return _job(row)

    def _by_key(self, key: str) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(select(jobs).where(jobs.c.idempotency_key == key)).first()

    def get(self, job_id: str) -> Job:
        with self.engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        if row is None:
            raise JobNotFound(job_id)
        return _job(row)

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


@dataclass(frozen=True)
class Notifier:
    """Sends ended jobs' webhooks (see :mod:`service.webhooks`); without a secret it
    sends nothing (jobs asking for one are refused at submission)."""

    secret: str | None
    allow_private: bool = False

    @classmethod
    def of(cls, settings: Settings) -> Notifier:
        return cls(settings.webhook_secret, settings.webhook_allow_private)

    async def job_ended(self, store: JobStore, job_id: str) -> None:
        if self.secret is None or not await asyncio.to_thread(store.claim_webhook, job_id):
            return
        job = await asyncio.to_thread(store.get, job_id)
        document = job.document()
        document.pop("webhook", None)
        outcome = await webhooks.deliver(
            job.webhook_url or "", document, self.secret, self.allow_private
        )
        await asyncio.to_thread(store.record_webhook, job_id, outcome)

    async def pending(self, store: JobStore) -> int:
        """Send the webhooks of ended jobs that no process has claimed; how many."""
        ids = await asyncio.to_thread(store.unnotified)
        for job_id in ids:
            await self.job_ended(store, job_id)
        return len(ids)


# ------------------------------------------------------------ in the worker process


def _problem_of(exc: BaseException) -> dict[str, Any]:
    """What a failed job reports: the same fields a synchronous route's problem has."""
    out: dict[str, Any] = {"title": "Cannot answer", "detail": str(exc)}
    field = getattr(exc, "field", None)
    if field is not None:
        out["field"] = field
    conflicts = getattr(exc, "conflicts", None)
    if conflicts is not None:
        out["conflicts"] = conflicts
    return out


def execute(
    url: str, job_id: str, memory_budget_mb: float | None, kernels: str | None = None
) -> str:
    """Start job ``job_id`` and run it (in a solver worker): its status, progress and
    result go to the database at ``url``. Returns the final status; ``queued`` when
    the server started shutting down before the job started (it runs after a restart),
    or while another re-plan of its site runs (:meth:`JobStore.start`).
    ``kernels``: the server's kernel database."""
    if process_stopping():
        return "queued"
    if not job_store(url).start(job_id):
        return job_store(url).get(job_id).status  # cancelled meanwhile
    return execute_started(url, job_id, memory_budget_mb, kernels=kernels)


def execute_started(
    url: str,
    job_id: str,
    memory_budget_mb: float | None,
    worker: str | None = None,
    kernels: str | None = None,
) -> str:
    """Run job ``job_id``, already ``running`` (see :func:`execute`); with ``worker``,
    only while that worker holds it (a job given back or presumed lost stops, and its
    outcome is not written)."""
    store = job_store(url)
    job = store.get(job_id)
    last_write = [0.0]
    cancel = [False]
    latest: dict[str, Any] = {}

    def monitor(state: dict[str, Any]) -> bool:
        latest.clear()
        latest.update(state)
        now = time.monotonic()
        if now - last_write[0] >= PROGRESS_EVERY_S:
            last_write[0] = now
            cancel[0] = store.progress(job_id, state, worker)
        return cancel[0]

    def end(status: str, **outcome: Any) -> str:
        return status if store.finish(job_id, status, worker=worker, **outcome) else "given up"

    try:
        result = run_kind(
            job.kind,
            job.request,
            memory_budget_mb,
            monitor,
            url,
            cancelled=lambda: store.progress(job_id, {**latest, "phase": "storing"}, worker),
            kernels=kernels,
            origin=Origin(job.trigger, job.id),
        )
    except PdwattError as exc:
        return end("failed", error=_problem_of(exc))
    except MemoryError:
        return end("failed", error={"title": "Out of memory", "detail": "MemoryError"})
    except SiteNotFound as exc:  # deleted after the job was queued
        return end(
            "failed", error={"title": "Not Found", "detail": str(exc), "field": "request.site_id"}
        )
    # a solve the server's shutdown stopped ends cancelled, with its best schedule
    stop = store.progress(job_id, {**latest, "phase": "done"}, worker) or process_stopping()
    return end("cancelled" if stop else "succeeded", result=result)


def run_kind(
    kind: str,
    request: dict[str, Any],
    memory_budget_mb: float | None,
    monitor: Any = None,
    url: str | None = None,
    cancelled: Callable[[], bool] | None = None,
    kernels: str | None = None,
    origin: Origin | None = None,
) -> dict[str, Any]:
    """What the synchronous route of ``kind`` answers for the stored ``request`` (the
    use case's run, :mod:`service.usecases`; ``url``: the database that holds the
    sites, for ``site_plan``; ``cancelled``: whether the job was cancelled, asked
    before a site plan is stored; ``kernels``: the server's kernel database;
    ``origin``: the job and what asked for it, kept with a site plan)."""
    from service.usecases import Context, parse, run

    ctx = Context(memory_budget_mb, kernels, monitor, url, cancelled, origin)
    return run(kind, parse(kind, request), ctx)


# ------------------------------------------------------------ in the API process


class JobRunner:
    """Runs the database's queued jobs in this process's solver pool, as many at once
    as it has workers; the others wait, queued."""

    def __init__(
        self,
        url: str,
        pool: SolvePool,
        notifier: Notifier | None = None,
        poll_s: float = 0.25,
        kernels: str | None = None,
    ) -> None:
        self.url = url
        self.pool = pool
        self.kernels = kernels  # the server's kernel database
        self.notifier = notifier or Notifier(None)
        self.poll_s = poll_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: set[str] = set()
        self._stopping = False

    @property
    def store(self) -> JobStore:
        return job_store(self.url)  # the engine is made once per process, on first use

    def recover(self) -> None:
        """After a restart: jobs left ``running`` lost their process (failed, with the
        reason); jobs left ``queued`` run again. Without a database (it is down), the
        server still starts; its jobs are recovered at the next start."""
        try:
            self._recover()
        except SQLAlchemyError as exc:
            log.warning(
                "jobs not recovered, the database is unavailable: %s", exc.__class__.__name__
            )

    def _recover(self) -> None:
        for job_id in self.store.with_status("running"):
            self.store.finish(job_id, "failed", error=INTERRUPTED)
        for job_id in self.store.with_status("queued"):
            self._start(job_id)
        self._spawn(self.notifier.pending(self.store))

    async def submit(self, job_id: str) -> None:
        self._start(job_id)

    def _start(self, job_id: str) -> None:
        self._spawn(self._run(job_id))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job_id: str) -> None:
        await self._execute(job_id)
        try:
            await self.notifier.job_ended(self.store, job_id)
        except SQLAlchemyError:  # sent at the next start
            log.warning("webhook of job %s not sent: the database is unavailable", job_id)

    async def _execute(self, job_id: str) -> None:
        while not self._stopping:
            if (await asyncio.to_thread(self.store.get, job_id)).status != "queued":
                return  # cancelled while waiting
            if await asyncio.to_thread(self.store.blocked, job_id):
                await asyncio.sleep(self.poll_s)  # after the re-plan of its site that runs
                continue
            try:
                # the jobs a shutdown asks to stop; one waiting for a worker (the
                # sleep below) is not among them, and one still queued stays so
                self._running.add(job_id)
                status = await self.pool.run(
                    execute, self.url, job_id, self.pool.memory_budget_mb, self.kernels
                )
                if status != "queued":
                    return
                # another re-plan of its site runs: this one waits for it, queued
            except PoolFull:
                pass
            except WorkerLost:
                # killed (e.g. out of memory), or, at shutdown, not stopped in time
                error = INTERRUPTED if self._stopping else WORKER_LOST
                await asyncio.to_thread(self.store.finish, job_id, "failed", error=error)
                return
            except Exception as exc:  # noqa: BLE001 - recorded on the job, never lost
                log.exception("job %s failed", job_id)
                await asyncio.to_thread(self.store.finish, job_id, "failed", error=_problem_of(exc))
                return
            finally:
                self._running.discard(job_id)
            await asyncio.sleep(self.poll_s)

    def cancel_running(self) -> None:
        """The server starts shutting down: take no more jobs and mark the running ones
        cancelled (before their solves are stopped, so that each ends as a cancelled
        job with its best schedule). Queued jobs stay queued."""
        self._stopping = True
        for job_id in list(self._running):
            try:
                self.store.stop_running(job_id)
            except SQLAlchemyError:  # the job fails as interrupted at the next start
                log.warning("job %s not stopped: the database is unavailable", job_id)

    async def stop(self, grace_s: float) -> None:
        """On shutdown: ask the running jobs to stop (each keeps its best schedule, as a
        cancelled job) and wait for them at most ``grace_s`` seconds; queued jobs stay
        queued for the next start."""
        self._stopping = True
        for job_id in list(self._running):
            try:
                await asyncio.to_thread(self.store.stop_running, job_id)
            except SQLAlchemyError:  # the job fails as interrupted at the next start
                log.warning("job %s not stopped: the database is unavailable", job_id)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
