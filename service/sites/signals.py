"""OpenADR 3.1.0 events (:mod:`service.sites.openadr`) as grid signals over a plan's
periods, and those signals merged into a site's grid.

Three payload types become grid signals over the plan's periods:

* ``IMPORT_CAPACITY_LIMIT`` (descriptor units ``KW``) -> ``power_cap_w`` (W);
* ``PRICE`` (descriptor units ``KWH`` or ``MWH``, currency ``USD``) -> ``price_usd_per_mwh``;
* ``GHG`` (g/kWh; descriptor units ``GHG`` or none) -> ``carbon_g_per_kwh``.

Any other payload type, a missing or mismatched descriptor, a value of the wrong kind
and an interval that lies wholly outside the plan's horizon are errors naming the field
(``event.intervals[1].payloads[0].type``); nothing is dropped silently.

Choices where OpenADR 3.1.0 leaves room (or where the plan's periods force one):

* Timing: an interval without its own ``intervalPeriod`` uses the event's; the k-th
  interval of the list then starts at ``start + k * duration`` (intervals in list
  order, as OpenADR's interval ``id`` is not a sequence number). An interval's own
  ``intervalPeriod`` without a ``duration`` takes the event's duration. A duration must
  be positive: ``PT0S`` ("instantaneous or infinity, depending on payloadType") is
  refused rather than guessed.
* Several values in one payload split the interval into that many equal parts (the
  compact representation of serial data of OpenADR 3.1.0).
* ``event.duration`` (3.1.0), when given, bounds the event: intervals are cut at
  ``start + duration``, and a sequence of consecutive intervals shorter than that
  repeats (``P9999Y`` repeats indefinitely, i.e. to the end of the horizon).
* ``randomizeStart`` is not applied (the site is planned as one resource on the nominal
  start), and ``notes`` says so, as it says which values ``event.duration`` cut off.
* A period partly covered by a capacity limit takes the most restrictive limit seen
  in it (site power is constant within a period, so the limit must hold throughout).
  A period partly covered by prices or GHG values takes their time-weighted mean over
  the covered part, and ``coverage`` tells which fraction is covered; merging weighs
  the event's value with the stored value by that fraction.
* Capacity limits that overlap in time combine to the smallest; prices (or GHG values)
  that overlap in time are an error, since it is unclear which one holds.
* An interval partly outside the horizon is cut to the horizon and reported in
  ``notes``; one wholly outside is an error.
* Merging into a site's grid: the cap becomes ``min(stored, event)`` (an event never
  raises a site's cap; replace the site to lift it), price and carbon are replaced on
  the covered part of each period.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from formulation.problem import expand_series
from model.errors import InputError
from service.sites.openadr import (
    CAP,
    GHG,
    MAX_OF,
    MAX_SEGMENTS,
    PRICE,
    SIGNAL_OF,
    SUPPORTED,
    UNIT_OF,
    Duration,
    EventPayloadDescriptor,
    Interval,
    OadrEvent,
    parse_duration,
    parse_event,
)

# ---------------------------------------------------------------- event -> signals


@dataclass(frozen=True)
class _Segment:
    kind: str  # payload type
    t0: datetime
    t1: datetime
    value: float  # in the grid's unit (W, USD/MWh, g/kWh)
    path: str  # the payload, e.g. event.intervals[1].payloads[0]
    interval: int


def _descriptors(ev: OadrEvent) -> dict[str, tuple[str, EventPayloadDescriptor]]:
    out: dict[str, tuple[str, EventPayloadDescriptor]] = {}
    for j, d in enumerate(ev.payloadDescriptors or []):
        path = f"event.payloadDescriptors[{j}]"
        if d.payloadType in out:
            raise InputError(
                f"{path}.payloadType",
                f"a second descriptor for {d.payloadType} (first: {out[d.payloadType][0]})",
            )
        out[d.payloadType] = (path, d)
    return out


def _scale(kind: str, descs: Mapping[str, tuple[str, EventPayloadDescriptor]], at: str) -> float:
    """Factor from the event's unit to the grid's unit; unit mismatches are errors."""
    found = descs.get(kind)
    if kind == CAP:
        if found is None:
            raise InputError(
                "event.payloadDescriptors",
                f"{CAP} (used at {at}) needs a payloadDescriptor with units KW",
            )
        path, d = found
        if (d.units or "").upper() != "KW":
            raise InputError(f"{path}.units", f"{CAP} must be in KW, got {d.units!r}")
        return 1000.0
    if kind == PRICE:
        if found is None:
            raise InputError(
                "event.payloadDescriptors",
                f"{PRICE} (used at {at}) needs a payloadDescriptor with units KWH or MWH "
                "and currency USD",
            )
        path, d = found
        if (d.currency or "").upper() != "USD":
            raise InputError(f"{path}.currency", f"only USD prices are planned, got {d.currency!r}")
        units = (d.units or "").upper()
        if units == "KWH":
            return 1000.0
        if units == "MWH":
            return 1.0
        raise InputError(f"{path}.units", f"{PRICE} must be per KWH or MWH, got {d.units!r}")
    # GHG: the payload type itself is defined in g/kWh
    if found is not None:
        path, d = found
        if d.units is not None and d.units.upper() not in {"GHG", "G_PER_KWH"}:
            raise InputError(f"{path}.units", f"{GHG} is in g/kWh (units GHG), got {d.units!r}")
    return 1.0


def _number(path: str, v: Any, kind: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InputError(path, f"{kind} values must be finite numbers, got {v!r}")
    if v < 0:
        raise InputError(path, f"{kind} values must be >= 0, got {v!r}")
    return float(v)


def _interval_span(ev: OadrEvent, i: int, iv: Interval) -> tuple[datetime, Duration, str]:
    at = f"event.intervals[{i}]"
    own, default = iv.intervalPeriod, ev.intervalPeriod
    if own is None and default is None:
        raise InputError(
            f"{at}.intervalPeriod",
            "is needed: neither the interval nor the event has an intervalPeriod",
        )
    if own is not None:
        text = own.duration or (default.duration if default is not None else None)
        dpath = (
            f"{at}.intervalPeriod.duration"
            if own.duration or default is None
            else "event.intervalPeriod.duration"
        )
        if text is None:
            raise InputError(dpath, "is needed to place the interval in time")
        dur = parse_duration(dpath, text)
        if dur.is_zero:
            raise InputError(dpath, "must be positive (PT0S is not planned)")
        return own.start, dur, dpath
    assert default is not None
    dpath = "event.intervalPeriod.duration"
    if default.duration is None:
        raise InputError(dpath, "is needed to place the intervals in time")
    dur = parse_duration(dpath, default.duration)
    if dur.is_zero:
        raise InputError(dpath, "must be positive (PT0S is not planned)")
    return dur.times(i).after(default.start), dur, dpath


def _segments(ev: OadrEvent) -> tuple[list[_Segment], list[tuple[int, datetime, datetime]]]:
    descs = _descriptors(ev)
    segs: list[_Segment] = []
    spans: list[tuple[int, datetime, datetime]] = []
    if not ev.intervals:
        raise InputError("event.intervals", "needs at least one interval")
    for i, iv in enumerate(ev.intervals):
        start, dur, _ = _interval_span(ev, i, iv)
        end = dur.after(start)
        spans.append((i, start, end))
        if not iv.payloads:
            raise InputError(f"event.intervals[{i}].payloads", "needs at least one payload")
        seen: dict[str, int] = {}
        for j, p in enumerate(iv.payloads):
            at = f"event.intervals[{i}].payloads[{j}]"
            if p.type not in SUPPORTED:
                raise InputError(
                    f"{at}.type",
                    f"unsupported payload type {p.type!r}; supported: {', '.join(SUPPORTED)}",
                )
            if p.type in seen:
                raise InputError(
                    f"{at}.type",
                    f"{p.type} appears twice in this interval (also payloads[{seen[p.type]}])",
                )
            seen[p.type] = j
            if not p.values:
                raise InputError(f"{at}.values", "needs at least one value")
            if len(segs) + len(p.values) > MAX_SEGMENTS:
                raise InputError(
                    f"{at}.values", f"the event holds more than {MAX_SEGMENTS} values in all"
                )
            scale = _scale(p.type, descs, at)
            n = len(p.values)
            step = (end - start) / n
            for k, v in enumerate(p.values):
                x = _number(f"{at}.values[{k}]", v, p.type) * scale
                if x > MAX_OF[p.type]:
                    raise InputError(
                        f"{at}.values[{k}]",
                        f"{p.type} of {x:g} {UNIT_OF[p.type]} is above {MAX_OF[p.type]:g}",
                    )
                t0 = start + step * k
                t1 = end if k == n - 1 else start + step * (k + 1)
                segs.append(_Segment(p.type, t0, t1, x, at, i))
    return segs, spans


def _bound_by_event_duration(
    ev: OadrEvent,
    segs: list[_Segment],
    spans: list[tuple[int, datetime, datetime]],
    horizon_end: datetime,
) -> list[_Segment]:
    """Apply ``event.duration``: cut at start + duration; repeat consecutive intervals."""
    assert ev.duration is not None
    if ev.intervalPeriod is None:
        raise InputError("event.duration", "needs event.intervalPeriod.start to anchor it")
    total = parse_duration("event.duration", ev.duration)
    if total.is_zero:
        return segs
    t_start = ev.intervalPeriod.start
    t_end = total.after(t_start)
    pattern_end = max(e for _, _, e in spans)
    out: list[_Segment] = []
    if t_end > pattern_end:
        if any(iv.intervalPeriod is not None for iv in ev.intervals):
            raise InputError(
                "event.duration",
                "repeating intervals is supported only when every interval uses the "
                "event's intervalPeriod",
            )
        assert ev.intervalPeriod.duration is not None  # checked by _interval_span
        unit = parse_duration("event.intervalPeriod.duration", ev.intervalPeriod.duration)
        cycle = unit.times(len(ev.intervals))
        k = 0
        stop = min(t_end, horizon_end)
        while cycle.times(k).after(t_start) < stop:
            shift = cycle.times(k)
            for s in segs:
                out.append(
                    _Segment(
                        s.kind, shift.after(s.t0), shift.after(s.t1), s.value, s.path, s.interval
                    )
                )
            if len(out) > MAX_SEGMENTS:
                raise InputError(
                    "event.duration",
                    f"repeats the intervals into more than {MAX_SEGMENTS} values",
                )
            k += 1
    else:
        out = list(segs)
    return [
        _Segment(s.kind, s.t0, min(s.t1, t_end), s.value, s.path, s.interval)
        for s in out
        if s.t0 < t_end
    ]


def event_to_signals(
    event: OadrEvent | Mapping[str, Any],
    plan_start: datetime,
    period_minutes: float,
    n_periods: int,
) -> dict[str, Any]:
    """Per-period grid overrides of an OpenADR 3.1.0 event over a plan's periods.

    Period ``t`` spans ``[plan_start + t * period, plan_start + (t + 1) * period)``.
    Returns, for each of ``power_cap_w`` (W), ``price_usd_per_mwh`` and
    ``carbon_g_per_kwh`` (g/kWh), ``{"values": [...], "coverage": [...]}`` with one
    entry per period: the value the event sets in that period (``None`` where it sets
    none; the most restrictive cap, the time-weighted price or GHG value) and the
    fraction of the period the event covers. Also ``periods`` (indices the event
    touches), ``types`` (payload types present) and ``notes`` (parts cut at the
    horizon). Raises :class:`InputError` naming the field at fault.
    """
    ev = parse_event(event)
    if plan_start.tzinfo is None:
        raise InputError("plan_start", "needs a UTC offset")
    if n_periods < 1:
        raise InputError("n_periods", "must be >= 1")
    try:
        return _signals(ev, plan_start, period_minutes, n_periods)
    except OverflowError:
        raise InputError("event", "a date-time lies outside the years 1 to 9998") from None


def _signals(
    ev: OadrEvent, plan_start: datetime, period_minutes: float, n_periods: int
) -> dict[str, Any]:
    period = timedelta(minutes=period_minutes)
    h0 = plan_start
    h1 = plan_start + period * n_periods
    horizon = f"[{h0.isoformat()}, {h1.isoformat()})"
    segs, spans = _segments(ev)
    notes = ev.unapplied()
    if ev.duration is not None:
        given, segs = len(segs), _bound_by_event_duration(ev, segs, spans, h1)
        if len(segs) < given:  # the event's duration ends before some of its values
            notes.append(f"event.duration {ev.duration}: {given - len(segs)} values not planned")
        if not any(s.t1 > h0 and s.t0 < h1 for s in segs):
            raise InputError(
                "event.intervalPeriod.start",
                f"the event lies wholly outside the plan horizon {horizon}",
            )
    else:
        for i, t0, t1 in spans:
            if t1 <= h0 or t0 >= h1:
                raise InputError(
                    f"event.intervals[{i}]",
                    f"spans [{t0.isoformat()}, {t1.isoformat()}), wholly outside the plan horizon "
                    f"{horizon}",
                )
            if t0 < h0 or t1 > h1:
                notes.append(
                    f"event.intervals[{i}] spans [{t0.isoformat()}, {t1.isoformat()}); only "
                    f"its part in the plan horizon {horizon} is planned"
                )
    _check_overlaps(segs)
    out: dict[str, Any] = {}
    touched: set[int] = set()
    for kind in SUPPORTED:
        values: list[float | None] = [None] * n_periods
        coverage = [0.0] * n_periods
        weighted = [0.0] * n_periods
        for s in (s for s in segs if s.kind == kind):
            first = max(0, math.floor((s.t0 - h0) / period))
            last = min(n_periods - 1, math.ceil((s.t1 - h0) / period) - 1)
            for t in range(first, last + 1):
                p0 = h0 + period * t
                p1 = p0 + period
                overlap = (min(s.t1, p1) - max(s.t0, p0)) / period
                if overlap <= 0:
                    continue
                touched.add(t)
                coverage[t] += overlap
                if kind == CAP:
                    cur = values[t]
                    values[t] = s.value if cur is None else min(cur, s.value)
                else:
                    weighted[t] += s.value * overlap
        if kind != CAP:
            values = [
                weighted[t] / coverage[t] if coverage[t] > 0 else None for t in range(n_periods)
            ]
        out[SIGNAL_OF[kind]] = {
            "values": values,
            "coverage": [min(1.0, c) for c in coverage],
        }
    out["periods"] = sorted(touched)
    out["types"] = sorted({s.kind for s in segs})
    out["notes"] = notes
    return out


def _check_overlaps(segs: Sequence[_Segment]) -> None:
    for kind in (PRICE, GHG):
        mine = sorted((s for s in segs if s.kind == kind), key=lambda s: (s.t0, s.t1))
        for a, b in zip(mine, mine[1:], strict=False):
            if b.t0 < a.t1 and a.interval != b.interval:
                raise InputError(
                    b.path,
                    f"its {kind} overlaps the {kind} of {a.path} in time; "
                    "which one holds is ambiguous",
                )


def merge_signals(grid: Mapping[str, Any], signals: Mapping[str, Any], n: int) -> dict[str, Any]:
    """A site's grid (constants or per-period lists) with an event's signals merged in.

    Cap: ``min(stored, event)`` where the event sets one. Price and carbon: the covered
    fraction ``c`` of a period takes the event's value, ``c * event + (1 - c) * stored``.
    The result has one value per period for every signal.
    """
    cap = list(expand_series("grid.power_cap_w", grid["power_cap_w"], n))
    price = list(expand_series("grid.price_usd_per_mwh", grid.get("price_usd_per_mwh", 0.0), n))
    carbon = list(expand_series("grid.carbon_g_per_kwh", grid.get("carbon_g_per_kwh", 0.0), n))
    for t, v in enumerate(signals["power_cap_w"]["values"]):
        if v is not None:
            cap[t] = min(cap[t], v)
    for key, series in (("price_usd_per_mwh", price), ("carbon_g_per_kwh", carbon)):
        sig = signals[key]
        for t, v in enumerate(sig["values"]):
            if v is not None:
                c = sig["coverage"][t]
                series[t] = v if c >= 1.0 else c * v + (1.0 - c) * series[t]
    return {**grid, "power_cap_w": cap, "price_usd_per_mwh": price, "carbon_g_per_kwh": carbon}
