"""Capacity under latency targets and the engine's largest batch (model/queueing/targets.py,
docs/admission.md section 8).

Brute-force references search the decode batch over whole numbers and the prefill
utilisation over its grid, point by point, instead of the closed form and the bisection
under test. ``targets_reference.json`` holds ``model.capacity.evaluate``'s outputs at
commit cb3ebd2, before ``serving.max_running_requests`` and the targets existed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import model.queueing.targets as targets_mod
from model.capacity import Coefficients, evaluate
from model.catalog import ServingStack
from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.queueing.targets import (
    LatencyTargets,
    PrefillQueue,
    evaluate_targets,
    prefill_times,
    tpot_batch,
)

REFERENCE = json.loads((Path(__file__).parent / "targets_reference.json").read_text())

SPEC = resolve_spec(SpecRequest(workload="fixed:2048:256"))  # admission variant
PAPER = dataclasses.replace(SPEC, variant="paper")
COEF = {"admission": Coefficients.of(SPEC), "paper": Coefficients.of(PAPER)}
# prompt lengths of a small made-up workload (only their prefill times matter here)
L_IN = np.random.default_rng(7).integers(64, 4096, 24).astype(float)

configs = st.tuples(st.integers(1, 6), st.integers(1, 6))
variants = st.sampled_from(["admission", "paper"])


def with_serving(spec, **fields):
    return dataclasses.replace(spec, serving=dataclasses.replace(spec.serving, **fields))


# ---- defaults: today's numbers, bit for bit -------------------------------------------


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: f"{c['variant']}-{c['gpu']}")
def test_defaults_reproduce_the_numbers_before_targets(case) -> None:
    spec = resolve_spec(
        SpecRequest(
            model=case["model"],
            gpu=case["gpu"],
            workload=case["workload"],
            model_variant=case["variant"],
        )
    )
    for r in (
        evaluate(spec, case["n_p"], case["n_d"]),
        evaluate_targets(spec, case["n_p"], case["n_d"], LatencyTargets()),
    ):
        assert r.capacity_rps.tolist() == case["capacity_rps"]
        assert r.power_w.tolist() == case["power_w"]
        assert r.batch.tolist() == case["batch"]
        assert r.limits is None
        assert "batch_capped_by" not in r.record(0)


def test_a_limit_that_does_not_bind_changes_no_number() -> None:
    n_p, n_d = [1, 2, 3, 1], [1, 1, 2, 4]
    base = evaluate(SPEC, n_p, n_d)
    big = int(base.batch.max()) + 1
    capped = evaluate(with_serving(SPEC, max_running_requests=big), n_p, n_d)
    slack = evaluate_targets(SPEC, n_p, n_d, LatencyTargets(tpot_p99_s=1e6))
    for r in (capped, slack):
        assert r.capacity_rps.tolist() == base.capacity_rps.tolist()
        assert r.power_w.tolist() == base.power_w.tolist()
        assert r.limits is not None and list(r.limits.capped_by) == [None] * 4


# ---- the decode batch --------------------------------------------------------------


def brute_force_decode(c: Coefficients, pool_batch: float, tpot: float, limit: float) -> float:
    """The largest decode rate over whole batches up to the pool's (and the pool's own
    batch), among those whose iteration is within ``tpot`` and the engine's limit."""
    best = 0.0
    for b in [*range(1, math.floor(pool_batch) + 1), pool_batch]:
        if b <= limit and c.alpha_s + c.g_s_per_request * b <= tpot:
            best = max(best, b / (c.out_iterations * (c.alpha_s + c.g_s_per_request * b)))
    return best


@settings(max_examples=40, deadline=None)
@given(cfg=configs, variant=variants, tpot=st.floats(0.005, 0.2), limit=st.integers(1, 400))
def test_decode_batch_equals_brute_force(cfg, variant, tpot, limit) -> None:
    spec = with_serving(SPEC if variant == "admission" else PAPER, max_running_requests=limit)
    c = Coefficients.of(spec)
    n_p, n_d = cfg
    pool = evaluate(COEF[variant], n_p, n_d)
    r = evaluate_targets(spec, n_p, n_d, LatencyTargets(tpot_p99_s=tpot))
    decode = n_d * brute_force_decode(c, float(pool.batch[0]), tpot, limit)
    expect = min(n_p * c.mu_prefill_rps, decode)
    assert r.capacity_rps[0] == pytest.approx(expect, rel=1e-12, abs=1e-12)
    if expect > 0:
        assert c.alpha_s + c.g_s_per_request * r.batch[0] <= tpot
    else:
        assert r.limits is not None and "alpha + g" in r.limits.unmet[0]


def test_tpot_batch_is_the_largest_whole_batch_within_the_target() -> None:
    c = COEF["admission"]
    for tpot in np.linspace(c.alpha_s, c.alpha_s + 300 * c.g_s_per_request, 97):
        b = tpot_batch(c, float(tpot))
        assert b == 0 or c.alpha_s + c.g_s_per_request * b <= tpot
        assert c.alpha_s + c.g_s_per_request * (b + 1) > tpot


def test_engine_limit_caps_the_batch_without_targets() -> None:
    r = evaluate(with_serving(SPEC, max_running_requests=8), [1, 3], [2, 1])
    c = COEF["admission"]
    assert r.batch.tolist() == [8.0, 8.0]
    assert r.capacity_rps[1] == pytest.approx(float(c.decode_rate_rps(8.0)))
    assert r.limits is not None and list(r.limits.capped_by) == ["max_running_requests"] * 2
    rec = r.record(1)
    assert rec["batch_capped_by"] == "max_running_requests"
    assert rec["limited_by"] == "decode"
    assert rec["pool_batch"] > 8


def test_a_tpot_target_below_one_request_holds_at_no_rate() -> None:
    c = COEF["admission"]
    r = evaluate_targets(
        SPEC, [1, 2], [1, 3], LatencyTargets(tpot_p99_s=0.99 * (c.alpha_s + c.g_s_per_request))
    )
    assert r.capacity_rps.tolist() == [0.0, 0.0]
    assert r.limits is not None
    assert "below one request's decode iteration" in r.record(0)["unmet"]


# ---- the prefill utilisation --------------------------------------------------------


def test_prefill_utilisation_equals_brute_force_on_its_grid(monkeypatch) -> None:
    monkeypatch.setattr(targets_mod, "RHO_LEVELS", 6)
    c = COEF["admission"]
    t_u, t_w = prefill_times(c, L_IN)
    bare_p99 = float(np.quantile(c.a_p_s_per_token * L_IN + c.b_p_s_per_token2 * L_IN**2, 0.99))
    for phases, running, busy, target in (
        (1, 0.0, 0.0, 3.0 * bare_p99),
        (2, 0.02, 0.9, 2.0 * bare_p99),
        (5, 0.05, 1.0, 1.3 * bare_p99),
    ):
        q = PrefillQueue(t_u, t_w, phases)
        grid = [k / 64 for k in range(64)]
        meets = [k for k, rho in enumerate(grid) if q.meets(rho, target, running, busy)]
        # the p99 increases with the utilisation: the points that meet are a prefix
        assert meets == list(range(len(meets))) and 0 < len(meets) < 64
        assert q.rho_limit(target, running, busy) == grid[meets[-1]]


# the fixture only sets a constant, the same for every example
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cfg=configs, looser=st.floats(1.0, 3.0), tpot=st.floats(0.01, 0.1))
def test_capacity_never_falls_as_targets_loosen_and_never_exceeds_none(
    monkeypatch, cfg, looser, tpot
) -> None:
    monkeypatch.setattr(targets_mod, "RHO_LEVELS", 6)
    n_p, n_d = cfg
    ttft = 1.5 * float(np.quantile(COEF["admission"].a_p_s_per_token * L_IN, 0.99))
    tight = LatencyTargets(ttft_p99_s=ttft, tpot_p99_s=tpot)
    loose = LatencyTargets(ttft_p99_s=ttft * looser, tpot_p99_s=tpot * looser)
    none = evaluate(SPEC, n_p, n_d).capacity_rps[0]
    a = evaluate_targets(SPEC, n_p, n_d, tight, l_in=L_IN).capacity_rps[0]
    b = evaluate_targets(SPEC, n_p, n_d, loose, l_in=L_IN).capacity_rps[0]
    only_tpot = evaluate_targets(SPEC, n_p, n_d, LatencyTargets(tpot_p99_s=tpot)).capacity_rps[0]
    assert 0.0 <= a <= b <= none
    assert a <= only_tpot <= none


def test_a_ttft_target_below_the_bare_prefill_time_holds_at_no_rate() -> None:
    c = COEF["admission"]
    t = c.a_p_s_per_token * L_IN + c.b_p_s_per_token2 * L_IN**2
    r = evaluate_targets(SPEC, [2], [2], LatencyTargets(ttft_p99_s=0.5 * float(t.max())), l_in=L_IN)
    assert r.capacity_rps.tolist() == [0.0]
    assert "bare prefill time" in r.record(0)["unmet"]


def test_ttft_limit_is_where_the_latency_model_meets_the_target() -> None:
    c = COEF["admission"]
    t_u, t_w = prefill_times(c, L_IN)
    target = 4.0 * float(np.max(t_u))
    r = evaluate_targets(SPEC, [3], [6], LatencyTargets(ttft_p99_s=target), l_in=L_IN)
    rec = r.record(0)
    assert rec["limited_by"] == "ttft_p99"
    q = PrefillQueue(t_u, t_w, 3)
    b = float(r.batch[0])
    running, busy = c.alpha_s + c.g_s_per_request * b, 1.0 - math.exp(-b)
    rho = rec["ttft_rho_limit"] * c.mu_prefill_rps * q.mean_s  # on the samples' E[t_P]
    assert q.meets(rho, target, running, busy)
    assert not q.meets(rho + 2.0**-targets_mod.RHO_LEVELS, target, running, busy)


# ---- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["ttft_p99_s", "tpot_p99_s"])
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan, True])
def test_bad_targets_name_their_field(field, value) -> None:
    with pytest.raises(InputError) as e:
        LatencyTargets(**{field: value})
    assert e.value.field == field


@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_bad_max_running_requests_names_its_field(value) -> None:
    with pytest.raises(InputError) as e:
        ServingStack(max_running_requests=value)
    assert e.value.field == "max_running_requests"


def test_a_ttft_target_needs_per_request_lengths() -> None:
    with pytest.raises(InputError) as e:
        evaluate_targets(SPEC, [1], [1], LatencyTargets(ttft_p99_s=1.0))
    assert e.value.field == "ttft_p99_s"


def test_a_tpot_target_far_beyond_any_batch_caps_nothing():
    """A target of 6.6e307 s (found by the API's fuzzing) overflowed B_T's division and
    answered 500; it caps no batch."""
    from model.queueing.targets import NO_BATCH_CAP, tpot_batch

    c = Coefficients.of(resolve_spec(SpecRequest("qwen3-8b", "h200", "fixed:1024:128", {})))
    assert tpot_batch(c, 6.557781748274768e307) == NO_BATCH_CAP
    assert tpot_batch(c, 1e300) == NO_BATCH_CAP
    assert tpot_batch(c, 0.05) < NO_BATCH_CAP
