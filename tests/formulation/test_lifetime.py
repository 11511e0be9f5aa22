"""Children that end with their parent (formulation/processes/lifetime.py): a real process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.servers,  # starts processes and kills them
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
    ),
]

# the middle process starts a grandchild that asks for the signal (or not), prints the
# grandchild's pid and waits to be killed
MIDDLE = textwrap.dedent(
    """
    import subprocess, sys, time
    ask = sys.argv[1] == "ask"
    code = (
        "from formulation.processes.lifetime import kill_on_parent_death\\n"
        + ("assert kill_on_parent_death()\\n" if ask else "")
        + "print('ready', flush=True)\\n"
        + "import time; time.sleep(60)\\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    print(child.pid, flush=True)
    time.sleep(60)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by init) counts as ended
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def _grandchild_after_parent_killed(mode: str) -> bool:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, mode], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        grandchild = int(middle.stdout.readline())  # type: ignore[union-attr]
        assert _alive(grandchild)
        middle.kill()
        middle.wait(10)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _alive(grandchild):
            time.sleep(0.05)
        alive = _alive(grandchild)
        if alive:
            os.kill(grandchild, 9)
        return alive
    finally:
        if middle.poll() is None:
            middle.kill()


def test_child_dies_with_its_parent():
    assert not _grandchild_after_parent_killed("ask")


def test_without_the_request_the_child_outlives_its_parent():
    # the control: the same tree without kill_on_parent_death leaves an orphan
    assert _grandchild_after_parent_killed("none")


# a ForkPool whose two workers each write their pid to a file and sleep; the test kills
# this process (as the out-of-memory killer would) while they run
FORK_POOL = textwrap.dedent(
    """
    import os, sys, time
    from formulation.processes.workers import ForkPool

    def task(shared, path):
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(path + ".tmp", path)
        time.sleep(60)

    with ForkPool(None, 2) as pool:
        assert pool.parallel
        pool.map(task, [(sys.argv[1] + "/a",), (sys.argv[1] + "/b",)])
    """
)


def test_fork_pool_workers_die_with_the_process_that_forked_them(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen([sys.executable, "-c", FORK_POOL, str(tmp_path)], env=env)
    try:
        files = [tmp_path / "a", tmp_path / "b"]
        deadline = time.monotonic() + 30
        while not all(f.exists() for f in files):
            assert time.monotonic() < deadline and parent.poll() is None, "no workers"
            time.sleep(0.05)
        workers = [int(f.read_text()) for f in files]
        assert all(_alive(w) for w in workers)
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.05)
        alive = [w for w in workers if _alive(w)]
        for w in alive:
            os.kill(w, 9)
        assert not alive, "forked workers outlived the process that forked them"
    finally:
        if parent.poll() is None:
            parent.kill()


# a subreaper (as a container's first process is) whose child leads a process group and
# starts a grandchild that does not ask for the parent-death signal; the child is killed,
# then its group, and the grandchild, re-parented to the subreaper, is reaped by it
GROUP = textwrap.dedent(
    """
    import ctypes, os, signal, subprocess, sys, time
    from formulation.processes.lifetime import kill_process_group, lead_process_group, reap_orphans

    PR_SET_CHILD_SUBREAPER = 36
    assert ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    code = (
        "import subprocess, sys, time\\n"
        "from formulation.processes.lifetime import lead_process_group\\n"
        "assert lead_process_group()\\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\\n"
        "print(g.pid, flush=True)\\n"
        "time.sleep(60)\\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    assert os.getpgid(grandchild) == child.pid != os.getpgrp()
    child.kill()
    time.sleep(0.2)  # the grandchild is re-parented to this process
    assert int(open(f"/proc/{grandchild}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    kill_process_group(child.pid)  # before reaping the leader
    child.wait()
    assert reap_orphans(child.pid) == 1
    assert not os.path.exists(f"/proc/{grandchild}")
    kill_process_group(os.getpid())  # leads no group: nothing happens to this one
    print("ok")
    """
)


def test_a_dead_leaders_group_is_killed_and_its_orphans_reaped() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", GROUP], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "ok", out.stderr
