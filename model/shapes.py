"""Instance shapes: how many GPUs a prefill or decode instance spans and how its model is
split over them (docs/shapes.md).

A shape is written ``tp<T>[,dp<D>][,ep<E>]`` (parts in any order, each at most once):

* ``tp`` (tensor parallelism): attention and the dense weights are split ``T`` ways;
* ``dp`` (data-parallel attention, default 1): that split is replicated ``D`` times, each
  replica serving ``1/D`` of the batch, so the instance spans ``T x D`` GPUs;
* ``ep`` (expert parallelism, default 1; a mixture of experts only): the routed experts
  are spread over ``E`` groups of GPUs, each holding ``experts / E`` whole experts, and
  sliced over the ``T x D / E`` GPUs of a group.

This is the convention of AIConfigurator's configurations and of its measured serving
results (``tp``, ``attention_dp``, ``moe_ep``; ``moe_tp = T x D / E``). SGLang's launch
flags count differently: ``--tp 8 --dp 8 --enable-dp-attention --ep 8`` is 8 GPUs with
attention unsplit, here ``tp1,dp8,ep8``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from model.errors import InputError

_PART = re.compile(r"(tp|dp|ep)([1-9][0-9]{0,3})")
#: the most GPUs one instance may span
MAX_INSTANCE_GPUS = 1024


@dataclass(frozen=True)
class InstanceShape:
    """An instance's split: ``tp`` x ``dp`` GPUs, routed experts over ``ep`` groups."""

    tp: int = 1
    dp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    @property
    def text(self) -> str:
        """The shape as :func:`parse_shape` reads it (``dp`` and ``ep`` only when > 1)."""
        parts = [f"tp{self.tp}"]
        parts += [f"{k}{v}" for k, v in (("dp", self.dp), ("ep", self.ep)) if v > 1]
        return ",".join(parts)


def parse_shape(text: object, field: str) -> InstanceShape:
    """The shape ``text`` names (see the module docstring); an input error naming
    ``field`` otherwise."""
    if not isinstance(text, str):
        raise InputError(field, f"must be a shape such as 'tp4' or 'tp1,dp8,ep8', got {text!r}")
    seen: dict[str, int] = {}
    for part in text.replace(" ", "").split(","):
        m = _PART.fullmatch(part)
        if m is None:
            raise InputError(
                field,
                f"{part!r} in {text!r} is not a part of a shape: write tp<N>, dp<N> or ep<N> "
                "separated by commas, e.g. 'tp4' or 'tp1,dp8,ep8'",
            )
        key, value = m.group(1), int(m.group(2))
        if key in seen:
            raise InputError(field, f"{key} is given twice in {text!r}")
        seen[key] = value
    if "tp" not in seen:
        raise InputError(field, f"{text!r} has no tp<N>: every shape says its tensor parallelism")
    shape = InstanceShape(seen["tp"], seen.get("dp", 1), seen.get("ep", 1))
    if shape.gpus > MAX_INSTANCE_GPUS:
        raise InputError(field, f"{text!r} spans {shape.gpus} GPUs, more than {MAX_INSTANCE_GPUS}")
    if shape.gpus % shape.ep:
        raise InputError(
            field, f"ep{shape.ep} does not divide the instance's {shape.gpus} GPUs (tp x dp)"
        )
    return shape


def check_shape(shape: InstanceShape, field: str, n_heads: int, experts: int) -> InstanceShape:
    """``shape`` if a model with ``n_heads`` attention heads and ``experts`` routed experts
    (0: dense) can be split so; an input error naming ``field`` otherwise."""
    if n_heads % shape.tp:
        raise InputError(
            field, f"tp{shape.tp} does not divide the model's {n_heads} attention heads"
        )
    if shape.ep > 1 and not experts:
        raise InputError(field, f"ep{shape.ep}: the model is dense (no routed experts to spread)")
    if shape.ep > experts > 0:
        raise InputError(field, f"ep{shape.ep} is more than the model's {experts} routed experts")
    if experts and experts % shape.ep:
        raise InputError(
            field, f"ep{shape.ep} does not divide the model's {experts} routed experts"
        )
    return shape
