"""Locked SM clocks and per-GPU power limits per phase (``docs/clocks.md``).

A *setting* is written ``"<N>MHz"`` (the SM clock locked at N MHz) or ``"<N>W"`` (a
per-GPU power limit of N W); the default is the GPU's full clock, and at the default
every number of the capacity model is today's, bit for bit (nothing is recomputed).

The model, derived in ``docs/clocks.md``:

* compute peak follows the SM clock, HBM bandwidth does not (to first order), so a
  phase's compute terms grow by ``f_max / f`` and its memory terms stay;
* prefill (SPEC 2.2: FLOPs at ``pi MFU``) takes ``f_max / f`` times as long;
* decode (SPEC 2.3) keeps its bandwidth line until the GEMMs' compute, which the
  weight read hides at full clock, outgrows it: the iteration pays
  ``max(a_w, c(f) B) - max(a_w, c(f_max) B)`` more, taken as its chord over the
  batches ``0..B_max`` so that the time stays linear in ``B`` (:func:`decode_extra_g`);
* a phase's power is ``P_static + (P_full - P_static) k(f)`` with
  ``k(f) = m r(f) + (1 - m) (f / f_max) (V(f) / V_max)^2``: the HBM share ``m`` follows
  the bytes moved per second (``r``, the phase's throughput relative to full clock),
  the rest is CMOS dynamic power ``C V^2 f`` with a linear voltage-frequency relation
  between the GPU's lowest and highest clock (:class:`GpuClocks`);
* a power limit acts through the clock at which the phase's saturated draw meets it
  (:func:`solve_power_limit`), bounded by the GPU's clocks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from model.errors import InputError

#: HBM access energy, picojoules per bit moved (HBM2, O'Connor et al., "Fine-Grained
#: DRAM: Energy-Efficient DRAM for Extreme Bandwidth Systems", MICRO 2017; taken for
#: HBM2e/HBM3/HBM3e as well, docs/clocks.md section 4)
HBM_PJ_PER_BIT = 3.9
#: relative tolerance of the power-limit solve on the clock
LIMIT_RTOL = 1e-12

#: a setting's number and unit (checked by :func:`parse_setting`: ``MHz``, ``W`` or ``w``)
_SETTING = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", re.ASCII)
#: the units of a setting as written: megahertz (exactly so: ``mHz`` is millihertz) and watts
_UNITS = {"MHz": "clock", "W": "limit", "w": "limit"}


def _plain(value: float) -> str:
    """``value`` as the shortest decimal that reads back as it, without an exponent
    (``1500``, ``1500.00001``)."""
    return format(Decimal(repr(value)).normalize(), "f")


@dataclass(frozen=True)
class GpuClocks:
    """What one GPU type allows and how its voltage follows its clock.

    ``sm_clock_min_mhz`` .. ``sm_clock_max_mhz``: the SM clocks it can be locked at
    (the top one is the full clock, the default setting); ``power_limit_min_w`` ..
    ``power_limit_max_w``: the per-GPU power limits it accepts; ``v_min_ratio``: core
    voltage at the lowest clock over the voltage at the full clock (linear in between);
    ``settings``: the settings offered by default (docs/clocks.md section 5)."""

    gpu: str
    sm_clock_min_mhz: float
    sm_clock_max_mhz: float
    power_limit_min_w: float
    power_limit_max_w: float
    v_min_ratio: float
    settings: tuple[str, ...] = ()
    source: str = ""
    #: the highest clock the GPU sustains unlocked (``sustained_clock_mhz``, at most the
    #: full clock; None: the full clock) and what a compute-bound pass would draw there
    #: without a power limit, over the default limit (``compute_draw_ratio``; None: not
    #: known, the calibration's draw taken as the full clock's), docs/clocks.md section 4
    sustained_clock_mhz: float | None = None
    compute_draw_ratio: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "sm_clock_min_mhz",
            "sm_clock_max_mhz",
            "power_limit_min_w",
            "power_limit_max_w",
            "v_min_ratio",
            "sustained_clock_mhz",
            "compute_draw_ratio",
        ):
            value = getattr(self, name)
            if value is None and name in ("sustained_clock_mhz", "compute_draw_ratio"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(name, f"must be a number, got {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise InputError(name, f"must be a finite number > 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        if not self.sm_clock_min_mhz < self.sm_clock_max_mhz:
            raise InputError("sm_clock_min_mhz", "must be below sm_clock_max_mhz")
        if not self.power_limit_min_w <= self.power_limit_max_w:
            raise InputError("power_limit_min_w", "must not exceed power_limit_max_w")
        if not self.v_min_ratio <= 1.0:
            raise InputError("v_min_ratio", f"must be in (0, 1], got {self.v_min_ratio!r}")
        sustained = self.sustained_clock_mhz
        if sustained is not None and not (
            self.sm_clock_min_mhz <= sustained <= self.sm_clock_max_mhz
        ):
            raise InputError(
                "sustained_clock_mhz",
                f"must be within the SM clocks {self.sm_clock_min_mhz:g}-"
                f"{self.sm_clock_max_mhz:g} MHz, got {sustained:g}",
            )
        for i, text in enumerate(self.settings):
            parse_setting(text, self, f"settings[{i}]")

    @property
    def top_mhz(self) -> float:
        """The highest clock the GPU runs at unlocked: the sustained clock where the
        catalog gives one, else the full clock."""
        if self.sustained_clock_mhz is None:
            return self.sm_clock_max_mhz
        return self.sustained_clock_mhz

    @property
    def full_clock(self) -> str:
        """The default setting as text: the full clock."""
        return f"{_plain(self.sm_clock_max_mhz)}MHz"

    def voltage_ratio(self, f_mhz: float) -> float:
        """``V(f) / V(f_max)``: linear from ``v_min_ratio`` at the lowest clock to 1."""
        span = self.sm_clock_max_mhz - self.sm_clock_min_mhz
        x = (f_mhz - self.sm_clock_min_mhz) / span
        return self.v_min_ratio + (1.0 - self.v_min_ratio) * x

    def dynamic_factor(self, f_mhz: float) -> float:
        """``(f / f_max) (V(f) / V_max)^2``: CMOS dynamic power relative to full clock."""
        v = self.voltage_ratio(f_mhz)
        return f_mhz / self.sm_clock_max_mhz * v * v


@dataclass(frozen=True)
class Setting:
    """A locked SM clock (``kind`` ``"clock"``, MHz) or a power limit (``"limit"``, W
    per GPU)."""

    kind: str
    value: float

    @property
    def text(self) -> str:
        """The setting's name: its value exactly, ``1500MHz`` or ``550W``."""
        return f"{_plain(self.value)}{'MHz' if self.kind == 'clock' else 'W'}"


def parse_setting(text: object, clocks: GpuClocks | None, field: str) -> Setting | None:
    """``text`` as a :class:`Setting` of a GPU with ``clocks``; ``None`` for the
    default (``None``, ``""`` or ``"default"``: the full clock). An input error names
    ``field`` for a malformed value, one outside the GPU's supported range, or any
    setting on a GPU without clock data."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError(field, f"must be a string like '1500MHz' or '550W', got {text!r}")
    if text.strip().lower() in ("", "default"):
        return None
    match = _SETTING.fullmatch(text)
    if match is None or match.group(2) not in _UNITS:
        unit = match.group(2) if match is not None else ""
        if unit == "mHz":
            raise InputError(
                field, f"{text!r} is in mHz (millihertz); a locked SM clock is in MHz (megahertz)"
            )
        if unit.lower() == "mhz":
            raise InputError(field, f"write the unit as MHz (megahertz), got {text!r}")
        raise InputError(
            field, f"must be '<N>MHz' (a locked SM clock) or '<N>W' (a power limit), got {text!r}"
        )
    number, kind = match.group(1), _UNITS[match.group(2)]
    value = float(number)
    if clocks is None:
        raise InputError(field, "this GPU has no clock data in the catalog: only the default")
    if kind == "clock":
        lo, hi, unit, what = clocks.sm_clock_min_mhz, clocks.sm_clock_max_mhz, "MHz", "SM clock"
    else:
        lo, hi, unit, what = clocks.power_limit_min_w, clocks.power_limit_max_w, "W", "power limit"
    if not lo <= value <= hi:
        raise InputError(
            field,
            f"{_plain(value)} {unit} is outside the {what}s {clocks.gpu} supports, "
            f"{lo:g}-{hi:g} {unit}",
        )
    setting = Setting(kind, value)
    if Decimal(number) != Decimal(_plain(value)):  # more digits than a double keeps
        raise InputError(
            field,
            f"{number} {unit} has more digits than a setting keeps; the nearest is "
            f"{setting.text!r}",
        )
    return setting


def named_settings(texts: Sequence[str], clocks: GpuClocks | None, field: str) -> tuple[str, ...]:
    """Each of ``texts`` checked by :func:`parse_setting` (an error names
    ``field[j]``) and written as this module writes it: the full clock as the GPU's full
    clock (``"default"`` on a GPU without clock data); repeats dropped, order kept."""
    full = clocks.full_clock if clocks is not None else "default"
    seen: list[str] = []
    for j, text in enumerate(texts):
        s = parse_setting(text, clocks, f"{field}[{j}]")
        name = full if s is None else s.text
        if name not in seen:
            seen.append(name)
    return tuple(seen)


def power_factor(
    clocks: GpuClocks,
    f_mhz: float,
    memory_share: float,
    throughput_ratio: float,
    anchor_mhz: float | None = None,
) -> float:
    """``k(f) = m r + (1 - m) (f V(f)^2) / (f_a V(f_a)^2)``: a phase's power above its
    static part at clock ``f`` relative to the clock ``f_a`` it was calibrated at
    (``anchor_mhz``, the full clock when None), ``m`` the HBM share of that part at
    ``f_a`` and ``r`` the phase's throughput relative to ``f_a``."""
    m = min(max(memory_share, 0.0), 1.0)
    dynamic = clocks.dynamic_factor(f_mhz)
    if anchor_mhz is not None:
        dynamic /= clocks.dynamic_factor(anchor_mhz)
    return m * throughput_ratio + (1.0 - m) * dynamic


def scaled_power(full_w: float, static_w: float, factor: float) -> float:
    """``P_static + (P_full - P_static) k``; a draw at or below the static power (a
    ramp's intercept can be) is left as it is."""
    if full_w <= static_w:
        return full_w
    return static_w + (full_w - static_w) * factor


def hbm_power_w(bytes_per_s: float) -> float:
    """Power of moving ``bytes_per_s`` through HBM at :data:`HBM_PJ_PER_BIT`."""
    return HBM_PJ_PER_BIT * 1e-12 * 8.0 * bytes_per_s


def decode_extra_g(f_ratio: float, weight_s: float, compute_s: float, batch_max: float) -> float:
    """Extra decode time per request and iteration at the clock ``f = f_ratio f_max``.

    The weight GEMMs take ``max(a_w, c B)`` at batch ``B`` (``a_w``: the weight read,
    ``c``: their compute per request at full clock, ``c / f_ratio`` at ``f``). SPEC's
    line ``alpha + g B`` holds at full clock; the extra ``max(a_w, c B / f_ratio) -
    max(a_w, c B)`` is convex in ``B`` and 0 at ``B = 0``, so its chord to
    ``B_max`` bounds it from above on ``[0, B_max]``: the slope returned. 0 at full
    clock and whenever the compute stays under the weight read."""
    if f_ratio >= 1.0 or not batch_max > 0 or not compute_s > 0:
        return 0.0
    slow = max(weight_s, compute_s / f_ratio * batch_max)
    full = max(weight_s, compute_s * batch_max)
    return (slow - full) / batch_max


def solve_power_limit(clocks: GpuClocks, limit_w: float, draw_w: Callable[[float], float]) -> float:
    """The clock (MHz) at which a phase drawing ``draw_w(f)`` per GPU (non-decreasing
    in ``f``) meets ``limit_w``: the full clock when it draws no more there, the
    lowest clock when even that draws more (the limit cannot be met), else the root
    of ``draw_w(f) = limit_w`` by bisection to :data:`LIMIT_RTOL`."""
    lo, hi = clocks.sm_clock_min_mhz, clocks.sm_clock_max_mhz
    if draw_w(hi) <= limit_w:
        return hi
    if draw_w(lo) >= limit_w:
        return lo
    while hi - lo > LIMIT_RTOL * hi:
        mid = 0.5 * (lo + hi)
        if draw_w(mid) > limit_w:
            hi = mid
        else:
            lo = mid
    return lo


def compute_bound_series(
    clocks: GpuClocks,
    static_w: float,
    limit_w: float | None,
    locked_mhz: list[float],
    anchor_mhz: float,
    anchor_w: float,
) -> tuple[list[float], list[float]]:
    """A compute-bound phase locked at each of ``locked_mhz``: its effective clock
    (MHz; below the locked one where its draw would exceed ``limit_w``) and its power
    (W), from one measured draw ``anchor_w`` at ``anchor_mhz`` (docs/clocks.md section
    6). Its time follows ``1 / f_eff``; its power ``P_static + (P - P_static) k`` with
    ``k`` the dynamic factor (no HBM share)."""

    def draw(f: float) -> float:
        ratio = clocks.dynamic_factor(f) / clocks.dynamic_factor(anchor_mhz)
        return static_w + (anchor_w - static_w) * ratio

    effective, power = [], []
    for f in locked_mhz:
        f_eff = f
        if limit_w is not None and draw(f) > limit_w:
            capped = GpuClocks(
                clocks.gpu,
                clocks.sm_clock_min_mhz,
                f,
                clocks.power_limit_min_w,
                max(clocks.power_limit_max_w, limit_w),
                clocks.v_min_ratio,
            )
            f_eff = solve_power_limit(capped, limit_w, draw)
        effective.append(f_eff)
        power.append(draw(f_eff))
    return effective, power


#: the step between an NVIDIA data-centre GPU's supported SM clocks, MHz (``nvidia-smi -q -d
#: SUPPORTED_CLOCKS`` lists them 15 MHz apart on the A100 and the H100, docs/clocks.md
#: section 5)
CLOCK_STEP_MHZ = 15.0


def clock_steps(clocks: GpuClocks) -> list[float]:
    """The clocks the GPU runs at unlocked, highest first: its top clock
    (:attr:`GpuClocks.top_mhz`, the full clock or the sustained one), then every
    :data:`CLOCK_STEP_MHZ` below it down to the lowest clock."""
    steps: list[float] = []
    k = 0
    while True:
        f = clocks.top_mhz - k * CLOCK_STEP_MHZ
        if f < clocks.sm_clock_min_mhz:
            return steps
        steps.append(f)
        k += 1


def default_clock(
    clocks: GpuClocks, draw_w: Callable[[float], float], limit_w: float | None = None
) -> float:
    """The clock a phase drawing ``draw_w(f)`` per GPU (non-decreasing in ``f``) runs at
    by default: its top clock (:attr:`GpuClocks.top_mhz`) when its draw there stays
    within ``limit_w`` (the GPU's default power limit, its highest, when None), else the
    highest of its clock steps (:func:`clock_steps`) whose draw does, and the lowest step
    when none does (docs/clocks.md section 4)."""
    limit = clocks.power_limit_max_w if limit_w is None else limit_w
    if draw_w(clocks.top_mhz) <= limit:
        return clocks.top_mhz
    steps = clock_steps(clocks)
    lo, hi = 0, len(steps) - 1  # the draw falls with the index
    if draw_w(steps[hi]) > limit:
        return steps[hi]
    while hi - lo > 1:  # steps[lo] draws more than the limit, steps[hi] no more
        mid = (lo + hi) // 2
        if draw_w(steps[mid]) > limit:
            lo = mid
        else:
            hi = mid
    return steps[hi]


def compute_draw_w(clocks: GpuClocks, static_w: float, f_mhz: float) -> float | None:
    """What a compute-bound pass draws per GPU at ``f_mhz`` without a power limit, from
    the catalog's ``compute_draw_ratio`` (its draw at the top clock over the default
    limit): ``P_static + (r L - P_static) k(f) / k(f_top)`` with ``k`` the dynamic factor
    (docs/clocks.md section 4); None where the catalog gives no ratio."""
    if clocks.compute_draw_ratio is None:
        return None
    top = clocks.compute_draw_ratio * clocks.power_limit_max_w
    return scaled_power(
        top, static_w, clocks.dynamic_factor(f_mhz) / clocks.dynamic_factor(clocks.top_mhz)
    )


def clocked_time(t_full: float, clock_share: float, f_max_mhz: float, f_mhz: float) -> float:
    """A time ``t_full`` at the full clock of which the share ``clock_share`` is bound
    by the SM clock (compute-bound kernels) and the rest is not (memory-bound kernels,
    communication, the engine's own time): ``t_full ((1 - x) + x f_max / f)``."""
    x = min(max(clock_share, 0.0), 1.0)
    return t_full * ((1.0 - x) + x * f_max_mhz / f_mhz)


def prefill_memory_bytes_per_token(
    hidden: float, q_width: float, kv_width: float, intermediate: float, tp: int, layers: int
) -> float:
    """HBM bytes per prompt token and GPU of a prefill pass's memory-bound kernels, each
    reading and writing its activations once at 2 bytes an element (docs/clocks.md
    section 2): per layer two fused residual-add RMSNorms (read the input and the
    residual, write both: ``4 d``; replicated on every GPU of a tensor-parallel group),
    the rotary embedding of the queries and keys (read and write, ``2 (q + kv) / tp``),
    the KV-cache write (``2 kv / tp``, keys and values) and the gated activation (read
    gate and up, write their product: ``3 d_ff / tp``)."""
    per_layer = 2 * 4.0 * hidden
    per_layer += 2.0 * (q_width + kv_width) / tp + 2.0 * kv_width / tp
    per_layer += 3.0 * intermediate / tp
    return 2.0 * per_layer * layers


def roofline_clock_bound(flops: float, moved_bytes: float, peak_flops: float, bw: float) -> bool:
    """Whether a kernel of ``flops`` FLOPs moving ``moved_bytes`` bytes is compute-bound
    at the GPU's peaks (its arithmetic intensity at or above ``peak_flops / bw``), so
    that its time follows the SM clock."""
    if not moved_bytes > 0:
        return flops > 0
    return flops / moved_bytes >= peak_flops / bw


def kernel_clock_bound(table: str, shape: dict[str, Any], peak_flops: float, bw: float) -> bool:
    """Whether one kernel of a composed pass (``model.performance.kernels.KernelCall``: its table's
    path and shape) is clock-bound: a GEMM by its roofline (``2 m n k`` FLOPs over its
    operands' bytes), a context attention by its roofline (causal: ``2 heads dim isl^2``
    FLOPs over its Q, K, V and output), a collective never (the links, not the SMs),
    anything else always (taken as compute)."""
    if "/comm/" in table or "nccl" in table or "allreduce" in table:
        return False
    if "/gemm/" in table and {"m", "n", "k"} <= shape.keys():
        m, n, k = (float(shape[c]) for c in ("m", "n", "k"))
        size = 1.0 if "fp8" in str(shape.get("gemm_dtype", "")) else 2.0
        return roofline_clock_bound(2.0 * m * n * k, size * (m * k + k * n + m * n), peak_flops, bw)
    if "context_attention" in table and "isl" in shape:
        isl = float(shape["isl"]) * float(shape.get("batch_size", 1))
        heads, kv = float(shape["num_heads"]), float(shape["num_key_value_heads"])
        dim = float(shape["head_dim"])
        flops = 2.0 * heads * dim * float(shape["isl"]) * isl
        moved = 2.0 * isl * dim * (2.0 * heads + 2.0 * kv)
        return roofline_clock_bound(flops, moved, peak_flops, bw)
    return True
