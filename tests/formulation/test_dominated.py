"""The dominance pruning of setting pairs (formulation.data.dominated_options) against
the pairwise rule it states, written out pair by pair: option ``a`` dominates ``b`` of
the same configuration when it has at least ``b``'s capacity and at most its power at
both curves' breakpoints up to ``b``'s capacity; ``b`` is dropped when some ``a``
dominates it and ``b`` does not dominate ``a`` back, unless ``a`` is listed first."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from formulation.data import build_data, deployment_candidates, dominated_options
from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from model.operations import instance_gpus
from model.spec import with_settings
from model.tables import build_table


def _power(xs: np.ndarray, ys: np.ndarray, s: np.ndarray) -> np.ndarray:
    """One curve's power at loads ``s``: the power at zero load plus each segment's slope
    times the part of ``s`` in it (the arithmetic of DeploymentData.power_w)."""
    out = np.full(s.shape, ys[0])
    for j in range(3):
        if np.isnan(xs[j + 1]):
            continue
        width = xs[j + 1] - xs[j]
        slope = (ys[j + 1] - ys[j]) / width if width > 0 else 0.0
        out += slope * np.clip(s - xs[j], 0.0, width)
    return out


def _reference(cap: np.ndarray, bl: np.ndarray, bp: np.ndarray) -> np.ndarray:
    n_opt, n = cap.shape

    def dom(a: int, b: int, i: int) -> bool:
        pts = np.minimum(np.nan_to_num(np.concatenate([bl[a, i], bl[b, i]])), cap[b, i])
        lower = _power(bl[a, i], bp[a, i], pts) <= _power(bl[b, i], bp[b, i], pts)
        return bool(cap[a, i] >= cap[b, i] and lower.all())

    out = np.zeros(cap.shape, dtype=bool)
    for i, b, a in itertools.product(range(n), range(n_opt), range(n_opt)):
        if a != b and dom(a, b, i) and (a < b or not dom(b, a, i)):
            out[b, i] = True
    return out


def _random_curves(rng: np.random.Generator, n_opt: int, n: int):
    """Concave-or-not curves on a coarse grid (ties in capacity and power are common),
    some options exact copies of others."""
    cap = np.zeros((n_opt, n))
    bl = np.full((n_opt, n, 4), np.nan)
    bp = np.full((n_opt, n, 4), np.nan)
    for o, i in itertools.product(range(n_opt), range(n)):
        if o > 0 and rng.random() < 0.2:  # a copy of an earlier option
            src = int(rng.integers(0, o))
            cap[o, i], bl[o, i], bp[o, i] = cap[src, i], bl[src, i], bp[src, i]
            continue
        count = int(rng.integers(1, 5))
        loads = np.concatenate([[0.0], np.sort(rng.choice(np.arange(1, 9), count - 1, False))])
        powers = np.sort(rng.integers(1, 6, count)).astype(float) * 100.0
        bl[o, i, :count], bp[o, i, :count] = loads, powers
        cap[o, i] = loads[-1]
    return cap, bl, bp


@pytest.mark.parametrize("seed", range(20))
def test_dominated_options_follow_the_pairwise_rule_on_random_curves(seed):
    rng = np.random.default_rng(seed)
    cap, bl, bp = _random_curves(rng, int(rng.integers(1, 10)), int(rng.integers(1, 30)))
    got = dominated_options(cap, bl, bp)
    assert got.dtype == bool and got.shape == cap.shape
    np.testing.assert_array_equal(got, _reference(cap, bl, bp))


def test_dominated_options_follow_the_pairwise_rule_on_the_demo_with_three_by_three():
    body = demo_request()
    problem = problem_from_dict(body)
    data = build_data(problem)
    checked = 0
    for d, dd in zip(problem.deployments, data.deployments, strict=True):
        clocks = dd.spec.gpu_clocks()
        assert clocks is not None and len(clocks.settings) == 3
        cp, cd = deployment_candidates(d, *instance_gpus(dd.spec))
        texts = [None if s == clocks.full_clock else s for s in clocks.settings]
        tables = [
            build_table(with_settings(dd.spec, sp, sd), cp, cd)
            for sp, sd in itertools.product(texts, texts)
        ]
        cap = np.stack([t.result.capacity_rps for t in tables])
        bl = np.stack([t.bp_load_rps for t in tables])
        bp = np.stack([t.bp_power_w for t in tables])
        got = dominated_options(cap, bl, bp)
        np.testing.assert_array_equal(got, _reference(cap, bl, bp))
        checked += int(got.sum())
    assert checked > 0  # the pruning drops some pairs there
