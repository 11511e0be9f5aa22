"""Pareto front and the selections on it (SPEC 2.7), checked against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model.capacity import candidate_configs, evaluate
from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.pareto import (
    eps_pareto_agreement,
    front_indices,
    max_capacity_index,
    min_power_index,
    pareto_mask,
)

# ---- brute-force definitions (SPEC 2.7) -------------------------------------------------


def brute_mask(mu, p):
    """Not dominated: no other point with mu' >= mu and P' <= P, one of them strict."""
    n = len(mu)
    out = []
    for i in range(n):
        dominated = any(
            mu[j] >= mu[i] and p[j] <= p[i] and (mu[j] > mu[i] or p[j] < p[i])
            for j in range(n)
            if j != i
        )
        out.append(not dominated)
    return out


def brute_min_power(mu, p, required, headroom=1.0, gpus=None):
    """Least P among rho_bar * mu >= required; ties: larger mu, then fewer GPUs."""
    g = gpus if gpus is not None else [0] * len(mu)
    ok = [(p[i], -mu[i], g[i]) for i in range(len(mu)) if headroom * mu[i] >= required]
    return min(ok) if ok else None


def brute_max_capacity(mu, p, budget):
    """Largest mu among P <= budget; ties: less power."""
    ok = [(-mu[i], p[i]) for i in range(len(mu)) if p[i] <= budget]
    return min(ok) if ok else None


# Values drawn from a small grid produce exact ties and duplicate points.
grid_values = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 7.25])
any_values = st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False)
points = st.lists(
    st.tuples(st.one_of(grid_values, any_values), st.one_of(grid_values, any_values)),
    min_size=0,
    max_size=40,
)


def split(pts):
    mu = np.array([a for a, _ in pts], dtype=float)
    p = np.array([b for _, b in pts], dtype=float)
    return mu, p


@settings(max_examples=100, deadline=None)
@given(points)
def test_pareto_mask_matches_brute_force(pts):
    mu, p = split(pts)
    assert pareto_mask(mu, p).tolist() == brute_mask(mu.tolist(), p.tolist())


@settings(max_examples=100, deadline=None)
@given(points)
def test_front_indices_are_the_front_sorted_by_capacity(pts):
    mu, p = split(pts)
    idx = front_indices(mu, p)
    assert sorted(idx.tolist()) == [i for i, keep in enumerate(brute_mask(mu, p)) if keep]
    assert np.all(np.diff(mu[idx]) >= 0)
    # along a front, power rises with capacity (equal capacity means equal power)
    assert np.all(np.diff(p[idx]) >= 0)
    strictly_more = np.diff(mu[idx]) > 0
    assert np.all(np.diff(p[idx])[strictly_more] > 0)


def test_duplicates_both_stay_on_the_front():
    mu = [1.0, 1.0, 2.0, 2.0, 0.5]
    p = [10.0, 10.0, 20.0, 25.0, 10.0]
    # (1, 10) twice: neither dominates the other; (2, 25) is dominated by (2, 20);
    # (0.5, 10) by (1, 10).
    assert pareto_mask(mu, p).tolist() == [True, True, True, False, False]
    assert front_indices(mu, p).tolist()[-1] == 2
    assert sorted(front_indices(mu, p).tolist()) == [0, 1, 2]


def test_empty_point_set():
    assert pareto_mask([], []).size == 0
    assert front_indices([], []).size == 0


@settings(max_examples=100, deadline=None)
@given(
    points.filter(len),
    st.floats(0.0, 1e4, allow_nan=False),
    st.sampled_from([1.0, 0.8, 0.5, 0.25]),
    st.lists(st.integers(1, 4), min_size=40, max_size=40),
)
def test_min_power_index_matches_brute_force(pts, required, headroom, gpus):
    mu, p = split(pts)
    g = np.array(gpus[: len(pts)], dtype=float)
    i = min_power_index(mu, p, required, headroom, g)
    ref = brute_min_power(mu.tolist(), p.tolist(), required, headroom, g.tolist())
    if ref is None:
        assert i is None
    else:
        assert i is not None
        assert (p[i], -mu[i], g[i]) == ref
        assert headroom * mu[i] >= required


@settings(max_examples=100, deadline=None)
@given(points.filter(len), st.floats(0.0, 1e4, allow_nan=False))
def test_max_capacity_index_matches_brute_force(pts, budget):
    mu, p = split(pts)
    i = max_capacity_index(mu, p, budget)
    ref = brute_max_capacity(mu.tolist(), p.tolist(), budget)
    if ref is None:
        assert i is None
    else:
        assert i is not None
        assert (-mu[i], p[i]) == ref
        assert p[i] <= budget


def test_selections_by_hand():
    mu = [1.0, 2.0, 4.0, 8.0]
    p = [100.0, 180.0, 330.0, 640.0]
    assert min_power_index(mu, p, 3.0) == 2
    assert min_power_index(mu, p, 3.0, headroom=0.5) == 3  # 0.5 * 4 < 3 <= 0.5 * 8
    assert min_power_index(mu, p, 9.0) is None
    assert min_power_index(mu, p, 0.0) == 0
    assert max_capacity_index(mu, p, 329.99) == 1
    assert max_capacity_index(mu, p, 330.0) == 2
    assert max_capacity_index(mu, p, 99.0) is None


@pytest.mark.parametrize("headroom", [0.0, -0.1, 1.5, math.nan])
def test_invalid_headroom_raises(headroom):
    with pytest.raises(InputError) as info:
        min_power_index([1.0], [1.0], 0.5, headroom)
    assert info.value.field == "headroom"
    front = ([1.0, 2.0], [1.0, 2.0], [0, 1])
    with pytest.raises(InputError) as info:
        eps_pareto_agreement(front, front, headroom=headroom)
    assert info.value.field == "headroom"


def test_headroom_of_one_is_valid():
    assert min_power_index([1.0], [1.0], 1.0, 1.0) == 0


# ---- epsilon-Pareto agreement (SPEC 2.7) -------------------------------------------------

MU = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
POWER = np.array([100.0, 180.0, 330.0, 640.0, 1250.0])
IDS = np.arange(5)


def test_front_agrees_with_itself():
    a = eps_pareto_agreement((MU, POWER, IDS), (MU, POWER, IDS))
    assert a.share == 1.0
    assert a.required_rps.size == 400  # SPEC 2.7: 400 log-spaced rates
    assert np.all(np.diff(np.log(a.required_rps)) > 0)


def test_perturbed_front_disagrees_beyond_epsilon():
    # every power 10% higher on a front of other configurations: |dP| = 0.1 P > 0.03 P
    other = (MU, POWER * 1.10, IDS + 100)
    assert eps_pareto_agreement(other, (MU, POWER, IDS)).share < 1.0
    assert eps_pareto_agreement((MU, POWER, IDS), other).share < 1.0
    # with epsilon = 0.11 the 10% difference counts as agreement, both ways round
    assert eps_pareto_agreement(other, (MU, POWER, IDS), epsilon=0.11).share == 1.0
    assert eps_pareto_agreement((MU, POWER, IDS), other, epsilon=0.11).share == 1.0


def test_same_configuration_agrees_whatever_its_power():
    other = (MU, POWER * 1.10, IDS)
    assert eps_pareto_agreement(other, (MU, POWER, IDS)).share == 1.0


def test_partial_disagreement_share():
    # front b lacks the 4 req/s point: for rates in (2, 4] a picks 330 W, b picks 640 W.
    a = (MU, POWER, IDS)
    b = (MU[[0, 1, 3, 4]], POWER[[0, 1, 3, 4]], IDS[[0, 1, 3, 4]])
    res = eps_pareto_agreement(a, b)
    rates = np.geomspace(1.0, 16.0, 400)
    expected = 1.0 - np.mean((rates > 2.0) & (rates <= 4.0))
    assert res.share == pytest.approx(expected, abs=1e-12)
    assert 0 < res.share < 1


def test_model_front_agrees_with_itself_and_not_with_perturbed_copy():
    spec = resolve_spec(SpecRequest(workload="azure-conv-2023"))
    n_p, n_d = candidate_configs(16)
    r = evaluate(spec, n_p, n_d)
    f = front_indices(r.capacity_rps, r.power_w)
    ids = r.n_p[f] * 100_000 + r.n_d[f]
    front = (r.capacity_rps[f], r.power_w[f], ids)
    assert eps_pareto_agreement(front, front).share == 1.0
    shifted = (r.capacity_rps[f], r.power_w[f] * 1.10, ids + 1)
    assert eps_pareto_agreement(shifted, front).share < 1.0
    assert eps_pareto_agreement(shifted, front, epsilon=0.11).share == 1.0


def test_agreement_input_errors():
    with pytest.raises(InputError):
        eps_pareto_agreement((MU, POWER, IDS), (MU, POWER, IDS), epsilon=-0.01)
    with pytest.raises(InputError):
        eps_pareto_agreement(([], [], []), (MU, POWER, IDS))
