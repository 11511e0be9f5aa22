"""The link a prompt's KV cache crosses from a prefill instance to a decode instance
(docs/mixed-gpus.md, section 3).

A disaggregated request's KV is written by the prefill instance and read by the decode
instance: its bytes (``kv_bytes_at(l_in)``) leave over the prefill replica's ``tp``
GPUs' links in parallel, so one prompt's transfer takes

    t_X(l_in) = kv_bytes_at(l_in) / (tp_P x link_bytes_per_s)

and the links of ``n`` GPUs carry at most ``n x link_bytes_per_s / E[kv bytes]``
requests per second. Bandwidths are per GPU and direction, in B/s; the named links'
figures are public datasheets'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from model.errors import InputError

#: B/s per GPU and direction of the named links, and where each figure comes from
INTERCONNECTS: dict[str, tuple[float, str]] = {
    "nvlink": (
        450e9,
        "NVIDIA H100/H200 datasheets: fourth-generation NVLink, 900 GB/s per GPU with "
        "both directions summed (450 GB/s each way); joins the GPUs of one board only",
    ),
    "infiniband": (
        50e9,
        "NVIDIA ConnectX-7 datasheet: 400 Gb/s InfiniBand NDR per port; DGX H100/H200 "
        "datasheets: one ConnectX-7 per GPU (50 GB/s each way)",
    ),
    "ethernet": (
        12.5e9,
        "IEEE 802.3 100GBASE (e.g. NVIDIA ConnectX-6 Dx, 100 GbE): one 100 Gb/s port per "
        "GPU (12.5 GB/s each way); a port shared by k GPUs: interconnect_gb_per_s = 12.5/k",
    ),
}

#: the link taken between phases on different GPU types when none is named: they sit on
#: different boards, so the KV crosses the scale-out network
MIXED_DEFAULT = "infiniband"


@dataclass(frozen=True)
class KvLink:
    """A link between prefill and decode instances: ``name`` (one of
    :data:`INTERCONNECTS`, or ``custom``) and its bandwidth per GPU and direction."""

    name: str
    bytes_per_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bytes_per_s) and self.bytes_per_s > 0):
            raise InputError("interconnect_gb_per_s", f"must be > 0, got {self.bytes_per_s!r}")

    def record(self) -> dict[str, object]:
        return {"interconnect": self.name, "interconnect_gb_per_s": self.bytes_per_s / 1e9}


def check_interconnect(name: object, field: str = "interconnect") -> str:
    """``name`` if it names a link of :data:`INTERCONNECTS`; else an input error naming
    ``field``."""
    if not isinstance(name, str) or name not in INTERCONNECTS:
        raise InputError(field, f"must be one of {', '.join(INTERCONNECTS)}, got {name!r}")
    return name


def kv_link(
    name: str | None, gb_per_s: float | None, mixed: bool, field: str = "interconnect"
) -> KvLink | None:
    """The link a deployment's KV transfer is charged at: ``name`` (one of
    :data:`INTERCONNECTS`) at its datasheet bandwidth, or at ``gb_per_s`` (GB/s per GPU
    and direction) when given; with neither, :data:`MIXED_DEFAULT` for phases on
    different GPU types (``mixed``) and None (not charged, as before the link existed)
    for one type. NVLink joins the GPUs of one board, never two GPU types: refused for
    ``mixed``, naming ``field``."""
    if name is not None:
        check_interconnect(name, field)
    if name == "nvlink" and mixed:
        raise InputError(
            field,
            "NVLink joins the GPUs of one board: phases on different GPU types exchange "
            "their KV over the network (infiniband or ethernet)",
        )
    if gb_per_s is not None:
        return KvLink(name or "custom", float(gb_per_s) * 1e9)
    if name is None:
        if not mixed:
            return None
        name = MIXED_DEFAULT
    return KvLink(name, INTERCONNECTS[name][0])


def kv_transfer_s(kv_bytes: float, lanes: int, link_bytes_per_s: float) -> float:
    """Time (s) of one request's KV (``kv_bytes``) over ``lanes`` GPUs' links in
    parallel at ``link_bytes_per_s`` each."""
    return kv_bytes / (link_bytes_per_s * lanes)
