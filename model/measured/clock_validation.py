"""The clock model against published measurement series (docs/clocks.md section 6).

Each series of ``data/clock_series.json`` gives a phase's time and energy at a set of
locked SM clocks. The model predicts, from the GPU's clock range, its idle power (the
catalog's rule: 120 W x TDP / 700 W, docs/clocks.md section 2) and one measured power
(the series' lowest clock, where no power limit binds), the phase's throughput and
power at every other clock; nothing is fitted to the series. Both are compared
relative to the series' highest clock, as the capacity model scales its full-clock
calibration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from model.clocks import GpuClocks, compute_bound_series

#: the catalog's idle-power rule: the reference GPU's idle power over its TDP
#: (calibrations.json, H200: 120 W of 700 W), applied to any GPU's TDP
IDLE_W_PER_TDP_W = 120.0 / 700.0


@dataclass(frozen=True)
class SeriesResult:
    """One series: measured and predicted throughput and power relative to the
    series' highest clock, at each clock, and the median absolute relative errors
    (the highest clock, 0 by construction, left out)."""

    id: str
    phase: str
    gpu: str
    source: str
    clocks_mhz: list[float]
    effective_mhz: list[float]
    throughput_measured: list[float]
    throughput_predicted: list[float]
    power_measured: list[float]
    power_predicted: list[float]
    throughput_median_error: float
    power_median_error: float


def load_series() -> list[dict[str, Any]]:
    text = resources.files("model").joinpath("data/clock_series.json").read_text()
    series: list[dict[str, Any]] = json.loads(text)["series"]
    return series


def evaluate_series(entry: dict[str, Any], v_min_ratio: float = 0.7) -> SeriesResult:
    """The model against one series; ``v_min_ratio`` is the voltage at the GPU's
    lowest clock over the full-clock voltage (0.7: the catalog's value for the A100,
    assumed; docs/clocks.md section 3)."""
    gpu = entry["gpu"]
    points = sorted(entry["points"], key=lambda p: -p[0])
    f = np.array([p[0] for p in points], dtype=float)
    t = np.array([p[1] for p in points], dtype=float)
    power = np.array([p[2] for p in points], dtype=float) / t
    tdp = float(gpu["tdp_w"])
    clocks = GpuClocks(
        gpu["name"],
        gpu["sm_clock_min_mhz"],
        gpu["sm_clock_max_mhz"],
        tdp,
        tdp if gpu["power_limit_w"] is None else max(tdp, gpu["power_limit_w"]),
        v_min_ratio,
    )
    if entry["phase"] != "prefill":
        raise ValueError(f"series {entry['id']}: only compute-bound (prefill) series are modelled")
    eff, pred = compute_bound_series(
        clocks,
        IDLE_W_PER_TDP_W * tdp,
        gpu["power_limit_w"],
        list(f),
        float(f[-1]),
        float(power[-1]),
    )
    eff_a, pred_a = np.array(eff), np.array(pred)
    thr_m, thr_p = t[0] / t, eff_a / eff_a[0]
    pow_m, pow_p = power / power[0], pred_a / pred_a[0]
    return SeriesResult(
        id=entry["id"],
        phase=entry["phase"],
        gpu=gpu["name"],
        source=entry["source"],
        clocks_mhz=list(f),
        effective_mhz=list(eff_a),
        throughput_measured=list(thr_m),
        throughput_predicted=list(thr_p),
        power_measured=list(pow_m),
        power_predicted=list(pow_p),
        throughput_median_error=float(np.median(np.abs(thr_p / thr_m - 1.0)[1:])),
        power_median_error=float(np.median(np.abs(pow_p / pow_m - 1.0)[1:])),
    )


def evaluate_all(v_min_ratio: float = 0.7) -> list[SeriesResult]:
    return [evaluate_series(entry, v_min_ratio) for entry in load_series()]


@dataclass(frozen=True)
class KernelPowerCheck:
    """The clock model at full clock against the B200 kernel power of the AIConfigurator
    tables (vLLM 0.24.0; docs/clocks.md section 6): the median power of compute-bound
    bf16 GEMMs (prefill's kernels: ``m >= 2048`` tokens, ``n k >= 4096^2``) against the
    model's full-clock prefill draw, the median power of memory-bound ones (``m <=
    16``: decode's weight reads) against the model's static plus HBM power at their
    bytes per second, and the power limit the tables were measured under."""

    gemms_compute_bound: int
    compute_bound_median_w: float
    prefill_draw_w: float
    gemms_memory_bound: int
    memory_bound_median_w: float
    memory_bound_bytes_per_s: float
    static_w: float
    hbm_w: float
    power_limit_w: float


def b200_kernel_check(folder: str, prefill_draw_w: float, static_w: float) -> KernelPowerCheck:
    """:class:`KernelPowerCheck` from the tables under ``folder`` (the AIConfigurator
    data directory, ``b200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet``)."""
    import pyarrow.parquet as pq

    from model.clocks import hbm_power_w

    path = f"{folder}/b200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    cols = pq.read_table(path).to_pydict()
    dtype = np.array(cols["gemm_dtype"])
    m, n, k, lat, power, limit = (
        np.array(cols[c], dtype=float) for c in ("m", "n", "k", "latency", "power", "power_limit")
    )
    ok = (dtype == "bfloat16") & np.isfinite(power) & (n * k >= 4096.0 * 4096.0)
    big = ok & (m >= 2048)
    small = ok & (m <= 16)
    moved = 2.0 * (m * k + k * n + m * n) / (lat * 1e-3)  # bf16 bytes per second
    rate = float(np.median(moved[small]))
    return KernelPowerCheck(
        gemms_compute_bound=int(big.sum()),
        compute_bound_median_w=float(np.median(power[big])),
        prefill_draw_w=prefill_draw_w,
        gemms_memory_bound=int(small.sum()),
        memory_bound_median_w=float(np.median(power[small])),
        memory_bound_bytes_per_s=rate,
        static_w=static_w,
        hbm_w=hbm_power_w(rate),
        power_limit_w=float(np.unique(limit[ok])[0]),
    )


@dataclass(frozen=True)
class TtftResult:
    """The latency model's TTFT (or decode capacity, or power) at each setting against a
    measured series relative to its default point (docs/clocks.md section 6)."""

    id: str
    clocks_mhz: list[float]
    measured: list[float]
    predicted: list[float]
    median_error: float


def _compared(
    entry_id: str, knobs: list[float], meas: list[float], pred: list[float]
) -> TtftResult:
    err = float(np.median(np.abs(np.array(pred) / np.array(meas) - 1.0)))
    return TtftResult(entry_id, knobs, meas, pred, err)


def _llama70b(gpu: str, tp: int, workload: str) -> Any:
    """Llama-3.1-70B (Llama-2-70B's and, nearly, LLaMA-65B's shape) on ``gpu`` at tensor
    parallelism ``tp`` under ``workload``, the catalog's calibration."""
    from model.operations import SpecRequest, resolve_spec

    return resolve_spec(
        SpecRequest(
            model="llama-3.1-70b",
            gpu=gpu,
            workload=workload,
            overrides={"serving": {"tensor_parallel": tp}},
        )
    )


def evaluate_dynamollm(
    path: str, line_model: bool = False, mean: bool = False
) -> list[TtftResult]:
    """The H100 series of ``path`` (``clock-series/series.json``) that the catalog can
    express, as Llama-3.1-70B (Llama-2-70B's shape) on ``h100-sxm`` with vLLM's measured
    calibration: TP4 prefill by the latency model's median TTFT of a 4,050-token prompt
    at the series' 0.5 req/s (the series gives the TTFT's P50), TP4 decode by decode
    capacity at ``B_max`` against the measured TBT; each relative to the default
    (unlocked) point. Nothing is fitted. ``mean``: the mean TTFT instead, for comparison.
    ``line_model``: the model before the sustained clock and the compute draw (the
    H100's calibration taken at its full clock, 1980 MHz), for comparison."""
    from dataclasses import replace

    from model.capacity import Coefficients
    from model.catalog import load_gpu_clocks
    from model.queueing.latency import latency_at

    with open(path) as fh:
        series = json.load(fh)
    spec = _llama70b("h100-sxm", 4, "azure-conv-2023")
    if line_model:
        clocks = load_gpu_clocks("h100-sxm")
        assert clocks is not None
        plain = replace(clocks, sustained_clock_mhz=None, compute_draw_ratio=None)
        spec = replace(spec, clocks=plain)
    out = []
    for entry in series:
        if not entry["id"].startswith("dynamollm-h100-tp4"):
            continue
        points = [p for p in entry["points"] if p["latency_rel"] is not None]
        f = [float(p["knob"]) for p in points if p["knob"] != 1980]
        meas = [float(p["latency_rel"]) for p in points if p["knob"] != 1980]
        if entry["phase"] == "prefill":

            def value(setting: str | None) -> float:
                c = Coefficients.of(replace(spec, prefill_setting=setting))
                lat = latency_at(c, 1, 1, 0.5, [4050.0], [96.0], quantile=0.5)
                return lat.ttft_mean_s if mean else lat.ttft_quantile_s
        else:

            def value(setting: str | None) -> float:
                c = Coefficients.of(replace(spec, decode_setting=setting))
                return 1.0 / float(c.decode_rate_rps(c.batch_max))

        base = value(None)
        out.append(_compared(entry["id"], f, meas, [value(f"{x:g}MHz") / base for x in f]))
    return out


#: the prompt and output lengths (tokens) read for DynamoLLM's request classes, whose
#: series name them only by letter (prompt, then output: ``LS`` long prompts and short
#: outputs): the long prompt is the TP4 prefill series' 4,050 tokens and the short
#: output the 96 its TTFT is evaluated with; the others are assumed, and the medians
#: move by at most 1.4 points with every length halved or doubled (docs/clocks.md)
DYNAMOLLM_PROMPT = {"S": 256, "M": 1024, "L": 4050}
DYNAMOLLM_OUTPUT = {"S": 96, "L": 1024}


def aggregated_power_w(c: Any, rate_rps: float) -> float:
    """The mean draw (W) of one instance serving both phases on the same GPUs at
    ``rate_rps`` (the engines' aggregated serving the DynamoLLM runs used): it prefills
    a share ``rho = lambda / mu_P`` of the time at the prefill's saturated draw and
    decodes the rest, at the decode draw of its load ``lambda / mu_D(B_max)`` (the
    capped ramp of SPEC 2.6); each draw at the instance's settings (docs/clocks.md,
    section 6). ``c``: the deployment's :class:`model.capacity.Coefficients`."""
    from model.capacity import phase_power_w

    mu_p = float(c.mu_prefill_rps)
    mu_d = float(c.decode_rate_rps(c.batch_max))
    lam = min(rate_rps, mu_p, mu_d)
    _, decode = phase_power_w(c, 1, 1, mu_p, mu_d, lam)
    rho = lam / mu_p
    return float(rho * c.psat_prefill_w + (1.0 - rho) * float(decode))


def evaluate_dynamollm_power(path: str) -> list[TtftResult]:
    """DynamoLLM's TP8 power series of ``path`` (``clock-series/series.json``: the mean
    board power per GPU of vLLM serving Llama-2-70B on all eight H100s at a Poisson
    load, every SM clock locked to each setting): Llama-3.1-70B at TP8 on ``h100-sxm``
    with vLLM's calibration, fixed request lengths by class (:data:`DYNAMOLLM_PROMPT`,
    :data:`DYNAMOLLM_OUTPUT`), both phases at the clock, the instance's draw by
    :func:`aggregated_power_w` at the series' rate, relative to the default (unlocked)
    point. Nothing is fitted."""
    from dataclasses import replace

    from model.capacity import Coefficients

    with open(path) as fh:
        series = json.load(fh)
    out = []
    for entry in series:
        sid = entry["id"]
        if not (sid.startswith("dynamollm-h100-tp8-") and sid.endswith("-power-only")):
            continue
        _, _, _, kind, load, *_ = sid.split("-")
        rate = float(load.removesuffix("rps"))
        workload = f"fixed:{DYNAMOLLM_PROMPT[kind[0]]}:{DYNAMOLLM_OUTPUT[kind[1]]}"
        spec = _llama70b("h100-sxm", 8, workload)
        points = [p for p in entry["points"] if p["power_rel"] is not None]
        f = [float(p["knob"]) for p in points if p["knob"] != 1980]
        meas = [float(p["power_rel"]) for p in points if p["knob"] != 1980]

        def power(setting: str | None, spec: Any = spec, rate: float = rate) -> float:
            c = Coefficients.of(replace(spec, prefill_setting=setting, decode_setting=setting))
            return aggregated_power_w(c, rate)

        base = power(None)
        out.append(_compared(sid, f, meas, [power(f"{x:g}MHz") / base for x in f]))
    return out


#: Samsi et al.'s runs (HPEC 2023, section IV-E): a static batch of 64 GSM8K prompts
SAMSI_BATCH = 64
#: tokens of a GSM8K question with its prompt, taken as 200 (the paper gives no length;
#: the KV it adds is small against the weights read per iteration at batch 64)
SAMSI_PROMPT_TOKENS = 200


def evaluate_samsi(path: str) -> list[tuple[TtftResult, TtftResult]]:
    """Samsi et al.'s A100 power-cap series of ``path`` (``clock-series/series.json``):
    LLaMA-65B on 4 A100 80GB, a static batch of 64 generating 256 to 1,024 tokens, under
    a per-GPU power limit of 250, 175 and 150 W, on boards of a 300 W TDP (the A100 80GB
    PCIe; the SXM board's is 400 W). Modelled as Llama-3.1-70B decode at TP4 on
    ``a100-pcie-80gb`` with the power limit as the decode setting: the time of an
    iteration at batch 64 (``alpha + g 64``) against the measured time and the decode's
    draw per GPU at the limit's clock against the measured mean power (energy over
    time), both relative to the 250 W point. Returns (time, power) per series. Nothing
    is fitted."""
    from dataclasses import replace

    from model.capacity import Coefficients

    with open(path) as fh:
        series = json.load(fh)
    out = []
    for entry in series:
        if not entry["id"].startswith("samsi-a100"):
            continue
        gen = int(entry["id"].rsplit("out", 1)[1])
        spec = _llama70b("a100-pcie-80gb", 4, f"fixed:{SAMSI_PROMPT_TOKENS}:{gen}")
        points = sorted(entry["points"], key=lambda p: -float(p["knob"]))

        def at(limit_w: float, spec: Any = spec) -> tuple[float, float]:
            c = Coefficients.of(replace(spec, decode_setting=f"{limit_w:g}W"))
            assert c.phase_clocks is not None
            return c.alpha_s + c.g_s_per_request * SAMSI_BATCH, c.phase_clocks.decode_draw_w

        base_t, base_p = at(float(points[0]["knob"]))
        knobs = [float(p["knob"]) for p in points[1:]]
        preds = [at(k) for k in knobs]
        time = _compared(
            entry["id"] + ":time",
            knobs,
            [float(p["latency_rel"]) for p in points[1:]],
            [t / base_t for t, _ in preds],
        )
        power = _compared(
            entry["id"] + ":power",
            knobs,
            [float(p["power_rel"]) for p in points[1:]],
            [w / base_p for _, w in preds],
        )
        out.append((time, power))
    return out
