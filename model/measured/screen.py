"""The consistency screen: measurements that no iteration model can describe are kept
out of the fit and out of the error statistics, and listed with the reason
(``docs/calibration.md``, section 9).

A *group* is the rows of one file that differ only in the batch: the same model, task,
serving stack, GPU, tensor-, expert- and data-parallel sizes and precision (one server
configuration measured at several batch limits). Within a group, a pair of rows with
batches ``b < b'`` *violates*

* the **ITL rule** when the larger batch's median ITL is more than 10% below the smaller
  batch's: in every iteration model the time of an iteration does not fall as the batch
  grows (more requests read more KV cache and do more work);
* the **power rule** when the larger batch's power per GPU is more than 10% below the
  smaller batch's: power follows the load, and the load does not fall as the batch grows.

Which row of violating pairs is screened: in each group, as long as a pair violates,
the row in the most violating pairs goes; on a tie, the one with the smaller batch (the
row slower, or drawing more, than a larger batch), then the lower row name. The rows
screened depend only on the set of rows, never on their order.

Across GPUs, *peers* are rows of the same model, task, serving stack, tensor-, expert-
and data-parallel sizes and precision on different GPUs. A row violates

* the **GPU rule** when its median ITL is more than 10% above a peer's on a GPU it
  dominates (no lower BF16 or FP8 peak, no lower HBM bandwidth, not the same on all)
  at a batch at least 95% of its own: in every iteration model built from the GPU's
  rates the same work takes no longer on the faster GPU, and an iteration at 95% of
  a batch takes at least 95% of its time (the time per request does not fall as the
  batch shrinks), which the 10% covers. The row on the faster GPU is screened.

The ITL rule runs first and screens the whole row (its ITL is not an iteration's time
and its power was drawn at that unknown operating point). The GPU rule runs next, on the
rows the ITL rule keeps (they are also the peers it compares with), and screens the
whole row for the same reason. The power rule then runs on
the rows left and screens only their power: their ITL passed the ITL rule and is kept
in the fit and in the errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from model.catalog import load_gpu
from model.errors import InputError
from model.measured.measurements import Measurement

#: a larger batch's ITL more than this share below a smaller batch's violates the ITL rule
ITL_DROP = 0.10
#: a larger batch's power per GPU more than this share below a smaller batch's violates
#: the power rule
POWER_DROP = 0.10
#: the share of usable rows each rule is meant to screen at most; more says the data,
#: not a few rows, disagree with the model (reports flag it)
MAX_SHARE = 0.05
#: a row's ITL more than this share above a peer's on a GPU it dominates violates the
#: GPU rule
GPU_SLOWER = 0.10
#: the GPU rule compares with peers at a batch at least this share of the row's
GPU_BATCH_SHARE = 0.95
#: the rules, in the order they run
RULES = ("itl", "gpu", "power")
#: the quantities of a predicted row (``model.measured.calibrate.predict``) each rule keeps out
#: of the error statistics
EXCLUDES = {"itl": ("itl_ms", "power_w"), "gpu": ("itl_ms", "power_w"), "power": ("power_w",)}


@dataclass(frozen=True)
class Screened:
    """A row the screen keeps out, and why."""

    row: str  # where: "file: row"
    rule: str  # "itl" or "gpu" (the whole row is out), "power" (its power is out)
    file: str
    model: str
    gpu: str
    tp: int
    ep: int
    batch: float
    value: float  # the screened quantity: median ITL (ms) or power per GPU (W)
    conflicts: tuple[str, ...]  # rows of the same file it violates the rule with
    reason: str


class HasMeasurement(Protocol):
    @property
    def m(self) -> Measurement: ...


T = TypeVar("T", bound=HasMeasurement)


@dataclass
class Screen(Generic[T]):
    """Rows after the screen: ``kept`` without the rows the ITL rule screens, the power
    of those the power rule screens removed (``power_w`` None); ``screened`` lists both."""

    kept: list[T]
    screened: list[Screened]


def _group(m: Measurement) -> tuple[Any, ...]:
    return (m.file, m.model, m.task, m.stack, m.gpu, m.tp, m.ep, m.dp, m.precision)


def _itl_ms(m: Measurement) -> float | None:
    return m.itl_s * 1e3


def _power_w(m: Measurement) -> float | None:
    return m.power_w


def _violations(
    idx: list[int],
    rows: Sequence[Measurement],
    value: Callable[[Measurement], float | None],
    drop: float,
) -> list[tuple[int, int]]:
    """Pairs (smaller batch, larger batch) of ``idx`` whose value falls by more than
    ``drop`` as the batch grows."""
    out = []
    for i in idx:
        for j in idx:
            a, b = rows[i], rows[j]
            va, vb = value(a), value(b)
            if va is None or vb is None:
                continue
            if a.batch < b.batch and vb < (1.0 - drop) * va:
                out.append((i, j))
    return out


def _order(m: Measurement) -> tuple[Any, ...]:
    """A total order on rows of one group (the tie-break after the batch)."""
    return (m.batch, m.row, m.itl_s, -1.0 if m.power_w is None else m.power_w, m.output_tokens)


def _ratio(a: Measurement, b: Measurement, value: Callable[[Measurement], float | None]) -> float:
    """The larger batch's value over the smaller batch's, of two rows with values."""
    lo, hi = (a, b) if a.batch < b.batch else (b, a)
    return float(value(hi) or 0.0) / float(value(lo) or 1.0)


def _screened(
    m: Measurement, rule: str, value: float, conflicts: Sequence[str], reason: str
) -> Screened:
    """The verdict of ``rule`` on row ``m``."""
    return Screened(
        row=m.where,
        rule=rule,
        file=m.file,
        model=m.model,
        gpu=m.gpu,
        tp=m.tp,
        ep=m.ep,
        batch=m.batch,
        value=value,
        conflicts=tuple(conflicts),
        reason=reason,
    )


def _rule(
    rows: Sequence[Measurement],
    idx: list[int],
    rule: str,
    value: Callable[[Measurement], float | None],
    drop: float,
) -> dict[int, Screened]:
    """The rows of one group ``idx`` that ``rule`` screens (greedy: the row in the most
    violating pairs, ties to the smaller batch)."""
    left = sorted(idx, key=lambda i: _order(rows[i]))
    out: dict[int, Screened] = {}
    unit, name, what = (
        ("ms", "median ITL", "row and power not judged")
        if rule == "itl"
        else ("W", "power per GPU", "power not judged, its ITL kept")
    )
    while True:
        pairs = _violations(left, rows, value, drop)
        if not pairs:
            return out
        count: dict[int, int] = {}
        for i, j in pairs:
            count[i] = count.get(i, 0) + 1
            count[j] = count.get(j, 0) + 1
        worst = min(count, key=lambda i: (-count[i], _order(rows[i])))
        m = rows[worst]
        partners = [rows[j if i == worst else i] for i, j in pairs if worst in (i, j)]
        # the pair named in the reason: the largest fall
        other = min(partners, key=lambda p: (_ratio(m, p, value), _order(p)))
        names = sorted({p.row for p in partners}, key=lambda r: (len(r), r))
        v, vo = float(value(m) or 0.0), float(value(other) or 0.0)
        reason = (
            f"{'ITL' if rule == 'itl' else 'power'} rule: {name} falls as the batch grows, "
            f"{v:.4g} {unit} at batch {m.batch:.1f} against {vo:.4g} {unit} at batch "
            f"{other.batch:.1f} ({other.row}), {1.0 - _ratio(m, other, value):.0%} less at "
            f"the larger batch (more than {drop:.0%}); in {len(partners)} such pair(s) of "
            f"its group, the most; {what}"
        )
        out[worst] = _screened(m, rule, v, names, reason)
        left.remove(worst)


def _rates(gpu: str) -> tuple[float, ...] | None:
    """A GPU's BF16 and FP8 peaks and HBM bandwidth (None: not in the catalog)."""
    try:
        g = load_gpu(gpu)
    except InputError:
        return None
    return (g.flops_per_s, g.fp8_flops_per_s or g.flops_per_s, g.mem_bw_bytes_per_s)


def dominates(gpu: str, other: str) -> bool:
    """Whether `gpu` has no lower rate than `other` (BF16 and FP8 peaks, HBM
    bandwidth) and a higher one; False for a GPU the catalog does not know."""
    a, b = _rates(gpu), _rates(other)
    if a is None or b is None or a == b:
        return False
    return all(x >= y for x, y in zip(a, b, strict=True))


def _peers(m: Measurement) -> tuple[Any, ...]:
    return (m.model, m.task, m.stack, m.tp, m.ep, m.dp, m.precision)


def _gpu_rule(rows: Sequence[Measurement], idx: list[int], slower: float) -> dict[int, Screened]:
    """The rows of ``idx`` that the GPU rule screens: slower than a peer of ``idx`` on
    a GPU they dominate (the peer with the largest ratio is named)."""
    peers: dict[tuple[Any, ...], list[int]] = {}
    for i in idx:
        peers.setdefault(_peers(rows[i]), []).append(i)
    out: dict[int, Screened] = {}
    for same in peers.values():
        # the pairs of GPUs of ``same`` where the first dominates: once per pair of
        # GPUs, not per pair of rows
        gpus = {rows[i].gpu for i in same}
        faster = {(g, h) for g in gpus for h in gpus if dominates(g, h)}
        for i in same:
            m = rows[i]
            worse = [
                rows[j]
                for j in same
                if (m.gpu, rows[j].gpu) in faster
                and rows[j].batch >= GPU_BATCH_SHARE * m.batch
                and m.itl_s > (1.0 + slower) * rows[j].itl_s
            ]
            if not worse:
                continue
            other = min(worse, key=lambda p: (p.itl_s / m.itl_s, _order(p)))
            names = sorted({p.row for p in worse}, key=lambda r: (len(r), r))
            out[i] = _screened(
                m,
                "gpu",
                m.itl_s * 1e3,
                names,
                f"GPU rule: median ITL {m.itl_s * 1e3:.4g} ms at batch {m.batch:.1f} on "
                f"{m.gpu}, {m.itl_s / other.itl_s - 1.0:.0%} above {other.itl_s * 1e3:.4g} "
                f"ms at batch {other.batch:.1f} on {other.gpu} ({other.row}), a GPU it "
                f"dominates (more than {slower:.0%}); row and power not judged",
            )
    return out


def verdicts(
    rows: Sequence[Measurement],
    itl_drop: float = ITL_DROP,
    power_drop: float = POWER_DROP,
    gpu_slower: float = GPU_SLOWER,
) -> list[Screened | None]:
    """The screen's verdict on each row, in the rows' order: None for a row kept whole."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, m in enumerate(rows):
        groups.setdefault(_group(m), []).append(i)
    by_itl: dict[int, Screened] = {}
    for idx in groups.values():
        by_itl |= _rule(rows, idx, "itl", _itl_ms, itl_drop)
    by_gpu = _gpu_rule(rows, [i for i in range(len(rows)) if i not in by_itl], gpu_slower)
    out: list[Screened | None] = [None] * len(rows)
    for idx in groups.values():
        rest = [i for i in idx if i not in by_itl and i not in by_gpu]
        for i, s in (_rule(rows, rest, "power", _power_w, power_drop)).items():
            out[i] = s
    for i, s in (by_itl | by_gpu).items():
        out[i] = s
    return out


def ordered(given: Sequence[Screened | None]) -> list[Screened]:
    """The screened rows of ``given`` verdicts: ITL rule first, then by file, GPU,
    layout and batch."""
    return sorted(
        (s for s in given if s),
        key=lambda s: (RULES.index(s.rule), s.file, s.gpu, s.tp, s.ep, s.batch, s.row),
    )


def screen(
    rows: Sequence[Measurement], itl_drop: float = ITL_DROP, power_drop: float = POWER_DROP
) -> list[Screened]:
    """The rows the screen keeps out, with the reason: ITL rule first, then by file,
    GPU, layout and batch."""
    return ordered(verdicts(rows, itl_drop, power_drop))


def apply(rows: Sequence[T], given: Sequence[Screened | None]) -> list[T]:
    """``rows`` with ``given`` verdicts (:func:`verdicts` of their measurements) applied:
    rows screened by the ITL rule left out, the power of those screened by the power
    rule removed."""
    out = []
    for u, s in zip(rows, given, strict=True):
        if s is None:
            out.append(u)
        elif s.rule == "power":
            out.append(dataclasses.replace(u, m=dataclasses.replace(u.m, power_w=None)))  # type: ignore[type-var]
    return out


def screen_usable(rows: Sequence[T]) -> Screen[T]:
    """:func:`screen` of rows that carry a measurement (``model.measured.calibrate.Usable``)."""
    v = verdicts([u.m for u in rows])
    return Screen(apply(rows, v), ordered(v))


def counts(screened: Sequence[Screened]) -> dict[str, int]:
    """Rows screened per rule."""
    return {r: sum(s.rule == r for s in screened) for r in RULES}
