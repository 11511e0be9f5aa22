"""Built-in catalog of models, GPUs and calibrations, and the user overrides on top.

The catalog is three data files shipped with the package (``model/data/*.json``):

* ``models.json``: architecture of each model (SPEC 2.1), from its public
  Hugging Face ``config.json``;
* ``gpus.json``: per-GPU peak dense BF16 compute, HBM bandwidth, memory and TDP,
  in vendor units (TFLOP/s, TB/s, decimal GB, W), converted to SI once at load;
* ``calibrations.json``: measured calibration sets (SPEC 2.1, paper Tab. 3) per
  (model, GPU) pair, with times in milliseconds, converted to seconds at load.

A (model, GPU) pair without an explicit calibration gets an ESTIMATED one
(``measured=False``) from the rule in :func:`load_calibration`.

Users adjust any input with overrides: a JSON or TOML file with the sections
``model``, ``gpu``, ``calibration`` and ``serving`` (:func:`load_override_file`),
or ``SECTION.FIELD=VALUE`` flags (:func:`parse_set_flags`), applied with
:func:`apply_overrides`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from model import jsondoc
from model.clocks import GpuClocks
from model.errors import InputError, NotFoundError
from model.shapes import InstanceShape, parse_shape

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

DISPATCH_MODES = ("round_robin", "random")
#: bytes per weight of each storage format: bf16 and fp8 one value each; MXFP4 (OCP
#: Microscaling spec v1.0) 4-bit E2M1 values with one 8-bit E8M0 scale per block of 32
#: (4.25 bits); NVFP4 4-bit E2M1 values with one FP8 E4M3 scale per block of 16 (4.5 bits)
PRECISION_BYTES = {"bf16": 2.0, "fp8": 1.0, "mxfp4": 4.25 / 8, "nvfp4": 4.5 / 8}
FP8_BYTES = PRECISION_BYTES["fp8"]
OVERRIDE_SECTIONS = ("model", "gpu", "calibration", "serving")
#: which weights a model's FP8 release stores in FP8 (:attr:`ModelArch.fp8_scope`)
FP8_SCOPES = ("linear", "mlp", "experts")
#: the weights a 4-bit release may store in its 4-bit format (:attr:`ModelArch.fp4_weights`):
#: the routed experts, the shared experts, the dense layers' MLPs and the attention's
#: output projection
FP4_WEIGHTS = ("experts", "shared", "mlp", "attention_out")
#: a linear-attention layer's shapes (:attr:`ModelArch.linear_layers`)
LINEAR_SHAPES = ("linear_layers", "linear_key_heads", "linear_value_heads",
                 "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel")  # fmt: skip
#: bytes per element of a linear-attention layer's convolution window, which the engines
#: keep in the activations' dtype (bf16)
CONV_STATE_BYTES = 2.0
#: routed experts' storage formats that their bytes per weight do not tell apart
#: (:attr:`ModelArch.expert_format`): INT4, 4-bit integers with one bf16 scale per group
#: of 32 weights (compressed-tensors ``pack-quantized``, group_size 32): 4.5 bits, the
#: size of NVFP4's
EXPERT_FORMATS = {"int4": 4.0 / 8 + 2.0 / 32}


# --------------------------------------------------------------------------
# Validation helpers


def _finite(field: str, value: object) -> float:
    """Return `value` as a float; InputError naming `field` unless a finite real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(field, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InputError(field, f"must be a finite number, got {value!r}")
    return float(value)


def _integer(field: str, value: object) -> int:
    """Return `value` if it is an int (not a bool); InputError naming `field` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"must be an integer, got {value!r}")
    return value


def _positive(field: str, value: float) -> None:
    if not value > 0:
        raise InputError(field, f"must be > 0, got {value!r}")


def _non_negative(field: str, value: float) -> None:
    if not value >= 0:
        raise InputError(field, f"must be >= 0, got {value!r}")


def _fraction(field: str, value: float) -> None:
    """0 < value <= 1."""
    if not 0 < value <= 1:
        raise InputError(field, f"must be in (0, 1], got {value!r}")


def _set_floats(obj: object, names: tuple[str, ...]) -> None:
    """Check that each named field of a frozen dataclass is finite and store it as float."""
    for name in names:
        object.__setattr__(obj, name, _finite(name, getattr(obj, name)))


def _check_str(field: str, value: object) -> None:
    if not isinstance(value, str):
        raise InputError(field, f"must be a string, got {value!r}")


# --------------------------------------------------------------------------
# Input dataclasses


@dataclass(frozen=True)
class ModelArch:
    """Model architecture (SPEC 2.1).

    `params` is the parameter count N; `layers` L; `n_heads`, `n_kv_heads` and
    `head_dim` the query heads, KV heads (h_kv) and head dimension (d_head);
    `bytes_per_param` the weight dtype size (2 for bf16) and `kv_bytes_per_elem`
    the KV-cache dtype size (2 for bf16). `hidden_size` is the residual stream's
    width (what a tensor-parallel all-reduce carries per token; 0: unknown, taken as
    the attention width); `aliases` are other names of the model (its Hugging Face
    id), by which measurement files name it.

    Mixture of experts (all 0 for a dense model): `moe_layers` layers each hold
    `experts` routed experts of `expert_params` parameters (counted in `params`), of
    which each token uses `experts_per_token`; shared experts and every other weight
    are dense. `expert_bytes_per_param` is the experts' weight dtype size when it
    differs (0: `bytes_per_param`). `kv_latent` (MLA, DeepSeek): elements a token
    keeps per layer in the KV cache instead of ``2 h_kv d_head`` (0: GQA).
    ``docs/calibration.md`` derives the decode time of such models.

    Sliding-window attention (Gemma 3, gpt-oss): `sliding_layers` of the layers attend
    to the last `sliding_window` tokens only and keep only those in the KV cache (0:
    every layer attends to the whole context). ``docs/sliding_window.md`` derives how
    the KV pool, the decode reads and the attention FLOPs follow.

    Shapes that only a kernel-level composition (``model/performance/kernels.py``) needs, from the
    same ``config.json`` (0: unknown, and that composition refuses the model):
    `intermediate_size`, the dense MLP's intermediate width (Llama 4:
    ``intermediate_size_mlp``; in a model without dense layers, the config's value as
    published, which no composition reads), and `vocab_size`, the embedding's and LM
    head's rows; `moe_intermediate_size`, one routed expert's intermediate width (0:
    ``expert_params / (3 hidden)``, which gpt-oss's expert biases do not allow), and
    `shared_intermediate_size`, the summed width of each MoE layer's shared experts (0:
    none; they are counted among the dense parameters). `chunked_layers` of the layers
    attend within consecutive chunks of `attention_chunk` tokens only (Llama 4's
    chunked local attention; 0: none).

    Multi-head latent attention's projections (DeepSeek V2/V3/R1, from the same
    ``config.json``; 0: unknown, and the kernel composition refuses the model):
    `q_lora_rank`, the width of the queries' low-rank compression; `kv_lora_rank`, the
    latent's (``kv_latent = kv_lora_rank + qk_rope_head_dim``); `qk_rope_head_dim`, the
    rotary part of each query/key head (`head_dim` is the rest, ``qk_nope_head_dim``,
    plus it); `v_head_dim`, each head's value width.

    How the model's FP8 release stores its weights (the catalog entry may describe its
    bf16 release; ``model/performance/kernels.py`` reads these when composing FP8 weights):
    `fp8_block`, the side of the square weight blocks sharing one scale (128 for
    Qwen3's and DeepSeek's FP8 releases; 0: one scale per tensor or per output
    channel), `fp8_scope`, which weights are FP8 (``linear``: every linear layer but
    the router and the LM head; ``mlp``: the dense MLPs only; ``experts``: the routed
    experts only) and `fp8_bf16_layers`, layers whose weights in that scope stay bf16
    (Meta's releases keep the first and the last layer in bf16).

    A quantised release of a model that has its own entry (NVIDIA's NVFP4 releases):
    `base_model`, the entry of the model it quantises (the same shapes; empty: none),
    by which a measurement of that model in the release's precision finds it
    (:func:`find_release`). Its 4-bit format: the routed experts' bytes per weight name
    it (4.25 bits MXFP4, 4.5 bits NVFP4) unless `expert_format` does (``int4``: INT4
    with a bf16 scale per 32 weights, also 4.5 bits; empty: from the bytes);
    `fp4_weights`, the weights stored in that format (of :data:`FP4_WEIGHTS`; the
    routed experts always, and in NVIDIA's NVFP4 releases the shared experts, the dense
    layers' MLPs and, in some, the attention output projection); every other weight
    (the rest of the attention, the router, the embedding and the LM head) is in
    `bytes_per_param`.

    Hybrid linear attention (Qwen3.5's Gated DeltaNet): `linear_layers` of the layers
    replace attention by a gated delta rule over `linear_key_heads` key heads of
    `linear_key_head_dim` and `linear_value_heads` value heads of
    `linear_value_head_dim`, after a causal convolution of `linear_conv_kernel` taps
    (0: none; every other layer is full attention). Such a layer keeps no KV cache but
    a fixed recurrent state per request: one ``key dim x value dim`` matrix per value
    head in `linear_state_bytes_per_elem` bytes (the config's ``mamba_ssm_dtype``) and
    the last ``kernel - 1`` inputs of its convolution (:attr:`linear_state_bytes`).
    `attention_output_gate`: the full-attention layers' query projection also yields a
    sigmoid gate per head and element of the attention's output (twice the query
    width).

    Speculative decoding with the model's own next-token-prediction modules (MTP,
    :mod:`model.performance.speculative`): `mtp_modules` the modules the checkpoint ships (its
    ``num_nextn_predict_layers``), `mtp_accept_first` the published chance that the
    first drafted token is accepted and `mtp_accept_next` that of each later one given
    the earlier were (0: none published; a deployment may then not draft).
    """

    name: str
    params: float
    layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    bytes_per_param: float = 2.0
    kv_bytes_per_elem: float = 2.0
    source: str = ""
    hidden_size: int = 0
    aliases: tuple[str, ...] = ()
    experts: int = 0
    experts_per_token: int = 0
    moe_layers: int = 0
    expert_params: float = 0.0
    expert_bytes_per_param: float = 0.0
    kv_latent: int = 0
    sliding_window: int = 0
    sliding_layers: int = 0
    intermediate_size: int = 0
    vocab_size: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    attention_chunk: int = 0
    chunked_layers: int = 0
    fp8_block: int = 0
    fp8_scope: str = "linear"
    fp8_bf16_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    base_model: str = ""
    expert_format: str = ""
    fp4_weights: tuple[str, ...] = ("experts",)
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    linear_state_bytes_per_elem: float = 0.0
    attention_output_gate: bool = False
    mtp_modules: int = 0
    mtp_accept_first: float = 0.0
    mtp_accept_next: float = 0.0

    def __post_init__(self) -> None:
        _check_str("name", self.name)
        _check_str("source", self.source)
        _set_floats(self, ("params", "bytes_per_param", "kv_bytes_per_elem"))
        _positive("params", self.params)
        _positive("bytes_per_param", self.bytes_per_param)
        _positive("kv_bytes_per_elem", self.kv_bytes_per_elem)
        for name in ("layers", "n_heads", "n_kv_heads", "head_dim"):
            _positive(name, _integer(name, getattr(self, name)))
        _non_negative("hidden_size", _integer("hidden_size", self.hidden_size))
        for name in (
            "experts",
            "experts_per_token",
            "moe_layers",
            "kv_latent",
            "sliding_window",
            "sliding_layers",
            "intermediate_size",
            "vocab_size",
            "moe_intermediate_size",
            "shared_intermediate_size",
            "attention_chunk",
            "chunked_layers",
            "fp8_block",
            "fp8_bf16_layers",
            "q_lora_rank",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "v_head_dim",
            *LINEAR_SHAPES,
        ):
            _non_negative(name, _integer(name, getattr(self, name)))
        self._check_linear()
        if self.kv_lora_rank and self.kv_latent != self.kv_lora_rank + self.qk_rope_head_dim:
            raise InputError(
                "kv_latent",
                f"must be kv_lora_rank + qk_rope_head_dim "
                f"({self.kv_lora_rank} + {self.qk_rope_head_dim}), got {self.kv_latent}",
            )
        if self.qk_rope_head_dim >= self.head_dim and self.qk_rope_head_dim:
            raise InputError("qk_rope_head_dim", f"must be below head_dim ({self.head_dim})")
        if bool(self.sliding_window) != bool(self.sliding_layers):
            raise InputError(
                "sliding_window", "sliding_window and sliding_layers must be set together"
            )
        if self.sliding_layers > self.layers:
            raise InputError("sliding_layers", f"must be <= layers ({self.layers})")
        if bool(self.attention_chunk) != bool(self.chunked_layers):
            raise InputError(
                "attention_chunk", "attention_chunk and chunked_layers must be set together"
            )
        if self.sliding_layers + self.chunked_layers > self.layers:
            raise InputError(
                "chunked_layers", f"sliding and chunked layers must be <= layers ({self.layers})"
            )
        if self.fp8_scope not in FP8_SCOPES:
            raise InputError(
                "fp8_scope", f"must be one of {', '.join(FP8_SCOPES)}, got {self.fp8_scope!r}"
            )
        if self.fp8_bf16_layers > self.layers:
            raise InputError("fp8_bf16_layers", f"must be <= layers ({self.layers})")
        _check_str("base_model", self.base_model)
        if self.base_model == self.name:
            raise InputError("base_model", "must name another entry, not the model itself")
        _set_floats(self, ("expert_params", "expert_bytes_per_param"))
        _non_negative("expert_params", self.expert_params)
        _non_negative("expert_bytes_per_param", self.expert_bytes_per_param)
        moe = (self.experts, self.experts_per_token, self.moe_layers, self.expert_params)
        if any(moe) and not all(moe):
            raise InputError(
                "experts",
                "experts, experts_per_token, moe_layers and "
                "expert_params must all be set for a mixture of experts",
            )
        if self.experts_per_token > self.experts:
            raise InputError("experts_per_token", f"must be <= experts ({self.experts})")
        if self.moe_layers > self.layers:
            raise InputError("moe_layers", f"must be <= layers ({self.layers})")
        if self.expert_total_params >= self.params:
            raise InputError("expert_params", "the experts must leave some dense parameters")
        if not isinstance(self.aliases, tuple) or not all(isinstance(a, str) for a in self.aliases):
            raise InputError("aliases", f"must be a list of names, got {self.aliases!r}")
        if self.n_heads % self.n_kv_heads != 0:
            raise InputError(
                "n_kv_heads", f"must divide n_heads ({self.n_heads}), got {self.n_kv_heads}"
            )
        self._check_four_bit()
        self._check_mtp()

    def _check_mtp(self) -> None:
        """Next-token-prediction modules: a count, and acceptances in [0, 1] given
        together with a module."""
        _non_negative("mtp_modules", _integer("mtp_modules", self.mtp_modules))
        _set_floats(self, ("mtp_accept_first", "mtp_accept_next"))
        for name in ("mtp_accept_first", "mtp_accept_next"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise InputError(name, f"must be in [0, 1], got {value!r}")
        if (self.mtp_accept_first or self.mtp_accept_next) and not self.mtp_modules:
            raise InputError("mtp_accept_first", "an acceptance needs mtp_modules >= 1")

    def _check_linear(self) -> None:
        """Linear-attention layers come with all their shapes, leave some full-attention
        layers, and hold no sliding or chunked ones; `attention_output_gate` is a bool."""
        if not isinstance(self.attention_output_gate, bool):
            gate = self.attention_output_gate
            raise InputError("attention_output_gate", f"must be true or false, got {gate!r}")
        _set_floats(self, ("linear_state_bytes_per_elem",))
        _non_negative("linear_state_bytes_per_elem", self.linear_state_bytes_per_elem)
        shapes = [getattr(self, n) for n in LINEAR_SHAPES] + [self.linear_state_bytes_per_elem]
        if not any(shapes):
            return
        if not all(shapes):
            missing = [n for n in (*LINEAR_SHAPES, "linear_state_bytes_per_elem")
                       if not getattr(self, n)]  # fmt: skip
            raise InputError(
                missing[0], f"linear attention needs {', '.join(missing)} set too"
            )
        if self.linear_layers >= self.layers:
            raise InputError("linear_layers", f"must leave full-attention layers (< {self.layers})")
        if self.sliding_layers or self.chunked_layers or self.kv_latent:
            raise InputError(
                "linear_layers", "linear attention beside sliding, chunked or latent attention "
                "is not described"
            )  # fmt: skip
        if self.linear_value_heads % self.linear_key_heads:
            raise InputError(
                "linear_value_heads",
                f"must be a multiple of linear_key_heads ({self.linear_key_heads})",
            )

    def _check_four_bit(self) -> None:
        """`expert_format` names a known format of the experts' bytes; `fp4_weights` lists
        known weights, the routed experts among them, and more than them only for a
        release whose experts are in a 4-bit format."""
        fmt = self.expert_format
        if fmt:
            if fmt not in EXPERT_FORMATS:
                raise InputError(
                    "expert_format", f"must be one of {', '.join(EXPERT_FORMATS)}, got {fmt!r}"
                )
            if not self.experts or self.expert_bytes_per_param != EXPERT_FORMATS[fmt]:
                raise InputError(
                    "expert_format",
                    f"{fmt} experts are {EXPERT_FORMATS[fmt]:g} bytes per weight; "
                    f"expert_bytes_per_param is {self.expert_bytes_per_param:g}",
                )
        weights = self.fp4_weights
        if not isinstance(weights, tuple) or not all(isinstance(w, str) for w in weights):
            raise InputError("fp4_weights", f"must be a list of names, got {weights!r}")
        unknown = [w for w in weights if w not in FP4_WEIGHTS]
        if unknown or "experts" not in weights or len(set(weights)) != len(weights):
            raise InputError(
                "fp4_weights",
                f"must list the routed experts and others of {', '.join(FP4_WEIGHTS)} once "
                f"each, got {list(weights)}",
            )
        if set(weights) != {"experts"} and not self.fp4_experts:
            raise InputError(
                "fp4_weights", "only a release whose routed experts are in a 4-bit format "
                "stores other weights in it"
            )  # fmt: skip

    @property
    def attn_width(self) -> int:
        """Attention width d = n_heads * head_dim (SPEC 2.1; not the hidden size)."""
        return self.n_heads * self.head_dim

    @property
    def residual_width(self) -> int:
        """Width of the activations a tensor-parallel all-reduce sums (hidden size)."""
        return self.hidden_size or self.attn_width

    @property
    def kv_layers(self) -> int:
        """Layers that keep a KV cache: all but the linear-attention ones."""
        return self.layers - self.linear_layers

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per token kappa = 2 (K, V) * kv_bytes_per_elem * L * h_kv * d_head (B/token);
        with MLA, kv_bytes_per_elem * L * kv_latent; ``L`` the layers that keep a KV
        cache (:attr:`kv_layers`: linear-attention layers keep none).

        SPEC 2.1: 262,144 B/token for Qwen3-32B.
        """
        if self.kv_latent:
            return self.kv_bytes_per_elem * self.layers * self.kv_latent
        return 2.0 * self.kv_bytes_per_elem * self.kv_layers * self.n_kv_heads * self.head_dim

    @property
    def linear_state_bytes(self) -> float:
        """Bytes of the fixed recurrent state one request keeps in the linear-attention
        layers, whatever its length (0 without them): per layer, one ``key dim x value
        dim`` matrix per value head in `linear_state_bytes_per_elem` bytes, and the
        convolution's last ``kernel - 1`` inputs of its ``2 key heads x key dim + value
        heads x value dim`` channels in :data:`CONV_STATE_BYTES`."""
        if not self.linear_layers:
            return 0.0
        state = (self.linear_value_heads * self.linear_key_head_dim
                 * self.linear_value_head_dim * self.linear_state_bytes_per_elem)  # fmt: skip
        channels = (2 * self.linear_key_heads * self.linear_key_head_dim
                    + self.linear_value_heads * self.linear_value_head_dim)  # fmt: skip
        conv = channels * (self.linear_conv_kernel - 1) * CONV_STATE_BYTES
        return float(self.linear_layers * (state + conv))

    def kv_bytes_at(self, ctx_tokens: float) -> float:
        """KV bytes a request keeps at a context of ``ctx_tokens``: every token in the
        full-attention layers, at most ``sliding_window`` in the sliding ones
        (``kv_bytes_per_token x ctx`` without sliding layers; linear-attention layers'
        fixed state is :attr:`linear_state_bytes`, not counted here)."""
        if not self.sliding_layers:
            return self.kv_bytes_per_token * ctx_tokens
        per_layer = self.kv_bytes_per_token / self.layers
        full = self.layers - self.sliding_layers
        return per_layer * (
            full * ctx_tokens + self.sliding_layers * min(ctx_tokens, self.sliding_window)
        )

    def attended_layers(self, ctx_tokens: float) -> float:
        """Layers' worth of attention over a context of ``ctx_tokens`` (``layers``
        without sliding layers): a sliding layer attends to ``min(ctx, window)`` tokens;
        a linear-attention layer to none (its state is fixed)."""
        if not self.sliding_layers or ctx_tokens <= self.sliding_window:
            return float(self.kv_layers)
        full = self.layers - self.sliding_layers
        return full + self.sliding_layers * self.sliding_window / ctx_tokens

    @property
    def expert_total_params(self) -> float:
        """Parameters of every routed expert of every MoE layer (0 for a dense model)."""
        return self.moe_layers * self.experts * self.expert_params

    @property
    def active_params(self) -> float:
        """Parameters one token uses: the dense ones and its experts (= params if dense)."""
        unused = self.moe_layers * (self.experts - self.experts_per_token) * self.expert_params
        return self.params - unused

    @property
    def precision(self) -> str:
        """The weight format the entry describes: the experts' when they are stored in
        a 4-bit block format (gpt-oss: MXFP4 experts, bf16 elsewhere; `expert_format`
        where it names it), else the weights' (``bf16``, ``fp8``)."""
        if self.expert_format and self.experts:
            return self.expert_format
        for name in ("mxfp4", "nvfp4"):
            if self.experts and self.expert_bytes_per_param == PRECISION_BYTES[name]:
                return name
        for name, size in PRECISION_BYTES.items():
            if self.bytes_per_param == size:
                return name
        return f"{self.bytes_per_param:g} bytes per weight"

    @property
    def fp4_experts(self) -> bool:
        """Whether the routed experts are stored in a 4-bit block format (MXFP4, NVFP4,
        INT4 with group scales)."""
        return self.precision in ("mxfp4", "nvfp4", *EXPERT_FORMATS) and bool(self.experts)

    def weight_group_params(self) -> dict[str, float]:
        """Parameters of each weight of :data:`FP4_WEIGHTS` in the whole model: the
        routed experts, the shared experts (``3 hidden x shared width`` per MoE layer),
        the dense layers' MLPs (``3 hidden x intermediate`` per dense layer) and the
        attention output projections (``heads x value width x hidden`` per layer), the
        MLPs gated (three matrices)."""
        hidden = self.residual_width
        value = self.v_head_dim or self.head_dim
        dense = self.layers - self.moe_layers if self.experts else self.layers
        return {
            "experts": self.expert_total_params,
            "shared": 3.0 * hidden * self.shared_intermediate_size * self.moe_layers,
            "mlp": 3.0 * hidden * self.intermediate_size * dense,
            "attention_out": float(self.layers * self.n_heads * value * hidden),
        }

    @property
    def fp4_dense_params(self) -> float:
        """Parameters outside the routed experts that the release stores in its 4-bit
        format (`fp4_weights`; 0 unless the experts are 4-bit)."""
        if not self.fp4_experts:
            return 0.0
        groups = self.weight_group_params()
        return sum(groups[w] for w in self.fp4_weights if w != "experts")

    @property
    def compute_precision(self) -> str:
        """Precision of the dense matrix products: ``fp8`` for FP8 weights (served W8A8,
        the activations quantised per token), ``fp4`` for 4-bit dense weights, else
        ``bf16`` (4-bit experts alone, as gpt-oss's, are taken to compute at the
        activations' bf16: Hopper has no FP4 Tensor Cores)."""
        if self.bytes_per_param == FP8_BYTES:
            return "fp8"
        if self.bytes_per_param in (PRECISION_BYTES["mxfp4"], PRECISION_BYTES["nvfp4"]):
            return "fp4"
        return "bf16"

    @property
    def fp8_layers(self) -> int:
        """Layers whose linear weights are FP8 (all of them when the dense weights are:
        the FP8 releases quantise every linear layer), else 0."""
        return self.layers if self.bytes_per_param == FP8_BYTES else 0

    @property
    def dense_weight_bytes(self) -> float:
        """Bytes of every weight but the routed experts': those the release stores in
        its 4-bit format (:attr:`fp4_dense_params`) at the experts' bytes, the others
        at `bytes_per_param`."""
        four = self.fp4_dense_params
        rest = self.params - self.expert_total_params - four
        return rest * self.bytes_per_param + four * self.expert_bytes_per_param

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes of every routed expert (0 for a dense model)."""
        per = self.expert_bytes_per_param or self.bytes_per_param
        return self.expert_total_params * per

    @property
    def weight_bytes(self) -> float:
        """Weight bytes = N * bytes_per_param (B); 2N for bf16 (SPEC 2.3); with experts
        stored in another dtype, the dense and the expert bytes."""
        return self.dense_weight_bytes + self.expert_weight_bytes


@dataclass(frozen=True)
class Fabric:
    """What joins a GPU to the others of a collective: `domain_gpus` GPUs share one
    NVLink switch domain, at `link_bw_bytes_per_s` per GPU and direction; beyond it the
    scale-out network, at `network_bw_bytes_per_s` per GPU and direction
    (docs/kernels.md, "Collectives over more GPUs than measured")."""

    domain_gpus: int
    link_bw_bytes_per_s: float
    network_bw_bytes_per_s: float

    def bandwidth(self, gpus: int) -> float:
        """The bus bandwidth (B/s per GPU, one direction) of a ring collective over `gpus`
        GPUs: NVLink's within the domain; beyond it, the rings run one per NIC rail, each
        crossing between domains on its own NIC, so a ring's share of the message crosses
        at the domain's NICs summed (``domain_gpus x network``), never above NVLink's."""
        if gpus <= self.domain_gpus:
            return self.link_bw_bytes_per_s
        return min(self.link_bw_bytes_per_s, self.domain_gpus * self.network_bw_bytes_per_s)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU in SI units (SPEC 2.1): peak dense BF16 `flops_per_s` (pi, FLOP/s),
    HBM bandwidth `mem_bw_bytes_per_s` (beta, B/s), memory `mem_bytes` (M, B) and
    board power `tdp_w` (W); `link_bw_bytes_per_s`: GPU-to-GPU (NVLink) bandwidth per
    direction (B/s; 0: unknown, tensor-parallel traffic then costs no time);
    `fp8_flops_per_s` and `fp4_flops_per_s`: dense peaks of the FP8 and FP4 Tensor
    Cores (0: the GPU has none, and such models compute at the next wider peak);
    `nvlink_domain_gpus`: GPUs one NVLink switch domain joins (8 on an HGX board, 72 in
    an NVL72 rack; 0: unknown) and `network_bw_bytes_per_s`: the scale-out NIC bandwidth
    per GPU and direction (B/s; 0: unknown), together its :attr:`fabric`;
    `device_mem_bytes`: the memory the driver reports, which a serving engine divides
    (B; 0: unknown, :attr:`engine_mem_bytes` is then ``mem_bytes``). Datasheets round
    HBM capacities given in GiB to "GB", so ``M`` (SPEC 2.1, 1e9 bytes per "GB") is
    about 7% below it."""

    name: str
    flops_per_s: float
    mem_bw_bytes_per_s: float
    mem_bytes: float
    tdp_w: float
    source: str = ""
    link_bw_bytes_per_s: float = 0.0
    fp8_flops_per_s: float = 0.0
    fp4_flops_per_s: float = 0.0
    nvlink_domain_gpus: int = 0
    network_bw_bytes_per_s: float = 0.0
    device_mem_bytes: float = 0.0

    @property
    def engine_mem_bytes(self) -> float:
        """The memory a serving engine on this GPU divides between weights, activations
        and KV cache: the driver's ``device_mem_bytes`` where the catalog gives it, else
        ``mem_bytes``."""
        return self.device_mem_bytes or self.mem_bytes

    @property
    def fabric(self) -> Fabric | None:
        """The GPU's NVLink domain and network (:class:`Fabric`); None where the catalog
        does not give all of them."""
        if not (self.nvlink_domain_gpus and self.link_bw_bytes_per_s
                and self.network_bw_bytes_per_s):  # fmt: skip
            return None
        return Fabric(self.nvlink_domain_gpus, self.link_bw_bytes_per_s,
                      self.network_bw_bytes_per_s)  # fmt: skip

    def __post_init__(self) -> None:
        _check_str("name", self.name)
        _check_str("source", self.source)
        names = ("flops_per_s", "mem_bw_bytes_per_s", "mem_bytes", "tdp_w")
        optional = ("link_bw_bytes_per_s", "fp8_flops_per_s", "fp4_flops_per_s",
                    "network_bw_bytes_per_s", "device_mem_bytes")  # fmt: skip
        _set_floats(self, (*names, *optional))
        n = self.nvlink_domain_gpus
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError("nvlink_domain_gpus", f"must be a whole number >= 0, got {n!r}")
        for name in names:
            _positive(name, getattr(self, name))
        for name in optional:
            _non_negative(name, getattr(self, name))

    def peak_flops(self, model: ModelArch) -> float:
        """Dense peak FLOP/s at the precision ``model``'s matrix products run in
        (:attr:`ModelArch.compute_precision`), falling back to the next wider one the
        GPU has."""
        p = model.compute_precision
        if p == "fp4" and self.fp4_flops_per_s:
            return self.fp4_flops_per_s
        if p in ("fp4", "fp8") and self.fp8_flops_per_s:
            return self.fp8_flops_per_s
        return self.flops_per_s


@dataclass(frozen=True)
class Calibration:
    """Calibration of one (model, GPU, serving stack) combination (SPEC 2.1, paper Tab. 3).

    `mfu`, `mbu`: achieved fractions of peak compute (prefill) and bandwidth
    (decode); `c_attn`: attention FLOP coefficient c_a; `t_iter_s`, `t_req_s`:
    decode per-iteration and per-request-per-iteration overheads (s); power
    ramps p(x) = min(p0 + gamma x, psat) per phase (W, SPEC 2.6); `p_idle_w`: a
    GPU that runs no instance (W). `measured` says whether the set was measured
    or estimated; `source` says where it comes from.

    Two terms beyond SPEC (``docs/calibration.md``), both off at 0 so that SPEC's
    decode time is the special case: `mfu_decode`, the fraction of peak compute a
    decode iteration achieves on its per-token FLOPs (0: decode FLOPs cost nothing
    beyond ``t_req``, as in SPEC), and `t_coll_s`, the fixed latency of one
    tensor-parallel all-reduce (two per layer per iteration when TP > 1), and
    `t_moe_layer_s`, the fixed cost of one MoE layer per iteration (routing and the
    expert kernels' launches; 0 for dense models and in SPEC), `t_fp8_layer_s`, the
    fixed cost per layer and iteration of a model whose linear layers run in FP8 (the
    per-token activation quantisation before each FP8 matrix product; 0 for other
    weights and in SPEC), and `mbu_expert`, the fraction of HBM bandwidth the grouped
    expert kernels achieve on the routed experts' weights (0: ``mbu``, as for every
    other weight), and `mbu_expert_fp4` the same for experts stored in a 4-bit block
    format (MXFP4, NVFP4: other kernels; 0: ``mbu_expert``).
    """

    mfu: float
    mbu: float
    c_attn: float
    t_iter_s: float
    t_req_s: float
    p0_prefill_w: float
    gamma_prefill_w: float
    psat_prefill_w: float
    p0_decode_w: float
    gamma_decode_w: float
    psat_decode_w: float
    p_idle_w: float
    measured: bool
    source: str = ""
    mfu_decode: float = 0.0
    t_coll_s: float = 0.0
    t_moe_layer_s: float = 0.0
    t_fp8_layer_s: float = 0.0
    mbu_expert: float = 0.0
    mbu_expert_fp4: float = 0.0

    def __post_init__(self) -> None:
        _set_floats(
            self,
            (
                *_CALIBRATION_NUMBERS,
                "mfu_decode",
                "t_coll_s",
                "t_moe_layer_s",
                "t_fp8_layer_s",
                "mbu_expert",
                "mbu_expert_fp4",
            ),
        )
        _fraction("mfu", self.mfu)
        _fraction("mbu", self.mbu)
        if not 0 <= self.mfu_decode <= 1:
            raise InputError("mfu_decode", f"must be in [0, 1], got {self.mfu_decode!r}")
        _non_negative("t_coll_s", self.t_coll_s)
        _non_negative("t_moe_layer_s", self.t_moe_layer_s)
        _non_negative("t_fp8_layer_s", self.t_fp8_layer_s)
        for name in ("mbu_expert", "mbu_expert_fp4"):
            if not 0 <= getattr(self, name) <= 1:
                raise InputError(name, f"must be in [0, 1], got {getattr(self, name)!r}")
        for name in _CALIBRATION_NUMBERS[2:]:
            _non_negative(name, getattr(self, name))
        for phase in ("prefill", "decode"):
            p0 = getattr(self, f"p0_{phase}_w")
            if getattr(self, f"psat_{phase}_w") < p0:
                raise InputError(f"psat_{phase}_w", f"must be >= p0_{phase}_w ({p0:g})")
        if not isinstance(self.measured, bool):
            raise InputError("measured", f"must be true or false, got {self.measured!r}")
        _check_str("source", self.source)


_CALIBRATION_NUMBERS = (
    "mfu",
    "mbu",
    "c_attn",
    "t_iter_s",
    "t_req_s",
    "p0_prefill_w",
    "gamma_prefill_w",
    "psat_prefill_w",
    "p0_decode_w",
    "gamma_decode_w",
    "psat_decode_w",
    "p_idle_w",
)
_CALIBRATION_POWERS = _CALIBRATION_NUMBERS[5:]


@dataclass(frozen=True)
class ServingStack:
    """Serving-stack settings of a deployment (SPEC 2.1, 2.5).

    KV pool C_tok = floor((mem_fraction * M - weight_bytes) / kappa) tokens unless
    `kv_pool_tokens` is set (from the engine log, e.g. SGLang's
    ``max_total_num_tokens``); `reserved_tokens` is R; `unused_fraction` is u
    (U = u * C_tok); `dispatch` is the router policy; `tensor_parallel` is the
    number of GPUs per instance (flops, bandwidth, memory and power scale ideally);
    `max_running_requests` is the engine's largest decode batch (SGLang's
    ``--max-running-requests``, vLLM's ``--max-num-seqs``; None: no limit beyond the KV
    pool, docs/admission.md, section 8). `prefill_shape` and `decode_shape` give each
    phase's instance its own split, ``tp<T>[,dp<D>][,ep<E>]`` (:mod:`model.shapes`,
    docs/shapes.md); a phase without one runs ``tp<tensor_parallel>``.
    `mtp_draft_tokens`: the tokens the decode instances draft per iteration with the
    model's next-token-prediction module (speculative decoding,
    :mod:`model.performance.speculative`; composed from measured kernels only; 0: none).
    """

    mem_fraction: float = 0.90
    reserved_tokens: int = 512
    unused_fraction: float = 0.0
    kv_pool_tokens: int | None = None
    dispatch: str = "round_robin"
    tensor_parallel: int = 1
    max_running_requests: int | None = None
    prefill_shape: str | None = None
    decode_shape: str | None = None
    mtp_draft_tokens: int = 0

    def __post_init__(self) -> None:
        _set_floats(self, ("mem_fraction", "unused_fraction"))
        _non_negative("mtp_draft_tokens", _integer("mtp_draft_tokens", self.mtp_draft_tokens))
        _fraction("mem_fraction", self.mem_fraction)
        _non_negative("reserved_tokens", _integer("reserved_tokens", self.reserved_tokens))
        if not 0 <= self.unused_fraction < 1:
            raise InputError("unused_fraction", f"must be in [0, 1), got {self.unused_fraction!r}")
        if self.kv_pool_tokens is not None:
            _positive("kv_pool_tokens", _integer("kv_pool_tokens", self.kv_pool_tokens))
        if self.dispatch not in DISPATCH_MODES:
            raise InputError(
                "dispatch", f"must be one of {', '.join(DISPATCH_MODES)}, got {self.dispatch!r}"
            )
        if _integer("tensor_parallel", self.tensor_parallel) < 1:
            raise InputError("tensor_parallel", f"must be >= 1, got {self.tensor_parallel!r}")
        if self.max_running_requests is not None:
            m = _integer("max_running_requests", self.max_running_requests)
            if m < 1:
                raise InputError("max_running_requests", f"must be >= 1, got {m!r}")
        self.shapes()  # an input error naming the shape if it is not one

    def shapes(self) -> tuple[InstanceShape, InstanceShape]:
        """The prefill and the decode instance's shape (``tp<tensor_parallel>`` for a
        phase without its own)."""
        default = InstanceShape(self.tensor_parallel)
        return (
            default
            if self.prefill_shape is None
            else parse_shape(self.prefill_shape, "prefill_shape"),
            default
            if self.decode_shape is None
            else parse_shape(self.decode_shape, "decode_shape"),
        )


_SECTION_TYPES: dict[str, type[Any]] = {
    "model": ModelArch,
    "gpu": GpuSpec,
    "calibration": Calibration,
    "serving": ServingStack,
}


# --------------------------------------------------------------------------
# Data files


def _read_data(filename: str) -> Any:
    text = (resources.files(__package__ or "model") / "data" / filename).read_text(encoding="utf-8")
    return json.loads(text)


def _scaled(value: object, scale: str, field: str) -> float:
    """Vendor unit -> SI: value * scale, computed in decimal so that 2.039 TB/s is 2.039e12 B/s."""
    number = _finite(field, value)
    return float(Decimal(repr(number)) * Decimal(scale))


def _check_keys(
    where: str, entry: object, required: set[str], optional: set[str]
) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise InputError(where, "must be an object")
    unknown = set(entry) - required - optional
    if unknown:
        raise InputError(f"{where}.{sorted(unknown)[0]}", "unknown key in catalog data")
    missing = required - set(entry)
    if missing:
        raise InputError(f"{where}.{sorted(missing)[0]}", "missing in catalog data")
    return entry


def _catalog_error(where: str, error: InputError) -> InputError:
    return InputError(f"{where}.{error.field}", error.reason)


_MODEL_KEYS = {"params", "layers", "n_heads", "n_kv_heads", "head_dim"}
#: every other field of ModelArch may be given (its default applies otherwise)
_MODEL_OPTIONAL = {f.name for f in dataclasses.fields(ModelArch)} - _MODEL_KEYS - {"name"}
_GPU_KEYS = {"bf16_dense_tflops", "mem_bw_tb_per_s", "mem_gb", "tdp_w"}
_GPU_OPTIONAL = {"source", "nvlink_gb_per_s", "fp8_dense_tflops", "fp4_dense_tflops", "clocks",
                 "nvlink_domain_gpus", "network_gbit_per_s", "device_mem_bytes"}  # fmt: skip
#: a GPU's ``clocks`` entry (:class:`model.clocks.GpuClocks`, docs/clocks.md section 5)
_CLOCK_KEYS = {
    "sm_clock_min_mhz",
    "sm_clock_max_mhz",
    "power_limit_min_w",
    "power_limit_max_w",
    "v_min_ratio",
    "settings",
}


E = TypeVar("E")


def _entries(
    filename: str,
    required: set[str],
    optional: set[str],
    build: Callable[[str, dict[str, Any]], E],
    section: str | None = None,
) -> Mapping[str, E]:
    """Each entry of a catalog file (or its ``section``, where it has one) checked for its
    keys and built; an error names the entry and the field."""
    catalog: dict[str, E] = {}
    for name, entry in _read_data(filename).items():
        where = f"{filename}:{name}"
        if section is not None:
            if section not in entry:
                continue
            where, entry = f"{where}.{section}", entry[section]
        raw = _check_keys(where, entry, required, optional)
        try:
            catalog[name] = build(name, raw)
        except InputError as error:
            raise _catalog_error(where, error) from None
    return types.MappingProxyType(catalog)


def _model_entry(name: str, entry: dict[str, Any]) -> ModelArch:
    fields = dict(entry)
    for key in ("aliases", "fp4_weights"):
        if key in fields:
            if not isinstance(fields[key], list):
                raise InputError(key, "must be a list of names")
            fields[key] = tuple(fields[key])
    return ModelArch(name=name, **fields)


#: the fields a quantised release shares with the entry of the model it quantises
#: (:attr:`ModelArch.base_model`): its shapes
RELEASE_SHAPES = (
    "params", "layers", "n_heads", "n_kv_heads", "head_dim", "hidden_size", "experts",
    "experts_per_token", "moe_layers", "expert_params", "kv_latent", "sliding_window",
    "sliding_layers", "intermediate_size", "vocab_size", "moe_intermediate_size",
    "shared_intermediate_size", "attention_chunk", "chunked_layers", "q_lora_rank",
    "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", *LINEAR_SHAPES,
    "linear_state_bytes_per_elem", "attention_output_gate",
)  # fmt: skip


def _check_releases(models: Mapping[str, ModelArch]) -> None:
    """Each entry's `base_model` names an entry that is no release itself, of the same
    shapes (:data:`RELEASE_SHAPES`), and no two releases of one model share a precision."""
    seen: dict[tuple[str, str], str] = {}
    for name, m in models.items():
        if not m.base_model:
            continue
        where = f"models.json:{name}.base_model"
        base = models.get(m.base_model)
        if base is None:
            raise InputError(where, f"no entry {m.base_model!r} in the catalog")
        if base.base_model:
            raise InputError(where, f"{base.name} is itself a release of {base.base_model}")
        differ = [f for f in RELEASE_SHAPES if getattr(m, f) != getattr(base, f)]
        if differ:
            raise InputError(where, f"its {', '.join(differ)} differ from {base.name}'s")
        key = (base.name, m.precision)
        if key in seen or m.precision == base.precision:
            other = seen.get(key, base.name)
            raise InputError(where, f"{other} is already {base.name}'s {m.precision} release")
        seen[key] = name


def _gpu_entry(name: str, entry: dict[str, Any]) -> GpuSpec:
    return GpuSpec(
        name=name,
        flops_per_s=_scaled(entry["bf16_dense_tflops"], "1e12", "bf16_dense_tflops"),
        mem_bw_bytes_per_s=_scaled(entry["mem_bw_tb_per_s"], "1e12", "mem_bw_tb_per_s"),
        mem_bytes=_scaled(entry["mem_gb"], "1e9", "mem_gb"),
        tdp_w=_finite("tdp_w", entry["tdp_w"]),
        source=entry.get("source", ""),
        # datasheets give NVLink bandwidth summed over both directions
        link_bw_bytes_per_s=_scaled(entry.get("nvlink_gb_per_s", 0), "0.5e9", "nvlink"),
        fp8_flops_per_s=_scaled(entry.get("fp8_dense_tflops", 0), "1e12", "fp8"),
        fp4_flops_per_s=_scaled(entry.get("fp4_dense_tflops", 0), "1e12", "fp4"),
        nvlink_domain_gpus=entry.get("nvlink_domain_gpus", 0),
        # NICs are rated in Gb/s per direction
        network_bw_bytes_per_s=_scaled(entry.get("network_gbit_per_s", 0), "0.125e9", "network"),
        device_mem_bytes=_finite("device_mem_bytes", entry.get("device_mem_bytes", 0)),
    )


def _clocks_entry(name: str, raw: dict[str, Any]) -> GpuClocks:
    if not isinstance(raw["settings"], list):
        raise InputError("settings", "must be a list of settings")
    return GpuClocks(
        gpu=name,
        sm_clock_min_mhz=raw["sm_clock_min_mhz"],
        sm_clock_max_mhz=raw["sm_clock_max_mhz"],
        power_limit_min_w=raw["power_limit_min_w"],
        power_limit_max_w=raw["power_limit_max_w"],
        v_min_ratio=raw["v_min_ratio"],
        settings=tuple(raw["settings"]),
        source=raw.get("source", ""),
        sustained_clock_mhz=raw.get("sustained_clock_mhz"),
        compute_draw_ratio=raw.get("compute_draw_ratio"),
    )


@functools.cache
def _models() -> Mapping[str, ModelArch]:
    models = _entries("models.json", _MODEL_KEYS, _MODEL_OPTIONAL, _model_entry)
    _check_releases(models)
    return models


@functools.cache
def _gpus() -> Mapping[str, GpuSpec]:
    return _entries("gpus.json", _GPU_KEYS, _GPU_OPTIONAL, _gpu_entry)


@functools.cache
def _gpu_clocks() -> Mapping[str, GpuClocks]:
    optional = {"source", "sustained_clock_mhz", "compute_draw_ratio"}
    return _entries("gpus.json", _CLOCK_KEYS, optional, _clocks_entry, section="clocks")


_CAL_TIME_KEYS = {"t_iter_ms": "t_iter_s", "t_req_ms": "t_req_s"}
_CAL_VALUE_KEYS = {"mfu", "mbu", "c_attn", *_CAL_TIME_KEYS, *_CALIBRATION_POWERS}


@dataclass(frozen=True)
class _CalibrationData:
    reference: tuple[str, str]
    pairs: Mapping[tuple[str, str], Mapping[str, object]]  # SI field name -> value


@functools.cache
def _calibration_data() -> _CalibrationData:
    raw = _read_data("calibrations.json")
    _check_keys("calibrations.json", raw, {"reference", "pairs"}, set())
    ref = _check_keys("calibrations.json:reference", raw["reference"], {"model", "gpu"}, set())
    pairs: dict[tuple[str, str], Mapping[str, object]] = {}
    for i, entry in enumerate(raw["pairs"]):
        where = f"calibrations.json:pairs[{i}]"
        _check_keys(where, entry, {"model", "gpu", "source"}, {"measured", *_CAL_VALUE_KEYS})
        for key in ("model", "gpu"):
            known = _models() if key == "model" else _gpus()
            if entry[key] not in known:
                raise NotFoundError(key, entry[key], known)
        values: dict[str, object] = {"measured": entry.get("measured", False)}
        values["source"] = entry["source"]
        for key in _CAL_VALUE_KEYS & set(entry):
            if key in _CAL_TIME_KEYS:
                values[_CAL_TIME_KEYS[key]] = _scaled(entry[key], "1e-3", f"{where}.{key}")
            else:
                values[key] = entry[key]
        pairs[(entry["model"], entry["gpu"])] = types.MappingProxyType(values)
    reference = (ref["model"], ref["gpu"])
    if reference not in pairs:
        raise InputError("calibrations.json:reference", f"no calibration for {reference}")
    missing = set(_CALIBRATION_NUMBERS) - set(pairs[reference])
    if missing:
        raise InputError(f"calibrations.json:reference.{sorted(missing)[0]}", "missing")
    return _CalibrationData(reference=reference, pairs=types.MappingProxyType(pairs))


@functools.cache
def _measured_stacks() -> Mapping[str, tuple[Mapping[str, object], str]]:
    """GPU -> (its fitted calibration fields, where they come from), from
    ``measured_calibrations.json`` (written by ``scripts/fit_calibrations.py``; one
    serving stack per GPU)."""
    raw = _read_data("measured_calibrations.json")
    origin = raw["source"]["description"]
    out: dict[str, tuple[Mapping[str, object], str]] = {}
    for entry in raw["calibrations"]:
        cal = entry["calibration"]
        fitted = {name: cal[name] for name in entry["fitted"]}
        out[entry["gpu"]] = (types.MappingProxyType(fitted), origin)
    return types.MappingProxyType(out)


@functools.cache
def _shipped_prompts() -> Mapping[str, float]:
    raw = _read_data("measured_calibrations.json")
    return types.MappingProxyType(
        {task: float(v["value"]) for task, v in raw.get("prompt_tokens", {}).items()}
    )


def shipped_prompt_tokens() -> dict[str, float]:
    """Task -> mean prompt length (tokens) fitted with the shipped calibrations
    (``measured_calibrations.json``), for measurements that give none (ML.ENERGY)."""
    return dict(_shipped_prompts())


def _key(field: str, name: object) -> str:
    if not isinstance(name, str):
        raise InputError(field, f"must be a name, got {name!r}")
    return name.strip().lower()


# --------------------------------------------------------------------------
# Public look-ups


def list_models() -> list[str]:
    """Names of the built-in models."""
    return sorted(_models())


def list_gpus() -> list[str]:
    """Names of the built-in GPUs."""
    return sorted(_gpus())


def load_model(name: str) -> ModelArch:
    """The built-in model `name` (or one of its aliases, e.g. its Hugging Face id);
    NotFoundError("model", ...) listing known names if unknown."""
    models = _models()
    key = _key("model", name)
    if key in models:
        return models[key]
    for arch in models.values():
        if key in (a.lower() for a in arch.aliases):
            return arch
    raise NotFoundError("model", name, models)


def find_release(model: ModelArch, precision: str) -> ModelArch | None:
    """The catalog entry of `model`'s release in `precision` (a :attr:`ModelArch.
    precision`, ``nvfp4``, ``int4``...): the entry of the model it is a release of
    (its `base_model`) or `model` itself if that one is, else the entry whose
    `base_model` it is; None when the catalog has no such release."""
    models = _models()
    base = models.get(model.base_model, model) if model.base_model else model
    for arch in (base, *(m for m in models.values() if m.base_model == base.name)):
        if arch.precision == precision:
            return arch
    return None


def load_gpu(name: str) -> GpuSpec:
    """The built-in GPU `name` in SI units; NotFoundError("gpu", ...) if unknown."""
    gpus = _gpus()
    key = _key("gpu", name)
    if key not in gpus:
        raise NotFoundError("gpu", name, gpus)
    return gpus[key]


def load_gpu_clocks(name: str) -> GpuClocks | None:
    """The clocks, power limits and default settings of the built-in GPU `name`
    (docs/clocks.md section 5); None for a GPU the catalog has no clock data for."""
    return _gpu_clocks().get(_key("gpu", name))


def load_calibration(model: str, gpu: str) -> Calibration:
    """Calibration for `model` on `gpu`.

    An explicit entry of ``calibrations.json`` for the pair wins. Any other pair
    gets an ESTIMATED set (``measured=False``) from the measured reference set
    (Qwen3-32B on H200, SPEC 2.1):

    * mfu, mbu, c_attn, t_iter_s, t_req_s are copied unchanged;
    * every power value (p0, gamma, psat of both phases, p_idle) is scaled by
      tdp_w(gpu) / tdp_w(reference gpu).

    An explicit entry may give only some fields; the others follow the rule.
    """
    return _calibration(load_model(model).name, load_gpu(gpu).name)


def estimated_calibration(model: str, gpu: str) -> Calibration:
    """The estimation rule of :func:`load_calibration` alone (no measured set of the
    catalog applied): what a fit starts from, and keeps where its data say nothing."""
    return _calibration(load_model(model).name, load_gpu(gpu).name, measured=False)


@functools.cache
def _calibration(model: str, gpu: str, measured: bool = True) -> Calibration:
    data = _calibration_data()
    ref_model, ref_gpu = data.reference
    reference = data.pairs[data.reference]
    ratio_num, ratio_den = load_gpu(gpu).tdp_w, load_gpu(ref_gpu).tdp_w
    values: dict[str, object] = {name: reference[name] for name in _CALIBRATION_NUMBERS}
    for name in _CALIBRATION_POWERS:
        values[name] = _finite(name, reference[name]) * ratio_num / ratio_den
    values["measured"] = False
    values["source"] = (
        f"ESTIMATED for {model} on {gpu}, not measured: mfu, mbu, c_attn, t_iter, t_req "
        f"copied from the measured {ref_model} on {ref_gpu} set ({reference['source']}); "
        f"power values (p0, gamma, psat of both phases, p_idle) scaled by "
        f"tdp_w({gpu})/tdp_w({ref_gpu}) = {ratio_num:g} W / {ratio_den:g} W"
    )
    explicit = data.pairs.get((model, gpu)) if measured else None
    stack = _measured_stacks().get(gpu) if measured else None
    if explicit is not None:
        values.update(explicit)
    elif stack is not None:
        fitted, origin = stack
        values.update(fitted)
        values["measured"] = True
        values["source"] = (
            f"MEASURED decode for {gpu} under vLLM, shared by every model on it: "
            f"{', '.join(sorted(fitted))} fitted to the {origin}; the rest ESTIMATED as "
            f"for any other pair ({values['source']})"
        )
        if _models()[model].experts:
            values["source"] = (
                f"{values['source']}; a mixture of experts: leave-one-model-out, the "
                "decode times of such models are predicted within 14% in the median "
                "(docs/calibration.md)"
            )
    try:
        return Calibration(**values)  # type: ignore[arg-type]
    except InputError as error:
        raise _catalog_error(f"calibrations.json:{model}/{gpu}", error) from None


def catalog_summary() -> dict[str, Any]:
    """JSON-able summary of the catalog (for GET /v1/catalog), in SI units."""
    models = {
        name: {
            **dataclasses.asdict(arch),
            "attn_width": arch.attn_width,
            "kv_bytes_per_token": arch.kv_bytes_per_token,
            "weight_bytes": arch.weight_bytes,
        }
        for name, arch in sorted(_models().items())
    }
    gpus = {name: dataclasses.asdict(spec) for name, spec in sorted(_gpus().items())}
    calibrations = []
    for model in list_models():
        for gpu in list_gpus():
            cal = load_calibration(model, gpu)
            calibrations.append(
                {"model": model, "gpu": gpu, "measured": cal.measured, "source": cal.source}
            )
    return {"models": models, "gpus": gpus, "calibrations": calibrations}


# --------------------------------------------------------------------------
# Overrides


def _field_names(cls: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _unknown_field(section: str, key: str, cls: type[Any]) -> InputError:
    return InputError(f"{section}.{key}", f"unknown field; known: {', '.join(_field_names(cls))}")


def _coerce(field: str, hint: Any, value: object) -> object:
    """Convert an override value to the field's declared type, or raise InputError."""
    args = typing.get_args(hint)
    if type(None) in args:
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(field, inner, value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise InputError(field, f"must be true or false, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise InputError(field, f"must be a string, got {value!r}")
    if hint is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise InputError(field, f"must be a number, got {value!r}") from None
        return _finite(field, value)
    if hint is int:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise InputError(field, f"must be an integer, got {value!r}") from None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        return _integer(field, value)
    raise InputError(field, f"cannot be overridden (type {hint!r})")


def apply_overrides(obj: T, values: Mapping[str, object], section: str) -> T:
    """A copy of the dataclass `obj` with `values` replaced, converted and validated.

    Errors name the field as ``section.field``: an unknown field lists the known
    ones; a value of the wrong type, out of range or not finite says why.
    """
    cls = type(obj)
    hints = typing.get_type_hints(cls)
    names = set(_field_names(cls))
    changes: dict[str, object] = {}
    for key, value in values.items():
        if key not in names:
            raise _unknown_field(section, key, cls)
        changes[key] = _coerce(f"{section}.{key}", hints[key], value)
    try:
        return dataclasses.replace(obj, **changes)
    except InputError as error:
        raise InputError(f"{section}.{error.field}", error.reason) from None


def _check_sections(raw: object, where: str) -> dict[str, dict[str, object]]:
    if not isinstance(raw, dict):
        raise InputError(where, "must be an object with sections " + ", ".join(OVERRIDE_SECTIONS))
    result: dict[str, dict[str, object]] = {}
    for section, values in raw.items():
        if section not in _SECTION_TYPES:
            raise InputError(
                str(section), f"unknown override section; known: {', '.join(OVERRIDE_SECTIONS)}"
            )
        if not isinstance(values, dict):
            raise InputError(section, "must be a table/object of field = value")
        names = set(_field_names(_SECTION_TYPES[section]))
        for key in values:
            if key not in names:
                raise _unknown_field(section, str(key), _SECTION_TYPES[section])
        result[section] = dict(values)
    return result


def load_override_file(path: str) -> dict[str, dict[str, object]]:
    """Read overrides from a ``.json`` or ``.toml`` file.

    The file holds optional sections ``model``, ``gpu``, ``calibration`` and
    ``serving``, each mapping field names (as in the dataclasses, SI units) to
    values, e.g. ``[calibration] mfu = 0.6``. Returns ``{section: {field: value}}``.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise InputError("override_file", f"must end in .json or .toml, got {file.name!r}")
    if suffix == ".json":
        return _check_sections(jsondoc.read(file, "override_file"), "override_file")
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError("override_file", f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InputError("override_file", f"{path} is not UTF-8 text: {error.reason}") from None
    try:
        raw = tomllib.loads(text)  # a key given twice is a TOML error
    except tomllib.TOMLDecodeError as error:
        raise InputError("override_file", f"cannot parse {file.name}: {error}") from None
    return _check_sections(raw, "override_file")


def parse_set_flags(items: list[str]) -> dict[str, dict[str, object]]:
    """Parse ``SECTION.FIELD=VALUE`` flags into ``{section: {field: value}}``.

    The value is parsed as JSON (``0.6``, ``200000``, ``true``, ``null``) and
    kept as a string when that fails (``serving.dispatch=random``). A later
    flag for the same field wins.
    """
    result: dict[str, dict[str, object]] = {}
    for item in items:
        target, sep, text = item.partition("=")
        section, dot, key = target.strip().partition(".")
        if not sep or not dot or not key or "." in key:
            raise InputError("set", f"expected SECTION.FIELD=VALUE, got {item!r}")
        value: object
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        result.setdefault(section, {})[key] = value
    return _check_sections(result, "set")
