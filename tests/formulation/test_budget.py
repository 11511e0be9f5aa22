"""The deadline object the solve's phases and kernels share (formulation.budget): each
derived deadline lies where its definition puts it, bracketed by the monotonic clock
read before and after (no assertion on how long anything takes); and no kernel of
``formulation/`` takes its time as a duration."""

from __future__ import annotations

import ast
import math
import time
from pathlib import Path

import pytest

from formulation.budget import Deadline, TimeBudget
from tests.source import parse

FORMULATION = Path(__file__).resolve().parents[2] / "formulation"


def test_a_deadline_in_the_past_is_expired_and_has_nothing_left() -> None:
    past = Deadline(time.monotonic() - 1.0)
    assert past.expired()
    assert past.remaining() == 0.0
    # a share of nothing is nothing: the sub-deadline is now, already past by the check
    before = time.monotonic()
    sub = past.fraction(0.5)
    assert before <= sub.at <= time.monotonic()


def test_no_deadline_never_expires() -> None:
    never = Deadline.never()
    assert not never.expired()
    assert never.remaining() == math.inf
    assert never.within(5.0).at < math.inf


@pytest.mark.parametrize("share", [0.0, 0.05, 0.6, 1.0])
def test_a_fraction_is_that_share_of_the_time_left(share: float) -> None:
    d = Deadline(time.monotonic() + 100.0)
    before = time.monotonic()
    sub = d.fraction(share)
    after = time.monotonic()
    assert before + share * (d.at - before) <= sub.at + 1e-9
    assert sub.at <= after + share * (d.at - after) + 1e-9
    assert sub <= d


def test_at_least_within_and_later() -> None:
    d = Deadline(time.monotonic() + 10.0)
    assert d.at_least(1.0) == d  # already further away
    before = time.monotonic()
    far = d.at_least(50.0)
    assert before + 50.0 <= far.at <= time.monotonic() + 50.0
    assert d.within(50.0) == d
    before = time.monotonic()
    near = d.within(1.0)
    assert before + 1.0 <= near.at <= time.monotonic() + 1.0
    assert d.later(2.5).at == d.at + 2.5


def test_phase_deadlines_follow_their_fractions_and_keep_the_reserve() -> None:
    started = time.monotonic()
    b = TimeBudget(1000.0, started=started)
    ends = [b.deadline(f).at for f in (b.BASELINES, b.ONE_PERIOD_BOUND, b.RELAXATION, b.REPAIR)]
    assert ends == [started + 1000.0 * f for f in (0.10, 0.15, 0.25, 0.40)]
    assert b.deadline(b.END).at == started + 1000.0 * (1 - b.RESERVE)
    # a phase that starts late keeps its least share, never past the end
    late = TimeBudget(1000.0, started=started - 980.0)
    before = time.monotonic()
    kept = late.deadline(b.RELAXATION, b.RELAXATION_AT_LEAST).at
    assert kept == late.deadline(b.END).at
    assert kept < before + b.RELAXATION_AT_LEAST * 1000.0


#: argument names that say a duration of the time limit (or of a share of it)
DURATIONS = ("time_limit_s", "limit_s", "timeout_s", "seconds", "milp_s")


def _signatures() -> list[tuple[str, str]]:
    """(file, function) of every function in formulation/ and its folders (what-ifs
    included) with an argument whose name says it is a duration of the time limit; the
    deadline object's own constructors (formulation/budget.py) aside."""
    found = []
    for path in sorted(FORMULATION.rglob("*.py")):
        if path.name == "budget.py":
            continue
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.args + node.args.kwonlyargs
                if any(a.arg in DURATIONS for a in args):
                    found.append((str(path.relative_to(FORMULATION)), node.name))
    return found


def test_kernels_take_a_deadline_not_a_duration() -> None:
    assert _signatures() == []


def test_the_end_of_the_limit_includes_the_reserve() -> None:
    started = time.monotonic()
    b = TimeBudget(1000.0, started=started)
    assert b.end().at == started + 1000.0
    assert b.deadline(b.END).at < b.end().at
