"""GPU settings per phase on the command line and the HTTP API (docs/clocks.md):
``pdwatt capacity --prefill-setting ... --decode-setting ...`` and the capacity
request's ``prefill_setting`` / ``decode_setting``."""

from __future__ import annotations

import pytest

from service.cli.app import main
from tests.model.test_front_settings import SETTING_KEYS
from tests.service.conftest import small_schedule
from tests.service.test_cli_core import QWEN3_32B_H200 as BASE
from tests.service.test_cli_core import run_json

BODY = {"model": "qwen3-32b", "gpu": "h200", "workload": "fixed:4096:256", "n_p": 3, "n_d": 1}


def clocked_mu_p(mhz: float) -> float:
    """One prefill instance's capacity at a locked SM clock (docs/clocks.md, sections 2
    and 4): the clock-bound part of t_P(4096) follows 1620 / f (the H200's prefill runs
    power-limited at 1,620 MHz by default, where its calibration was taken), the
    clock-free part of a_P (memory-bound kernels,
    model.capacity.prefill_clock_free_s_per_token) does not."""
    from model.capacity import Coefficients, prefill_clock_free_s_per_token
    from model.operations import SpecRequest, resolve_spec

    spec = resolve_spec(SpecRequest("qwen3-32b", "h200", "fixed:4096:256", {}))
    c, free, r, n = Coefficients.of(spec), prefill_clock_free_s_per_token(spec), 1620 / mhz, 4096
    return 1.0 / (free * n + (c.a_p_s_per_token - free) * n * r + c.b_p_s_per_token2 * n * n * r)


def test_cli_capacity_with_settings(capsys):
    base = run_json(capsys, BASE)
    assert not SETTING_KEYS & set(base)  # the default document is as before
    rep = run_json(capsys, [*BASE, "--prefill-setting", "1500MHz", "--decode-setting", "550W"])
    assert set(rep) >= SETTING_KEYS
    assert (rep["prefill_setting"], rep["decode_setting"]) == ("1500MHz", "550W")
    assert rep["prefill_clock_mhz"] == 1500.0
    # prefill capacity follows the clock but for its clock-free part (docs/clocks.md 2)
    assert rep["mu_p_rps"] == pytest.approx(clocked_mu_p(1500), rel=1e-12)
    assert base["mu_p_rps"] * 1500 / 1980 < rep["mu_p_rps"] < base["mu_p_rps"]
    # the 550 W limit binds on decode (678 W at full clock): its draw meets the limit
    assert rep["decode_draw_w"] == pytest.approx(550.0, rel=1e-9)
    assert 345 < rep["decode_clock_mhz"] < 1980
    assert rep["power_w"] < base["power_w"]
    assert rep["capacity_rps"] <= base["capacity_rps"]


def test_cli_full_clock_setting_is_the_default(capsys):
    base = run_json(capsys, BASE)
    rep = run_json(capsys, [*BASE, "--prefill-setting", "1980MHz", "--decode-setting", "700W"])
    assert (rep["prefill_setting"], rep["decode_setting"]) == ("1980MHz", "700W")
    for key in ("capacity_rps", "power_w", "mu_p_rps", "mu_d_rps", "batch"):
        assert rep[key] == base[key]


@pytest.mark.parametrize(
    ("flag", "value", "field", "words"),
    [
        ("--decode-setting", "5000MHz", "decode_setting", "345-1980 MHz"),
        ("--prefill-setting", "100W", "prefill_setting", "200-700 W"),
        ("--prefill-setting", "fast", "prefill_setting", "'<N>MHz'"),
    ],
)
def test_cli_bad_setting_names_the_field(capsys, flag, value, field, words):
    code = main([*BASE, flag, value])
    out, err = capsys.readouterr()
    assert code == 2
    assert f"{field}:" in err and words in err


def test_api_capacity_with_settings(client):
    base = client.post("/v1/capacity", json=BODY)
    assert base.status_code == 200, base.text
    assert not SETTING_KEYS & set(base.json())
    r = client.post(
        "/v1/capacity", json={**BODY, "prefill_setting": "1500MHz", "decode_setting": "550W"}
    )
    assert r.status_code == 200, r.text
    got = r.json()
    assert set(got) >= SETTING_KEYS
    assert (got["prefill_setting"], got["decode_setting"]) == ("1500MHz", "550W")
    assert got["mu_p_rps"] == pytest.approx(clocked_mu_p(1500), rel=1e-12)
    assert got["decode_draw_w"] == pytest.approx(550.0, rel=1e-9)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decode_setting": "2500MHz"}, "decode_setting"),
        ({"prefill_setting": "50W"}, "prefill_setting"),
        ({"prefill_setting": "1.5GHz"}, "prefill_setting"),
    ],
)
def test_api_bad_setting_is_a_422_naming_the_field(client, body, field):
    r = client.post("/v1/capacity", json={**BODY, **body})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].split(";")[0] == "application/problem+json"
    problem = r.json()
    assert [e["field"] for e in problem["errors"]] == [field]
    assert "Traceback" not in r.text


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("1500 mHz", "millihertz"),  # was read as 1500 MHz
        ("1500mHz", "millihertz"),
        ("1500mhz", "MHz"),
        ("1500MHZ", "MHz"),
        ("1500.0000000000000001MHz", "more digits"),  # was renamed 1500MHz
    ],
)
def test_api_setting_unit_and_digits_are_taken_as_written(client, setting, words):
    """Found by an adversarial test: the unit was read in any case (millihertz as
    megahertz), and a value was renamed to six significant digits."""
    r = client.post("/v1/capacity", json={**BODY, "prefill_setting": setting})
    assert r.status_code == 422, r.text
    (error,) = r.json()["errors"]
    assert error["field"] == "prefill_setting" and words in error["reason"], error


def test_api_setting_keeps_the_value_sent(client):
    r = client.post(
        "/v1/capacity",
        json={**BODY, "prefill_setting": "1500.00001MHz", "decode_setting": "550.125W"},
    )
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["prefill_setting"], got["decode_setting"]) == ("1500.00001MHz", "550.125W")
    assert got["prefill_clock_mhz"] == 1500.00001


def _with_settings(body, prefill, decode):
    for d in body["deployments"]:
        d["settings"] = {"prefill": prefill, "decode": decode}
    return body


def test_api_schedule_with_settings(client):
    plain = client.post("/v1/schedule", json=small_schedule())
    assert plain.status_code == 200, plain.text
    body = _with_settings(small_schedule(), ["1980MHz", "1185MHz"], ["default", "1590MHz"])
    r = client.post("/v1/schedule", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    offered = {("1980MHz", "1980MHz"), ("1980MHz", "1590MHz")}
    offered |= {("1185MHz", "1980MHz"), ("1185MHz", "1590MHz")}
    for p in got["periods"]:
        for d in p["deployments"].values():
            assert (d["prefill_setting"], d["decode_setting"]) in offered
    for p in plain.json()["periods"]:
        for d in p["deployments"].values():
            assert "prefill_setting" not in d and "decode_setting" not in d
    # the choice is a superset of the full clock's (both solves proven within their gap)
    assert got["lower_bound_usd"] <= plain.json()["objective_usd"] * (1 + 1e-9)


@pytest.mark.parametrize(
    ("prefill", "decode", "field"),
    [
        (["1980MHz"], ["1590MHz", "2500MHz"], "deployments[1].settings.decode[1]"),
        (["50W"], ["default"], "deployments[1].settings.prefill[0]"),
        (["1980MHz", 1500], ["default"], "deployments[1].settings.prefill[1]"),
    ],
)
def test_api_schedule_and_site_bad_setting_is_a_422_naming_the_field(
    client, prefill, decode, field
):
    body = small_schedule()
    body["deployments"][1]["settings"] = {"prefill": prefill, "decode": decode}
    site = {**body, "name": "with-settings", "plan_start": "2026-07-01T12:00:00Z"}
    for route, doc in (("/v1/schedule", body), ("/v1/sites", site)):
        r = client.post(route, json=doc)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].split(";")[0] == "application/problem+json"
        assert [e["field"] for e in r.json()["errors"]] == [field]
