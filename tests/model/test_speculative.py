"""Speculative decoding with a model's own next-token-prediction module (DeepSeek's MTP):
the tokens gained per iteration at the published acceptance, the knob
``serving.mtp_draft_tokens`` and its refusals, and the composed iteration in the
capacity model (docs/kernels.md, "Speculative decoding (DeepSeek's MTP)")."""

from __future__ import annotations

import pytest

from model.catalog import ServingStack, load_model
from model.errors import InputError
from model.operations import SpecRequest, capacity_report, resolve_spec
from model.performance.engine import KernelSource, KernelTimes, choose_version
from model.performance.speculative import accepted_tokens, check_draft, model_accepted_tokens
from tests.conftest import installed_kernel_tables


def test_tokens_gained_at_deepseeks_published_acceptance() -> None:
    """1.875 tokens per iteration with one draft (DeepSeek-V3's technical report, arXiv
    2412.19437 section 5.4.3: 85-90% of second tokens accepted, the middle taken), 3.20
    with seven (nebius/MTP-DeepSeek-V3-0324's model card, the original module at
    temperature 0); rising with the drafts, never more than the tokens verified."""
    m = load_model("deepseek-v3.1")
    assert m.mtp_modules == 1
    assert model_accepted_tokens(m, 0) == 1.0
    assert model_accepted_tokens(m, 1) == pytest.approx(1.875, abs=1e-12)
    assert model_accepted_tokens(m, 7) == pytest.approx(3.20, abs=1e-3)
    got = [model_accepted_tokens(m, d) for d in range(1, 8)]
    assert all(a < b for a, b in zip(got, got[1:], strict=False))
    assert all(1.0 < g < 1.0 + d for d, g in enumerate(got, start=1))
    assert accepted_tokens(3, 1.0, 1.0) == 4.0  # every draft accepted: all verified
    assert accepted_tokens(3, 0.0, 0.5) == 1.0  # none: the request's own token


def test_drafting_is_refused_where_it_is_not_expressed() -> None:
    check_draft(load_model("qwen3-32b"), 0)  # no drafting: any model
    with pytest.raises(InputError, match="mtp_draft_tokens.*no next-token-prediction"):
        check_draft(load_model("qwen3-32b"), 2)
    with pytest.raises(InputError, match="mtp_draft_tokens.*must be >= 0"):
        ServingStack(mtp_draft_tokens=-1)
    with pytest.raises(InputError, match="mtp_draft_tokens.*integer"):
        ServingStack(mtp_draft_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="mtp_accept_first"):
        resolve_spec(SpecRequest(model="qwen3-32b",
                                 overrides={"model": {"mtp_accept_first": 0.8}}))  # fmt: skip
    # the roofline path composes no drafting
    serving = {"mtp_draft_tokens": 3, "tensor_parallel": 8}
    req = SpecRequest(model="deepseek-v3.1", gpu="b200", overrides={"serving": serving})
    with pytest.raises(InputError, match="mtp_draft_tokens.*performance 'kernels'"):
        resolve_spec(req)


def _times(draft: int) -> KernelTimes:
    folder = str(installed_kernel_tables())
    version, _ = choose_version(folder, "b200", "sglang", None, None)
    source = KernelSource(folder, "sglang", (("b200", version),))
    return KernelTimes.of(source, load_model("deepseek-v3.1"), "b200", 8, 8, draft_tokens=draft)


def test_the_capacity_model_reads_an_mtp_iteration_per_token_gained() -> None:
    """``t_D`` under MTP is the composed speculative iteration over the tokens it gains
    (KernelTimes.decode_s): at one request, where the verifying pass costs about one
    token's, DeepSeek decodes each token in well under 60% of the plain iteration."""
    plain, mtp = _times(0), _times(3)
    c = 2048.0
    g = model_accepted_tokens(load_model("deepseek-v3.1"), 3)
    for b in (1.0, 16.0, 64.0):
        want = mtp.kernels.t_decode_speculative(b, c, 3) / g
        assert mtp.decode_s(b, c) == pytest.approx(want, rel=1e-12)
    assert mtp.decode_s(1.0, c) < 0.6 * plain.decode_s(1.0, c)


def test_drafting_changes_the_decode_instances_only() -> None:
    """The same 1P1D DeepSeek deployment on B200 under SGLang's tables (8-GPU instances,
    decode tp8,ep8), with and without 3 drafted tokens: prefill is the same to the last
    digit; the decode instance, at the KV pool's batch of about 600, serves more (37.1
    against 43.3 req/s when this was written: the verifying pass at 4 tokens per
    request costs less than the 2.745 tokens it gains)."""
    folder = str(installed_kernel_tables())

    def report(draft: int) -> dict:
        spec = resolve_spec(SpecRequest(
            model="deepseek-v3.1", gpu="b200", performance="kernels", framework="sglang",
            kernels=folder,
            overrides={"serving": {"tensor_parallel": 8, "decode_shape": "tp8,ep8",
                                   "mtp_draft_tokens": draft}},
        ))  # fmt: skip
        return capacity_report(spec, 1, 1)

    without, drafting = report(0), report(3)
    assert drafting["mu_p_rps"] == without["mu_p_rps"]
    assert drafting["mu_d_rps"] > 1.05 * without["mu_d_rps"]
    assert drafting["power_saturated_w"] == without["power_saturated_w"]



def test_the_front_over_draft_depths_is_the_front_of_each_depths_front(capsys) -> None:
    """``pdwatt front --mtp-draft-tokens 0,3`` (DeepSeek-V3.1 on B200, SGLang's tables,
    8-GPU instances, up to 32 GPUs): every configuration names its depth, each depth's
    configurations are that depth's own front's, and the front over both is the
    capacity-power front of their union."""
    from tests.service.test_cli_core import run, run_json

    folder = str(installed_kernel_tables())
    base = ["front", "--model", "deepseek-v3.1", "--gpu", "b200", "--performance", "kernels",
            "--framework", "sglang", "--kernels", folder, "--set", "serving.tensor_parallel=8",
            "--decode-shape", "tp8,ep8", "--max-gpus", "32", "--json"]  # fmt: skip
    both = run_json(capsys, [*base, "--mtp-draft-tokens", "0,3,3"])
    assert both["mtp_draft_tokens"] == [0, 3]  # repeats dropped, order kept
    assert {c["mtp_draft_tokens"] for c in both["configs"]} == {0, 3}
    for d in (0, 3):
        alone = run_json(capsys, [*base, "--set", f"serving.mtp_draft_tokens={d}"])
        mine = [c for c in both["configs"] if c["mtp_draft_tokens"] == d]
        assert [(c["n_p"], c["n_d"], c["capacity_rps"]) for c in mine] == [
            (c["n_p"], c["n_d"], c["capacity_rps"]) for c in alone["configs"]
        ]
    points = [(c["capacity_rps"], c["power_w"]) for c in both["configs"]]
    front = {(c["capacity_rps"], c["power_w"]) for c in both["front"]}
    for mu, w in points:  # a point is on the front exactly when no other dominates it
        dominated = any(m2 >= mu and w2 <= w and (m2, w2) != (mu, w) for m2, w2 in points)
        assert ((mu, w) in front) == (not dominated)
    qwen = ["front", "--model", "qwen3-32b", "--gpu", "b200", "--performance", "kernels",
            "--framework", "sglang", "--kernels", folder, "--mtp-draft-tokens", "0,2"]  # fmt: skip
    code, _, err = run(capsys, qwen)
    assert code == 2 and "mtp_draft_tokens[1]" in err and "qwen3-32b" in err
