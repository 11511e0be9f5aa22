"""Children that end with their parent (formulation/lifetime.py): a real process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)

# the middle process starts a grandchild that asks for the signal (or not), prints the
# grandchild's pid and waits to be killed
MIDDLE = textwrap.dedent(
    """
    import subprocess, sys, time
    ask = sys.argv[1] == "ask"
    code = (
        "from formulation.lifetime import kill_on_parent_death\\n"
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
