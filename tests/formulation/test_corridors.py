"""The corridor search (``neighbourhoods``) when its MILPs are too large for the time
left: over the whole horizon first, then over time windows at the same radius, a window
too large split into halves down to one period; never a schedule below the optimum."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

import formulation.solve as solve_module
from formulation.budget import TimeBudget
from formulation.milp.compact import free_choices
from formulation.primal.search import halves
from formulation.problem import problem_from_dict
from formulation.run import Run
from formulation.solve import solve
from tests.formulation.test_resumed import optimum, site

SEEDS = range(8)


def neighbourhoods_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A solve whose relaxation stops after one round and whose only MILPs are the
    corridors, until the limit."""
    monkeypatch.setattr(TimeBudget, "RELAXATION", 0.0)
    monkeypatch.setattr(TimeBudget, "RELAXATION_AT_LEAST", 0.0)
    monkeypatch.setattr(solve_module, "exact_window", lambda *args: None)
    monkeypatch.setattr(solve_module, "lp_support", lambda *args: None)
    monkeypatch.setattr(solve_module, "column_milp", lambda *args: None)
    monkeypatch.setattr(solve_module, "_neighbourhoods_end", lambda _generation: TimeBudget.END)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12, 14])
def test_halves_split_a_window_into_consecutive_halves(n: int) -> None:
    window = set(range(5, 5 + n))
    parts = halves(window)
    assert set().union(*parts) == window
    assert not parts[0] & parts[1]
    if n > 1:
        first, second = parts
        assert first and second
        assert max(first) < min(second)  # earlier first
        assert abs(len(first) - len(second)) <= 1
        for p in parts:  # consecutive periods
            assert sorted(p) == list(range(min(p), max(p) + 1))


def test_windows_too_large_are_split_and_keep_the_radius(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With MILPs refused above a number of choices (as the time estimate refuses them
    on hundreds of deployments), the whole horizon is refused, the first pass of windows
    runs at radius 1, as the whole horizon stopped at, and a window refused is followed
    by its halves; the schedules found are never better than the optimum."""
    optima = {seed: optimum(seed) for seed in SEEDS}  # the compact MILP, unrestricted
    neighbourhoods_only(monkeypatch)
    monkeypatch.setattr(TimeBudget, "WINDOW_PERIODS", 6)
    limit = {"choices": 0}
    fits = Run.fits

    def smaller(
        self: Run, choices: int, until: float, root: bool = True, free: int | None = None
    ) -> bool:
        return choices <= limit["choices"] and fits(self, choices, until, root, free)

    monkeypatch.setattr(Run, "fits", smaller)
    split = 0
    for seed in SEEDS:
        body = site(seed, "auto")
        body["solver"]["time_limit_s"] = 4
        # refused over the horizon, over a whole window of 6 periods too
        limit["choices"] = 40
        out = solve(problem_from_dict(body))
        rows = out.stats["neighbourhoods"]
        if not rows:  # the gap closed before the neighbourhoods
            assert out.status == "optimal"
            continue
        assert rows[0]["periods"] is None and rows[0]["status"] == "not built: no time"
        windows = [r for r in rows if r["periods"] is not None]
        assert windows and windows[0]["radius"] == 1
        for a, b in pairwise(rows):
            if a["status"] == "not built: no time" and a["periods"] is not None:
                lo, hi = a["periods"]
                assert b["radius"] == a["radius"]
                first, _ = halves(set(range(lo, hi + 1)))
                if lo < hi:
                    assert b["periods"] == [min(first), max(first)]
                    split += 1
        best = optima[seed]
        assert out.priced.objective_usd >= best - 1e-7 * max(abs(best), 1.0)
        for r in rows:
            if r["status"] != "not built: no time":
                assert r["choices"] <= limit["choices"]
    assert split >= 1, split


def test_a_refused_one_period_window_ends_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MILP fits at all: every refused row is logged, windows are split down to one
    period and the search ends there, with the relaxation's incumbent kept."""
    neighbourhoods_only(monkeypatch)
    monkeypatch.setattr(Run, "fits", lambda self, choices, until, root=True, free=None: False)
    ran = 0
    for seed in SEEDS:
        body = site(seed, "auto")
        body["solver"]["time_limit_s"] = 4
        out = solve(problem_from_dict(body))
        rows = out.stats["neighbourhoods"]
        if not rows:
            continue
        ran += 1
        assert all(r["status"] == "not built: no time" for r in rows)
        assert rows[0]["periods"] is None
        sizes = [r["periods"][1] - r["periods"][0] + 1 for r in rows[1:]]
        assert 1 in sizes  # halved down to one period
        first = sizes[: sizes.index(1) + 1]
        assert first == sorted(first, reverse=True)
        # each a half of the one before: the first of the window's halves
        for a, b in pairwise(rows[1 : len(first) + 1]):
            half, _ = halves(set(range(a["periods"][0], a["periods"][1] + 1)))
            assert b["periods"] == [min(half), max(half)]
        assert np.isfinite(out.priced.objective_usd)
    assert ran >= 1, ran


def test_free_choices_leave_out_the_fixed_rows() -> None:
    """A (deployment, period) row of one choice is fixed: only rows of several count."""
    allowed = [
        [np.array([3]), np.array([1, 2]), np.array([0, 4, 5])],
        [np.array([7]), np.array([7])],
    ]
    assert free_choices(allowed) == 5
    assert free_choices([[np.array([2])]]) == 0
