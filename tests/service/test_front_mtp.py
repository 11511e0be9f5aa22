"""The front over MTP draft depths over HTTP (``mtp_draft_tokens`` of ``POST /v1/front``,
docs/kernels.md "Speculative decoding (DeepSeek's MTP)"): each point names its depth,
and bad depths are problem details naming the field."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import installed_kernel_tables
from tests.service.test_routes import assert_problem

BODY = {
    "model": "deepseek-v3.1",
    "gpu": "b200",
    "performance": "kernels",
    "framework": "sglang",
    "overrides": {"serving": {"tensor_parallel": 8, "decode_shape": "tp8,ep8"}},
    "max_gpus": 16,
}


def test_the_front_over_depths_names_each_points_depth(client: TestClient) -> None:
    installed_kernel_tables()  # the server reads the installed package's tables
    r = client.post("/v1/front", json={**BODY, "mtp_draft_tokens": [0, 3]})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["mtp_draft_tokens"] == [0, 3]
    assert {c["mtp_draft_tokens"] for c in got["configs"]} == {0, 3}
    assert all("mtp_draft_tokens" in c for c in got["front"])


def test_bad_depths_name_the_field(client: TestClient) -> None:
    installed_kernel_tables()
    assert_problem(client.post("/v1/front", json={**BODY, "mtp_draft_tokens": [-1]}), 422)
    assert_problem(client.post("/v1/front", json={**BODY, "mtp_draft_tokens": []}), 422)
    qwen = {**BODY, "model": "qwen3-32b", "overrides": {}, "mtp_draft_tokens": [0, 2]}
    assert_problem(client.post("/v1/front", json=qwen), 422, "mtp_draft_tokens[1]")
    spec = {k: v for k, v in BODY.items() if k not in ("performance", "framework")}
    spec = {**spec, "mtp_draft_tokens": [3]}  # the rooflines compose no drafting
    assert_problem(client.post("/v1/front", json=spec), 422, "mtp_draft_tokens[0]")
