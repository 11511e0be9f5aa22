"""The solver pool (service/runtime/pool.py) on real worker processes, with calls of this
module: a worker killed mid-call fails that call only, at once, and what it started is
killed with its process group; an idle worker found dead is replaced before it gets a
call; at shutdown a call that ignores the stop request is ended; a call's exception is
raised in the caller."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.runtime import pool as pool_module
from service.runtime.pool import PoolFull, SolvePool, WorkerLost
from tests.service.processes import linux_only

pytestmark = [linux_only, pytest.mark.servers]


def sleeper(path: str, seconds: float) -> int:
    """Start a grandchild that does not ask to end with its parent, write both pids to
    ``path``, sleep."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(path + ".tmp").write_text(f"{os.getpid()} {child.pid}")
    os.rename(path + ".tmp", path)
    time.sleep(seconds)
    child.kill()
    child.wait()
    return os.getpid()


def failing(message: str) -> None:
    raise ValueError(message)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _ended(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return not _alive(pid)


async def _pids(path: Path, timeout_s: float = 60.0) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, "the call never started"
        await asyncio.sleep(0.05)
    worker, grandchild = map(int, path.read_text().split())
    return worker, grandchild


def test_a_worker_killed_mid_call_fails_that_call_only_and_its_group_dies(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        pool = SolvePool(2)
        try:
            a = asyncio.ensure_future(pool.run(sleeper, str(tmp_path / "a"), 60))
            b = asyncio.ensure_future(pool.run(sleeper, str(tmp_path / "b"), 3))
            worker, grandchild = await _pids(tmp_path / "a")
            await _pids(tmp_path / "b")
            with pytest.raises(PoolFull):
                await pool.run(os.getpid)
            os.kill(worker, signal.SIGKILL)
            with pytest.raises(WorkerLost):
                await asyncio.wait_for(a, 30)  # a guard, not a timing
            assert await _ended(grandchild), "the dead worker's child outlived it"
            assert await asyncio.wait_for(b, 60) != worker  # the other call went on
            assert pool.replaced == 1 and pool.busy == 0
            assert await pool.run(os.getpid) not in (worker, 0)
        finally:
            pool.shutdown()

    asyncio.run(main())


def test_a_dead_idle_worker_is_replaced_before_the_next_call() -> None:
    async def main() -> None:
        pool = SolvePool(1)
        try:
            first = await pool.run(os.getpid)
            os.kill(first, signal.SIGKILL)
            second = await pool.run(os.getpid)  # at once: no WorkerLost
            assert second != first and pool.replaced == 1
        finally:
            pool.shutdown()

    asyncio.run(main())


def test_a_call_that_ignores_the_stop_request_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool_module, "STOP_GRACE_S", 0.5)

    async def main() -> None:
        pool = SolvePool(1)
        try:
            call = asyncio.ensure_future(pool.run(sleeper, str(tmp_path / "a"), 60))
            worker, grandchild = await _pids(tmp_path / "a")
            pool.stop_solves()  # sleeper does not ask whether to stop
            with pytest.raises(WorkerLost):
                await asyncio.wait_for(call, 30)
            assert await _ended(worker) and await _ended(grandchild)
        finally:
            pool.shutdown()

    asyncio.run(main())


def test_an_exception_in_the_worker_is_raised_here_with_its_traceback() -> None:
    async def main() -> None:
        pool = SolvePool(1)
        try:
            with pytest.raises(ValueError, match="no such thing") as info:
                await pool.run(failing, "no such thing")
            assert any("in the solver process" in n for n in info.value.__notes__)
            assert await pool.run(os.getpid) > 0  # the worker is still there
            assert pool.replaced == 0
        finally:
            pool.shutdown()

    asyncio.run(main())


def test_a_worker_whose_exit_descriptor_is_above_1024_is_still_watched() -> None:
    """A server with many open descriptors gives its workers' exit descriptors numbers
    at or above FD_SETSIZE (1024), which ``select`` refuses: the pool still serves calls
    and sees a killed worker."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"the descriptor limit ({soft}) is below what the test opens")
    held = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            held.append(fd)
            if fd >= 1100:
                break

        async def main() -> None:
            pool = SolvePool(1)
            try:
                # every descriptor below 1100 is held: the worker's are above it
                first = await pool.run(os.getpid)
                os.kill(first, signal.SIGKILL)
                second = await pool.run(os.getpid)  # the dead one seen, replaced
                assert second != first and pool.replaced == 1
            finally:
                pool.shutdown()

        asyncio.run(main())
    finally:
        for fd in held:
            os.close(fd)
