"""The capacity-power front searched over GPU settings (docs/clocks.md): a configuration
is ``(n_P, n_D, setting_P, setting_D)``; without settings the report is the one of the
full clock, number for number. Latency targets check each configuration at its own
settings (model.queueing.slo)."""

from __future__ import annotations

import numpy as np
import pytest

from model.capacity import Coefficients, candidate_configs, evaluate
from model.errors import InputError
from model.operations import SpecRequest, capacity_report, front_report, resolve_spec
from model.pareto import front_indices, max_capacity_index, min_power_index
from model.queueing.latency import latency_at
from model.queueing.slo import SloTargets, slo_restricted_front
from model.simulator import Samples, SimTiming, simulated_slo
from model.spec import setting_arg, with_settings

PREFILL = ["1980MHz", "1500MHz", "550W"]
DECODE = ["1980MHz", "1200MHz", "500W"]
#: what a configuration or report with settings adds (docs/clocks.md)
SETTING_KEYS = {
    "prefill_setting",
    "decode_setting",
    "prefill_clock_mhz",
    "decode_clock_mhz",
    "prefill_draw_w",
    "decode_draw_w",
}


@pytest.fixture(scope="module")
def spec():
    return resolve_spec(SpecRequest(model="qwen3-32b", gpu="h200", workload="azure-conv-2023"))


def _strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in SETTING_KEYS}


def test_default_front_is_the_full_clock_front_number_for_number(spec):
    plain = front_report(spec, 16, required_rps=20.0, budget_w=5000.0)
    # today's front: every candidate evaluated at the full clock, its Pareto indices
    n_p, n_d = candidate_configs(16)
    r = evaluate(spec, n_p, n_d)
    assert plain["configs"] == [r.record(i) for i in range(len(r))]
    assert plain["front"] == [r.record(int(i)) for i in front_indices(r.capacity_rps, r.power_w)]
    assert "prefill_settings" not in plain and not SETTING_KEYS & set(plain["front"][0])
    # the single full-clock setting, named: the same numbers, bit for bit, plus the names
    named = front_report(
        spec, 16, required_rps=20.0, budget_w=5000.0,
        prefill_settings=["default"], decode_settings=["1980MHz"],
    )  # fmt: skip
    assert named["prefill_settings"] == named["decode_settings"] == ["1980MHz"]
    assert [_strip(c) for c in named["configs"]] == plain["configs"]
    assert [_strip(c) for c in named["front"]] == plain["front"]
    for key in ("min_power_for_rate", "max_capacity_under_budget"):
        assert _strip(named[key]["config"]) == plain[key]["config"]
    assert {(c["prefill_setting"], c["decode_setting"]) for c in named["configs"]} == {
        ("1980MHz", "1980MHz")
    }


def test_front_over_settings_dominates_and_each_point_is_its_capacity(spec):
    plain = front_report(spec, 12, required_rps=15.0, budget_w=3000.0)
    rep = front_report(
        spec, 12, required_rps=15.0, budget_w=3000.0,
        prefill_settings=PREFILL, decode_settings=DECODE,
    )  # fmt: skip
    assert len(rep["configs"]) == 9 * len(plain["configs"])
    mu = np.array([c["capacity_rps"] for c in rep["front"]])
    power = np.array([c["power_w"] for c in rep["front"]])
    # every point of the full-clock front is weakly dominated by a point of this front
    for c in plain["front"]:
        assert np.any((mu >= c["capacity_rps"]) & (power <= c["power_w"])), c
    # the settings open points the full clock does not have
    pairs = {(c["prefill_setting"], c["decode_setting"]) for c in rep["front"]}
    assert pairs - {("1980MHz", "1980MHz")}
    # the front is the Pareto set of every configuration of every pair
    all_mu = np.array([c["capacity_rps"] for c in rep["configs"]])
    all_p = np.array([c["power_w"] for c in rep["configs"]])
    assert rep["front"] == [rep["configs"][int(i)] for i in front_indices(all_mu, all_p)]
    # each point's numbers are `pdwatt capacity`'s at its settings
    for c in rep["front"]:
        at = with_settings(spec, c["prefill_setting"], c["decode_setting"])
        one = capacity_report(at, c["n_p"], c["n_d"])
        for key in ("capacity_rps", "power_w", "mu_p_rps", "mu_d_rps", "batch", "gpus"):
            # the same numbers to rounding: the capacity root of one configuration solved
            # alone and within the front's array can differ in the last bits
            assert c[key] == pytest.approx(one[key], rel=1e-12), (key, c)
    # the selections search every point of the front
    gpus = np.array([c["gpus"] for c in rep["front"]])
    i = min_power_index(mu, power, 15.0, 1.0, gpus)
    assert i is not None and rep["min_power_for_rate"]["config"] == rep["front"][i]
    assert (
        rep["min_power_for_rate"]["config"]["power_w"]
        <= (plain["min_power_for_rate"]["config"]["power_w"])
    )
    j = max_capacity_index(mu, power, 3000.0)
    assert j is not None and rep["max_capacity_under_budget"]["config"] == rep["front"][j]
    assert (
        rep["max_capacity_under_budget"]["config"]["capacity_rps"]
        >= (plain["max_capacity_under_budget"]["config"]["capacity_rps"])
    )


def test_one_phase_given_searches_the_full_clock_for_the_other(spec):
    rep = front_report(spec, 6, decode_settings=["1200MHz", "1200MHz"])
    assert rep["prefill_settings"] == ["1980MHz"] and rep["decode_settings"] == ["1200MHz"]
    assert {c["decode_clock_mhz"] for c in rep["configs"]} == {1200.0}


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"prefill_settings": ["3000MHz"]}, "prefill_settings[0]", "345-1980 MHz"),
        ({"decode_settings": ["1500MHz", "fast"]}, "decode_settings[1]", "'<N>MHz'"),
        ({"decode_settings": []}, "decode_settings", "at least one"),
    ],
)
def test_bad_settings_name_the_field(spec, kwargs, field, words):
    with pytest.raises(InputError) as e:
        front_report(spec, 6, **kwargs)
    assert e.value.field == field and words in e.value.reason


# -- latency targets over settings: each configuration checked at its own settings -------

FIXED = (1024, 256)  # fixed lengths: the analytic and the simulated checks both apply
LOW = "800MHz"  # a decode clock at which the weight GEMMs' compute shows (g grows)


@pytest.fixture(scope="module")
def fixed_spec():
    return resolve_spec(
        SpecRequest(model="qwen3-32b", gpu="h200", workload=f"fixed:{FIXED[0]}:{FIXED[1]}")
    )


def _p99s(c, cfg, rate):
    lat = latency_at(c, cfg["n_p"], cfg["n_d"], rate, [FIXED[0]], [FIXED[1]])
    return lat.ttft_quantile_s, lat.tpot_quantile_s


def _key(c):
    return c["n_p"], c["n_d"], c.get("prefill_setting"), c.get("decode_setting")


@pytest.mark.parametrize(
    "targets",
    [
        SloTargets(0.2, 0.02),  # analytic, simulated where pool admission binds
        SloTargets(0.2, 0.02, method="simulate", requests=300),
    ],
    ids=["analytic", "simulate"],
)
def test_slo_front_at_the_listed_full_clock_is_todays_number_for_number(fixed_spec, targets):
    samples = Samples.fixed(*FIXED)
    plain = slo_restricted_front(front_report(fixed_spec, 6, 5.0), fixed_spec, samples, targets)
    # the targets bite: batches capped to the TPOT target, and some p99s still missed
    assert plain["slo"]["batch_capped"] > 0
    assert plain["slo"]["meeting"] > 0 and plain["slo"]["failing"] > 0
    report = front_report(
        fixed_spec, 6, 5.0, prefill_settings=["1980MHz"], decode_settings=["default"]
    )
    named = slo_restricted_front(report, fixed_spec, samples, targets)
    assert named["slo"] == plain["slo"]
    assert [_strip(c) for c in named["configs"]] == plain["configs"]  # verdicts included
    assert [_strip(c) for c in named["front"]] == plain["front"]
    least = named["min_power_for_rate"]["config"]
    assert (least and _strip(least)) == plain["min_power_for_rate"]["config"]


def test_sim_timing_follows_the_settings(fixed_spec):
    full = SimTiming.of(fixed_spec)
    assert full.clock_extra_s_per_request == 0.0 and full.request_s == full.t_req_s
    # the full clock written out is the timing without settings, field for field
    assert SimTiming.of(with_settings(fixed_spec, "1980MHz", "1980MHz")) == full
    prev = full
    for mhz in (1590, 1185, 800, 345):
        at = with_settings(fixed_spec, f"{mhz}MHz", f"{mhz}MHz")
        c, t = Coefficients.of(at), SimTiming.of(at)
        # prefill: the clocked coefficients; decode: the capacity model's extra slope
        assert (t.a_p_s_per_token, t.b_p_s_per_token2) == (c.a_p_s_per_token, c.b_p_s_per_token2)
        # the clock-bound part of a_P follows 1620 / f, the power-limited default's clock
        # (docs/clocks.md section 4; a clock locked above it runs at it) (Qwen3-32B on one
        # H200: its memory-bound kernels' 17,694,720 bytes per token at 4.8 TB/s x 0.77
        # do not)
        free = 17_694_720 / (4.8e12 * 0.77)
        scale = 1620 / min(mhz, 1620)
        expected = free + (full.a_p_s_per_token - free) * scale
        assert t.a_p_s_per_token == pytest.approx(expected, rel=1e-12)
        assert t.b_p_s_per_token2 == pytest.approx(full.b_p_s_per_token2 * scale, rel=1e-12)
        assert t.clock_extra_s_per_request == c.clock_extra_g_s_per_request
        assert c.g_s_per_request == Coefficients.of(fixed_spec).g_s_per_request + (
            c.clock_extra_g_s_per_request
        )
        # every decode iteration at least as long as at the next higher clock, the same
        # with an empty batch
        for batch, context in ((0, 0.0), (1, 1100.0), (64, 70_000.0), (140, 160_000.0)):
            assert t.t_decode_s(batch, context) >= prev.t_decode_s(batch, context)
        assert t.t_decode_s(0, 0.0) == full.t_decode_s(0, 0.0)
        prev = t
    assert prev.clock_extra_s_per_request > 0.0  # the lowest clock slows decode


def test_sim_timing_with_kernels_adds_the_clock_term_once(tmp_path):
    """Under ``performance: kernels`` the decode line is split without the clock's term
    and the term added beside it: at the mean context the iteration is the clocked line."""
    from model.capacity import clear_kernel_cache
    from tests.model.test_engine import kernel_spec, make_tables

    clear_kernel_cache()
    spec = kernel_spec(make_tables(tmp_path))
    full = SimTiming.of(spec)
    at = with_settings(spec, None, "345MHz")  # the toy's GEMMs outgrow their read here
    c, t = Coefficients.of(at), SimTiming.of(at)
    assert c.clock_extra_g_s_per_request > 0.0
    assert t.clock_extra_s_per_request == c.clock_extra_g_s_per_request
    assert (t.t_req_s, t.kernel_token_s, t.kernel_iteration_s) == (
        full.t_req_s,
        full.kernel_token_s,
        full.kernel_iteration_s,
    )
    for n in (1, 7, 50):
        assert t.t_decode_s(n, n * c.ctx_tokens) == pytest.approx(
            c.alpha_s + c.g_s_per_request * n, rel=1e-12
        )


def test_a_lower_decode_clock_never_lowers_tpot_at_the_same_rate(fixed_spec):
    """For one configuration at one absolute arrival rate (below the capacity at the
    lower clock), the analytic p99 TPOT is non-decreasing as the decode clock falls;
    simulated with the same seeds, too."""
    clocks = ("1980MHz", "1590MHz", "1185MHz", "800MHz", "345MHz")
    coefficients = [Coefficients.of(with_settings(fixed_spec, None, d)) for d in clocks]
    lowest = with_settings(fixed_spec, None, clocks[-1])
    grew = False
    for n_p, n_d in ((1, 1), (2, 1), (1, 2), (3, 2), (2, 5)):
        mu = capacity_report(lowest, n_p, n_d)["capacity_rps"]
        for share in (0.2, 0.5, 0.8):
            cfg = {"n_p": n_p, "n_d": n_d}
            tpot = [_p99s(c, cfg, share * mu)[1] for c in coefficients]
            assert all(b >= a for a, b in zip(tpot, tpot[1:], strict=False)), (n_p, n_d, tpot)
            grew |= tpot[-1] > tpot[0]
    assert grew
    samples = Samples.fixed(*FIXED)
    sim = []
    for d in ("1980MHz", "800MHz", "345MHz"):
        timing = SimTiming.of(with_settings(fixed_spec, None, d))
        mu = capacity_report(lowest, 2, 2)["capacity_rps"]
        sim.append(simulated_slo(timing, samples, 2, 2, 0.8 * mu, (None, None), requests=600))
    tpot = [v["tpot_p99_s"] for v in sim]
    assert tpot[0] < tpot[1] < tpot[2], tpot


def test_a_target_the_full_clock_meets_caps_the_low_clock_configurations_missing_it(
    fixed_spec,
):
    """The target is the worst p99 TPOT of a full-clock configuration at 0.8 x its
    capacity. Low-clock configurations that miss it there are not dropped: each runs at
    the largest batch whose iteration meets it (docs/admission.md, section 8), so its
    capacity falls, and it is judged at its own settings' p99 at 0.8 x that capacity."""
    report = front_report(
        fixed_spec, 6, 10.0, prefill_settings=["1980MHz"], decode_settings=["1980MHz", LOW]
    )
    at = {
        d: Coefficients.of(with_settings(fixed_spec, None, setting_arg(d, fixed_spec)))
        for d in ("1980MHz", LOW)
    }
    live = [c for c in report["configs"] if c["capacity_rps"] > 0]
    before = {_key(c): c["capacity_rps"] for c in live}
    tpot = {_key(c): _p99s(at[c["decode_setting"]], c, 0.8 * c["capacity_rps"])[1] for c in live}
    target = max(v for k, v in tpot.items() if k[3] == "1980MHz")
    missing = {k for k, v in tpot.items() if v > target}
    assert missing and all(k[3] == LOW for k in missing)
    targets = SloTargets(tpot_p99_s=target, simulate_bound=False)
    out = slo_restricted_front(report, fixed_spec, Samples.fixed(*FIXED), targets)
    after = {_key(c): c for c in out["configs"]}
    for k in missing:  # capped, not dropped
        assert 0 < after[k]["capacity_rps"] < before[k]
        assert after[k]["batch_capped_by"] == "tpot_p99"
    for c in out["configs"]:  # never above the capacity without the target
        assert c["capacity_rps"] <= before.get(_key(c), 0.0) * (1 + 1e-12)
        if c["slo"]["checked"]:  # judged by its own settings' p99 at its capacity
            p99 = _p99s(at[c["decode_setting"]], c, 0.8 * c["capacity_rps"])[1]
            assert c["slo"]["tpot_p99_s"] == p99
            assert c["slo"]["meets"] == (p99 <= target)
    # the front is the front of every configuration with capacity but those failing
    kept = [c for c in out["configs"] if c["capacity_rps"] > 0 and c["slo"]["meets"] is not False]
    mu = np.array([c["capacity_rps"] for c in kept])
    power = np.array([c["power_w"] for c in kept])
    assert [_key(c) for c in out["front"]] == [_key(kept[i]) for i in front_indices(mu, power)]
    assert all(c["slo"]["meets"] for c in out["front"])
    assert {c["decode_setting"] for c in out["front"]} == {"1980MHz", LOW}
