"""Per-configuration piecewise tables (SPEC 3), cached by a hash of their inputs.

For every candidate ``(n_P, n_D)`` the table keeps capacity, the per-instance rates,
``B*``, ``P(mu)``, ``P(0)`` and the breakpoints of the concave piecewise-linear power
curve ``P(lambda)`` on ``[0, mu]``: ``0``, the loads where a ramp saturates (only those
strictly inside ``(0, mu)``), and ``mu``, with the power at each, and the prefill
instances' part of it (each phase's power is linear between the same breakpoints, so
the prefill part interpolates as exactly as the whole; the decode part is the rest).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cachetools import LRUCache
from numpy.typing import ArrayLike, NDArray

from model.capacity import CapacityResult, phase_power_w
from model.queueing.targets import evaluate_spec
from model.spec import DeploymentSpec

#: Most tables kept in memory (least recently used are dropped first).
CACHE_SIZE = 128


@dataclass(frozen=True)
class ConfigTable:
    """The piecewise table of SPEC 3 for one deployment and workload."""

    key: str  # sha256 of the inputs
    result: CapacityResult
    bp_load_rps: NDArray[np.float64]  # (n, 4): breakpoint loads, NaN-padded
    bp_power_w: NDArray[np.float64]  # (n, 4): power at each breakpoint, NaN-padded
    bp_count: NDArray[np.int64]  # number of breakpoints per configuration (>= 1)
    bp_prefill_power_w: NDArray[np.float64]  # (n, 4): the prefill instances' part

    def __len__(self) -> int:
        return len(self.result)

    def breakpoints(self, i: int) -> tuple[list[float], list[float]]:
        """Sorted loads (req/s) and powers (W) of configuration ``i``."""
        k = int(self.bp_count[i])
        return self.bp_load_rps[i, :k].tolist(), self.bp_power_w[i, :k].tolist()

    def records(self) -> list[dict[str, Any]]:
        out = []
        for i in range(len(self)):
            rec = self.result.record(i)
            loads, powers = self.breakpoints(i)
            rec["breakpoints"] = [
                {"load_rps": a, "power_w": b} for a, b in zip(loads, powers, strict=True)
            ]
            out.append(rec)
        return out


def _breakpoints(
    r: CapacityResult,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64], NDArray[np.float64]]:
    c = r.coefficients
    npf = r.n_p.astype(float)
    ndf = r.n_d.astype(float)
    mu = r.capacity_rps
    with np.errstate(divide="ignore", invalid="ignore"):
        sat_p = np.where(
            c.gamma_prefill_w > 0,
            (c.psat_prefill_w - c.p0_prefill_w) / c.gamma_prefill_w * npf * r.mu_p_rps,
            np.inf,
        )
        sat_d = np.where(
            c.gamma_decode_w > 0,
            (c.psat_decode_w - c.p0_decode_w) / c.gamma_decode_w * ndf * r.mu_d_max_rps,
            np.inf,
        )
    inner = np.stack([np.minimum(sat_p, sat_d), np.maximum(sat_p, sat_d)], axis=1)
    inner = np.where((inner > 0) & (inner < mu[:, None]), inner, np.nan)
    loads = np.column_stack([np.zeros_like(mu), inner, mu])
    # push NaNs (absent breakpoints) and a duplicate mu == 0 to the end of each row
    loads[:, 3] = np.where(mu > 0, mu, np.nan)
    order = np.argsort(np.where(np.isnan(loads), np.inf, loads), axis=1, kind="stable")
    loads = np.take_along_axis(loads, order, axis=1)
    count = np.sum(~np.isnan(loads), axis=1).astype(np.int64)
    safe = np.nan_to_num(loads, nan=0.0)
    with np.errstate(invalid="ignore"):  # 0 x inf for n_D = 0 with no decode work
        decode_max_total = np.where(ndf > 0, ndf * r.mu_d_max_rps, 0.0)
    prefill, decode = phase_power_w(
        c,
        npf[:, None],
        ndf[:, None],
        (npf * r.mu_p_rps)[:, None],
        decode_max_total[:, None],
        safe,
    )
    absent = np.isnan(loads)
    powers = np.where(absent, np.nan, prefill + decode)  # P(n_P, n_D, lambda), SPEC 2.6
    return loads, powers, count, np.where(absent, np.nan, prefill)


def table_key(spec: DeploymentSpec, n_p: ArrayLike, n_d: ArrayLike) -> str:
    """sha256 of the deployment's inputs and the candidate list."""
    return _key(_described(spec), n_p, n_d)


def _described(spec: DeploymentSpec) -> bytes:
    return json.dumps(spec.describe(), sort_keys=True, default=str).encode()


def _key(described: bytes, n_p: ArrayLike, n_d: ArrayLike) -> str:
    h = hashlib.sha256()
    h.update(described)
    h.update(np.ascontiguousarray(np.asarray(n_p, dtype=np.int64)).tobytes())
    h.update(b"|")
    h.update(np.ascontiguousarray(np.asarray(n_d, dtype=np.int64)).tobytes())
    return h.hexdigest()


_cache: LRUCache[str, ConfigTable] = LRUCache(CACHE_SIZE)
_lock = threading.Lock()


def build_table(spec: DeploymentSpec, n_p: ArrayLike, n_d: ArrayLike) -> ConfigTable:
    """The table for the candidates ``(n_p[i], n_d[i])``; cached by :func:`table_key`."""
    return build_tables(spec, [(n_p, n_d)])[0]


def build_tables(
    spec: DeploymentSpec, grids: Sequence[tuple[ArrayLike, ArrayLike]]
) -> list[ConfigTable]:
    """:func:`build_table` of each candidate list ``grids[j] = (n_p, n_d)`` of one spec.
    The lists not cached are evaluated in one pass over their concatenation, each list a
    group of :func:`~model.capacity.evaluate` (the batch root is shared within a list
    only), so each table's rows are those the list gives alone, at the fixed cost of one
    evaluation instead of one per list (``root_passes`` is the pass's). Repeated lists
    share one table."""
    described = _described(spec)
    keys = [_key(described, n_p, n_d) for n_p, n_d in grids]
    out: dict[str, ConfigTable] = {}
    with _lock:
        for key in keys:
            hit = _cache.get(key)
            if hit is not None:
                out[key] = hit
    todo: dict[str, tuple[NDArray[np.int64], NDArray[np.int64]]] = {}
    for key, (n_p, n_d) in zip(keys, grids, strict=True):
        if key not in out and key not in todo:
            todo[key] = (np.asarray(n_p, dtype=np.int64), np.asarray(n_d, dtype=np.int64))
    if todo:
        sizes = [p.size for p, _ in todo.values()]
        # the capacities under the deployment's latency targets, if it has any
        result = evaluate_spec(
            spec,
            np.concatenate([p.ravel() for p, _ in todo.values()]),
            np.concatenate([d.ravel() for _, d in todo.values()]),
            groups=None if len(sizes) == 1 else np.repeat(np.arange(len(sizes)), sizes),
        )
        loads, powers, count, prefill = _breakpoints(result)
        ends = np.cumsum([0, *sizes])
        made = {}
        for key, a, b in zip(todo, ends[:-1], ends[1:], strict=True):
            made[key] = ConfigTable(
                key, result.rows(a, b), loads[a:b], powers[a:b], count[a:b], prefill[a:b]
            )
        out |= made
        with _lock:
            for key, table in made.items():
                _cache[key] = table  # the least recently used goes beyond CACHE_SIZE
    return [out[key] for key in keys]


def clear_cache() -> None:
    with _lock:
        _cache.clear()
