"""Discrete-event simulator: determinism, exact timing, conservation, pool and admission.

These tests check the simulator on its own terms. They never compare it with the
analytical core: that comparison is the validation report's (docs/validation.md).
"""

from __future__ import annotations

import argparse
import math
import shlex
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from model.errors import DoesNotFitError, InputError
from model.operations import SpecRequest, front_report, resolve_spec
from model.simulator import (
    DATA_DIR_ENV,
    Samples,
    SimResult,
    SimTiming,
    find_capacity,
    resolve_samples,
    simulate,
)
from model.workload import Workload
from service.cli import simulate as cli_simulate

# Round numbers, so that expected times can be worked out by hand.
TIMING = SimTiming(
    a_p_s_per_token=1e-4,
    b_p_s_per_token2=1e-8,
    weight_bytes=6e10,
    kv_bytes_per_token=3e5,
    decode_bw_bytes_per_s=3e12,
    t_iter_s=1e-3,
    t_req_s=5e-5,
    kv_pool_tokens=40_000,
    kv_usable_tokens=40_000,
    reserved_tokens=64,
)


def _mixed_samples(n: int = 400, seed: int = 1) -> Samples:
    """Lengths with long outputs (most beyond R = 64, so that retractions happen) and
    some single-token outputs (finished by prefill)."""
    rng = np.random.default_rng(seed)
    l_in = rng.integers(50, 3000, n)
    l_out = rng.integers(1, 600, n)
    l_out[::20] = 1
    return Samples(l_in, l_out, name="mixed")


def _one_request(l_in: int, l_out: int) -> Samples:
    return Samples(np.array([l_in]), np.array([l_out]), name="one", arrival_s=np.array([0.0]))


# ---- determinism ------------------------------------------------------------------------


def _fingerprint(r: SimResult) -> tuple[Any, ...]:
    return (
        r.throughput_rps,
        r.completed,
        r.mean_batch,
        r.kv_active_frac,
        r.retractions,
        r.end_s,
        tuple(r.ttft_s.tolist()),
        tuple(r.tpot_s.tolist()),
    )


@pytest.mark.parametrize("dispatch", ["round_robin", "random"])
def test_same_seed_gives_identical_results(dispatch: str) -> None:
    s = _mixed_samples()
    runs = [
        simulate(TIMING, s, 2, 3, 4.0, requests=600, seed=7, dispatch=dispatch, log=True)
        for _ in range(2)
    ]
    assert _fingerprint(runs[0]) == _fingerprint(runs[1])
    assert runs[0].log == runs[1].log
    other = simulate(TIMING, s, 2, 3, 4.0, requests=600, seed=8, dispatch=dispatch)
    assert _fingerprint(other) != _fingerprint(runs[0])


def test_same_seed_identical_capacity() -> None:
    s = _mixed_samples()
    a = find_capacity(TIMING, s, 2, 2, seeds=2, requests=500, check_margin=None)
    b = find_capacity(TIMING, s, 2, 2, seeds=2, requests=500, check_margin=None)
    assert a.capacity_rps == b.capacity_rps
    assert a.ci95_rps == b.ci95_rps


# ---- one request through 1p1d: exact timing ---------------------------------------------


def test_single_request_timing_by_hand() -> None:
    # l_in = 1000, l_out = 5: t_P = 1e-4 * 1000 + 1e-8 * 1000^2 = 0.11 s.
    # Decode iteration k = 1..4 attends to 1000 + k tokens:
    #   t_D(k) = (6e10 + 3e5 (1000 + k)) / 3e12 + 1e-3 + 5e-5
    #          = 0.02 + 1e-4 + 1e-7 k + 1.05e-3 = 0.02115 + 1e-7 k
    # sum over k = 1..4: 4 * 0.02115 + 1e-7 * 10 = 0.0846 + 0.000001 = 0.084601 s.
    r = simulate(TIMING, _one_request(1000, 5), 1, 1, None, replay=True, warmup_fraction=0.0)
    assert r.total_completed == 1
    assert r.ttft_s.tolist() == pytest.approx([0.11], rel=1e-12)
    assert r.end_s == pytest.approx(0.11 + 0.084601, rel=1e-12)
    assert r.tpot_s.tolist() == pytest.approx([0.084601 / 4], rel=1e-12)


def test_single_request_with_catalog_timing() -> None:
    # Qwen3-32B on H200 (SPEC 2.1): t_P and the decode iterations from the primitive
    # formulas, the context growing from l_in + 1 to l_in + l_out - 1.
    spec = resolve_spec(SpecRequest(workload="fixed:4096:256"))
    tm = SimTiming.of(spec)
    m, g, cal = spec.model, spec.gpu, spec.calibration
    l_in, l_out = 4096, 256
    flops = g.flops_per_s * cal.mfu
    t_p = 2 * m.params / flops * l_in + cal.c_attn * m.layers * m.attn_width / flops * l_in**2
    bw = g.mem_bw_bytes_per_s * cal.mbu
    decode = sum(
        (m.weight_bytes + m.kv_bytes_per_token * (l_in + k)) / bw + cal.t_iter_s + cal.t_req_s
        for k in range(1, l_out)
    )
    r = simulate(tm, _one_request(l_in, l_out), 1, 1, None, replay=True, warmup_fraction=0.0)
    assert r.ttft_s[0] == pytest.approx(t_p, rel=1e-12)
    assert r.end_s == pytest.approx(t_p + decode, rel=1e-12)


def test_single_output_token_ends_at_prefill() -> None:
    r = simulate(TIMING, _one_request(2000, 1), 1, 1, None, replay=True, warmup_fraction=0.0)
    assert r.end_s == pytest.approx(0.2 + 0.04, rel=1e-12)
    assert r.tpot_s.size == 0


# ---- conservation, pool and admission (checked from the event log) ---------------------


@pytest.fixture(scope="module")
def drained() -> SimResult:
    """A drained open-loop run under overload: admission queues, a full pool, retractions."""
    return simulate(
        TIMING,
        _mixed_samples(),
        2,
        3,
        12.0,
        duration_s=150.0,
        warmup_fraction=0.0,
        seed=3,
        drain=True,
        log=True,
    )


def test_every_admitted_request_completes(drained: SimResult) -> None:
    r = drained
    assert r.total_arrived > 1000
    assert r.total_admitted == r.total_arrived == r.total_completed
    assert r.retractions > 0  # the retraction path was exercised
    assert r.log is not None
    admits: dict[int, int] = defaultdict(int)
    done: dict[int, int] = defaultdict(int)
    for e in r.log:
        if e[0] == "admit":
            admits[e[2]] += 1
        elif e[0] == "done":
            done[e[2]] += 1
    retracted = sum(1 for e in r.log if e[0] == "retract")
    assert set(done) == set(range(r.total_arrived))
    assert all(v == 1 for v in done.values())
    # one admission each, plus one per resumption after a retraction
    assert sum(admits.values()) == r.total_arrived + retracted


def test_pool_occupancy_never_exceeds_pool(drained: SimResult) -> None:
    # Rebuild every decode instance's token allocation from the log, request by request,
    # and check it against the simulator's own figures at the start of every step.
    r = drained
    assert r.log is not None
    alloc: dict[int, int] = {}  # tokens held by each admitted request
    reserved: dict[int, set[int]] = defaultdict(set)  # admitted, not yet decoding
    batch: dict[int, set[int]] = defaultdict(set)
    parked: dict[int, int] = {}  # retracted request -> tokens it held
    started: dict[int, tuple[int, int, int]] = {}  # running step per instance
    peak = 0
    for e in r.log:
        kind, d = e[0], e[3]
        if kind in ("admit", "join", "retract") or (kind == "done" and e[2] in alloc):
            # the batch and the admissions change only at iteration boundaries
            # (a single-token request may finish in prefill while a step runs)
            assert d not in started or (kind == "done" and e[2] in reserved[d])
        if kind == "admit":
            rid, size = e[2], e[7]
            if rid in parked:  # resumes straight into the batch with its context
                assert size == parked.pop(rid)
                batch[d].add(rid)
            else:
                reserved[d].add(rid)
            alloc[rid] = size
        elif kind == "join":
            reserved[d].remove(e[2])
            batch[d].add(e[2])
        elif kind == "retract":
            batch[d].remove(e[2])
            parked[e[2]] = alloc.pop(e[2])
        elif kind == "done":
            reserved[d].discard(e[2])
            batch[d].discard(e[2])
            alloc.pop(e[2])
        elif kind == "step":  # start: the planned iterations must fit
            d, n, kv0, k, pre = e[2], e[3], e[4], e[5], e[6]
            assert n == len(batch[d])
            assert kv0 == sum(alloc[x] for x in batch[d])
            assert pre == sum(alloc[x] for x in reserved[d])
            assert kv0 + k * n + pre <= TIMING.kv_usable_tokens
            started[d] = (kv0, n, pre)
        elif kind == "step_end":  # every member gained one token per iteration run
            d, k = e[2], e[3]
            kv0, n, pre = started.pop(d)
            peak = max(peak, kv0 + k * n + pre)  # the last iteration allocates the most
            for x in batch[d]:
                alloc[x] += k
    assert not alloc and not parked  # drained: every token released
    assert peak <= TIMING.kv_pool_tokens
    assert peak > 0.9 * TIMING.kv_pool_tokens  # the pool was the limit
    assert r.kv_peak_tokens == peak


def test_admission_rule_and_fifo(drained: SimResult) -> None:
    r = drained
    assert r.log is not None
    usable, res = TIMING.kv_usable_tokens, TIMING.reserved_tokens
    admitted: dict[int, list[int]] = defaultdict(list)
    admit_time: dict[int, float] = {}
    refusals = 0
    for kind, t, rid, d, kv, pre, inflight, size in _of(r.log, "admit", "refuse"):
        fits = kv + pre + res * (inflight + 1) + size <= usable
        assert fits == (kind == "admit"), (kind, t, rid)
        refusals += kind == "refuse"
        if kind == "admit" and rid not in admit_time:
            admitted[d].append(rid)
            admit_time[rid] = t
    assert refusals > 0
    for rids in admitted.values():  # FIFO per decode instance (ids follow arrival order)
        assert rids == sorted(rids)
    prefill_order: dict[int, list[int]] = defaultdict(list)
    for _, t, rid, p in _of(r.log, "prefill"):
        assert t >= admit_time[rid]  # prefill only after the decode pool admitted it
        prefill_order[p].append(rid)
    for p, rids in prefill_order.items():  # FCFS prefill, in order of admission
        assert [admit_time[x] for x in rids] == sorted(admit_time[x] for x in rids), p


def _of(log: list[tuple[Any, ...]], *kinds: str) -> list[tuple[Any, ...]]:
    return [e for e in log if e[0] in kinds]


def test_saturated_run_bounded_by_prefill() -> None:
    # One prefill instance serves at most 1/t_P requests per second (fixed lengths);
    # with four decode instances it is the bottleneck and never idles when saturated.
    # The window is cut at completions, which land on decode iteration boundaries:
    # that jitter (~ one iteration over a 120 s window) is the tolerance.
    s = Samples.fixed(2000, 20)
    r = simulate(TIMING, s, 1, 4, math.inf, requests=500)
    t_p = 1e-4 * 2000 + 1e-8 * 2000**2
    assert r.throughput_rps == pytest.approx(1 / t_p, rel=1e-3)
    assert r.prefill_utilisation == pytest.approx(1.0, abs=1e-6)


def test_capacity_check_brackets_the_estimate() -> None:
    est = find_capacity(TIMING, _mixed_samples(), 2, 2, seeds=2, requests=1500)
    assert est.capacity_rps > 0 and est.ci95_rps < 0.1 * est.capacity_rps
    assert est.lower_stable is True
    assert est.upper_stable is False
    assert est.check_passed is True


# ---- inputs -----------------------------------------------------------------------------


def test_request_longer_than_pool_is_rejected() -> None:
    with pytest.raises(DoesNotFitError):
        simulate(TIMING, Samples.fixed(39_000, 2000), 1, 1, 1.0)


def test_samples_for_fixed_and_moments() -> None:
    s = resolve_samples("fixed:1024:256")
    assert (s.l_in.tolist(), s.l_out.tolist()) == ([1024], [256])
    assert len(resolve_samples("fixed-4096-256")) == 1
    moments = Workload.from_samples([10, 30], [5, 7], name="mine")
    with pytest.raises(InputError, match="trace"):
        resolve_samples(moments)


def test_preset_without_trace_needs_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    with pytest.raises(InputError, match="trace"):
        resolve_samples("azure-conv-2023")


def test_trace_file_samples(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0.0,100,3\n0.5,200,1\n2.0,50,10\n")
    s = resolve_samples(f"trace:{path}")
    assert s.l_in.tolist() == [100, 200, 50]
    assert s.arrival_s is not None and s.arrival_s.tolist() == [0.0, 0.5, 2.0]
    r = simulate(TIMING, s, 1, 1, None, replay=True, warmup_fraction=0.0)
    assert r.total_completed == 3


# ---- command line (service/cli_simulate.py) -------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdwatt")
    sub = p.add_subparsers(dest="command", required=True)
    cli_simulate.register(sub)
    return p


def _cli(command: str) -> dict[str, Any]:
    a = _parser().parse_args(shlex.split(command))
    result: dict[str, Any] = a.func(a)
    return result


def test_cli_simulate_rate() -> None:
    rep = _cli(
        "simulate --workload fixed:1024:256 --np 1 --nd 1 --rate 2 --seeds 2 --requests 300 --json"
    )
    assert rep["n_p"] == 1 and rep["rate_rps"] == 2.0 and rep["seeds"] == 2
    assert set(rep["ttft_s"]) >= {"p50", "p90", "p99"}
    assert rep["throughput_rps"] == pytest.approx(2.0, rel=0.15)
    assert rep["stable"] is True


def test_cli_simulate_find_capacity() -> None:
    rep = _cli(
        "simulate --workload fixed:4096:256 --np 2 --nd 1 --find-capacity --seeds 1 "
        "--requests 1000 --json"
    )
    assert rep["capacity_rps"] > 0
    assert rep["check"]["passed"] is True
    assert rep["tpot_s"]["p99"] is not None


def test_cli_needs_rate_or_capacity() -> None:
    with pytest.raises(InputError):
        _cli("simulate --workload fixed:1024:256 --np 1 --nd 1")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["simulate", "analytic"])
def test_slo_front_filters_configurations(method: str) -> None:
    front = argparse.ArgumentParser()
    for flag in ("--model", "--gpu", "--workload", "--override", "--dispatch"):
        front.add_argument(flag)
    front.add_argument("--set", dest="sets", action="append", default=[])
    cli_simulate.add_slo_args(front)
    spec = resolve_spec(SpecRequest(workload="fixed:1024:256"))
    report = front_report(spec, max_gpus=4, required_rps=5.0)
    base = (
        "--model qwen3-32b --gpu h200 --workload fixed:1024:256 --slo-requests 400 "
        f"--slo-method {method} "
    )

    lax = front.parse_args(shlex.split(base + "--ttft-p99 100 --tpot-p99 1"))
    out = cli_simulate.apply_slo(report, lax)
    assert [c["n_p"] * 10 + c["n_d"] for c in out["front"]] == [
        c["n_p"] * 10 + c["n_d"] for c in report["front"]
    ]
    assert out["slo"]["failing"] == 0

    # a TPOT target below one request's iteration (alpha + g) holds at no batch: every
    # configuration has capacity 0 and says why, and none is left to check
    strict = front.parse_args(shlex.split(base + "--tpot-p99 0.001"))
    out = cli_simulate.apply_slo(report, strict)
    assert out["front"] == [] and out["min_power_for_rate"]["config"] is None
    assert out["slo"]["meeting"] == 0 and out["slo"]["unmet"] == len(report["configs"])
    assert out["slo"].get("checked", 0) == 0 and out["slo"]["simulated"] == 0
    assert all(c["capacity_rps"] == 0 for c in out["configs"])
    assert all("below one request's decode iteration" in c["unmet"] for c in out["configs"])

    # a target that holds at a smaller batch: checked (simulated where the method says)
    tight = front.parse_args(shlex.split(base + "--tpot-p99 0.025"))
    out = cli_simulate.apply_slo(report, tight)
    checked = out["slo"]["simulated" if method == "simulate" else "checked"]
    assert out["slo"]["batch_capped"] > 0 and checked > 0
    if method == "analytic":  # fixed lengths on a small pool: no admission waits
        assert out["slo"]["simulated"] == 0
        assert all(c["slo"]["simulated"] is False for c in out["configs"])

    none = front.parse_args(shlex.split(base))
    assert cli_simulate.apply_slo(report, none) is report
