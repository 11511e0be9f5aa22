"""A schedule whose deployment drafts with DeepSeek's MTP module (``serving.mtp_draft_tokens``
under measured kernels, docs/kernels.md "Speculative decoding (DeepSeek's MTP)"): its
tables read the drafting capacity, so the same demand costs no more, and a model
without the module is refused naming the deployment's field."""

from __future__ import annotations

from typing import Any

import pytest

from formulation.demo import demo_request
from formulation.problem import problem_from_dict
from formulation.solve import solve
from model.errors import InputError
from tests.conftest import installed_kernel_tables


def _request(serving: dict[str, Any], model: str = "deepseek-v3.1") -> dict[str, Any]:
    installed_kernel_tables()  # skips where the package's tables are not installed
    body = demo_request()
    d = dict(body["deployments"][0])
    d.update(
        name="ds", model=model, gpu="b200", max_gpus=32, performance="kernels",
        framework="sglang", overrides={"serving": serving}, initial={"n_p": 1, "n_d": 1},
        demand_rps=[2.0 * x for x in d["demand_rps"]],
    )  # fmt: skip
    body["deployments"] = [d]
    body["site"]["gpu_inventory"] = {"b200": 32}
    body["solver"]["time_limit_s"] = 30
    return body


def test_drafting_serves_the_demo_chat_demand_for_less() -> None:
    """DeepSeek-V3.1 on up to 32 B200 (8-GPU instances, decode tp8,ep8, SGLang's
    tables) serving twice the demo's chat demand: with 3 drafts a decode instance
    serves more at its batch (docs/kernels.md: 37.1 against 43.3 req/s), so the
    proven-optimal plan costs less (18,837 against 19,800 USD when this was written)."""
    shape = {"tensor_parallel": 8, "decode_shape": "tp8,ep8"}
    plain = solve(problem_from_dict(_request(shape)))
    drafting = solve(problem_from_dict(_request({**shape, "mtp_draft_tokens": 3})))
    assert plain.status == drafting.status == "optimal"
    assert drafting.priced.objective_usd < 0.99 * plain.priced.objective_usd


def test_a_model_without_an_mtp_module_is_refused_naming_the_field() -> None:
    body = _request({"tensor_parallel": 1, "mtp_draft_tokens": 2}, model="qwen3-32b")
    with pytest.raises(InputError, match=r"deployments\[0\]\.mtp_draft_tokens: qwen3-32b ships no"):
        solve(problem_from_dict(body))
