"""The front restricted to latency targets over HTTP (``POST /v1/front`` with ``slo``):
the same function as ``pdwatt front --ttft-p99/--tpot-p99`` (model.queueing.slo), by the
analytic p99s alone, and refusals that name the field."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from model.queueing.targets import tpot_batch
from tests.service.test_cli_core import run, run_json
from tests.service.test_routes import assert_problem

BODY: dict[str, Any] = {
    "model": "qwen3-32b",
    "gpu": "h200",
    "workload": "fixed:1024:128",
    "max_gpus": 6,
}
CLI = ["front", "--model", "qwen3-32b", "--gpu", "h200", "--workload", "fixed:1024:128"]
CLI += ["--max-gpus", "6", "--slo-jobs", "1", "--json"]


def _key(cfgs: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(c["n_p"], c["n_d"]) for c in cfgs]


def test_the_front_meets_the_targets_as_on_the_command_line(client: TestClient, capsys) -> None:
    lax = client.post("/v1/front", json={**BODY, "slo": {"tpot_p99_s": 10.0}}).json()
    tpots = sorted(c["slo"]["tpot_p99_s"] for c in lax["configs"] if c["slo"]["checked"])
    assert len(tpots) >= 2 and tpots[0] < tpots[-1]
    target = (tpots[0] + tpots[-1]) / 2  # between the fastest and the slowest checked
    r = client.post("/v1/front", json={**BODY, "slo": {"tpot_p99_s": target, "at_load": 0.8}})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["slo"]["method"] == "analytic" and got["slo"]["simulated"] == 0
    # the configurations whose pool batch misses the target run at a smaller one
    assert got["slo"]["meeting"] >= 1 and got["slo"]["batch_capped"] >= 1
    assert all(c["slo"]["meets"] and c["slo"]["tpot_p99_s"] <= target for c in got["front"])
    # no configuration here waits for pool memory, so the command line, which simulates
    # only those, keeps the same configurations
    assert not any(c["slo"].get("admission_bound") for c in got["configs"])
    cli = run_json(capsys, [*CLI, "--tpot-p99", repr(target)])
    assert _key(cli["front"]) == _key(got["front"])
    assert [c["slo"] for c in cli["configs"]] == [c["slo"] for c in got["configs"]]
    plain = client.post("/v1/front", json=BODY).json()
    assert "slo" not in plain and _key(got["front"]) != _key(plain["front"])


def test_slo_refusals_name_the_field(client: TestClient) -> None:
    assert_problem(client.post("/v1/front", json={**BODY, "slo": {}}), 422, "slo")
    over = {**BODY, "slo": {"tpot_p99_s": 0.05, "at_load": 1.5}}
    assert_problem(client.post("/v1/front", json=over), 422, "slo.at_load")
    zero = {**BODY, "slo": {"ttft_p99_s": 0}}
    assert_problem(client.post("/v1/front", json=zero), 422, "slo.ttft_p99_s")
    moments = {  # lengths that vary: no fixed pair to simulate
        "mean_in": 1024, "e_in2": 2 * 1024**2, "e_in3": 6 * 1024**3, "e_in4": 24 * 1024**4,
        "mean_out": 128, "e_out2": 2 * 128**2, "e_in_out": 1024 * 128, "max_tokens": 8192,
    }  # fmt: skip
    body = {**BODY, "moments": moments, "slo": {"tpot_p99_s": 0.05}}
    assert_problem(client.post("/v1/front", json=body), 422, "workload")


def _coefficients():
    from model.capacity import Coefficients
    from model.operations import SpecRequest, resolve_spec

    spec = resolve_spec(SpecRequest(model="qwen3-32b", gpu="h200", workload="fixed:1024:128"))
    return Coefficients.of(spec)


def test_a_tpot_target_caps_the_batch_instead_of_dropping(client: TestClient, capsys) -> None:
    c = _coefficients()
    plain = client.post("/v1/front", json=BODY).json()
    pool = {_key([p])[0]: p for p in plain["configs"]}
    # a target that the pool's batch misses in every configuration but a smaller one meets
    target = c.alpha_s + 2.5 * c.g_s_per_request
    k = tpot_batch(c, target)
    assert 1 <= k < min(p["batch"] for p in plain["configs"])
    r = client.post("/v1/front", json={**BODY, "slo": {"tpot_p99_s": target}})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["slo"]["batch_capped"] == len(got["configs"]) and got["slo"]["unmet"] == 0
    for cfg in got["configs"]:
        before = pool[_key([cfg])[0]]
        assert cfg["batch"] == k and cfg["batch_capped_by"] == "tpot_p99"
        assert cfg["pool_batch"] == before["batch"]
        assert cfg["decode_iteration_s"] <= target
        assert 0 < cfg["capacity_rps"] <= before["capacity_rps"]
    # each is run at the smaller batch; the front keeps those whose analytic p99s at
    # at_load x that capacity meet the target (docs/admission.md, section 8)
    assert all(cfg["slo"]["meets"] for cfg in got["front"])
    code, text, _ = run(capsys, [*CLI[:-1], "--tpot-p99", repr(target)])
    n = len(got["configs"])
    assert code == 0 and "capped by" in text and f"({n} of {n} configurations capped)" in text


def test_a_tpot_target_below_one_request_says_why(client: TestClient) -> None:
    c = _coefficients()
    target = 0.9 * (c.alpha_s + c.g_s_per_request)
    got = client.post("/v1/front", json={**BODY, "slo": {"tpot_p99_s": target}}).json()
    assert got["front"] == [] and got["slo"]["unmet"] == len(got["configs"])
    assert all(cfg["capacity_rps"] == 0.0 for cfg in got["configs"])
    assert all("below one request's decode iteration" in cfg["unmet"] for cfg in got["configs"])


def test_max_running_requests_refusals_name_the_field(client: TestClient, capsys) -> None:
    body = {**BODY, "overrides": {"serving": {"max_running_requests": 0}}}
    assert_problem(client.post("/v1/front", json=body), 422, "serving.max_running_requests")
    code, _, err = run(capsys, [*CLI, "--set", "serving.max_running_requests=0"])
    assert code == 2 and "serving.max_running_requests" in err and "Traceback" not in err


def test_max_running_requests_caps_the_front_batch(client: TestClient) -> None:
    body = {**BODY, "overrides": {"serving": {"max_running_requests": 4}}}
    got = client.post("/v1/front", json=body).json()
    assert all(cfg["batch"] <= 4 for cfg in got["configs"])
    assert any(cfg["batch_capped_by"] == "max_running_requests" for cfg in got["configs"])


# -- one configuration under latency targets: pdwatt capacity and POST /v1/capacity ------


def test_capacity_under_targets_is_model_targets_on_the_command_line_and_over_http(client, capsys):
    from model.capacity import evaluate
    from model.latency_targets import LatencyTargets
    from model.operations import SpecRequest, resolve_spec
    from model.queueing.targets import evaluate_targets

    spec = resolve_spec(SpecRequest("qwen3-32b", "h200", "fixed:1024:256", {}))
    goals = LatencyTargets(ttft_p99_s=0.5, tpot_p99_s=0.02)
    ref = evaluate_targets(spec, [2], [1], goals, l_in=[1024]).record(0)
    plain = evaluate(spec, [2], [1]).record(0)
    assert ref["capacity_rps"] < plain["capacity_rps"]  # the targets bite
    args = ["capacity", "--workload", "fixed:1024:256", "--np", "2", "--nd", "1"]
    cli = run_json(capsys, [*args, "--ttft-p99", "0.5", "--tpot-p99", "0.02", "--json"])
    body = {"workload": "fixed:1024:256", "n_p": 2, "n_d": 1}
    r = client.post("/v1/capacity", json={**body, "latency_targets": goals.record()})
    assert r.status_code == 200, r.text
    for got in (cli, r.json()):
        assert got["latency_targets"] == goals.record()
        for key in ("capacity_rps", "batch", "batch_capped_by", "limited_by", "power_w"):
            assert got[key] == ref[key], key
    # without targets: today's record, no latency_targets key
    r = client.post("/v1/capacity", json=body)
    assert r.json()["capacity_rps"] == plain["capacity_rps"]
    assert "latency_targets" not in r.json()
    bad = client.post("/v1/capacity", json={**body, "latency_targets": {"tpot_p99_s": -1}})
    assert_problem(bad, 422, "latency_targets.tpot_p99_s")


def test_front_over_shapes_on_the_command_line_and_over_http_with_targets(client, capsys):
    body = {
        "model": "llama-3.1-70b",
        "workload": "fixed:1024:256",
        "max_gpus": 24,
        "prefill_shapes": ["tp2", "tp4"],
        "decode_shapes": ["tp4", "tp8"],
        "slo": {"tpot_p99_s": 0.05},
    }
    r = client.post("/v1/front", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    pairs = {(c["prefill_shape"], c["decode_shape"]) for c in got["configs"]}
    assert pairs == {("tp2", "tp4"), ("tp2", "tp8"), ("tp4", "tp4"), ("tp4", "tp8")}
    assert all(c["slo"]["meets"] for c in got["front"])
    # the counts of the pairs' restricted fronts add up
    capped = sum(1 for c in got["configs"] if c.get("batch_capped_by") == "tpot_p99")
    assert got["slo"]["batch_capped"] == capped
    for c in got["configs"]:  # a configuration's GPUs are its shapes'
        gp, gd = (int(c[f"{k}_shape"][2:]) for k in ("prefill", "decode"))
        assert c["gpus"] == c["n_p"] * gp + c["n_d"] * gd
    cli = run_json(
        capsys,
        [
            "front", "--model", "llama-3.1-70b", "--workload", "fixed:1024:256",
            "--max-gpus", "24", "--prefill-shapes", "tp2", "tp4", "--decode-shapes", "tp4",
            "tp8", "--tpot-p99", "0.05", "--slo-jobs", "1", "--json",
        ],
    )  # fmt: skip
    assert [c["capacity_rps"] for c in cli["front"]] == [c["capacity_rps"] for c in got["front"]]
    bad = client.post("/v1/front", json={**body, "prefill_shapes": ["tp2", "tp3"]})
    assert_problem(bad, 422, "prefill_shapes[1]")
