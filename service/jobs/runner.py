"""Running jobs: a job's run in a solver worker (:func:`execute`, the use case's run of
its kind, :func:`run_kind`) and, without a broker, the runner that starts the
database's queued jobs in this process's solver pool (:class:`JobRunner`).

On start-up, jobs still ``queued`` run again and jobs that were ``running`` (their
process is gone) are ``failed`` with that reason, never lost. Without a broker the
jobs run in this process's solver pool, as many at once as it has workers, the rest
waiting ``queued``. The worker writes the job's ``progress`` (phase, best objective,
proven bound, gap; for a demand-response what-if the solves done of two, for a
flexibility curve the evaluations done of its total, with the time since it started)
to the database as the work goes, and reads ``cancel_requested`` there: a cancelled
schedule stops at its next check (a running MILP finishes its slice first, at most a
fifth of the time limit) and its best schedule so far is kept as the result of the
``cancelled`` job; a cancelled demand-response what-if stops its solve the same way,
and a flexibility curve after the evaluation that runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from formulation.processes.interrupt import process_stopping
from model.errors import PdwattError
from service.runtime.jobstore import JobStore, job_store
from service.runtime.pool import PoolFull, SolvePool, WorkerLost
from service.runtime.records import Origin, SiteNotFound
from service.runtime.webhooks import Notifier

log = logging.getLogger(__name__)

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
    use case's run, :mod:`service.usecases.table`; ``url``: the database that holds the
    sites, for ``site_plan``; ``cancelled``: whether the job was cancelled, asked
    before a site plan is stored; ``kernels``: the server's kernel database;
    ``origin``: the job and what asked for it, kept with a site plan)."""
    from service.usecases.rows import Context
    from service.usecases.table import parse, run

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
