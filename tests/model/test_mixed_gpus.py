"""A deployment's phases on different GPU types (docs/mixed-gpus.md): each phase's
quantities from its own GPU, today's numbers when both name one type, the KV transfer
between the phases (model/performance/interconnect.py) and the inputs refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from model.capacity import Coefficients, candidate_configs, evaluate
from model.errors import DoesNotFitError, InputError, NotFoundError
from model.measured.silicon import KV_LINK_BYTES_PER_S
from model.operations import SpecRequest, capacity_report, resolve_spec
from model.performance.interconnect import INTERCONNECTS, kv_link
from model.queueing.latency import latency_at
from model.tables import build_table


def spec(gpu="h200", model="llama-3.1-70b", workload="fixed:8192:512", variant="admission",
         tp=4, **phases):  # fmt: skip
    return resolve_spec(
        SpecRequest(model, gpu, workload, {"serving": {"tensor_parallel": tp}},
                    model_variant=variant, **phases)
    )  # fmt: skip


#: (model, GPU, workload, tensor parallelism): a dense model per Hopper GPU and a
#: mixture of experts on Blackwell
TODAY = [
    ("qwen3-32b", "h200", "azure-conv-2023", 1),
    ("llama-3.1-70b", "h100-sxm", "azure-code-2023", 4),
    ("qwen3-30b-a3b", "b200", "fixed:4096:512", 2),
]


@pytest.mark.parametrize("variant", ["paper", "admission"])
@pytest.mark.parametrize(("model", "gpu", "workload", "tp"), TODAY)
def test_both_phases_on_the_deployments_gpu_are_todays_numbers(variant, model, gpu, workload, tp):
    """``prefill_gpu == decode_gpu == gpu``: the spec, coefficients, capacities, powers
    and table of the request without them, bit for bit."""
    today = spec(gpu, model, workload, variant, tp)
    named = spec(gpu, model, workload, variant, tp, prefill_gpu=gpu, decode_gpu=gpu)
    assert named == today
    assert named.describe() == today.describe()
    assert dataclasses.asdict(Coefficients.of(named)) == dataclasses.asdict(Coefficients.of(today))
    n_p, n_d = candidate_configs(16 * tp, tp)
    a, b = evaluate(today, n_p, n_d), evaluate(named, n_p, n_d)
    for name in ("gpus", "capacity_rps", "power_w", "power_idle_w", "batch", "mu_d_rps"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    ta, tb = build_table(today, n_p, n_d), build_table(named, n_p, n_d)
    for name in ("bp_load_rps", "bp_power_w", "bp_prefill_power_w"):
        assert np.array_equal(getattr(ta, name), getattr(tb, name), equal_nan=True), name


def test_each_phase_takes_its_quantities_from_its_own_gpu():
    """Prefill times and power from the prefill GPU's peak and calibration; the decode
    iteration, the KV pool and decode power from the decode GPU's."""
    a100, h200 = Coefficients.of(spec("a100-80gb")), Coefficients.of(spec("h200"))
    mixed = Coefficients.of(spec("h200", prefill_gpu="a100-80gb"))
    for k in ("a_p_s_per_token", "b_p_s_per_token2", "t_prefill_mean_s", "p0_prefill_w",
              "gamma_prefill_w", "psat_prefill_w"):  # fmt: skip
        assert getattr(mixed, k) == getattr(a100, k), k
    for k in ("alpha_s", "g_s_per_request", "kv_pool_tokens", "p0_decode_w", "gamma_decode_w",
              "psat_decode_w"):  # fmt: skip
        assert getattr(mixed, k) == getattr(h200, k), k
    # A100's 312 TFLOP/s against H200's 989 (gpus.json): prefill 989/312 times slower
    # at the estimated calibration's equal MFU
    assert mixed.a_p_s_per_token == pytest.approx(h200.a_p_s_per_token * 989 / 312, rel=1e-12)
    # naming the decode GPU instead of gpu is the same deployment
    other = Coefficients.of(spec("a100-80gb", decode_gpu="h200"))
    assert dataclasses.asdict(other) == dataclasses.asdict(mixed)


def test_a_mixed_pair_charges_the_kv_transfer_over_infiniband_by_default():
    s = spec("h200", prefill_gpu="h100-sxm")
    assert s.kv_link is not None and s.kv_link.name == "infiniband"
    assert spec("h200").kv_link is None  # one type: not charged, as before
    c = Coefficients.of(spec("h200", prefill_gpu="h100-sxm", interconnect="ethernet"))
    # Llama 3.1 70B: kappa = 2 x 2 B x 80 layers x 8 KV heads x 128 = 327,680 B per token;
    # 8,192 tokens over a tp4 prefill replica's four 100 GbE ports (12.5 GB/s each)
    assert c.kv_transfer_s_per_token * 8192 == pytest.approx(327_680 * 8192 / (4 * 12.5e9))
    assert c.kv_link_rps_per_gpu == pytest.approx(12.5e9 / (327_680 * 8192))


def test_the_transfer_holds_the_decode_pool_and_a_slow_link_caps_capacity():
    none = Coefficients.of(spec("h200", interconnect_gb_per_s=None))
    slow = Coefficients.of(spec("h200", interconnect="ethernet"))
    e1, e2, r = 8192.0, 8192.0**2, 512.0
    extra = slow.kv_transfer_s_per_token * (e2 + r * e1)
    assert slow.t_prefill_reserve_token_s == pytest.approx(none.t_prefill_reserve_token_s + extra)
    n_p, n_d = np.array([1, 2, 4]), np.array([4, 2, 1])
    a, b = evaluate(none, n_p, n_d), evaluate(slow, n_p, n_d)
    assert np.all(b.capacity_rps <= a.capacity_rps)
    # a link of 0.05 GB/s per GPU carries 0.05e9 / (327,680 x 8,192) req/s per GPU
    tiny = spec("h200", interconnect="ethernet", interconnect_gb_per_s=0.05)
    r1 = capacity_report(tiny, 2, 2)
    assert r1["bottleneck"] == "kv_transfer"
    assert r1["capacity_rps"] == pytest.approx(8 * 0.05e9 / (327_680 * 8192))
    assert r1["interconnect"] == "ethernet" and r1["interconnect_gb_per_s"] == 0.05


def test_the_transfer_adds_to_ttft():
    """Each prompt's TTFT gains its own transfer: the mean by ``E[t_X]``."""
    none = Coefficients.of(spec("h200", workload="azure-code-2023"))
    link = Coefficients.of(spec("h200", workload="azure-code-2023", interconnect="ethernet"))
    l_in = np.array([512.0, 2048.0, 8192.0, 8192.0])
    l_out = np.array([64.0, 128.0, 256.0, 32.0])
    a = latency_at(none, 2, 2, 0.2, l_in, l_out)
    b = latency_at(link, 2, 2, 0.2, l_in, l_out)
    assert b.ttft_mean_s - a.ttft_mean_s == pytest.approx(
        link.kv_transfer_s_per_token * l_in.mean(), rel=1e-9
    )
    assert b.ttft_quantile_s > a.ttft_quantile_s


@pytest.mark.parametrize(
    ("phases", "field", "words"),
    [
        ({"prefill_gpu": "h900"}, "prefill_gpu", "unknown prefill_gpu"),
        ({"decode_gpu": "mi300x"}, "decode_gpu", "unknown decode_gpu"),
        ({"prefill_gpu": "h100-sxm", "interconnect": "nvlink"}, "interconnect", "one board"),
        ({"interconnect": "token-ring"}, "interconnect", "must be one of"),
        ({"interconnect_gb_per_s": 0.0}, "interconnect_gb_per_s", "must be > 0"),
    ],
)
def test_bad_phase_gpus_and_links_name_the_field(phases, field, words):
    with pytest.raises(InputError) as e:
        spec("h200", **phases)
    assert e.value.field == field and words in e.value.reason
    if "unknown" in words:
        assert isinstance(e.value, NotFoundError)


def test_a_prefill_gpu_too_small_for_the_weights_names_it():
    """Llama 3.1 405B's 811 GB fit 0.9 x 8 x 141 GB of H200 but not 0.9 x 8 x 80 GB of
    A100 (gpus.json)."""
    with pytest.raises(DoesNotFitError) as e:
        Coefficients.of(
            spec("h200", "llama-3.1-405b", "fixed:2048:256", tp=8, prefill_gpu="a100-80gb")
        )
    assert e.value.field == "prefill_gpu" and "a100-80gb" in e.value.reason


def test_settings_need_one_gpu_type():
    s = spec("h200", prefill_gpu="h100-sxm")
    with pytest.raises(InputError) as e:
        dataclasses.replace(s, decode_setting="1500MHz")
    assert e.value.field == "prefill_gpu"


def test_the_silicon_validation_reads_the_same_infiniband_link():
    assert KV_LINK_BYTES_PER_S == INTERCONNECTS["infiniband"][0] == 50e9
    assert kv_link(None, None, mixed=True) == kv_link("infiniband", None, mixed=False)
