"""SPEC 2.2-2.3's rooflines: a prefill's time per prompt token from its FLOPs at the
calibration's MFU (:func:`prefill_coefficients`), and a decode iteration's time from the
bytes it reads at the calibration's MBU, its FLOPs and its collectives
(:class:`DecodeTerms`; ``docs/calibration.md``). The ``spec`` performance source of
:mod:`model.capacity`.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.catalog import Calibration, GpuSpec, ModelArch
from model.errors import InputError
from model.performance.kernels import busiest_rank_experts

#: bytes per activation element that a tensor-parallel all-reduce carries (bf16)
ACTIVATION_BYTES = 2.0


def prefill_coefficients(
    model: ModelArch, cal: Calibration, flops: float, mean_in: float, e_in2: float
) -> tuple[float, float]:
    """``(a_P, b_P)`` of SPEC 2.2 (``t_P(l) = a_P l + b_P l^2``). With sliding-window
    layers a prompt of ``l`` tokens costs those layers ``c_a d g(l)``, ``g(l) = l^2``
    up to the window ``W`` and ``2 l W - W^2`` beyond it; both ``l^2`` and ``2 W l``
    bound ``g`` from above at every ``l``, and the one with the smaller mean over the
    workload's prompts is taken (``docs/sliding_window.md``), so that ``t_P`` stays a
    quadratic in ``l`` and SPEC's prefill moments hold."""
    a_p = 2.0 * model.active_params / flops
    full = model.layers - model.sliding_layers
    b_p = cal.c_attn * full * model.attn_width / flops
    if model.sliding_layers:
        per_token2 = cal.c_attn * model.sliding_layers * model.attn_width / flops
        window = float(model.sliding_window)
        if e_in2 <= 2.0 * window * mean_in:
            b_p += per_token2
        else:
            a_p += per_token2 * 2.0 * window
    return a_p, b_p


def expert_mbu(cal: Calibration, fp4: bool = False) -> float:
    """Bandwidth fraction of the routed experts' reads: ``mbu_expert_fp4`` for 4-bit
    experts, else ``mbu_expert``, else ``mbu``."""
    return (cal.mbu_expert_fp4 if fp4 else 0.0) or cal.mbu_expert or cal.mbu


@dataclass(frozen=True)
class DecodeTerms:
    """The parts of one decode iteration's time on one GPU of an instance, each at
    full efficiency (``docs/calibration.md``); with a calibration they give the
    iteration time :meth:`time_s` and its linear form ``t(B) = alpha + g B``
    (:meth:`alpha_g`, what the capacity model uses).

    An instance is ``tp x dp`` GPUs: attention and the dense weights are split ``tp``
    ways and replicated ``dp`` times (each replica serving ``1/dp`` of the batch); the
    routed experts of a mixture of experts are spread over all ``tp x dp`` GPUs."""

    weight_read_s: float  # dense weight bytes per GPU / HBM bandwidth
    expert_read_s: float  # every routed expert's bytes per GPU / HBM bandwidth (0: dense)
    experts: int  # routed experts per MoE layer (0: dense)
    experts_per_token: int
    moe_layers: int
    kv_read_s: float  # per request: KV bytes of its context per GPU / HBM bandwidth
    flops_s: float  # per request: (2 N_active + 4 L d ctx) per GPU / peak FLOP/s
    collectives: int  # per iteration: 2 all-reduces per layer (TP > 1), 2 all-to-alls
    # per MoE layer (experts over several GPUs)
    link_s: float  # per request: collective bytes per GPU / link bandwidth
    # GPUs (or groups of GPUs) that each hold whole experts, E/ep of them (expert
    # parallelism); 1: every GPU holds a slice of every expert
    expert_groups: int = 1
    fp8_layers: int = 0  # layers whose linear weights are FP8 (ModelArch.fp8_layers)
    fp4_experts: bool = False  # experts in a 4-bit block format (ModelArch.fp4_experts)

    @classmethod
    def of(
        cls,
        model: ModelArch,
        gpu: GpuSpec,
        tp: int,
        ctx_tokens: float,
        dp: int = 1,
        ep: int = 1,
    ) -> DecodeTerms:
        gpus = tp * dp
        if ep < 1 or gpus % ep:
            raise InputError("ep", f"must be >= 1 and divide the instance's {gpus} GPUs")
        kv_split = min(tp, model.n_kv_heads)  # KV heads are split, never below one per GPU
        attended = model.attended_layers(ctx_tokens)
        flops = 2.0 * model.active_params + 4.0 * attended * model.attn_width * ctx_tokens
        all_reduces = 2 * model.layers if tp > 1 else 0
        # experts spread over several GPUs: each MoE layer sends its tokens to their
        # experts and back (two all-to-all exchanges)
        all_to_alls = 2 * model.moe_layers if gpus > 1 else 0
        link = 0.0
        if gpu.link_bw_bytes_per_s > 0:
            size = model.residual_width * ACTIVATION_BYTES
            if all_reduces:
                ring = 2.0 * (tp - 1) / tp  # ring all-reduce: bytes each GPU sends per byte
                link += all_reduces * ring * size / dp
            if all_to_alls:  # k copies of each token, (G-1)/G of them to other GPUs
                away = (gpus - 1) / gpus
                link += all_to_alls * model.experts_per_token * away * size / dp
            link /= gpu.link_bw_bytes_per_s
        bw = gpu.mem_bw_bytes_per_s
        return cls(
            weight_read_s=model.dense_weight_bytes / tp / bw,
            expert_read_s=model.expert_weight_bytes / gpus / bw,
            experts=model.experts,
            experts_per_token=model.experts_per_token,
            moe_layers=model.moe_layers,
            kv_read_s=model.kv_bytes_at(ctx_tokens) / kv_split / dp / bw,
            flops_s=flops / gpus / gpu.peak_flops(model),
            collectives=all_reduces + all_to_alls,
            link_s=link,
            expert_groups=ep if model.experts else 1,
            fp8_layers=model.fp8_layers,
            fp4_experts=model.fp4_experts,
        )

    def touched(self, batch: float) -> float:
        """Expected share of a MoE layer's experts that ``batch`` tokens use, each
        routed to ``k`` of ``E`` experts: ``1 - (1 - k/E)^B`` (1 for a dense model)."""
        if not self.experts:
            return 1.0
        return 1.0 - (1.0 - self.experts_per_token / self.experts) ** batch

    def slowest_share(self, batch: float) -> float:
        """Share of its experts that the busiest GPU reads at ``batch``.

        With the experts sliced over every GPU (``expert_groups`` 1) each GPU reads its
        slice of the touched ones: :meth:`touched`. With expert parallelism, group
        ``g`` holds ``n = E / ep`` whole experts and reads the ``X_g`` of them the batch
        touched; the layer ends when the busiest group does, so the iteration reads
        ``E[max_g X_g] / n`` of a group's experts. Each ``X_g`` is binomial
        ``(n, p)`` with ``p`` = :meth:`touched` (the experts taken as independent, which
        the routing of ``k`` distinct experts per token makes slightly pessimistic), so
        ``E[max] = sum_{j=1..n} (1 - F(j - 1)^ep)`` with ``F`` their distribution
        function (:func:`model.performance.kernels.busiest_rank_experts`, which the kernel
        composition reads the fused-MoE tables with; ``docs/calibration.md``, section 7)."""
        p = self.touched(batch)
        ep = self.expert_groups
        if ep <= 1 or p >= 1.0:
            return p
        read = busiest_rank_experts(batch, self.experts, self.experts_per_token, ep)
        return read / (self.experts / ep)

    def alpha_g(self, cal: Calibration) -> tuple[float, float]:
        """``(alpha, g)`` of ``t(B) = alpha + g B`` (s, s per request), every expert
        read (the batch touches nearly all once ``B`` exceeds a few ``E/k``). With TP 1,
        a dense model and ``mfu_decode`` 0 this is SPEC 2.3 exactly."""
        alpha = self.weight_read_s / cal.mbu
        alpha += self.expert_read_s / expert_mbu(cal, self.fp4_experts)
        alpha += cal.t_iter_s + self.collectives * cal.t_coll_s
        alpha += self.moe_layers * cal.t_moe_layer_s + self.fp8_layers * cal.t_fp8_layer_s
        g = self.kv_read_s / cal.mbu + cal.t_req_s + self.link_s
        if cal.mfu_decode > 0:
            g += self.flops_s / cal.mfu_decode
        return alpha, g

    def time_s(self, cal: Calibration, batch: float) -> float:
        """The iteration time at ``batch``, with the experts the batch touches on the
        busiest GPU (:meth:`slowest_share`)."""
        alpha, g = self.alpha_g(cal)
        unread = (1.0 - self.slowest_share(batch)) * self.expert_read_s
        unread /= expert_mbu(cal, self.fp4_experts)
        return alpha - unread + g * batch
