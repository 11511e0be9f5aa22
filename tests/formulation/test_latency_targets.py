"""Per-deployment latency targets in a schedule (docs/admission.md, section 8): the
tables are each configuration's capacity under the deployment's p99 targets, so the
plan serves no more than the rate at which those targets hold.

Qwen3-32B on H200 with the fixed workload 1024:256, a 2-GPU site as in test_tiny.py.
References come from :func:`model.queueing.targets.evaluate_targets` called directly on the
deployment's spec, not from the schedule's own tables."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from formulation.data import build_data
from formulation.problem import problem_from_dict
from model.capacity import Coefficients, evaluate
from model.errors import InputError
from model.latency_targets import LatencyTargets
from model.operations import SpecRequest, resolve_spec
from model.queueing.targets import evaluate_targets
from model.simulator import DATA_DIR_ENV
from tests.formulation.test_tiny import plan, request, schedule

SPEC = resolve_spec(SpecRequest("qwen3-32b", "h200", "fixed:1024:256", {}))
PLAIN = evaluate(SPEC, [1], [1])
C = Coefficients.of(SPEC)
#: a TPOT target at half the pool batch of 1P1D: the iteration t_D(B) = alpha + g B
#: (SPEC 2.3) at B*/2, so the decode batch is capped near B*/2
TPOT = C.alpha_s + C.g_s_per_request * float(PLAIN.batch[0]) / 2.0
CAPPED = evaluate_targets(SPEC, [1], [1], LatencyTargets(tpot_p99_s=TPOT))


def _with_targets(body: dict, targets: dict | None) -> dict:
    out = copy.deepcopy(body)
    if targets is not None:
        out["deployments"][0]["latency_targets"] = targets
    return out


def test_the_target_binds_for_one_p_one_d():
    # guards the choice of TPOT above: the pool batch is above B_T, and 1P1D is
    # decode-bound below its capacity without the target
    assert PLAIN.batch[0] > CAPPED.batch[0] >= 1
    assert 0 < CAPPED.capacity_rps[0] < PLAIN.capacity_rps[0]


def test_tables_hold_the_capacity_under_the_deployments_targets():
    body = request([1.0], 1e4)
    plain = build_data(problem_from_dict(body)).deployments[0]
    capped = build_data(problem_from_dict(_with_targets(body, {"tpot_p99_s": TPOT}))).deployments[0]
    for table in (plain.table, capped.table):
        assert list(zip(table.result.n_p, table.result.n_d, strict=True)) == [(1, 1)]
    assert plain.table.result.capacity_rps[0] == PLAIN.capacity_rps[0]
    assert capped.table.result.capacity_rps[0] == CAPPED.capacity_rps[0]
    assert capped.table.result.batch[0] == CAPPED.batch[0]
    # power at the capped capacity, SPEC 2.6 at the served load
    assert capped.table.bp_power_w[0, capped.table.bp_count[0] - 1] == pytest.approx(
        float(CAPPED.power_w[0]), rel=1e-12
    )
    # no targets, or both left out, is today's table (the same cache key)
    empty = build_data(problem_from_dict(_with_targets(body, {}))).deployments[0]
    assert empty.table.key == plain.table.key
    assert "targets" not in SPEC.describe()


@pytest.mark.parametrize("method", ["auto", "compact"])
def test_the_plan_serves_no_more_than_the_capacity_under_the_target(method):
    demand = float(CAPPED.capacity_rps[0] + PLAIN.capacity_rps[0]) / 2.0  # between the two
    body = request([demand, 1.0], 1e4, max_gpus=2, inventory=2, method=method)
    free = schedule(plan(body))
    assert free[0] == (1, 1, pytest.approx(demand))  # without the target: all served
    held = plan(_with_targets(body, {"tpot_p99_s": TPOT}))
    (n_p, n_d, served), (_, _, low) = schedule(held)
    assert (n_p, n_d) == (1, 1)
    assert served == pytest.approx(float(CAPPED.capacity_rps[0]), rel=1e-9)
    assert low == pytest.approx(1.0)  # below the capped capacity: all served
    first = held["periods"][0]["deployments"]["chat"]
    assert first["capacity_rps"] == pytest.approx(float(CAPPED.capacity_rps[0]), rel=1e-12)
    assert first["demand_rps"] == pytest.approx(demand) and first["served_rps"] < demand


def test_a_ttft_target_caps_prefill_as_model_targets_does():
    ttft = 0.3  # s, above the bare 1024-token prefill with the boundary wait
    body = _with_targets(request([1.0], 1e4, max_gpus=3, inventory=3), {"ttft_p99_s": ttft})
    table = build_data(problem_from_dict(body)).deployments[0].table
    n_p, n_d = table.result.n_p, table.result.n_d
    ref = evaluate_targets(SPEC, n_p, n_d, LatencyTargets(ttft_p99_s=ttft), l_in=[1024])
    assert np.array_equal(table.result.capacity_rps, ref.capacity_rps)
    assert np.any(ref.capacity_rps < evaluate(SPEC, n_p, n_d).capacity_rps)  # it bites


@pytest.mark.parametrize(
    ("targets", "field"),
    [
        ({"tpot_p99_s": 0}, "deployments[0].latency_targets.tpot_p99_s"),
        ({"ttft_p99_s": -1.0}, "deployments[0].latency_targets.ttft_p99_s"),
        ({"tpot_p99_s": "0.05"}, "deployments[0].latency_targets.tpot_p99_s"),
        ({"p99": 0.05}, "deployments[0].latency_targets.p99"),
    ],
)
def test_bad_targets_name_their_field(targets, field):
    with pytest.raises(InputError) as e:
        problem_from_dict(_with_targets(request([1.0], 1e4), targets))
    assert e.value.field == field


def test_a_ttft_target_without_per_request_lengths_names_the_field(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))  # no trace files there
    body = _with_targets(request([1.0], 1e4), {"ttft_p99_s": 1.0})
    body["deployments"][0]["workload"] = "azure-conv-2023"  # its preset ships moments only
    with pytest.raises(InputError) as e:
        build_data(problem_from_dict(body))
    assert e.value.field == "deployments[0].latency_targets.ttft_p99_s"
    assert "per-request lengths" in e.value.reason


def test_a_tpot_target_below_one_requests_iteration_leaves_only_off():
    one = C.alpha_s + C.g_s_per_request  # a batch of one
    body = _with_targets(request([1.0], 1e4), {"tpot_p99_s": one * (1 - 1e-9)})
    table = build_data(problem_from_dict(body)).deployments[0].table
    assert np.all(table.result.capacity_rps == 0.0)
    assert all("below one request's decode iteration" in u for u in table.result.limits.unmet)
    assert math.isfinite(one)


def test_a_deployment_with_phase_shapes_counts_each_phases_gpus():
    """docs/shapes.md: a configuration takes n_P G_P + n_D G_D GPUs, and the candidates
    are every pair that fits max_gpus."""
    body = request([1.0], 1e4, max_gpus=12, inventory=12)
    body["deployments"][0]["overrides"] = {
        "serving": {"prefill_shape": "tp2", "decode_shape": "tp4"}
    }
    d = build_data(problem_from_dict(body)).deployments[0]
    pairs = list(zip(d.n_p[1:].tolist(), d.n_d[1:].tolist(), strict=True))  # [0]: off
    assert pairs == [(p, q) for p in range(1, 7) for q in range(1, 4) if 2 * p + 4 * q <= 12]
    assert d.gpus[1:].tolist() == [2 * p + 4 * q for p, q in pairs]
    resp = plan(body)
    chat = resp["periods"][0]["deployments"]["chat"]
    assert chat["gpus"] == 2 * chat["n_p"] + 4 * chat["n_d"]
