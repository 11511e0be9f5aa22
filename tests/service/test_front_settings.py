"""The front searched over GPU settings on the command line (``pdwatt front
--prefill-settings ... --decode-settings ...``) and the HTTP API (``POST /v1/front``'s
``prefill_settings`` / ``decode_settings``), also with latency targets (checked at each
configuration's own settings)."""

from __future__ import annotations

import pytest

from tests.service.test_cli_core import run, run_json

SPEC = ["--model", "qwen3-32b", "--gpu", "h200", "--workload", "fixed:4096:256"]
FRONT = ["front", *SPEC, "--max-gpus", "8", "--required-rps", "3", "--budget-w", "4000"]
SETTINGS = ["--prefill-settings", "1980MHz,1500MHz", "--decode-settings", "1980MHz,1200MHz,500W"]
BODY = {
    "model": "qwen3-32b",
    "gpu": "h200",
    "workload": "fixed:4096:256",
    "max_gpus": 8,
    "required_rps": 3,
    "budget_w": 4000,
}


def test_cli_front_over_settings_names_every_point(capsys, tmp_path):
    plain = run_json(capsys, [*FRONT, "--json"])
    chart = tmp_path / "front.png"
    rep = run_json(capsys, [*FRONT, *SETTINGS, "--json", "--plot", str(chart)])
    assert rep["prefill_settings"] == ["1980MHz", "1500MHz"]
    assert rep["decode_settings"] == ["1980MHz", "1200MHz", "500W"]
    assert len(rep["configs"]) == 6 * len(plain["configs"])
    for c in [*rep["front"], rep["min_power_for_rate"]["config"]]:
        assert c["prefill_setting"] in rep["prefill_settings"]
        assert c["decode_setting"] in rep["decode_settings"]
    assert "prefill_setting" not in plain["front"][0]
    assert (
        rep["min_power_for_rate"]["config"]["power_w"]
        <= (plain["min_power_for_rate"]["config"]["power_w"])
    )
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, _ = run(capsys, [*FRONT, *SETTINGS])
    assert code == 0
    assert "settings P/D" in out
    assert " at 1" in out.splitlines()[-2]  # the selection names its settings


def test_cli_front_settings_errors_name_the_field(capsys):
    code, _, err = run(capsys, [*FRONT, "--decode-settings", "1200MHz,9000MHz"])
    assert code == 2 and "decode_settings[1]:" in err and "345-1980 MHz" in err
    # with latency targets as well: still the setting at fault
    code, _, err = run(capsys, [*FRONT, "--decode-settings", "1200MHz,9000MHz", "--tpot-p99", "1"])
    assert code == 2 and "decode_settings[1]:" in err and "345-1980 MHz" in err


def test_api_front_over_settings_is_the_cli_document(client, capsys):
    plain = client.post("/v1/front", json=BODY)
    assert plain.status_code == 200, plain.text
    assert "prefill_settings" not in plain.json()
    assert "prefill_setting" not in plain.json()["front"][0]
    body = {**BODY, "prefill_settings": ["1980MHz", "1500MHz"]}
    body["decode_settings"] = ["1980MHz", "1200MHz", "500W"]
    r = client.post("/v1/front", json=body)
    assert r.status_code == 200, r.text
    cli = run_json(capsys, [*FRONT, *SETTINGS, "--json"])
    got = r.json()
    for key in ("prefill_settings", "decode_settings", "front", "min_power_for_rate"):
        assert got[key] == cli[key], key


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"prefill_settings": ["1500MHz", "2500MHz"]}, "prefill_settings[1]"),
        ({"decode_settings": ["50W"]}, "decode_settings[0]"),
        (
            {"decode_settings": ["1200MHz", "9000MHz"], "slo": {"tpot_p99_s": 0.1}},
            "decode_settings[1]",
        ),
    ],
)
def test_api_front_bad_settings_are_a_422_naming_the_field(client, extra, field):
    r = client.post("/v1/front", json={**BODY, **extra})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].split(";")[0] == "application/problem+json"
    assert [e["field"] for e in r.json()["errors"]] == [field]


SLO_SETTINGS = {
    "prefill_settings": ["1980MHz", "1185MHz"],
    "decode_settings": ["1980MHz", "800MHz"],
}


def test_api_front_over_settings_meets_latency_targets_at_each_ones_settings(client, capsys):
    body = {**BODY, "workload": "fixed:1024:128", **SLO_SETTINGS}
    lax = client.post("/v1/front", json={**body, "slo": {"tpot_p99_s": 10.0}})
    assert lax.status_code == 200, lax.text
    checked = [c for c in lax.json()["configs"] if c["slo"]["checked"]]
    tpots = sorted(c["slo"]["tpot_p99_s"] for c in checked)
    target = (tpots[0] + tpots[-1]) / 2  # between the fastest and the slowest checked
    r = client.post("/v1/front", json={**body, "slo": {"tpot_p99_s": target}})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["prefill_settings"] == SLO_SETTINGS["prefill_settings"]
    assert got["decode_settings"] == SLO_SETTINGS["decode_settings"]
    # the target bites by capping batches: configurations run at a smaller batch
    # instead of being dropped (docs/admission.md, section 8)
    assert got["slo"]["meeting"] >= 1 and got["slo"]["batch_capped"] >= 1
    for c in got["front"]:  # each point names its settings and meets the target
        assert c["prefill_setting"] in got["prefill_settings"]
        assert c["decode_setting"] in got["decode_settings"]
        assert c["slo"]["meets"] and c["slo"]["tpot_p99_s"] <= target
    lax_by = {_point(c): c for c in lax.json()["configs"]}
    capped = [c for c in got["configs"] if c.get("batch_capped_by") == "tpot_p99"]
    assert capped and all(0 < c["capacity_rps"] < lax_by[_point(c)]["capacity_rps"] for c in capped)
    # a verdict's p99 is its configuration's, whatever the target, where the target
    # left its capacity as it was
    lax_p99 = {_point(c): c["slo"]["tpot_p99_s"] for c in checked}
    for c in got["configs"]:
        p = _point(c)
        if c["slo"]["checked"] and p in lax_p99 and c["capacity_rps"] == lax_by[p]["capacity_rps"]:
            assert c["slo"]["tpot_p99_s"] == lax_p99[p]
    # the same (n_P, n_D) at the same capacity share is slower per token at the lower
    # decode clock (the lax target caps nothing)
    assert lax.json()["slo"]["batch_capped"] == 0
    pairs = [
        (v, lax_p99[(n_p, n_d, p, "1980MHz")])
        for (n_p, n_d, p, d), v in lax_p99.items()
        if d == "800MHz" and (n_p, n_d, p, "1980MHz") in lax_p99
    ]
    assert pairs and all(low >= full for low, full in pairs)
    # the command line's document (it simulates only where pool admission binds: none
    # does here)
    assert not any(c["slo"].get("admission_bound") for c in got["configs"])
    cli_args = [
        "front", "--model", "qwen3-32b", "--gpu", "h200", "--workload", "fixed:1024:128",
        "--max-gpus", "8", "--required-rps", "3", "--budget-w", "4000",
        "--prefill-settings", ",".join(SLO_SETTINGS["prefill_settings"]),
        "--decode-settings", ",".join(SLO_SETTINGS["decode_settings"]),
        "--tpot-p99", repr(target), "--slo-jobs", "1", "--json",
    ]  # fmt: skip
    cli = run_json(capsys, cli_args)
    assert [_point(c) for c in cli["front"]] == [_point(c) for c in got["front"]]
    assert [c["slo"] for c in cli["configs"]] == [c["slo"] for c in got["configs"]]
    code, out, err = run(capsys, cli_args[:-1])  # the text: targets given, at each one's settings
    assert code == 0
    assert (
        f"latency targets (TPOT p99 <= {target!r} s at 0.8 x capacity, each at its settings" in out
    )
    assert "TTFT p99" not in out and "SLO check 1: " in err and "MHz analytic, " in err


def _point(c):
    return c["n_p"], c["n_d"], c["prefill_setting"], c["decode_setting"]


def test_api_front_over_settings_stays_within_the_servers_largest_front(make_client):
    # a server answering fronts of up to 16 GPUs: 120 configurations at one setting, so
    # 2 x 2 pairs allow 8 GPUs (4 x 28 = 112 configurations), not 9 (4 x 36 = 144)
    client = make_client(workers=1, max_front_gpus=16)
    body = {**BODY, "prefill_settings": ["1980MHz", "1500MHz"]}
    body["decode_settings"] = ["1980MHz", "1200MHz"]
    assert client.post("/v1/front", json={**body, "max_gpus": 8}).status_code == 200
    r = client.post("/v1/front", json={**body, "max_gpus": 9})
    assert r.status_code == 422, r.text
    (error,) = r.json()["errors"]
    assert error["field"] == "max_gpus" and "<= 8" in error["reason"]
    assert client.post("/v1/front", json={**BODY, "max_gpus": 16}).status_code == 200


def test_api_front_runs_in_the_solver_pool_429_when_full(client):
    """A front runs in a solver worker, not in the API process: with every worker busy
    it is refused at once (429 with Retry-After) instead of piling up in the server's
    memory (four fronts at max_gpus 512 took a server from 327 to 1,011 MB)."""
    pool = client.app.state.pool
    pool._busy = pool.workers  # every worker busy
    try:
        r = client.post("/v1/front", json=BODY)
        assert r.status_code == 429, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert int(r.headers["retry-after"]) >= 1
    finally:
        pool._busy = 0
    assert client.post("/v1/front", json=BODY).status_code == 200
    assert pool.busy == 0


def test_api_front_over_gpu_types_and_shapes_stays_within_the_servers_largest_front(
    make_client,
):
    """GPU-type pairs and shape pairs multiply a front's configurations as setting pairs
    do: a 150-byte request over 7 GPU types (49 pairs) at 512 GPUs ran a solver worker
    to 24 GB before it was counted, and 4 x 4 shapes at 512 GPUs answered 198 MB."""
    client = make_client(workers=1, max_front_gpus=16)
    # 16 GPUs at one setting: 120 configurations; 2 GPU types make 4 pairs, so 8 GPUs
    # (4 x 28 = 112), not 9 (4 x 36 = 144)
    body = {**BODY, "gpus": ["h200", "h100-sxm"]}
    assert client.post("/v1/front", json={**body, "max_gpus": 8}).status_code == 200
    r = client.post("/v1/front", json={**body, "max_gpus": 9})
    (error,) = r.json()["errors"]
    assert r.status_code == 422 and error["field"] == "max_gpus" and "<= 8" in error["reason"]
    assert "4 GPU-type pairs" in error["reason"]
    # shapes: tp1 and tp2 per phase, each pair's (n_P, n_D) within the GPUs, counted
    # by brute force against the server's 120
    shapes = {**BODY, "prefill_shapes": ["tp1", "tp2"], "decode_shapes": ["tp1", "tp2"]}

    def configs(g: int) -> int:
        return sum(
            1
            for a in (1, 2)
            for b in (1, 2)
            for n in range(1, g + 1)
            for m in range(1, g + 1)
            if n * a + m * b <= g
        )

    most = max(g for g in range(2, 17) if configs(g) <= 120)
    assert client.post("/v1/front", json={**shapes, "max_gpus": most}).status_code == 200
    r = client.post("/v1/front", json={**shapes, "max_gpus": most + 1})
    (error,) = r.json()["errors"]
    assert r.status_code == 422 and error["field"] == "max_gpus" and f"<= {most}" in error["reason"]
    # a shape the server cannot read is named by its field, before any work
    r = client.post("/v1/front", json={**BODY, "prefill_shapes": ["tp0"]})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "prefill_shapes[0]"
