"""Phases on different GPU types over HTTP (docs/mixed-gpus.md): the capacity and the
front over GPU pairs are the core's documents, and bad names are RFC 9457 problems
naming the field."""

from __future__ import annotations

import pytest

from model.operations import SpecRequest, capacity_report, resolve_spec
from tests.service.test_routes import assert_problem

BODY = {
    "model": "llama-3.1-70b",
    "gpu": "h200",
    "workload": "fixed:8192:512",
    "overrides": {"serving": {"tensor_parallel": 4}},
    "prefill_gpu": "h100-sxm",
    "interconnect": "ethernet",
}


def test_capacity_of_a_mixed_pair_is_the_cores(client):
    r = client.post("/v1/capacity", json={**BODY, "n_p": 2, "n_d": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    spec = resolve_spec(
        SpecRequest("llama-3.1-70b", "h200", "fixed:8192:512",
                    {"serving": {"tensor_parallel": 4}}, prefill_gpu="h100-sxm",
                    interconnect="ethernet")
    )  # fmt: skip
    core = capacity_report(spec, 2, 2, overridden=True)
    assert body["capacity_rps"] == core["capacity_rps"]
    assert (body["prefill_gpu"], body["decode_gpu"]) == ("h100-sxm", "h200")
    # 327,680 B per token x 8,192 tokens over four 12.5 GB/s ports
    assert body["kv_transfer_s"] == pytest.approx(327_680 * 8192 / (4 * 12.5e9))


def test_front_over_gpu_pairs_names_each_points_pair(client):
    body = {k: v for k, v in BODY.items() if k != "prefill_gpu"}
    r = client.post("/v1/front", json={**body, "max_gpus": 16, "gpus": ["h100-sxm", "h200"]})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert rep["gpu_pairs"] == [["h100-sxm", "h100-sxm"], ["h100-sxm", "h200"],
                                ["h200", "h100-sxm"], ["h200", "h200"]]  # fmt: skip
    pairs = {(c["prefill_gpu"], c["decode_gpu"]) for c in rep["configs"]}
    assert len(pairs) == 4
    assert all("prefill_gpu" in c for c in rep["front"])


@pytest.mark.parametrize(
    ("route", "extra", "field"),
    [
        ("/v1/capacity", {"prefill_gpu": "tpu-v9", "n_p": 1, "n_d": 1}, "prefill_gpu"),
        ("/v1/capacity", {"decode_gpu": "tpu-v9", "n_p": 1, "n_d": 1}, "decode_gpu"),
        ("/v1/capacity", {"interconnect": "nvlink", "n_p": 1, "n_d": 1}, "interconnect"),
        ("/v1/front", {"gpus": ["h200", "tpu-v9"]}, "gpus[1]"),
    ],
)
def test_bad_phase_gpus_are_problems_naming_the_field(client, route, extra, field):
    r = client.post(route, json={**BODY, **extra})
    assert_problem(r, 422, field)
