"""Capacity-power Pareto front and selections on it (SPEC 2.7).

Choices where SPEC leaves room:

* Two configurations with exactly equal ``(mu, P)`` do not dominate each other, so
  both stay on the front (SPEC: "one strict").
* Ties in a selection (equal power) go to the larger capacity, then fewer GPUs.
* epsilon-Pareto agreement: the 400 required rates are log-spaced from the smallest
  to the largest rate that both fronts can serve with the headroom (below the
  smallest capacity both select their least-power point, which is still compared).
  A selection agrees when both pick the same ``(n_P, n_D)`` or when
  ``|P_a - P_b| <= epsilon * P_b``, the second front being the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from model.errors import InputError


def pareto_mask(capacity_rps: ArrayLike, power_w: ArrayLike) -> NDArray[np.bool_]:
    """True where no other point has ``mu' >= mu`` and ``P' <= P`` with one strict.

    O(n log n): sort by capacity (descending) then power (ascending); a point is
    dominated iff some point of strictly larger capacity has power ``<= P``, or a point
    of equal capacity has strictly smaller power.
    """
    mu = np.asarray(capacity_rps, dtype=float)
    p = np.asarray(power_w, dtype=float)
    n = mu.shape[0]
    if n == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort((p, -mu))
    mu_s, p_s = mu[order], p[order]
    prefix_min = np.empty(n)
    prefix_min[0] = np.inf
    np.minimum.accumulate(p_s[:-1], out=prefix_min[1:])
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    new_group[1:] = mu_s[1:] != mu_s[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    dominated = (prefix_min[group_start] <= p_s) | (p_s[group_start] < p_s)
    mask = np.empty(n, dtype=bool)
    mask[order] = ~dominated
    return mask


def front_indices(capacity_rps: ArrayLike, power_w: ArrayLike) -> NDArray[np.int64]:
    """Indices of the front, ordered by capacity (ascending), then power."""
    mu = np.asarray(capacity_rps, dtype=float)
    p = np.asarray(power_w, dtype=float)
    idx = np.flatnonzero(pareto_mask(mu, p))
    return idx[np.lexsort((p[idx], mu[idx]))].astype(np.int64)


def _check_headroom(headroom: float) -> None:
    if not (0.0 < headroom <= 1.0):
        raise InputError("headroom", "must be in (0, 1]")


def min_power_index(
    capacity_rps: ArrayLike,
    power_w: ArrayLike,
    required_rps: float,
    headroom: float = 1.0,
    gpus: ArrayLike | None = None,
) -> int | None:
    """Least-power point with ``headroom * mu >= required_rps``; None if none qualifies."""
    _check_headroom(headroom)
    if not np.isfinite(required_rps) or required_rps < 0:
        raise InputError("required_rps", "must be finite and >= 0")
    mu = np.asarray(capacity_rps, dtype=float)
    p = np.asarray(power_w, dtype=float)
    ok = np.flatnonzero(headroom * mu >= required_rps)
    if ok.size == 0:
        return None
    g = np.zeros_like(mu) if gpus is None else np.asarray(gpus, dtype=float)
    best = np.lexsort((g[ok], -mu[ok], p[ok]))[0]
    return int(ok[best])


def max_capacity_index(capacity_rps: ArrayLike, power_w: ArrayLike, budget_w: float) -> int | None:
    """Largest-capacity point with ``P <= budget_w``; None if none qualifies."""
    if not np.isfinite(budget_w) or budget_w < 0:
        raise InputError("budget_w", "must be finite and >= 0")
    mu = np.asarray(capacity_rps, dtype=float)
    p = np.asarray(power_w, dtype=float)
    ok = np.flatnonzero(p <= budget_w)
    if ok.size == 0:
        return None
    best = np.lexsort((p[ok], -mu[ok]))[0]
    return int(ok[best])


@dataclass(frozen=True)
class Agreement:
    """Result of :func:`eps_pareto_agreement`."""

    share: float  # fraction of required rates where the selections agree
    required_rps: NDArray[np.float64]
    agree: NDArray[np.bool_]
    power_a_w: NDArray[np.float64]
    power_b_w: NDArray[np.float64]


def eps_pareto_agreement(
    front_a: tuple[ArrayLike, ArrayLike, ArrayLike],
    front_b: tuple[ArrayLike, ArrayLike, ArrayLike],
    epsilon: float = 0.03,
    n_rates: int = 400,
    headroom: float = 1.0,
) -> Agreement:
    """Share of ``n_rates`` log-spaced required rates where two fronts agree (SPEC 2.7).

    Each front is ``(capacity_rps, power_w, config_ids)``; ``config_ids`` identify
    configurations across the two (e.g. ``n_P * 100000 + n_D``). See the module
    docstring for the range of rates and the agreement rule.
    """
    _check_headroom(headroom)
    if not (epsilon >= 0):
        raise InputError("epsilon", "must be >= 0")
    if n_rates < 2:
        raise InputError("n_rates", "must be >= 2")
    mu_a, p_a, id_a = (np.asarray(v) for v in front_a)
    mu_b, p_b, id_b = (np.asarray(v) for v in front_b)
    if mu_a.size == 0 or mu_b.size == 0:
        raise InputError("front", "both fronts need at least one point")
    lo = min(mu_a.min(), mu_b.min()) * headroom
    hi = min(mu_a.max(), mu_b.max()) * headroom
    if not (lo > 0):
        raise InputError("front", "capacities must be positive")
    rates = np.geomspace(lo, hi, n_rates) if hi > lo else np.full(n_rates, lo)
    agree = np.zeros(n_rates, dtype=bool)
    pa = np.zeros(n_rates)
    pb = np.zeros(n_rates)
    for i, r in enumerate(rates):
        ia = min_power_index(mu_a, p_a, r, headroom)
        ib = min_power_index(mu_b, p_b, r, headroom)
        if ia is None or ib is None:  # cannot happen inside the range; guard rounding
            continue
        pa[i], pb[i] = p_a[ia], p_b[ib]
        agree[i] = id_a[ia] == id_b[ib] or abs(pa[i] - pb[i]) <= epsilon * pb[i]
    return Agreement(float(agree.mean()), rates, agree, pa, pb)


#: A configuration's GPU settings as a front over settings names them (docs/clocks.md):
#: ``(prefill_setting, decode_setting)``.
SettingPair = tuple[str, str]

T = TypeVar("T")


def setting_pair(cfg: Mapping[str, Any]) -> SettingPair | None:
    """The settings a configuration of a front report names (None: a front without
    settings, every configuration at the deployment's own)."""
    if "prefill_setting" not in cfg:
        return None
    return str(cfg["prefill_setting"]), str(cfg["decode_setting"])


def at_setting(value: T | Mapping[SettingPair, T], cfg: Mapping[str, Any]) -> T:
    """What a check uses for configuration ``cfg``: ``value`` itself, or, when it is
    given per setting pair (a front over settings, whose configurations each name
    theirs), the entry of ``cfg``'s pair."""
    if not isinstance(value, Mapping):
        return value
    pair = setting_pair(cfg)
    if pair is None or pair not in value:
        raise KeyError(f"no entry for the settings {pair} of {cfg['n_p']}P{cfg['n_d']}D")
    return value[pair]


#: How a round's checks are run: ``map_checks(check, configs)`` yields ``check(c)`` for
#: each configuration in order (the built-in ``map``: one after the other, here).
CheckMap = Callable[
    [Callable[[dict[str, Any]], dict[str, Any]], list[dict[str, Any]]],
    Iterable[dict[str, Any]],
]


def restrict_front(
    report: dict[str, Any],
    check: Callable[[dict[str, Any]], dict[str, Any]],
    map_checks: CheckMap = map,
) -> tuple[dict[str, Any], int]:
    """A front report (``pdwatt front``) restricted to the configurations that ``check``
    accepts: ``check(config)`` returns a verdict whose ``meets`` says whether the
    configuration stays; it is stored under the configuration's ``slo``. Only
    configurations that reach the front of the remaining candidates are checked: one
    dominated by a configuration that meets the check can never be on the new front, so
    the result is the same as checking every configuration first (those never checked
    get ``{"checked": False, "simulated": False, "meets": None}``). The selections
    (``min_power_for_rate``, ``max_capacity_under_budget``) are redone on the new front.
    The configurations of one round (those on the current front, not yet checked) do not
    depend on each other's verdicts, so ``map_checks`` may run them side by side (in
    other processes: ``check`` must then pickle); the result does not depend on how.
    Returns the new report and the number of configurations checked."""
    configs = [dict(c) for c in report["configs"]]
    mu = np.array([c["capacity_rps"] for c in configs], dtype=float)
    power = np.array([c["power_w"] for c in configs], dtype=float)
    alive = mu > 0
    verdict: dict[int, dict[str, Any]] = {}
    while True:
        idx = np.flatnonzero(alive)
        front = idx[front_indices(mu[idx], power[idx])] if idx.size else idx
        todo = [int(i) for i in front if int(i) not in verdict]
        if not todo:
            break
        checked = map_checks(check, [configs[i] for i in todo])
        for i, v in zip(todo, checked, strict=True):
            verdict[i] = {"checked": True} | v
            if not v["meets"]:
                alive[i] = False
    for i, c in enumerate(configs):
        c["slo"] = verdict.get(i, {"checked": False, "simulated": False, "meets": None})
    out = dict(report)
    out["configs"] = configs
    out["front"] = [configs[int(i)] for i in front]
    mu_f, p_f = mu[front], power[front]
    gpus_f = np.array([configs[int(i)]["gpus"] for i in front], dtype=float)
    if "min_power_for_rate" in report:
        sel = dict(report["min_power_for_rate"])
        j = (
            min_power_index(mu_f, p_f, sel["required_rps"], sel["headroom"], gpus_f)
            if front.size
            else None
        )
        sel["config"] = None if j is None else configs[int(front[j])]
        out["min_power_for_rate"] = sel
    if "max_capacity_under_budget" in report:
        sel = dict(report["max_capacity_under_budget"])
        j = max_capacity_index(mu_f, p_f, sel["budget_w"]) if front.size else None
        sel["config"] = None if j is None else configs[int(front[j])]
        out["max_capacity_under_budget"] = sel
    return out, len(verdict)


def restrict_to_slo(
    report: dict[str, Any],
    slo_check: Callable[..., dict[str, Any]],
    map_checks: CheckMap,
    targets: tuple[float | None, float | None],
    at_load: float,
    fields: Callable[[int, list[dict[str, Any]]], dict[str, Any]],
    rule: str,
    **context: Any,
) -> dict[str, Any]:
    """:func:`restrict_front` by latency targets ``(ttft_p99_s, tpot_p99_s)``: each
    configuration is judged by ``slo_check(config, targets=, at_load=, **context)``. The
    report's ``slo`` summary gives the targets and ``at_load``, ``fields(checked,
    verdicts)`` (the verdicts of the configurations checked), how many of those meet the
    targets and how many fail, and the ``rule`` that decided."""
    check = partial(slo_check, targets=targets, at_load=at_load, **context)
    out, checked = restrict_front(report, check, map_checks)
    verdicts = [c["slo"] for c in out["configs"] if c["slo"]["checked"]]
    failing = sum(1 for v in verdicts if not v["meets"])
    out["slo"] = {
        "ttft_p99_s": targets[0],
        "tpot_p99_s": targets[1],
        "at_load": at_load,
        **fields(checked, verdicts),
        "meeting": checked - failing,
        "failing": failing,
        "rule": rule,
    }
    return out


def check_slo_targets(ttft_p99_s: float | None, tpot_p99_s: float | None, at_load: float) -> None:
    """The latency targets of a front's SLO filter: at least one, each > 0 s, and a load
    fraction in (0, 1]."""
    if ttft_p99_s is None and tpot_p99_s is None:
        raise InputError("slo", "give --ttft-p99 and/or --tpot-p99")
    for name, v in (("ttft_p99", ttft_p99_s), ("tpot_p99", tpot_p99_s)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InputError(name, "must be > 0 seconds")
    if not (0 < at_load <= 1):
        raise InputError("at_load", "must be in (0, 1]")


def within_targets(
    values: tuple[float | None, float | None], targets: tuple[float | None, float | None]
) -> bool:
    """Whether each latency is within its target (a missing target always is; a missing
    value never meets a target)."""
    pairs = zip(values, targets, strict=True)
    return all(t is None or (v is not None and v <= t) for v, t in pairs)
