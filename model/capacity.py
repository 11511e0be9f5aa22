"""Capacity and power of PD-disaggregated configurations (SPEC sections 2.2 to 2.6).

Everything here is vectorised over arrays of configurations ``(n_P, n_D)``: one call
evaluates thousands of configurations in a few array passes. The per-deployment
scalars (``a_P``, ``b_P``, ``alpha``, ``g``, the KV pool, the prefill moments) are
computed once by :class:`Coefficients`.

Choices this module makes where SPEC leaves room (also listed in README.md):

* ``tensor_parallel`` (GPUs per instance, default 1) scales peak FLOP/s, bandwidth,
  memory and every power value of an instance linearly; a decode iteration also pays
  two all-reduces per layer, their bytes over the GPU's link bandwidth plus the
  calibration's ``t_coll_s`` each (:class:`model.performance.roofline.DecodeTerms`,
  ``docs/calibration.md``).
* Decode weight traffic is ``weight_bytes`` (SPEC 2.3: "use weight_bytes in general");
  the prefill FLOP count is ``2 N l_in + c_a L d l_in^2`` with ``N`` the parameter count
  (the active parameters of a mixture of experts, whose decode reads every expert here:
  ``DecodeTerms.alpha_g``).
* A workload "does not fit" when the KV pool is not positive, or when its longest
  request (``max(l_in + l_out)``) plus the ``R`` reserved tokens exceeds the usable
  pool ``C_tok - U``.
* The memory balance is solved in the batch variable ``B`` after clearing the two
  positive denominators (the paper's cubic, restricted to its bracket); see
  :func:`solve_batch`.
* ``performance`` (:data:`model.spec.PERFORMANCE_SOURCES`) says where ``a_P``, ``b_P``,
  ``alpha`` and ``g`` come from: ``spec``, SPEC 2.2-2.3's rooflines with the calibration (the
  default), or ``kernels``, measured kernel tables composed into forward passes plus
  the serving engine's fitted overheads (:mod:`model.performance.engine`), through the
  same two forms (:class:`KernelForms`; ``docs/kernels.md``, "In the core"). Everything
  else (the KV pool, the memory balance, the power ramps of the calibration) is the same.

The deployment itself is :class:`model.spec.DeploymentSpec`; SPEC's rooflines are
:mod:`model.performance.roofline`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
from cachetools import LRUCache
from numpy.typing import ArrayLike, NDArray

from model import admission
from model.catalog import GpuSpec, ModelArch
from model.clocks import (
    GpuClocks,
    Setting,
    clocked_time,
    compute_draw_w,
    decode_extra_g,
    default_clock,
    hbm_power_w,
    kernel_clock_bound,
    power_factor,
    prefill_memory_bytes_per_token,
    scaled_power,
    solve_power_limit,
)
from model.errors import DoesNotFitError, InputError, OutsideTableError
from model.performance.engine import (
    PREFILL_CHUNK,
    KernelSource,
    KernelTimes,
    LinearForm,
    decode_line,
    prefill_curve,
)
from model.performance.interconnect import kv_transfer_s
from model.performance.roofline import DecodeTerms, expert_mbu, prefill_coefficients
from model.shapes import InstanceShape
from model.spec import DeploymentSpec, check_variant
from model.workload import Workload

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Relative tolerance on the operating batch ``B*`` (SPEC 2.5 asks for 1e-9).
ROOT_RTOL = 1e-9


def kv_memory_bytes(
    model: ModelArch, gpu: GpuSpec, tp: int, mem_fraction: float, dp: int = 1
) -> float:
    """Memory left for the KV cache on an instance of ``tp x dp`` GPUs: the share
    ``mem_fraction`` of their memory less the weights (the dense ones held by each of
    the ``dp`` replicas, the routed experts once); negative when they do not fit."""
    weights = model.dense_weight_bytes * dp + model.expert_weight_bytes
    return mem_fraction * (gpu.mem_bytes * tp * dp) - weights


def kv_replicas(model: ModelArch, shape: InstanceShape) -> float:
    """How many copies of each token's KV an instance of ``shape`` keeps: each attention
    replica (``dp``) splits its KV heads over its ``tp`` GPUs, never below one head per
    GPU, so ``tp / min(tp, h_kv)`` GPUs of a replica hold the same heads (1 while ``tp``
    is at most the KV heads; ``tp`` for MLA's single latent). Each request lives in one
    replica, so ``dp`` adds no copy."""
    return shape.tp / min(shape.tp, model.n_kv_heads)


def kv_bytes_per_pool_token(model: ModelArch, ctx_tokens: float) -> float:
    """KV bytes per token of context that the pool's token count is measured in:
    ``kappa`` (SPEC 2.1), or with sliding-window layers the bytes a request keeps at
    the mean context ``ctx`` over ``ctx``. Sliding layers keep ``min(c, window)``
    tokens and ``E[min(c, W)] <= min(E[c], W)``, so at the mean context this is an
    upper bound on the mean bytes per token: the pool it gives is never larger than
    the one requests actually fill (``docs/sliding_window.md``)."""
    if not model.sliding_layers or not ctx_tokens > 0:
        return model.kv_bytes_per_token
    return model.kv_bytes_at(ctx_tokens) / ctx_tokens


@dataclass(frozen=True)
class PhaseClocks:
    """What a deployment's settings did (docs/clocks.md): each phase's effective SM
    clock (MHz; a power limit resolved to the clock at which its draw meets it) and
    its draw per GPU at capacity, saturated (W)."""

    prefill_clock_mhz: float
    decode_clock_mhz: float
    prefill_draw_w: float
    decode_draw_w: float


@dataclass(frozen=True)
class _Clocked:
    a_p: float
    b_p: float
    extra_g: float  # what the decode clock adds to g (0 at the full clock)
    powers: dict[str, float]
    phases: PhaseClocks


def _phase_clock(
    clocks: GpuClocks, setting: Setting | None, ceiling: float, draw_w: Callable[[float], float]
) -> float:
    """The clock a phase runs at: never above ``ceiling``, the clock it runs at by
    default (:func:`model.clocks.default_clock`); a locked clock below it; a power
    limit's solved clock."""
    if setting is None:
        return ceiling
    if setting.kind == "clock":
        return min(setting.value, ceiling)
    return min(solve_power_limit(clocks, setting.value, draw_w), ceiling)


def default_prefill_clocks(spec: DeploymentSpec, clocks: GpuClocks) -> tuple[float, float]:
    """Prefill's default clock and the clock its calibration was taken at (MHz;
    docs/clocks.md section 4). Where the catalog gives the unconstrained draw of a
    compute-bound pass (``compute_draw_ratio``), the default is the highest clock step at
    which that draw stays within the GPU's default power limit, and the calibration, a
    measurement at the default, was taken there. Otherwise the calibration is taken at the
    top clock, and the default is the highest step at which its draw stays within the
    limit."""
    cal = spec.calibration
    if clocks.compute_draw_ratio is not None:

        def unconstrained(f: float) -> float:
            w = compute_draw_w(clocks, cal.p_idle_w, f)
            assert w is not None
            return w

        f_def = default_clock(clocks, unconstrained)
        return f_def, f_def
    top = clocks.top_mhz
    f_def = default_clock(
        clocks, lambda f: scaled_power(cal.psat_prefill_w, cal.p_idle_w, _k(clocks, f, top))
    )
    return f_def, top


def _k(clocks: GpuClocks, f_mhz: float, anchor_mhz: float) -> float:
    """The dynamic factor at ``f_mhz`` relative to the one at ``anchor_mhz``."""
    return clocks.dynamic_factor(f_mhz) / clocks.dynamic_factor(anchor_mhz)


def prefill_clock_free_s_per_token(spec: DeploymentSpec) -> float:
    """The part of ``a_P`` (s per prompt token) not bound by the SM clock
    (docs/clocks.md section 2). With kernel tables: the kernels of a full prefill chunk
    that are not compute-bound at their shape (:func:`model.clocks.kernel_clock_bound`:
    collectives, memory-bound GEMMs) and the engine's overheads, per token, as
    :func:`model.performance.engine.prefill_curve` shares them out. Otherwise derived: the
    memory-bound kernels' bytes per token (:func:`model.clocks.
    prefill_memory_bytes_per_token`) at the calibration's bandwidth utilisation and the
    tensor-parallel all-reduces' bytes over the GPU's links (as decode's,
    :class:`DecodeTerms`). Never above ``a_P`` at the full clock."""
    m, hw, cal = spec.model, spec.gpu, spec.calibration
    sp, _ = spec.serving.shapes()
    if spec.performance == "kernels":
        with _kernel_lock:
            times = _times_of(_times_key(spec, sp))
        full = times.prefill_phase(PREFILL_CHUNK)
        peak = hw.peak_flops(m)
        free = sum(
            c.total_s
            for c in full.calls
            if not kernel_clock_bound(c.table, dict(c.shape), peak, hw.mem_bw_bytes_per_s)
        )
        o = times.overheads
        free += o.t_iter_s + o.t_layer_s * times.layers
        return free / PREFILL_CHUNK / sp.dp
    hidden = float(m.residual_width)
    moved = prefill_memory_bytes_per_token(
        hidden,
        float(m.n_heads * m.head_dim),
        float(m.n_kv_heads * m.head_dim),
        float(m.intermediate_size),
        sp.tp,
        m.layers,
    )
    memory_s = moved / (hw.mem_bw_bytes_per_s * cal.mbu) / sp.dp
    link_s = DecodeTerms.of(m, hw, sp.tp, 0.0, sp.dp, sp.ep).link_s
    return memory_s + link_s


def _apply_settings(
    spec: DeploymentSpec,
    a_p: float,
    b_p: float,
    alpha: float,
    g: float,
    ctx: float,
    batch_max: float,
) -> _Clocked | None:
    """The coefficients under the deployment's settings, or None at the default when no
    phase's full-clock draw exceeds the GPU's default power limit (then nothing is
    recomputed and every number stays as it is, bit for bit).

    A phase whose full-clock draw exceeds that limit runs, by default, at the highest
    clock step whose draw stays within it (:func:`model.clocks.default_clock`), as a
    locked clock there would. Prefill's clock-bound share of ``a_P`` and all of ``b_P``
    follow ``f_max / f``, the rest of ``a_P`` does not
    (:func:`prefill_clock_free_s_per_token`); decode adds
    :func:`model.clocks.decode_extra_g` to ``g`` (the weight GEMMs' compute outgrowing
    their weight read); each phase's ramp maps through ``P_static + (P - P_static)
    k(f)`` with ``P_static`` the GPUs' idle power and ``k`` of
    :func:`model.clocks.power_factor` (prefill's HBM share taken as 0, decode's from its
    bytes per second at ``B_max``)."""
    prefill, decode = spec.settings()
    clocks = spec.gpu_clocks()
    if clocks is None:
        return None
    cal = spec.calibration
    limit = clocks.power_limit_max_w
    if (
        prefill is None
        and decode is None
        and (clocks.compute_draw_ratio is not None or cal.psat_prefill_w <= limit)
        and cal.psat_decode_w <= limit
    ):
        return None  # the default, and no phase runs below the clock it was calibrated at
    m, hw = spec.model, spec.gpu
    sp, sd = spec.serving.shapes()
    gp, gd = sp.gpus, sd.gpus
    top = clocks.top_mhz
    static_p, static_d = cal.p_idle_w * gp, cal.p_idle_w * gd
    p_ramp = (cal.p0_prefill_w * gp, cal.gamma_prefill_w * gp, cal.psat_prefill_w * gp)
    d_ramp = (cal.p0_decode_w * gd, cal.gamma_decode_w * gd, cal.psat_decode_w * gd)

    # prefill: calibrated at f_cal (its default clock where the unconstrained draw of a
    # compute-bound pass is known, else the top clock)
    f_def_p, f_cal = default_prefill_clocks(spec, clocks)

    def prefill_draw(f: float) -> float:
        return scaled_power(p_ramp[2], static_p, _k(clocks, f, f_cal)) / gp

    f_p = _phase_clock(clocks, prefill, f_def_p, prefill_draw)
    k_p = _k(clocks, f_p, f_cal)
    prefill_clocked = f_p != f_cal  # a setting at or above the default, or a limit not binding

    # decode: calibrated at the top clock
    decode_work = math.isfinite(g) and batch_max > 0
    terms = DecodeTerms.of(m, hw, sd.tp, ctx if decode_work else 0.0, sd.dp, sd.ep)
    gemm = DecodeTerms.of(m, hw, sd.tp, 0.0, sd.dp, sd.ep)
    weight_s = terms.weight_read_s / cal.mbu
    weight_s += terms.expert_read_s / expert_mbu(cal, terms.fp4_experts)
    # the weight GEMMs' compute per request at the top clock; a calibration that charges
    # decode FLOPs already (mfu_decode > 0) scales that charge instead
    compute_s = gemm.flops_s / (cal.mfu_decode or cal.mfu)

    def extra_g(f: float) -> float:
        if not decode_work:
            return 0.0
        if cal.mfu_decode > 0:
            return compute_s * (top / f - 1.0)
        return decode_extra_g(f / top, weight_s, compute_s, batch_max)

    memory_share = 0.0
    t_full = math.nan
    if decode_work:
        t_full = alpha + g * batch_max
        moved = terms.weight_read_s + terms.expert_read_s + terms.kv_read_s * batch_max
        moved *= hw.mem_bw_bytes_per_s * gd / t_full  # bytes per second at B_max
        above = d_ramp[2] - static_d
        memory_share = hbm_power_w(moved) / above if above > 0 else 0.0

    def decode_factor(f: float) -> float:
        ratio = t_full / (t_full + extra_g(f) * batch_max) if decode_work else 1.0
        return power_factor(clocks, f, memory_share, ratio, top)

    def decode_draw(f: float) -> float:
        return scaled_power(d_ramp[2], static_d, decode_factor(f)) / gd

    f_d = _phase_clock(clocks, decode, default_clock(clocks, decode_draw), decode_draw)
    decode_clocked = f_d != top
    if not (prefill_clocked or decode_clocked):
        return None
    k_d = decode_factor(f_d)

    def ramp(
        p0: float, gamma: float, psat: float, k: float, static: float
    ) -> tuple[float, float, float]:
        q0 = scaled_power(p0, static, k)
        return q0, scaled_power(p0 + gamma, static, k) - q0, scaled_power(psat, static, k)

    pp = ramp(*p_ramp, k_p, static_p) if prefill_clocked else p_ramp
    dp = ramp(*d_ramp, k_d, static_d) if decode_clocked else d_ramp
    if prefill_clocked:
        share = 1.0 - min(prefill_clock_free_s_per_token(spec), a_p) / a_p if a_p > 0 else 1.0
        a_p = clocked_time(a_p, share, f_cal, f_p)
        b_p = clocked_time(b_p, 1.0, f_cal, f_p)
    return _Clocked(
        a_p=a_p,
        b_p=b_p,
        extra_g=extra_g(f_d) if decode_clocked else 0.0,
        powers={
            "p0_prefill_w": pp[0],
            "gamma_prefill_w": pp[1],
            "psat_prefill_w": pp[2],
            "p0_decode_w": dp[0],
            "gamma_decode_w": dp[1],
            "psat_decode_w": dp[2],
        },
        phases=PhaseClocks(f_p, f_d, pp[2] / gp, dp[2] / gd),
    )


@dataclass(frozen=True)
class KernelForms:
    """The capacity model's two forms through a deployment's composed kernel times
    (``performance: kernels``; :mod:`model.performance.engine`), where they were taken, and how far
    each strays from the composed times (``worst_deviation``, relative).

    ``decode``: ``t_D(B) = alpha + g B`` at the deployment's active context over batches
    1 to ``batch_max`` (the batch that fills the usable pool); ``decode_one_token``: the
    same line at a context of ``reference_context`` tokens (one, or the shortest context
    the tables measure, e.g. two for TensorRT-LLM's MLA module), whose ``g`` with
    ``decode``'s gives the part of ``g`` proportional to the context (``g_context = (g(ctx)
    - g(c0)) / (ctx - c0)``, at least 0); ``prefill``: ``t_P(l) = a_P l + b_P l^2`` over
    prompts up to ``longest_prompt_tokens``."""

    decode: LinearForm
    decode_one_token: LinearForm
    prefill: LinearForm
    context_tokens: float
    batch_max: float
    longest_prompt_tokens: float
    #: tables read from another framework's tables of the GPU (:class:`model.performance.kernels.
    #: KernelModel`), each said
    substitutions: tuple[str, ...] = ()
    reference_context: float = 1.0


#: KV-cache dtype names of the kernel tables, by bytes per element
_KV_DTYPES = {2.0: "bfloat16", 1.0: "fp8"}
#: composed kernel times (per model, GPU, tables, TP, overheads) and forms (per times,
#: context, batch range and longest prompt) kept per process
KERNEL_TIMES_CACHE_SIZE = 32
KERNEL_FORMS_CACHE_SIZE = 1024
_kernel_times: LRUCache[tuple[Any, ...], KernelTimes] = LRUCache(KERNEL_TIMES_CACHE_SIZE)
_kernel_forms: LRUCache[tuple[Any, ...], KernelForms] = LRUCache(KERNEL_FORMS_CACHE_SIZE)
_kernel_lock = threading.Lock()


def _times_key(spec: DeploymentSpec, shape: InstanceShape) -> tuple[Any, ...]:
    src, eng = spec.kernel_source, spec.engine
    assert src is not None and eng is not None  # DeploymentSpec checks it
    m = spec.model
    kv = _KV_DTYPES.get(m.kv_bytes_per_elem)
    if kv is None:
        raise InputError(
            "kv_bytes_per_elem",
            f"no kernel tables for a KV cache of {m.kv_bytes_per_elem:g} bytes per element "
            "(bf16: 2, fp8: 1)",
        )
    version = src.version(spec.gpu.name)
    draft = spec.serving.mtp_draft_tokens
    return (src.folder, src.framework, version, spec.gpu.name, m, shape, kv, eng.overheads,
            draft)  # fmt: skip


def _times_of(key: tuple[Any, ...]) -> KernelTimes:
    """The composed times of ``key`` (:func:`_times_key`), kept; the caller holds the lock."""
    hit = _kernel_times.get(key)
    if hit is not None:
        return hit
    folder, framework, version, gpu, model, shape, kv, overheads, draft = key
    source = KernelSource(folder, framework, ((gpu, version),))
    times = KernelTimes.of(
        source,
        model,
        gpu,
        shape.tp,
        shape.ep,
        overheads=overheads,
        kv_dtype=kv,
        attention_dp=shape.dp,
        draft_tokens=draft,
    )
    _kernel_times[key] = times  # the least recently used goes beyond the cache's size
    return times


def longest_prompt_tokens(w: Workload) -> float:
    """The longest prompt a workload's moments allow: every prompt when they are all of
    one length (``E[l_in^2] = E[l_in]^2``), else ``max(l_in + l_out) - 1``."""
    if w.e_in2 <= w.mean_in * w.mean_in * (1.0 + 1e-12):
        return w.mean_in
    return w.max_tokens - 1.0


def kernel_forms(spec: DeploymentSpec, ctx: float, batch_max: float) -> KernelForms:
    """A ``kernels`` deployment's :class:`KernelForms` at active context ``ctx`` (nan:
    no decode work, the line at one token) over batches 1 to ``batch_max``, built once
    per process for everything that determines them. A shape the tables do not measure
    is an :class:`InputError` naming ``workload``, with the table and the shape."""
    longest = longest_prompt_tokens(spec.workload)
    context = ctx if math.isfinite(ctx) else 1.0
    bmax = batch_max if math.isfinite(ctx) else 1.0
    sp, sd = spec.serving.shapes()
    prefill_key, decode_key = _times_key(spec, sp), _times_key(spec, sd)
    key = (*decode_key, sp, context, bmax, longest)
    with _kernel_lock:
        hit = _kernel_forms.get(key)
        if hit is not None:
            return hit
        times = _times_of(decode_key)
        prefill_times = times if sp == sd else _times_of(prefill_key)
        try:
            prefill = prefill_curve(prefill_times, longest)
        except OutsideTableError as e:
            raise InputError(
                "workload",
                f"its longest prompt ({longest:,.0f} tokens) is beyond the kernel tables: {e}",
            ) from e
        try:
            decode = decode_line(times, context, bmax)
            one, c0 = _reference_line(times, decode, context, bmax)
        except OutsideTableError as e:
            raise InputError(
                "workload",
                f"its decode at a context of {context:,.0f} tokens, batches 1 to "
                f"{max(1, math.floor(bmax))}, is beyond the kernel tables: {e}",
            ) from e
        subs = tuple(
            dict.fromkeys([*prefill_times.kernels.substitutions, *times.kernels.substitutions])
        )
        forms = KernelForms(decode, one, prefill, context, bmax, longest, subs, c0)
        _kernel_forms[key] = forms
        return forms


def _reference_line(
    times: KernelTimes, decode: LinearForm, context: float, bmax: float
) -> tuple[LinearForm, float]:
    """The decode line at a context of one token, or, where the tables start above it
    (TensorRT-LLM's MLA module measures contexts from two), at two; and that context."""
    for c0 in (1.0, 2.0):
        if context <= c0:
            return decode, context
        try:
            return decode_line(times, c0, bmax), c0
        except OutsideTableError:
            if c0 == 2.0:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def clear_kernel_cache() -> None:
    """Forget every composed kernel time and form (tests, benchmarks)."""
    with _kernel_lock:
        _kernel_times.clear()
        _kernel_forms.clear()


@dataclass(frozen=True)
class Coefficients:
    """Per-deployment scalars of SPEC 2.2-2.6, in SI units."""

    a_p_s_per_token: float  # a_P = 2N / (pi MFU)
    b_p_s_per_token2: float  # b_P = c_a L d / (pi MFU)
    t_prefill_mean_s: float  # E[t_P]
    t_prefill_scv: float  # c_s^2 = Var(t_P) / E[t_P]^2
    t_prefill_reserve_token_s: float  # E[t_P (l_in + R)]  (token-seconds)
    alpha_s: float  # decode time per iteration at B = 0
    g_s_per_request: float  # decode time per iteration per active request
    kv_bytes_per_token: float
    kv_pool_tokens: int  # C_tok
    kv_usable_tokens: float  # C_tok - U
    ctx_tokens: float  # residence-corrected active context (nan if no decode work)
    reserved_tokens: int  # R
    mean_in_tokens: float  # E[l_in]
    out_iterations: float  # E[l_out - 1]
    random_dispatch: bool
    # power ramps, per instance (tensor parallel already applied)
    p0_prefill_w: float
    gamma_prefill_w: float
    psat_prefill_w: float
    p0_decode_w: float
    gamma_decode_w: float
    psat_decode_w: float
    p_idle_w: float
    #: GPUs per prefill and per decode instance (their shapes' tp x dp)
    prefill_gpus: int
    decode_gpus: int
    variant: str = "paper"  # Coefficients.of sets the spec's variant
    # the part of g proportional to the request's context (KV read and attention
    # FLOPs), per token: g = g(0) + g_context * ctx (analytic latency, model/queueing/latency.py)
    g_context_s_per_token: float = 0.0
    # admission variant: uncommitted pool under FIFO admission (0 for paper)
    fragment_tokens: float = 0.0
    # squared coefficient of variation of l_out - 1 (admission variant: how far the
    # decode stage reorders requests; inf: completely, docs/admission.md section 3)
    out_scv: float = math.inf
    # admission variant, one prefill server per component (docs/admission.md, section 6):
    # E[(c + R)^2] of a decoding request over its iterations (c its active context) and
    # E[(l_in + R)^2] of a request at admission; nan without the workload's third moments
    decode_held_e2_tokens2: float = math.nan
    head_e2_tokens2: float = math.nan
    # performance "kernels": the forms a_P, b_P, alpha and g come from (None: SPEC's)
    forms: KernelForms | None = None
    # the settings' effect (None: the default full clock, docs/clocks.md)
    phase_clocks: PhaseClocks | None = None
    # the part of g_s_per_request the decode setting's clock adds, per request and
    # iteration (model.clocks.decode_extra_g, docs/clocks.md); 0 at the full clock
    clock_extra_g_s_per_request: float = 0.0
    # the engine's largest decode batch (serving.max_running_requests; inf: none)
    batch_limit: float = math.inf
    # the KV transfer from prefill to decode (docs/mixed-gpus.md, section 3): its time
    # per prompt token, t_X(l) = kv_transfer_s_per_token * l (0: not charged), and the
    # requests per second one GPU's link carries (inf: not charged)
    kv_transfer_s_per_token: float = 0.0
    kv_link_rps_per_gpu: float = math.inf

    def __post_init__(self) -> None:
        check_variant(self.variant)
        if self.variant == "paper" and self.fragment_tokens != 0.0:
            raise InputError("fragment_tokens", "the paper variant has no fragmentation")

    @property
    def kv_link_charged(self) -> bool:
        """Whether the KV transfer between the phases is charged (a link is given)."""
        return math.isfinite(self.kv_link_rps_per_gpu)

    def kv_link_rps(self, n_p: ArrayLike, n_d: ArrayLike) -> FloatArray:
        """The most requests per second the links carry from ``n_P`` prefill to ``n_D``
        decode instances: each request's KV leaves over the prefill GPUs' links and
        arrives over the decode GPUs' (inf when not charged)."""
        gpus = np.minimum(
            np.asarray(n_p, float) * self.prefill_gpus, np.asarray(n_d, float) * self.decode_gpus
        )
        return gpus * self.kv_link_rps_per_gpu

    @property
    def mu_prefill_rps(self) -> float:
        """One prefill instance's capacity ``mu_P = 1/E[t_P]`` (req/s), SPEC 2.2."""
        return 1.0 / self.t_prefill_mean_s

    @property
    def has_decode_work(self) -> bool:
        return self.out_iterations > 0.0

    @property
    def batch_max(self) -> float:
        """``B_max = (C_tok - U)/(ctx + R)``: the batch that fills the pool alone (the
        admission variant fills the packable pool, ``C_tok - U`` less fragmentation)."""
        if not self.has_decode_work:
            return 0.0
        return (self.kv_usable_tokens - self.fragment_tokens) / (
            self.ctx_tokens + self.reserved_tokens
        )

    def loop_terms(self) -> admission.LoopTerms:
        """The scalars of the admission variant's closed loop."""
        return admission.LoopTerms(
            out_iterations=self.out_iterations,
            alpha_s=self.alpha_s,
            g_s_per_request=self.g_s_per_request,
            ctx_tokens=self.ctx_tokens,
            reserved_tokens=self.reserved_tokens,
            mean_in_tokens=self.mean_in_tokens,
            prefill_reserve_token_s=self.t_prefill_reserve_token_s,
            t_prefill_mean_s=self.t_prefill_mean_s,
            t_prefill_scv=self.t_prefill_scv,
            usable_tokens=self.kv_usable_tokens,
            fragment_tokens=self.fragment_tokens,
            random_dispatch=self.random_dispatch,
            out_scv=self.out_scv,
            decode_held_e2_tokens2=self.decode_held_e2_tokens2,
            head_e2_tokens2=self.head_e2_tokens2,
        )

    @classmethod
    def of(cls, spec: DeploymentSpec) -> Coefficients:
        m, hw, cal, w, st = spec.model, spec.gpu, spec.calibration, spec.workload, spec.serving
        # the prefill phase's GPU and calibration (the decode phase's: hw, cal)
        hp, calp = spec.prefill_hw, spec.prefill_cal
        sp, sd = st.shapes()
        flops = hp.peak_flops(m) * sp.gpus * calp.mfu
        mem = hw.mem_bytes * sd.gpus
        iters = w.e_out_m1
        ctx = w.ctx_tokens if iters > 0 else math.nan
        kappa = kv_bytes_per_pool_token(m, ctx if iters > 0 else w.mean_in)

        if st.kv_pool_tokens is not None:
            pool = int(st.kv_pool_tokens)
        else:
            free = kv_memory_bytes(m, hw, sd.tp, st.mem_fraction, sd.dp)
            if free <= 0:
                raise DoesNotFitError(
                    "model",
                    f"{m.name} weights ({m.weight_bytes / 1e9:.1f} GB) do not fit in "
                    f"{st.mem_fraction:g} x {mem / 1e9:.1f} GB of {hw.name} x{sd.gpus}: KV "
                    f"pool would be {free / 1e9:.1f} GB; use more tensor parallelism or a "
                    "larger GPU",
                )
            # each token's KV is held once per attention group of the tp split whose
            # GPUs hold the same KV heads (docs/shapes.md)
            pool = math.floor(free / (kappa * kv_replicas(m, sd)))
        if pool <= 0:
            raise DoesNotFitError("model", f"KV pool of {m.name} on {hw.name} is empty")
        if sp != sd or spec.mixed:  # the prefill instance holds its weights and a request's KV
            held = kv_memory_bytes(m, hp, sp.tp, st.mem_fraction, sp.dp)
            need = kappa * kv_replicas(m, sp) * w.max_tokens
            if held < need:
                raise DoesNotFitError(
                    "prefill_shape" if sp != sd else "prefill_gpu",
                    f"{m.name} on {sp.text} of {hp.name}: {st.mem_fraction:g} x "
                    f"{hp.mem_bytes * sp.gpus / 1e9:.1f} GB leaves {held / 1e9:.1f} GB "
                    f"beside the weights, short of the {need / 1e9:.2f} GB of the longest "
                    "request's KV cache",
                )
        usable = pool * (1.0 - st.unused_fraction)
        longest = w.max_tokens + st.reserved_tokens
        if longest > usable:
            raise DoesNotFitError(
                "workload",
                f"the longest request needs {longest:,.0f} tokens (l_in + l_out + R) but "
                f"the usable KV pool of {m.name} on {hw.name} holds {usable:,.0f}",
            )

        e1, e2, e3, e4 = w.mean_in, w.e_in2, w.e_in3, w.e_in4
        r = float(st.reserved_tokens)
        variant = spec.variant  # checked by DeploymentSpec
        fragment = 0.0
        if variant == "admission" and iters > 0:
            fragment = admission.fragmentation_tokens(e1, e2, st.reserved_tokens, iters)
            if usable - fragment <= 0:
                raise DoesNotFitError(
                    "workload",
                    f"the KV pool of {m.name} on {hw.name} ({usable:,.0f} tokens) leaves "
                    f"nothing to pack once FIFO admission's fragmentation "
                    f"({fragment:,.0f} tokens) is set aside",
                )

        forms = None
        if spec.performance == "kernels":
            # B_max as Coefficients.batch_max gives it
            forms = kernel_forms(spec, ctx, (usable - fragment) / (ctx + r))
            a_p, b_p = forms.prefill.coefficients
            # a pass of a dp-way instance prefills one prompt per attention replica
            a_p, b_p = a_p / sp.dp, b_p / sp.dp
            alpha, g = forms.decode.coefficients
            g_one = forms.decode_one_token.coefficients[1]
            c0 = forms.reference_context
            g_context = max(g - g_one, 0.0) / (ctx - c0) if iters > 0 and ctx > c0 else 0.0
        else:
            a_p, b_p = prefill_coefficients(m, calp, flops, e1, e2)
            terms = DecodeTerms.of(m, hw, sd.tp, ctx if iters > 0 else 0.0, sd.dp, sd.ep)
            alpha, g = terms.alpha_g(cal)
            g_context = 0.0
            if iters > 0 and ctx > 0:
                bare = DecodeTerms.of(m, hw, sd.tp, 0.0, sd.dp, sd.ep)
                g_context = (g - bare.alpha_g(cal)[1]) / ctx
        if not iters > 0:
            g = math.nan
        clocked = _apply_settings(spec, a_p, b_p, alpha, g, ctx, (usable - fragment) / (ctx + r))
        gp, gd = sp.gpus, sd.gpus
        powers = {
            "p0_prefill_w": calp.p0_prefill_w * gp,
            "gamma_prefill_w": calp.gamma_prefill_w * gp,
            "psat_prefill_w": calp.psat_prefill_w * gp,
            "p0_decode_w": cal.p0_decode_w * gd,
            "gamma_decode_w": cal.gamma_decode_w * gd,
            "psat_decode_w": cal.psat_decode_w * gd,
        }
        if clocked is not None:
            a_p, b_p, powers = clocked.a_p, clocked.b_p, clocked.powers
            g = g + clocked.extra_g
        t_mean = a_p * e1 + b_p * e2
        t_sq = a_p * a_p * e2 + 2.0 * a_p * b_p * e3 + b_p * b_p * e4
        scv = max(t_sq - t_mean * t_mean, 0.0) / (t_mean * t_mean)
        reserve = a_p * e2 + b_p * e3 + st.reserved_tokens * t_mean
        transfer, link_rps = 0.0, math.inf
        if spec.kv_link is not None:  # docs/mixed-gpus.md, section 3
            bytes_per_token = kv_bytes_per_pool_token(m, e1)
            transfer = kv_transfer_s(bytes_per_token, sp.tp, spec.kv_link.bytes_per_s)
            link_rps = spec.kv_link.bytes_per_s / (bytes_per_token * e1)
            # the decode pool holds a request's input through its transfer as well
            reserve += transfer * (e2 + r * e1)
        return cls(
            a_p_s_per_token=a_p,
            b_p_s_per_token2=b_p,
            t_prefill_mean_s=t_mean,
            t_prefill_scv=scv,
            t_prefill_reserve_token_s=reserve,
            alpha_s=alpha,
            g_s_per_request=g,
            kv_bytes_per_token=kappa,
            kv_pool_tokens=pool,
            kv_usable_tokens=usable,
            ctx_tokens=ctx,
            reserved_tokens=st.reserved_tokens,
            mean_in_tokens=e1,
            out_iterations=iters,
            random_dispatch=st.dispatch == "random",
            **powers,
            p_idle_w=cal.p_idle_w,
            prefill_gpus=gp,
            decode_gpus=gd,
            variant=variant,
            fragment_tokens=fragment,
            out_scv=w.var_out / (iters * iters) if iters > 0 else math.inf,
            g_context_s_per_token=g_context,
            decode_held_e2_tokens2=(w.ctx_e2_tokens2 + (2.0 * ctx + r) * r)
            if iters > 0
            else math.nan,
            head_e2_tokens2=e2 + (2.0 * e1 + r) * r,
            forms=forms,
            phase_clocks=None if clocked is None else clocked.phases,
            clock_extra_g_s_per_request=0.0 if clocked is None else clocked.extra_g,
            batch_limit=math.inf
            if st.max_running_requests is None
            else float(st.max_running_requests),
            kv_transfer_s_per_token=transfer,
            kv_link_rps_per_gpu=link_rps,
        )

    # -- per-configuration functions of B (SPEC 2.3, 2.5); used by tests and brentq ----------

    def decode_rate_rps(self, batch: ArrayLike) -> FloatArray:
        """``lambda_D(B) = B / (E[l_out-1] (alpha + g B))`` (req/s per decode instance)."""
        b = np.asarray(batch, dtype=float)
        return b / (self.out_iterations * (self.alpha_s + self.g_s_per_request * b))

    def arrival_scv(self, n_p: ArrayLike) -> FloatArray:
        """``scv_arr``: 1/n_P for round-robin dispatch, 1 for random (SPEC 2.5)."""
        n = np.asarray(n_p, dtype=float)
        return np.ones_like(n) if self.random_dispatch else 1.0 / n

    def batch_rho(self, n_p: ArrayLike, n_d: ArrayLike) -> FloatArray:
        """``B_rho``, the batch at which prefill utilisation reaches 1 (inf if never)."""
        x = np.asarray(n_p, float) * self.mu_prefill_rps / np.asarray(n_d, float)
        den = 1.0 - x * self.out_iterations * self.g_s_per_request
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, x * self.out_iterations * self.alpha_s / den, np.inf)

    def memory_balance(self, batch: ArrayLike, n_p: ArrayLike, n_d: ArrayLike) -> FloatArray:
        """``f(B)`` of SPEC 2.5 in tokens (inf at or beyond ``B_rho``)."""
        b = np.asarray(batch, dtype=float)
        lam = self.decode_rate_rps(b)
        rho = lam * np.asarray(n_d, float) / (np.asarray(n_p, float) * self.mu_prefill_rps)
        kw = (self.arrival_scv(n_p) + self.t_prefill_scv) / 2.0 * self.t_prefill_mean_s
        with np.errstate(divide="ignore", invalid="ignore"):
            wait = np.where(rho < 1.0, rho / (1.0 - rho) * kw, np.inf)
            reservations = lam * (
                wait * (self.mean_in_tokens + self.reserved_tokens) + self.t_prefill_reserve_token_s
            )
        return b * (self.ctx_tokens + self.reserved_tokens) + reservations - self.kv_usable_tokens


def _cubic_coefficients(
    c: Coefficients, n_p: FloatArray, n_d: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Coefficients of ``h(B) = E(B) D(B) f(B)``, a cubic in ``B``.

    With ``E(B) = e1 (alpha + g B)`` (so ``lambda_D = B/E``), ``x = n_P mu_P / n_D`` and
    ``D(B) = x E(B) - B`` (so ``rho/(1-rho) = B/D``), the balance is
    ``f = m1 B + m0 + (B/E)(K B/D + T)`` with ``m1 = ctx + R``, ``m0 = -(C_tok - U)``,
    ``K = (scv_arr + c_s^2)/2 E[t_P] (E[l_in] + R)`` and ``T = E[t_P (l_in + R)]``.
    ``E`` and ``D`` are positive on ``(0, B_rho)``, so ``h`` and ``f`` share their sign
    there and ``h = (m1 B + m0) E D + K B^2 + T B D`` has the same single root.
    """
    it = c.out_iterations
    e0, ee = it * c.alpha_s, it * c.g_s_per_request
    x = n_p * (c.mu_prefill_rps / n_d)
    d0, d1 = x * e0, x * ee - 1.0
    m1, m0 = c.ctx_tokens + c.reserved_tokens, -c.kv_usable_tokens
    scv_arr = 1.0 if c.random_dispatch else 1.0 / n_p
    k = (scv_arr + c.t_prefill_scv) * (
        0.5 * c.t_prefill_mean_s * (c.mean_in_tokens + c.reserved_tokens)
    )
    t = c.t_prefill_reserve_token_s
    em0, em1, em2 = e0 * m0, e0 * m1 + ee * m0, ee * m1
    c0 = em0 * d0
    c1 = em1 * d0 + em0 * d1 + t * d0
    c2 = em2 * d0 + em1 * d1 + k + t * d1
    c3 = em2 * d1
    return c0, c1, c2, c3


def _start_batch(c: Coefficients, upper: FloatArray) -> FloatArray:
    """Start point: the root ``B0`` of the balance without prefill queueing (``W = 0``).

    Dropping the Kingman term leaves ``(m1 B + m0) E(B) + T B = 0``, a quadratic with
    one positive root, independent of the configuration
    (:func:`model.admission.no_wait_batch`, which the admission variant shares). Since
    the wait only adds reservations, ``B* <= B0``; the start is ``min(B0, upper)``.
    """
    b0 = admission.no_wait_batch(c.loop_terms())
    return np.minimum(b0, upper)


def solve_batch(
    c: Coefficients, n_p: ArrayLike, n_d: ArrayLike, rtol: float = ROOT_RTOL, max_iter: int = 100
) -> tuple[FloatArray, int]:
    """Operating batch ``B*``: the root of ``f`` in ``(0, min(B_max, B_rho))`` (SPEC 2.5).

    Vectorised, bracketed Halley iteration on the cubic ``h`` of
    :func:`_cubic_coefficients` (a polynomial: no pole, cheap exact derivatives). The
    bracket ``[lo, hi]`` starts at ``[0, min(B_max, B_rho)]``, where
    ``h(lo) < 0 < h(hi)``, and shrinks with the sign of ``h`` at every iterate; a step
    that leaves the bracket is replaced by bisection, so convergence is guaranteed.
    The start is :func:`_start_batch`. Halley's error after a step is of the order of
    the step cubed, so an element stops once its relative step is below
    ``rtol ** (2/3) / 10`` (about 1e-7 for ``rtol = 1e-9``): its error is then far
    below ``rtol``. Converged elements leave the working set, so late passes touch only
    the few slow ones. Returns ``(B*, passes)``.
    """
    n_p = np.asarray(n_p, dtype=float)
    n_d = np.asarray(n_d, dtype=float)
    c0, c1, c2, c3 = _cubic_coefficients(c, n_p, n_d)
    hi = np.minimum(c.batch_max, c.batch_rho(n_p, n_d))
    lo = np.zeros_like(hi)
    b = _start_batch(c, hi)
    out = b.copy()
    idx = np.arange(b.shape[0])
    step_tol = rtol ** (2.0 / 3.0) / 10.0
    passes = 0
    while idx.size and passes < max_iter:
        passes += 1
        h = ((c3 * b + c2) * b + c1) * b + c0
        dh = (3.0 * c3 * b + 2.0 * c2) * b + c1
        d2h = 6.0 * c3 * b + 2.0 * c2
        neg = h < 0.0
        lo = np.where(neg, b, lo)
        hi = np.where(neg, hi, b)
        with np.errstate(divide="ignore", invalid="ignore"):
            nb = b - (2.0 * h * dh) / (2.0 * dh * dh - h * d2h)
        nb = np.where((nb >= lo) & (nb <= hi), nb, 0.5 * (lo + hi))
        done = np.abs(nb - b) <= step_tol * nb
        out[idx] = nb
        if done.any():
            keep = ~done
            idx, b, lo, hi = idx[keep], nb[keep], lo[keep], hi[keep]
            c0, c1, c2, c3 = c0[keep], c1[keep], c2[keep], c3[keep]
        else:
            b = nb
    return out, passes


#: what may cap a configuration's decode batch below the memory balance's ``B*``
CAPPED_BY = ("max_running_requests", "tpot_p99")


@dataclass(frozen=True)
class Limits:
    """Why a configuration's capacity is below the one of the memory balance alone
    (docs/admission.md, section 8), per configuration: ``pool_batch``, the balance's
    ``B*``; ``capped_by``, what capped the decode batch (an entry of
    :data:`CAPPED_BY`, or None); ``prefill_limit_rps``, the rate up to which the
    prefill instances meet the TTFT target (inf without one); ``unmet``, why no rate
    meets the targets (None where one does)."""

    pool_batch: FloatArray
    capped_by: NDArray[np.object_]
    prefill_limit_rps: FloatArray
    unmet: NDArray[np.object_]

    def record(self, i: int, result: CapacityResult) -> dict[str, Any]:
        c = result.coefficients
        b = float(result.batch[i])
        iteration = c.alpha_s + c.g_s_per_request * b if c.has_decode_work and b > 0 else None
        prefill = float(result.n_p[i]) * float(result.mu_p_rps[i])
        limit = float(self.prefill_limit_rps[i])
        cap = float(result.capacity_rps[i])
        if self.unmet[i] is not None:
            by = None
        elif math.isfinite(limit) and cap >= limit * (1.0 - 1e-12):
            by = "ttft_p99"
        elif cap >= prefill * (1.0 - 1e-12):
            by = "prefill"
        else:
            by = "decode"
        return {
            "pool_batch": float(self.pool_batch[i]),
            "batch_capped_by": self.capped_by[i],
            "decode_iteration_s": iteration,
            "ttft_rho_limit": limit / prefill if math.isfinite(limit) and prefill > 0 else None,
            "limited_by": by,
            "unmet": self.unmet[i],
        }


def no_limits(n: int) -> Limits:
    """:class:`Limits` of ``n`` configurations that nothing capped (``pool_batch`` nan
    until set)."""
    return Limits(
        pool_batch=np.full(n, np.nan),
        capped_by=np.full(n, None, dtype=object),
        prefill_limit_rps=np.full(n, np.inf),
        unmet=np.full(n, None, dtype=object),
    )


@dataclass(frozen=True)
class CapacityResult:
    """Capacity and power of an array of configurations (SPEC 2.5, 2.6)."""

    n_p: IntArray
    n_d: IntArray
    gpus: IntArray
    capacity_rps: FloatArray  # mu
    mu_p_rps: FloatArray  # per prefill instance
    mu_d_rps: FloatArray  # per decode instance, with the coupling (inf if no decode work)
    mu_d_max_rps: FloatArray  # per decode instance, pool without reservations
    batch: FloatArray  # B*
    rho_star: FloatArray  # prefill utilisation at capacity
    prefill_bound: NDArray[np.bool_]  # uncoupled bottleneck is prefill
    power_w: FloatArray  # P(mu), or P at the given load
    power_idle_w: FloatArray  # P(0)
    power_sat_w: FloatArray  # every instance saturated
    load_rps: FloatArray  # load at which power_w is given
    coefficients: Coefficients
    root_passes: int
    #: set where an engine limit or a latency target capped a capacity (None: SPEC's
    #: capacity, nothing capped)
    limits: Limits | None = None

    def __len__(self) -> int:
        return int(self.n_p.shape[0])

    def rows(self, start: int, stop: int) -> CapacityResult:
        """Configurations ``start..stop-1`` alone (``root_passes`` stays the whole
        evaluation's: the most false-position passes any configuration needed)."""
        cut: dict[str, Any] = {
            f.name: getattr(self, f.name)[start:stop]
            for f in fields(self)
            if isinstance(getattr(self, f.name), np.ndarray)
        }
        if self.limits is not None:
            lim = self.limits
            cut["limits"] = Limits(
                **{f.name: getattr(lim, f.name)[start:stop] for f in fields(lim)}
            )
        return replace(self, **cut)

    def record(self, i: int) -> dict[str, Any]:
        """One configuration as the JSON record of SPEC 6.1."""
        c = self.coefficients

        def num(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        out = {
            "n_p": int(self.n_p[i]),
            "n_d": int(self.n_d[i]),
            "gpus": int(self.gpus[i]),
            "capacity_rps": float(self.capacity_rps[i]),
            "power_w": float(self.power_w[i]),
            "load_rps": float(self.load_rps[i]),
            "mu_p_rps": num(self.mu_p_rps[i]),
            "mu_d_rps": num(self.mu_d_rps[i]),
            "mu_d_max_rps": num(self.mu_d_max_rps[i]),
            "batch": num(self.batch[i]),
            "ctx_tokens": num(c.ctx_tokens),
            "kv_pool_tokens": int(c.kv_pool_tokens),
            "rho_star": num(self.rho_star[i]),
            "bottleneck": "prefill" if self.prefill_bound[i] else "decode",
            "power_idle_w": float(self.power_idle_w[i]),
            "power_saturated_w": float(self.power_sat_w[i]),
        }
        if self.limits is not None:
            out |= self.limits.record(i, self)
        if c.kv_link_charged:
            link = float(c.kv_link_rps(self.n_p[i], self.n_d[i]))
            out["kv_transfer_s"] = c.kv_transfer_s_per_token * c.mean_in_tokens
            out["kv_link_rps"] = link
            if self.capacity_rps[i] > 0 and self.capacity_rps[i] >= link * (1.0 - 1e-12):
                out["bottleneck"] = "kv_transfer"
                if out.get("limited_by") is not None:
                    out["limited_by"] = "kv_transfer"
        return out


def instance_power_w(p0_w: float, gamma_w: float, psat_w: float, x: ArrayLike) -> FloatArray:
    """Capped ramp ``p_s(x) = min(p0_s + gamma_s x, psat_s)`` (W), SPEC 2.6."""
    return np.minimum(p0_w + gamma_w * np.asarray(x, dtype=float), psat_w)


def phase_power_w(
    c: Coefficients,
    n_p: ArrayLike,
    n_d: ArrayLike,
    mu_p_total: ArrayLike,
    mu_d_max_total: ArrayLike,
    load_rps: ArrayLike,
) -> tuple[FloatArray, FloatArray]:
    """The prefill and decode instances' power at a served load: ``n_P p_P(lambda/(n_P
    mu_P))`` and ``n_D p_D(lambda/(n_D mu_D_max))`` (W), whose sum is SPEC 2.6's
    ``P(n_P, n_D, lambda)``.

    ``mu_p_total = n_P mu_P`` and ``mu_d_max_total = n_D mu_D_max`` (req/s); an absent
    phase (``n = 0``) contributes nothing; an infinite ``mu_D_max`` (no decode work)
    leaves decode instances at ``p0_D``. ``load_rps`` must already be capped at ``mu``.
    """
    npf = np.asarray(n_p, dtype=float)
    ndf = np.asarray(n_d, dtype=float)
    lam = np.asarray(load_rps, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        xp = np.where(npf > 0, lam / np.asarray(mu_p_total, float), 0.0)
        xd = np.where(ndf > 0, lam / np.asarray(mu_d_max_total, float), 0.0)
    pp = instance_power_w(c.p0_prefill_w, c.gamma_prefill_w, c.psat_prefill_w, xp)
    pd = instance_power_w(c.p0_decode_w, c.gamma_decode_w, c.psat_decode_w, xd)
    return npf * pp, ndf * pd


def evaluate(
    spec: DeploymentSpec | Coefficients,
    n_p: ArrayLike,
    n_d: ArrayLike,
    load_rps: ArrayLike | None = None,
    groups: ArrayLike | None = None,
) -> CapacityResult:
    """Capacity ``mu`` and power of every configuration ``(n_p[i], n_d[i])`` in one pass.

    ``load_rps`` (scalar or per configuration) gives power at that served load, capped at
    capacity (SPEC 2.6: an offered load above ``mu`` is served at ``mu``); by default
    power is at capacity. ``n_P = 0`` or ``n_D = 0`` gives capacity 0. ``groups`` (one
    label per configuration, optional): lists evaluated together, each given exactly
    what evaluating it alone gives (the admission variant's configurations of one
    component shape share their batch only within a group).
    """
    c = spec if isinstance(spec, Coefficients) else Coefficients.of(spec)
    npi = np.atleast_1d(np.asarray(n_p)).astype(np.int64)
    ndi = np.atleast_1d(np.asarray(n_d)).astype(np.int64)
    npi, ndi = np.broadcast_arrays(npi, ndi)
    if npi.size and (npi.min() < 0 or ndi.min() < 0):
        raise InputError("n_p" if npi.min() < 0 else "n_d", "instance counts must be >= 0")
    both = (npi > 0) & (ndi > 0)
    npf = npi.astype(float)
    ndf = ndi.astype(float)
    mu_p = np.full(npf.shape, c.mu_prefill_rps)
    passes = 0
    if c.has_decode_work:
        batch = np.zeros(npf.shape)
        if both.any():
            if c.variant == "admission":
                b, passes = admission.solve_batch(
                    c.loop_terms(),
                    npi[both],
                    ndi[both],
                    c.batch_max,
                    c.batch_rho(npf[both], ndf[both]),
                    rtol=ROOT_RTOL,
                    groups=None if groups is None else np.broadcast_to(groups, both.shape)[both],
                )
            else:
                b, passes = solve_batch(c, npf[both], ndf[both])
            batch[both] = b
        limits = None
        if math.isfinite(c.batch_limit):  # the engine's largest batch (admission.md, 8)
            limits = no_limits(batch.size)
            limits.pool_batch[:] = batch
            capped = batch > c.batch_limit
            limits.capped_by[capped] = "max_running_requests"
            batch = np.minimum(batch, c.batch_limit)
        mu_d = c.decode_rate_rps(batch)
        mu_d_max = np.full(npf.shape, float(c.decode_rate_rps(c.batch_max)))
    else:  # every request has l_out = 1: no decode work (SPEC 2.5 edge case)
        limits = None
        batch = np.zeros(npf.shape)
        mu_d = np.full(npf.shape, np.inf)
        mu_d_max = np.full(npf.shape, np.inf)
    prefill_total = npf * mu_p
    with np.errstate(invalid="ignore"):
        decode_total = np.where(ndf > 0, ndf * mu_d, 0.0)
        decode_max_total = np.where(ndf > 0, ndf * mu_d_max, 0.0)
    capacity = np.where(both, np.minimum(prefill_total, decode_total), 0.0)
    if c.kv_link_charged:  # the links between the phases (docs/mixed-gpus.md, section 3)
        capacity = np.minimum(capacity, c.kv_link_rps(npf, ndf))
    with np.errstate(divide="ignore", invalid="ignore"):
        rho_star = np.where(both, capacity / prefill_total, 0.0)
    prefill_bound = prefill_total < decode_max_total
    load = capacity if load_rps is None else np.minimum(np.asarray(load_rps, float), capacity)
    load = np.broadcast_to(load, capacity.shape).astype(float)
    if np.any(load < 0) or not np.all(np.isfinite(load)):
        raise InputError("load_rps", "served load must be finite and >= 0")
    prefill_w, decode_w = phase_power_w(c, npf, ndf, prefill_total, decode_max_total, load)
    power = prefill_w + decode_w
    power_idle = npf * c.p0_prefill_w + ndf * c.p0_decode_w
    power_sat = npf * c.psat_prefill_w + ndf * c.psat_decode_w
    return CapacityResult(
        n_p=npi,
        n_d=ndi,
        gpus=npi * c.prefill_gpus + ndi * c.decode_gpus,
        capacity_rps=capacity,
        mu_p_rps=mu_p,
        mu_d_rps=mu_d,
        mu_d_max_rps=mu_d_max,
        batch=batch,
        rho_star=rho_star,
        prefill_bound=prefill_bound,
        power_w=power,
        power_idle_w=power_idle,
        power_sat_w=power_sat,
        load_rps=load,
        coefficients=c,
        root_passes=passes,
        limits=limits,
    )


def candidate_configs(
    max_gpus: int, prefill_gpus: int = 1, decode_gpus: int | None = None
) -> tuple[IntArray, IntArray]:
    """Every ``(n_P, n_D)`` with ``n_P, n_D >= 1`` and ``n_P G_P + n_D G_D <= max_gpus``
    (``G_P``, ``G_D``: GPUs per prefill and per decode instance; ``G_D`` defaults to
    ``G_P``), in the order of ``n_P``, then ``n_D``."""
    gp = prefill_gpus
    gd = prefill_gpus if decode_gpus is None else decode_gpus
    if max_gpus < gp + gd:
        raise InputError(
            "max_gpus", f"must be at least {gp + gd} (one prefill and one decode instance)"
        )
    if gp == gd:  # as before shapes: n_P + n_D <= floor(max_gpus / G)
        total = max_gpus // gp
        n_p, n_d = np.meshgrid(np.arange(1, total), np.arange(1, total), indexing="ij")
        keep = (n_p + n_d) <= total
    else:
        n_p, n_d = np.meshgrid(
            np.arange(1, (max_gpus - gd) // gp + 1),
            np.arange(1, (max_gpus - gp) // gd + 1),
            indexing="ij",
        )
        keep = n_p * gp + n_d * gd <= max_gpus
    return n_p[keep].astype(np.int64), n_d[keep].astype(np.int64)


def settings_record(spec: DeploymentSpec) -> dict[str, Any]:
    """The fields an output adds for the deployment's settings: none at the default
    when its numbers are the calibration's (the document is as before); else
    ``prefill_setting`` and ``decode_setting`` (the full clock for a phase left at its
    default at the GPU's top clock, or ``default (power-limited at 1,620 MHz)`` for one
    held below it by the GPU's default power limit, docs/clocks.md section 4), each
    phase's effective SM clock (a power limit resolved to its clock) and its draw per
    GPU at capacity."""
    out: dict[str, Any] = spec.setting_texts()
    clocks = spec.gpu_clocks()
    if clocks is None:
        return out
    phases = Coefficients.of(spec).phase_clocks if out or _power_limited(spec, clocks) else None
    if not out and phases is None:
        return out
    if phases is None:  # the settings change nothing: each phase at its calibrated clock
        cal = spec.calibration
        f_cal = default_prefill_clocks(spec, clocks)[1]
        phases = PhaseClocks(f_cal, clocks.top_mhz, cal.psat_prefill_w, cal.psat_decode_w)
    prefill, decode = spec.settings()
    for name, setting, f in (
        ("prefill_setting", prefill, phases.prefill_clock_mhz),
        ("decode_setting", decode, phases.decode_clock_mhz),
    ):
        if setting is None:
            out[name] = default_setting_text(clocks, f)
    return out | asdict(phases)


def default_setting_text(clocks: GpuClocks, f_mhz: float) -> str:
    """How outputs name a phase's default setting: the full clock (``1980MHz``; the GPU
    then runs at its top clock, :attr:`model.clocks.GpuClocks.top_mhz`), or ``default
    (power-limited at 1,620 MHz)`` where its draw holds it below that."""
    if f_mhz >= clocks.top_mhz:
        return clocks.full_clock
    return f"default (power-limited at {f_mhz:,.0f} MHz)"


def _power_limited(spec: DeploymentSpec, clocks: GpuClocks) -> bool:
    """Whether the default's numbers differ from the calibration's: a phase calibrated
    at the top clock whose draw there exceeds the default power limit."""
    cal, limit = spec.calibration, clocks.power_limit_max_w
    prefill = clocks.compute_draw_ratio is None and cal.psat_prefill_w > limit
    return prefill or cal.psat_decode_w > limit
