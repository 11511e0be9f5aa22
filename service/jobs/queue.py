"""Jobs on a Redis queue: the API enqueues them, ``pdwatt worker`` processes run them.

With ``PDWATT_REDIS_URL`` set, ``POST /v1/jobs`` writes the job to the database (as
without a broker) and enqueues its id on Redis through arq; any number of ``pdwatt
worker`` processes, on any machines that reach the same Redis and database, take jobs
from the queue and run each in their own solver pool. The database stays the record of
every job (status, progress, result, cancellation); Redis only carries the ids, so a
lost Redis message is recovered from the database and a duplicate one runs nothing.

Delivery and failure (see the ``jobs`` columns ``attempts``, ``worker``, ``heartbeat``):

* A worker takes a job with an atomic ``queued`` -> ``running`` update naming itself
  (``host:pid``) and counting an attempt; whoever loses that race does nothing. A job
  cancelled while queued is never started.
* While it runs the job, the worker writes a heartbeat every ``HEARTBEAT_S`` seconds.
* Every worker sweeps the database every few seconds: a running job whose heartbeat is
  older than ``PDWATT_JOB_HEARTBEAT_TIMEOUT_S`` lost its worker (killed, or cut off from
  the database): it is queued again while it has had fewer than
  ``PDWATT_JOB_MAX_ATTEMPTS`` attempts, and failed with that reason after. Queued jobs
  are (re-)enqueued under an id that names their attempt, which Redis refuses twice, so
  a job whose message was lost (Redis restarted empty, the API stopped between its
  database write and its enqueue) still runs, once.
* A solver process that dies under a running job (the out-of-memory killer) fails the
  job with that reason within a second (the pool watches the process itself, see
  :mod:`service.runtime.pool`; the job's heartbeat stops with it); what was left of its solve
  ends with it, and the worker replaces the process and goes on.
* Webhooks of ended jobs are sent by the worker that ended them, or by the sweep when
  that worker stopped first.
* Every worker also re-plans the sites that ask for it at each period boundary
  (:mod:`service.sites.replan`; each boundary once, whatever the number of workers).
* ``SIGTERM`` to a worker: it takes no more jobs, puts its running jobs back in the
  queue for the other workers (their solver processes, and theirs, are killed) and
  exits. Killed outright, it takes its solver processes with it (parent-death signal).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Worker, func
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError

from service.jobs.runner import WORKER_LOST, execute_started
from service.requests.limits import time_limit
from service.runtime.jobstore import job_store
from service.runtime.pool import SolvePool, WorkerLost
from service.runtime.settings import Settings
from service.runtime.webhooks import Notifier
from service.sites import replan

log = logging.getLogger(__name__)

QUEUE_NAME = "pdwatt:jobs"
FUNCTION = "run_job"
#: seconds between two heartbeats of a worker's running jobs
HEARTBEAT_S = 2.0
#: seconds between two tries to start a job that waits for another of its scope
WAIT_S = 0.25


def redis_settings(url: str) -> RedisSettings:
    return RedisSettings.from_dsn(url)


def message_id(job_id: str, attempts: int) -> str:
    """The queue message of a job that has had ``attempts`` attempts: one per attempt,
    so that a job queued again after a lost worker gets a new message while a job
    swept twice in the same state does not."""
    return f"pdwatt:{job_id}:{attempts}"


async def enqueue(redis: ArqRedis, job_id: str, attempts: int) -> bool:
    """Put the job on the queue; False when its message is already there (or done)."""
    job = await redis.enqueue_job(
        FUNCTION, job_id, _job_id=message_id(job_id, attempts), _queue_name=QUEUE_NAME
    )
    return job is not None


# ------------------------------------------------------------ in the API process


class RedisJobs:
    """The API side: jobs are enqueued for the workers; this process runs none."""

    def __init__(self, url: str, redis_url: str) -> None:
        self.url = url
        self.redis_url = redis_url
        self._redis: ArqRedis | None = None

    async def _connection(self) -> ArqRedis:
        if self._redis is None:
            self._redis = await create_pool(
                redis_settings(self.redis_url), default_queue_name=QUEUE_NAME
            )
        return self._redis

    def recover(self) -> None:
        """Nothing to do here: the workers recover jobs (see the module docstring)."""

    async def submit(self, job_id: str) -> None:
        """Enqueue a new job. If Redis does not answer, the job stays queued in the
        database and the workers' next sweep enqueues it: it is never lost."""
        try:
            await enqueue(await self._connection(), job_id, 0)
        except (RedisError, OSError) as exc:
            log.warning(
                "job %s not enqueued (%s); the workers' sweep will", job_id, type(exc).__name__
            )

    async def ready(self) -> bool:
        try:
            return bool(await asyncio.wait_for((await self._connection()).ping(), 2.0))
        except (RedisError, OSError, TimeoutError):
            return False

    def cancel_running(self) -> None:
        """The API stops: the jobs belong to the workers and go on."""

    async def stop(self, grace_s: float) -> None:
        if self._redis is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._redis.aclose()
            self._redis = None


# ------------------------------------------------------------ in a worker process


class JobWorker:
    """One ``pdwatt worker``: runs up to ``settings.workers`` jobs at once, each in a
    solver process of its own pool; beats for them and sweeps the database."""

    def __init__(self, settings: Settings) -> None:
        if settings.redis_url is None:
            raise ValueError("PDWATT_REDIS_URL is not set: a worker needs the Redis queue")
        self.settings = settings
        self.url = settings.database_url
        self.name = f"{socket.gethostname()}:{os.getpid()}"[:128]
        self.pool = SolvePool(settings.workers, settings.max_solve_memory_mb, settings.ray_address)
        self.notifier = Notifier.of(settings)
        self.running: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def store(self) -> Any:
        return job_store(self.url)

    async def run_job(self, ctx: dict[str, Any], job_id: str) -> str:
        """Take job ``job_id`` (if it is still queued), run it to its end and send its
        webhook."""
        status = await self._run_job(ctx, job_id)
        if status != "not queued":
            try:
                await self.notifier.job_ended(self.store, job_id)
            except SQLAlchemyError:  # the sweep sends it
                log.warning("webhook of job %s not sent: the database is unavailable", job_id)
        return status

    async def _run_job(self, ctx: dict[str, Any], job_id: str) -> str:
        taken = await asyncio.to_thread(self.store.start, job_id, self.name)
        while not taken and await asyncio.to_thread(self.store.waits, job_id):
            # another re-plan of its site runs (JobStore.start): this one starts after it
            await asyncio.sleep(WAIT_S)
            taken = await asyncio.to_thread(self.store.start, job_id, self.name)
        if not taken:
            return "not queued"
        self.running.add(job_id)
        try:
            return str(
                await self.pool.run(
                    execute_started,
                    self.url,
                    job_id,
                    self.settings.max_solve_memory_mb,
                    self.name,
                    self.settings.kernels,
                )
            )
        except WorkerLost:
            await asyncio.to_thread(
                self.store.finish, job_id, "failed", error=WORKER_LOST, worker=self.name
            )
            return "failed"
        except asyncio.CancelledError:
            # the worker is stopping: the job goes back to the queue, for another worker
            await asyncio.shield(self._give_back(job_id, ctx["redis"]))
            raise
        finally:
            self.running.discard(job_id)

    async def _give_back(self, job_id: str, redis: ArqRedis) -> None:
        try:
            if await asyncio.to_thread(self.store.release, job_id, self.name):
                job = await asyncio.to_thread(self.store.get, job_id)
                await enqueue(redis, job_id, job.attempts)
                log.info("job %s given back to the queue", job_id)
        except (SQLAlchemyError, RedisError, OSError) as exc:
            # its heartbeat stops: the other workers' sweep queues it again
            log.warning("job %s not given back (%s)", job_id, type(exc).__name__)

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await asyncio.to_thread(self.store.beat, sorted(self.running), self.name)
            except SQLAlchemyError as exc:
                log.warning("heartbeat not written (%s)", type(exc).__name__)

    async def sweep(self, redis: ArqRedis) -> dict[str, int]:
        """Queue again (or fail) the jobs of dead workers; enqueue queued jobs whose
        message is missing. Returns what it did, by kind."""
        done = {"requeued": 0, "failed": 0, "enqueued": 0}
        timeout = self.settings.job_heartbeat_timeout_s
        for job_id, attempts, worker in await asyncio.to_thread(self.store.stale, timeout):
            if attempts >= self.settings.job_max_attempts:
                error = {
                    **WORKER_LOST,
                    "detail": f"worker {worker} stopped giving signs of life while it ran this "
                    f"job (no heartbeat for {timeout:g} s), on attempt {attempts} of "
                    f"{self.settings.job_max_attempts}; submit it again",
                }
                await asyncio.to_thread(self.store.finish, job_id, "failed", error=error)
                done["failed"] += 1
                log.warning("job %s failed: worker %s lost", job_id, worker)
            elif await asyncio.to_thread(self.store.release, job_id, worker):
                done["requeued"] += 1
                log.warning("job %s queued again: worker %s lost", job_id, worker)
        for job_id, attempts in await asyncio.to_thread(self.store.queued):
            if await enqueue(redis, job_id, attempts):
                done["enqueued"] += 1
        done["notified"] = await self.notifier.pending(self.store)
        return done

    async def sweeper(self, redis: ArqRedis) -> None:
        every = max(0.5, self.settings.job_heartbeat_timeout_s / 3)
        while True:
            try:
                await self.sweep(redis)
            except (SQLAlchemyError, RedisError, OSError) as exc:
                log.warning("sweep skipped (%s)", type(exc).__name__)
            await asyncio.sleep(every)

    async def on_startup(self, ctx: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        redis = ctx["redis"]

        async def submit(job_id: str) -> None:
            await enqueue(redis, job_id, 0)

        self._tasks = [
            loop.create_task(self.heartbeat()),
            loop.create_task(self.sweeper(redis)),
            loop.create_task(replan.run_forever(self.url, submit, self.settings.replan_check_s)),
        ]
        log.info("worker %s: %d solver processes", self.name, self.pool.workers)

    async def on_shutdown(self, ctx: dict[str, Any]) -> None:
        for task in self._tasks:
            task.cancel()
        self.pool.kill()  # the solves of jobs given back end now

    def arq_worker(self, burst: bool = False) -> Worker:
        # a job runs at most its solver's time limit (capped by the server's); the queue
        # timeout is a backstop well beyond that, and retries are this module's own
        timeout_s = 2 * time_limit(self.settings).max_s + 120
        return Worker(
            functions=[func(self.run_job, name=FUNCTION, timeout=timeout_s, max_tries=1)],
            queue_name=QUEUE_NAME,
            redis_settings=redis_settings(self.settings.redis_url or ""),
            max_jobs=self.settings.workers,
            on_startup=self.on_startup,
            on_shutdown=self.on_shutdown,
            burst=burst,
            keep_result=3600,
            poll_delay=0.2,
        )


def run_worker(settings: Settings, burst: bool = False) -> None:
    """``pdwatt worker``: runs until SIGTERM or SIGINT (or, with ``burst``, until the
    queue is empty)."""
    JobWorker(settings).arq_worker(burst).run()
