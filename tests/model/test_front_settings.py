"""The capacity-power front searched over GPU settings (docs/clocks.md): a configuration
is ``(n_P, n_D, setting_P, setting_D)``; without settings the report is the one of the
full clock, number for number."""

from __future__ import annotations

import numpy as np
import pytest

from model.capacity import candidate_configs, evaluate, with_settings
from model.errors import InputError
from model.operations import SpecRequest, capacity_report, front_report, resolve_spec
from model.pareto import front_indices, max_capacity_index, min_power_index

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
            assert c[key] == one[key], (key, c)
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
