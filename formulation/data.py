"""Numbers of a schedule problem: tables per deployment and per-period parameters.

Built once from a validated :class:`~formulation.problem.ScheduleProblem`; every
solver (compact MILP, decomposition, baselines) and the independent pricing of a
schedule read only this.

Units: power in W, loads in req/s, money in USD; ``cost_usd_per_w[t]`` is the cost
of drawing one IT watt (before PUE) through period ``t``: energy plus carbon,
``dt_h * PUE * (price / 1e6 + carbon_g_per_kwh * carbon_price / 1e9)``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from formulation import memory
from formulation.problem import DeploymentInput, ScheduleProblem, validate
from model.capacity import Coefficients
from model.clocks import named_settings
from model.errors import InputError, PdwattError
from model.latency_targets import LatencyTargets
from model.operations import SpecRequest, instance_gpus, resolve_spec
from model.simulator import resolve_samples
from model.spec import DeploymentSpec, setting_arg, with_settings, with_targets
from model.tables import ConfigTable, build_table, build_tables

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: the fields of a deployment's spec that the site's request gives
SITE_FIELDS = ("interconnect", "interconnect_gb_per_s")


@dataclass(frozen=True)
class DeploymentData:
    """One deployment's candidates (index 0 is "off") and per-period numbers."""

    name: str
    pool: str
    spec: DeploymentSpec
    table: ConfigTable  # candidates 1..K-1 (off excluded)
    n_p: IntArray  # (K,)
    n_d: IntArray
    gpus: IntArray
    capacity_rps: FloatArray  # (K,) 0 for off
    bp_load_rps: FloatArray  # (K, 4) NaN-padded breakpoints of P(lambda) on [0, mu]
    bp_power_w: FloatArray
    bp_count: IntArray
    bp_prefill_power_w: FloatArray  # (K, 4) the prefill instances' part of bp_power_w
    demand_rps: FloatArray  # (T,)
    smax_rps: FloatArray  # (T, K): min(demand, headroom * mu)
    unserved_usd_per_rps: FloatArray  # (T,): value of one req/s unserved through a period
    initial: int  # candidate index of the initial state
    off_allowed: bool  # False when min_n_p or min_n_d >= 1
    headroom: float
    measured_calibration: bool
    #: the (prefill, decode) GPU settings the candidates run at, when the deployment
    #: lists settings (None: the full clock only, named nowhere); ``option[k]`` is the
    #: index of candidate ``k``'s pair (0 for off). Candidates of one ``(n_P, n_D)`` at
    #: different settings are distinct choices whose moves between them are free: every
    #: transition is priced on ``n_p``/``n_d`` alone
    settings: tuple[tuple[str, str], ...] | None = None
    option: IntArray | None = None
    #: (T, K) with settings: a candidate of the same ``(n_P, n_D)`` that dominates
    #: ``k`` in period ``t`` (:func:`period_dominated`), ``k`` itself where none does; no
    #: schedule is lost without the dominated choices, so solvers leave them out.
    #: None: every candidate counts
    dominator: NDArray[np.int32] | None = None
    #: phases on two GPU types (docs/mixed-gpus.md): the prefill phase's pool (``pool``
    #: is then the decode phase's) and each candidate's GPUs of either phase (K,);
    #: None when both phases draw from ``pool``
    prefill_pool: str | None = None
    prefill_gpus: IntArray | None = None
    decode_gpus: IntArray | None = None

    @cached_property
    def useful(self) -> NDArray[np.bool_] | None:
        """(T, K) the choices no other of their configuration dominates (None: all)."""
        if self.dominator is None:
            return None
        return np.asarray(self.dominator == np.arange(self.n_configs, dtype=np.int32))

    def period_allowed(self) -> NDArray[np.bool_]:
        """(T, K) the choices a solver needs: :attr:`allowed`, less the candidates
        another one of their configuration dominates in the period (computed once,
        read-only: solvers call this inside their period loops)."""
        return self._period_allowed

    @cached_property
    def _period_allowed(self) -> NDArray[np.bool_]:
        ok = np.broadcast_to(self.allowed, self.smax_rps.shape)
        if self.useful is None:
            return ok  # a read-only view already
        out = ok & self.useful
        out.flags.writeable = False
        return out

    def setting_of(self, k: int) -> tuple[str, str] | None:
        """Candidate ``k``'s ``(prefill, decode)`` settings (None without settings)."""
        if self.settings is None or self.option is None:
            return None
        return self.settings[int(self.option[k])]

    @property
    def n_configs(self) -> int:
        return int(self.n_p.shape[0])

    @property
    def allowed(self) -> NDArray[np.bool_]:
        """Candidates this deployment may run (off only if its bounds allow it)."""
        ok = np.ones(self.n_configs, dtype=bool)
        ok[0] = self.off_allowed
        return ok

    def power_w(self, k: int | IntArray, load_rps: float | FloatArray) -> FloatArray:
        """IT power ``P_k(s)`` of configuration(s) ``k`` at served load(s), exact
        piecewise-linear, vectorised (``k`` and ``s`` broadcast): the power at zero load
        plus each segment's slope times the part of ``s`` that falls in it (flat beyond
        capacity)."""
        k_arr, s_arr = _indexed(k, load_rps)
        return _piecewise(self.bp_load_rps[k_arr], self.bp_power_w[k_arr], s_arr)

    def phase_power_w(
        self, k: int | IntArray, load_rps: float | FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """The prefill and the decode instances' parts of :meth:`power_w` (same
        arguments): each phase's power is linear between the same breakpoints, so the
        prefill part interpolates exactly like the whole; the decode part is the rest."""
        k_arr, s_arr = _indexed(k, load_rps)
        prefill = _piecewise(self.bp_load_rps[k_arr], self.bp_prefill_power_w[k_arr], s_arr)
        return prefill, self.power_w(k, load_rps) - prefill

    def power_at(self, k: int, load_rps: float) -> float:
        """:meth:`power_w` of one configuration at one load, for callers pricing single
        decisions: linear interpolation over the same breakpoints, flat beyond them."""
        c = int(self.bp_count[k])
        return float(np.interp(load_rps, self.bp_load_rps[k, :c], self.bp_power_w[k, :c]))

    @cached_property
    def full_load_power_w(self) -> FloatArray:
        """(T, K) ``P_k(smax[t, k])``: each candidate's power at the most it may serve
        in each period (computed once, read by the DPs and the one-period problems)."""
        return self.power_w(np.arange(self.n_configs)[None, :], self.smax_rps)

    def max_load_within(self, k: int | IntArray, budget_w: float | FloatArray) -> FloatArray:
        """Largest load ``s`` with ``P_k(s) <= budget_w`` (before clipping to ``smax``);
        -1 where even zero load exceeds the budget. Vectorised like :meth:`power_w`."""
        k_arr, b = _indexed(k, budget_w)
        xs = self.bp_load_rps[k_arr]
        ys = self.bp_power_w[k_arr]
        out = np.where(b >= ys[..., 0], 0.0, -1.0)
        for j in range(3):
            x0, x1, y0, y1 = xs[..., j], xs[..., j + 1], ys[..., j], ys[..., j + 1]
            valid = ~np.isnan(x1) & (y0 <= b)
            with np.errstate(divide="ignore", invalid="ignore"):
                frac = np.where(y1 > y0, (b - y0) / (y1 - y0), 1.0)
            cand = x0 + np.clip(frac, 0.0, 1.0) * (x1 - x0)
            out = np.where(valid, np.maximum(out, cand), out)
        return out

    def max_load_at(self, k: int, budget_w: float) -> float:
        """:meth:`max_load_within` of one configuration at one budget, segment by
        segment in plain floats (the same rule, for callers pricing single decisions)."""
        c = int(self.bp_count[k])
        xs = self.bp_load_rps[k, :c].tolist()
        ys = self.bp_power_w[k, :c].tolist()
        out = 0.0 if budget_w >= ys[0] else -1.0
        for j in range(c - 1):
            x0, x1, y0, y1 = xs[j], xs[j + 1], ys[j], ys[j + 1]
            if y0 <= budget_w:
                frac = (budget_w - y0) / (y1 - y0) if y1 > y0 else 1.0
                out = max(out, x0 + min(max(frac, 0.0), 1.0) * (x1 - x0))
        return out

    def curve(self, t: int, k: int) -> tuple[list[float], list[float]]:
        """Breakpoints of ``P_k`` clipped to ``[0, smax[t, k]]`` (loads, powers)."""
        c = int(self.bp_count[k])
        loads = self.bp_load_rps[k, :c]
        powers = self.bp_power_w[k, :c]
        smax = float(self.smax_rps[t, k])
        keep = loads < smax
        xs = loads[keep].tolist()
        ys = powers[keep].tolist()
        if smax > 0:
            xs.append(smax)
            ys.append(float(np.interp(smax, loads, powers)))
        if not xs:
            xs, ys = [0.0], [float(powers[0])]
        return xs, ys


@dataclass(frozen=True)
class ScheduleData:
    problem: ScheduleProblem
    n_periods: int
    period_hours: float
    deployments: tuple[DeploymentData, ...]
    pools: tuple[str, ...]
    pool_gpus: IntArray  # (G,)
    pool_of: IntArray  # (M,) pool index of each deployment
    pue: float
    idle_gpu_power_w: float
    power_cap_w: FloatArray  # (T,) site power (after PUE)
    cost_usd_per_w: FloatArray  # (T,)
    price_usd_per_mwh: FloatArray
    carbon_g_per_kwh: FloatArray
    carbon_price_usd_per_tonne: float
    start_cost_usd: float
    stop_cost_usd: float
    max_changes: int | None
    #: (M,) the pool of each deployment's prefill phase where it differs from its
    #: ``pool_of`` (then the decode phase's); None: every deployment in one pool
    prefill_pool_of: IntArray | None = None
    #: the largest MILP, in choices, the memory budget leaves room for
    #: (:attr:`memory.MemoryEstimate.milp_budget_choices`); None: no budget
    milp_choices: int | None = None

    @property
    def total_gpus(self) -> int:
        return int(self.pool_gpus.sum())

    def pool_use(self, m: int) -> tuple[tuple[int, IntArray], ...]:
        """The GPU pools deployment ``m`` draws from, each with the GPUs every candidate
        takes of it, (K,): its one pool with ``gpus``, or, for phases on two GPU types,
        the prefill pool with the prefill GPUs and the decode pool with the decode GPUs
        (docs/mixed-gpus.md)."""
        d = self.deployments[m]
        g = int(self.pool_of[m])
        if d.prefill_gpus is None or d.decode_gpus is None or self.prefill_pool_of is None:
            return ((g, d.gpus),)
        return ((int(self.prefill_pool_of[m]), d.prefill_gpus), (g, d.decode_gpus))

    def add_pool_use(self, used: NDArray[np.generic], m: int, k: int | IntArray) -> None:
        """Add to ``used`` (G, ...) the GPUs deployment ``m``'s candidate(s) ``k`` take of
        each pool (``k`` shaped like ``used``'s trailing axes)."""
        for g, gpus in self.pool_use(m):
            used[g] += gpus[k]

    def gpu_price(self, m: int, sigma: FloatArray) -> FloatArray:
        """Deployment ``m``'s price per GPU of each candidate at the pools' prices
        ``sigma`` (G, T): its pool's (T,) when it draws from one, else (T, K), the
        prefill and decode GPUs' prices averaged over the candidate's GPUs (times
        ``gpus`` it is what the candidate pays both pools)."""
        use = self.pool_use(m)
        if len(use) == 1:
            return np.asarray(sigma[use[0][0]])
        gpus = self.deployments[m].gpus.astype(float)
        out = np.zeros((sigma.shape[1], gpus.size))
        with np.errstate(divide="ignore", invalid="ignore"):
            for g, part in use:
                out += sigma[g][:, None] * np.where(gpus > 0, part / gpus, 0.0)[None, :]
        return out

    @property
    def it_cap_w(self) -> FloatArray:
        """IT power allowed per period: ``cap / PUE``."""
        return self.power_cap_w / self.pue

    @property
    def idle_site_it_w(self) -> float:
        """IT power of the site with every GPU idle."""
        return self.idle_gpu_power_w * self.total_gpus

    @property
    def net_cap_w(self) -> FloatArray:
        """What the deployments may draw per period net of their GPUs' idle power
        (``cap / PUE - p_idle G``): the right-hand side of the coupled cap row."""
        return self.it_cap_w - self.idle_site_it_w


def _ranges(d: DeploymentInput, gp: int, gd: int) -> tuple[int, int, int, int]:
    """``n_P`` and ``n_D`` ranges of a deployment whose instances take ``gp`` and ``gd``
    GPUs (before ``n_P gp + n_D gd <= max_gpus`` is applied)."""
    top_p, top_d = d.max_gpus // gp, d.max_gpus // gd
    hi_p = top_p if d.max_n_p is None else min(d.max_n_p, top_p)
    hi_d = top_d if d.max_n_d is None else min(d.max_n_d, top_d)
    return max(1, d.min_n_p), hi_p, max(1, d.min_n_d), hi_d


def candidate_count(d: DeploymentInput, gp: int, gd: int) -> int:
    """How many configurations (off included) :func:`deployment_candidates` gives, without
    building them: pairs with n_P, n_D in their ranges and n_P gp + n_D gd <= max_gpus."""
    lo_p, hi_p, lo_d, hi_d = _ranges(d, gp, gd)
    if gp != gd:  # per n_P, the n_D that fit beside it
        n_p = np.arange(lo_p, hi_p + 1, dtype=np.int64)
        fit = np.minimum(hi_d, (d.max_gpus - n_p * gp) // gd)
        return 1 + int(np.maximum(fit - lo_d + 1, 0).sum())
    top = d.max_gpus // gp
    # closed form (max_gpus is unbounded on the command line): for n_P up to
    # top - hi_d every n_D in [lo_d, hi_d] fits; beyond, top - n_P - lo_d + 1 of them
    full_hi = min(hi_p, top - hi_d)
    count = max(0, full_hi - lo_p + 1) * max(0, hi_d - lo_d + 1)
    a, b = max(lo_p, full_hi + 1), min(hi_p, top - lo_d)  # the tapering part
    if b >= a:
        first, last = top - a - lo_d + 1, top - b - lo_d + 1
        count += (first + last) * (b - a + 1) // 2
    return 1 + count


def deployment_candidates(d: DeploymentInput, gp: int, gd: int) -> tuple[IntArray, IntArray]:
    """The deployment's configurations ``(n_P, n_D)`` within its bounds and ``n_P gp +
    n_D gd <= max_gpus``, in the order of ``n_P``, then ``n_D``."""
    lo_p, hi_p, lo_d, hi_d = _ranges(d, gp, gd)
    pp, dd = np.meshgrid(
        np.arange(lo_p, hi_p + 1),
        np.arange(lo_d, hi_d + 1),
        indexing="ij",
    )
    keep = pp * gp + dd * gd <= d.max_gpus
    return pp[keep].astype(np.int64), dd[keep].astype(np.int64)


def _spec(i: int, d: DeploymentInput, p: ScheduleProblem) -> DeploymentSpec:
    at = f"deployments[{i}]"
    try:
        spec = resolve_spec(
            SpecRequest(
                d.model,
                d.gpu,
                d.workload,
                d.overrides,
                read_files=p.host.read_files,
                model_variant=d.model_variant,
                performance=d.performance,
                framework=d.framework,
                kernels=p.host.kernels,
                kernel_versions=dict(p.host.kernel_versions),
                prefill_gpu=d.prefill_gpu,
                decode_gpu=d.decode_gpu,
                interconnect=p.site.interconnect,
                interconnect_gb_per_s=p.site.interconnect_gb_per_s,
            )
        )
        Coefficients.of(spec)
    except InputError as e:
        if e.field in SITE_FIELDS:  # the site's link, refused for this deployment's GPUs
            raise InputError(f"site.{e.field}", f"{at}: {e.reason}") from e
        raise InputError(f"{at}.{e.field}", e.reason) from e
    except PdwattError as e:  # pragma: no cover - every core error is an InputError
        raise InputError(at, str(e)) from e
    targets = LatencyTargets(d.ttft_p99_s, d.tpot_p99_s)
    if targets.ttft_p99_s is not None:
        try:  # the p99 of the prefill times needs the per-request lengths
            resolve_samples(spec.workload)
        except InputError as e:
            raise InputError(
                f"{at}.latency_targets.ttft_p99_s",
                f"a TTFT target needs the workload's per-request lengths: {e.reason}",
            ) from e
    return with_targets(spec, d.ttft_p99_s, d.tpot_p99_s)


def setting_lists(
    i: int, d: DeploymentInput, spec: DeploymentSpec
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The deployment's settings per phase, validated against its GPU and written as
    model.clocks writes them (the full clock as the GPU's full clock; repeats dropped);
    None when it lists none. An input error names ``deployments[i].settings.<phase>[j]``."""
    if d.prefill_settings is None and d.decode_settings is None:
        return None
    clocks = spec.gpu_clocks()
    pre, dec = (
        named_settings(texts or ("default",), clocks, f"deployments[{i}].settings.{phase}")
        for phase, texts in (("prefill", d.prefill_settings), ("decode", d.decode_settings))
    )
    return pre, dec


def _indexed(k: int | IntArray, x: float | FloatArray) -> tuple[IntArray, FloatArray]:
    """``k`` as candidate indices and ``x`` as floats, not broadcast against each other:
    the breakpoints are taken once per index (``k``'s shape, (..., 4)) and broadcast
    against ``x`` segment by segment, instead of copied for every element of the
    broadcast shape ((T, K, 4) for a (T, K) load against (K,) candidates)."""
    k_arr = np.atleast_1d(np.asarray(k, dtype=np.int64))
    x_arr = np.asarray(x, dtype=float)
    np.broadcast_shapes(k_arr.shape, x_arr.shape)  # the shapes must still broadcast
    return k_arr, x_arr


def _piecewise(xs: FloatArray, ys: FloatArray, s: FloatArray) -> FloatArray:
    """Piecewise-linear power at loads ``s``: breakpoints ``xs``/``ys`` (..., 4),
    NaN-padded, whose ``[..., j]`` slices broadcast with ``s``; the power at zero load
    plus each segment's slope times the part of ``s`` that falls in it (flat beyond the
    last breakpoint). The one rule behind :meth:`DeploymentData.power_w` and
    :func:`_pw_at`."""
    out = np.broadcast_to(ys[..., 0], np.broadcast_shapes(ys[..., 0].shape, s.shape)).copy()
    for j in range(3):
        x0, x1 = xs[..., j], xs[..., j + 1]
        valid = ~np.isnan(x1)
        width = np.where(valid, x1 - x0, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            slope = np.where(valid & (width > 0), (ys[..., j + 1] - ys[..., j]) / width, 0.0)
        out += slope * np.clip(s - np.where(valid, x0, 0.0), 0.0, width)
    return out


def _pw_at(bl: FloatArray, bp: FloatArray, x: FloatArray) -> FloatArray:
    """Rows' piecewise-linear power (breakpoints ``bl``/``bp``, NaN-padded, (n, 4)) at
    the loads ``x`` (n, m), or (periods, n, m): :func:`_piecewise` with each row's
    breakpoints against its row of loads."""
    return _piecewise(bl[:, None, :], bp[:, None, :], x)


def dominated_options(cap: FloatArray, bl: FloatArray, bp: FloatArray) -> NDArray[np.bool_]:
    """(O, n) whether option ``b`` of configuration ``i`` is dominated: another option
    ``a`` of the same configuration has at least its capacity and at most its power at
    every load up to ``b``'s capacity (checked at both curves' breakpoints there, between
    which the difference is linear), and is not itself dominated back by ``b`` unless
    listed first. ``cap`` is (O, n), ``bl``/``bp`` (O, n, 4). Such an ``a`` serves
    whatever ``b`` serves, on the same GPUs, for no more power, so dropping ``b`` loses
    no schedule."""
    n_opt = cap.shape[0]
    # pair[a, b]: a dominates b (each a against every b at once, (O, n) per a)
    pair = np.zeros((n_opt, *cap.shape), dtype=bool)
    at_b = np.nan_to_num(bl, nan=0.0)  # (O, n, 4): b's breakpoints, absent ones at 0
    for a in range(n_opt):
        pts = np.concatenate([np.broadcast_to(np.nan_to_num(bl[a], nan=0.0), bl.shape), at_b], 2)
        pts = np.minimum(pts, cap[:, :, None])  # up to each b's capacity
        lower = _pw_at(bl[a], bp[a], pts) <= _piecewise(bl[:, :, None, :], bp[:, :, None, :], pts)
        pair[a] = (cap[a][None, :] >= cap) & lower.all(axis=2)
    ab = np.arange(n_opt)
    first = (ab[:, None] < ab[None, :])[:, :, None]  # a listed before b
    beaten = pair & (first | ~pair.transpose(1, 0, 2))
    beaten[ab, ab] = False  # an option does not dominate itself
    return np.asarray(beaten.any(axis=0))


def lower_up_to(
    bl_a: FloatArray, bp_a: FloatArray, bl_b: FloatArray, bp_b: FloatArray
) -> FloatArray:
    """Per row: the largest breakpoint load ``x`` (of either curve) such that curve
    ``a`` draws at most curve ``b``'s power at every load in ``[0, x]``; inf when it
    does everywhere, -inf when not even at zero load. Between two breakpoints the
    difference of the curves is linear, so checking at them is exact; beyond the last
    both curves are flat."""
    pts = np.sort(np.concatenate([bl_a, bl_b], axis=1), axis=1)  # NaNs sort last
    pts = np.where(np.isnan(pts), pts[:, :1], pts)  # absent: load 0 again, harmless
    above = _pw_at(bl_a, bp_a, pts) > _pw_at(bl_b, bp_b, pts)
    # the first load where a draws more; every point before it is fine
    first_bad = np.where(above.any(axis=1), np.argmax(above, axis=1), pts.shape[1])
    out = np.full(pts.shape[0], np.inf)
    inside = first_bad < pts.shape[1]
    prev = np.take_along_axis(pts, np.maximum(first_bad - 1, 0)[:, None], axis=1)[:, 0]
    out[inside] = np.where(first_bad[inside] == 0, -np.inf, prev[inside])
    # the sorted points repeat 0 for absent breakpoints: a load 0 that fails fails at 0
    return out


def period_dominated(
    n_p: IntArray, n_d: IntArray, bl: FloatArray, bp: FloatArray, smax: FloatArray
) -> NDArray[np.int32]:
    """(T, K) a candidate that dominates candidate ``k`` in period ``t`` (``k`` where
    none does): another candidate ``a`` of the same ``(n_P, n_D)`` (a setting pair of
    one configuration) that may serve at least as much (``smax[t, a] >= smax[t, k]``)
    and draws at most ``k``'s power at every load up to ``smax[t, k]``
    (:func:`lower_up_to`), where ``k`` does not dominate ``a`` back unless ``a`` comes
    first. Then any schedule running ``k`` in ``t`` runs ``a`` instead, serving the same
    load on the same GPUs for no more power and no other transition: leaving ``k`` out
    of period ``t`` loses no schedule. Candidates of one configuration must be
    consecutive."""
    t_count, k_count = smax.shape
    key = n_p * (int(n_d.max()) + 1) + n_d
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    sizes = np.diff(np.r_[starts, k_count])
    group = np.repeat(np.arange(starts.size), sizes)
    first, size = starts[group], sizes[group]
    pos = np.arange(k_count) - first
    # candidate-major (K, T): each comparison gathers whole rows
    out = np.broadcast_to(np.arange(k_count, dtype=np.int32)[:, None], (k_count, t_count)).copy()
    smax_kt = np.ascontiguousarray(smax.T)
    for j in range(int(sizes.max())):
        # the candidates k whose configuration has a j-th pair a other than k itself
        # (only those are compared: a configuration keeps a few of its pairs)
        k = np.flatnonzero((j < size) & (j != pos))
        if k.size == 0:
            continue
        a = first[k] + j
        x_ak = lower_up_to(bl[a], bp[a], bl[k], bp[k])  # a no higher than k up to x_ak
        x_ka = lower_up_to(bl[k], bp[k], bl[a], bp[a])
        s_a, s_k = smax_kt[a], smax_kt[k]
        ak = (s_a >= s_k) & (s_k <= x_ak[:, None])
        ka = (s_k >= s_a) & (s_a <= x_ka[:, None])
        hit = ak & ((j < pos[k])[:, None] | ~ka)
        out[k] = np.where(hit, a[:, None].astype(np.int32), out[k])
    return np.ascontiguousarray(out.T)


def undominated(data: ScheduleData, config: IntArray) -> IntArray:
    """``config`` (M, T) with every choice a dominated setting pair replaced by the
    pair that dominates it in its period (:func:`period_dominated`): the same instances
    serving the same loads for no more power, and no other transition."""
    out = np.array(config, dtype=np.int64, copy=True)
    t = np.arange(out.shape[1])
    for m, d in enumerate(data.deployments):
        if d.dominator is None:
            continue
        for _ in range(len(d.settings or ())):  # a chain is at most as long as the pairs
            nxt = d.dominator[t, out[m]].astype(np.int64)
            if np.array_equal(nxt, out[m]):
                break
            out[m] = nxt
    return out


#: a deployment's candidates: the first table, n_p, n_d, capacity, breakpoint loads and
#: powers and counts and the powers' prefill parts (off first), the setting pairs and
#: each candidate's pair
_Candidates = tuple[
    ConfigTable,
    IntArray,
    IntArray,
    FloatArray,
    FloatArray,
    FloatArray,
    IntArray,
    FloatArray,
    tuple[tuple[str, str], ...] | None,
    IntArray | None,
]


def _tables(
    i: int,
    d: DeploymentInput,
    spec: DeploymentSpec,
    cp: IntArray,
    cd: IntArray,
    ready: list[ConfigTable] | None = None,
) -> _Candidates:
    """The candidates (off first) and their tables: one per configuration at the full
    clock, or, when the deployment lists settings, one per configuration and setting
    pair that no other pair of the configuration dominates (:func:`dominated_options`),
    configuration by configuration in the order the pairs are listed. ``ready``: the
    tables per pair (one without settings), when :func:`_batched_tables` built them."""
    lists = setting_lists(i, d, spec)
    off_row = np.array([[0.0, np.nan, np.nan, np.nan]])
    if lists is None:
        table = build_table(spec, cp, cd) if ready is None else ready[0]
        n_p = np.concatenate([[0], cp]).astype(np.int64)
        n_d = np.concatenate([[0], cd]).astype(np.int64)
        cap = np.concatenate([[0.0], table.result.capacity_rps])
        bl = np.vstack([off_row, table.bp_load_rps])
        bp = np.vstack([off_row, table.bp_power_w])
        bc = np.concatenate([[1], table.bp_count]).astype(np.int64)
        bf = np.vstack([off_row, table.bp_prefill_power_w])
        return table, n_p, n_d, cap, bl, bp, bc, bf, None, None
    pairs = tuple((a, b) for a in lists[0] for b in lists[1])
    tables = [] if ready is None else ready
    for sp, sd in pairs if ready is None else ():
        try:
            s = with_settings(spec, setting_arg(sp, spec), setting_arg(sd, spec))
            tables.append(build_table(s, cp, cd))
        except InputError as e:
            raise InputError(f"deployments[{i}].settings", f"{sp}/{sd}: {e.reason}") from e
    cap_o = np.stack([t.result.capacity_rps for t in tables])
    bl_o = np.stack([t.bp_load_rps for t in tables])
    bp_o = np.stack([t.bp_power_w for t in tables])
    bc_o = np.stack([t.bp_count for t in tables])
    bf_o = np.stack([t.bp_prefill_power_w for t in tables])
    keep = ~dominated_options(cap_o, bl_o, bp_o)  # (O, n)
    cfg_idx, opt_idx = np.nonzero(keep.T)  # configuration-major, options in order
    n_p = np.concatenate([[0], cp[cfg_idx]]).astype(np.int64)
    n_d = np.concatenate([[0], cd[cfg_idx]]).astype(np.int64)
    cap = np.concatenate([[0.0], cap_o[opt_idx, cfg_idx]])
    bl = np.vstack([off_row, bl_o[opt_idx, cfg_idx]])
    bp = np.vstack([off_row, bp_o[opt_idx, cfg_idx]])
    bc = np.concatenate([[1], bc_o[opt_idx, cfg_idx]]).astype(np.int64)
    bf = np.vstack([off_row, bf_o[opt_idx, cfg_idx]])
    option = np.concatenate([[0], opt_idx]).astype(np.int64)
    return tables[0], n_p, n_d, cap, bl, bp, bc, bf, pairs, option


def _batched_tables(
    p: ScheduleProblem, specs: list[DeploymentSpec]
) -> list[list[ConfigTable] | None]:
    """Per deployment: its tables per setting pair (one without settings), as
    :func:`_tables` builds them one by one, here with one evaluation per distinct spec
    and setting pair over the candidates of every deployment that shares them
    (:func:`~model.tables.build_tables`; many deployments of a site share a model, GPU
    and workload). All None when some table fails: then :func:`_tables` builds them one
    by one and reports the first failure as it does."""
    try:
        return _shared_tables(p, specs)
    except InputError:
        return [None] * len(specs)


def _shared_tables(
    p: ScheduleProblem, specs: list[DeploymentSpec]
) -> list[list[ConfigTable] | None]:
    groups: dict[tuple[bytes, str | None, str | None], list[tuple[int, int]]] = {}
    jobs: dict[tuple[bytes, str | None, str | None], DeploymentSpec] = {}
    grids: list[tuple[IntArray, IntArray]] = []
    sizes: list[int] = []
    for i, (d, spec) in enumerate(zip(p.deployments, specs, strict=True)):
        grids.append(deployment_candidates(d, *instance_gpus(spec)))
        base = json.dumps(spec.describe(), sort_keys=True, default=str).encode()
        lists = setting_lists(i, d, spec)
        pairs = [(None, None)] if lists is None else [(a, b) for a in lists[0] for b in lists[1]]
        sizes.append(len(pairs))
        for o, (sp, sd) in enumerate(pairs):
            key = (
                base,
                None if sp is None else setting_arg(sp, spec),
                None if sd is None else setting_arg(sd, spec),
            )
            if key not in jobs:
                jobs[key] = spec if lists is None else with_settings(spec, key[1], key[2])
            groups.setdefault(key, []).append((i, o))
    out: list[list[ConfigTable | None]] = [[None] * n for n in sizes]
    for key, members in groups.items():
        tables = build_tables(jobs[key], [grids[i] for i, _ in members])
        for (i, o), table in zip(members, tables, strict=True):
            out[i][o] = table
    return [[t for t in row if t is not None] for row in out]


def _deployment(
    i: int,
    d: DeploymentInput,
    p: ScheduleProblem,
    spec: DeploymentSpec,
    ready: list[ConfigTable] | None = None,
) -> DeploymentData:
    at = f"deployments[{i}]"
    gp, gd = instance_gpus(spec)
    cp, cd = deployment_candidates(d, gp, gd)
    pre_pool, dec_pool = d.phase_gpus
    off_allowed = d.min_n_p == 0 and d.min_n_d == 0
    if cp.size == 0 and not off_allowed:
        raise InputError(f"{at}.max_gpus", "no configuration fits the bounds and max_gpus")
    table, n_p, n_d, cap, bl, bp, bc, bf, pairs, option = _tables(i, d, spec, cp, cd, ready)
    gpus = n_p * gp + n_d * gd
    demand = np.asarray(d.demand_rps, dtype=float)
    smax = np.minimum(demand[:, None], d.headroom * cap[None, :])
    dominator = None if pairs is None else period_dominated(n_p, n_d, bl, bp, smax)
    init = 0
    if d.initial_n_p or d.initial_n_d:  # a candidate: check_initial said so
        init = int(np.flatnonzero((n_p == d.initial_n_p) & (n_d == d.initial_n_d))[0])
    unserved = d.unserved_penalty_usd_per_request * 3600.0 * p.period_hours * np.ones(len(demand))
    data = DeploymentData(
        name=d.name,
        pool=dec_pool,
        spec=spec,
        table=table,
        n_p=n_p,
        n_d=n_d,
        gpus=gpus,
        capacity_rps=cap,
        bp_load_rps=bl,
        bp_power_w=bp,
        bp_count=bc,
        bp_prefill_power_w=bf,
        demand_rps=demand,
        smax_rps=smax,
        unserved_usd_per_rps=unserved,
        initial=init,
        off_allowed=off_allowed,
        headroom=d.headroom,
        measured_calibration=bool(spec.calibration.measured),
        settings=pairs,
        option=option,
        dominator=dominator,
        prefill_pool=None if pre_pool == dec_pool else pre_pool,
        prefill_gpus=None if pre_pool == dec_pool else n_p * gp,
        decode_gpus=None if pre_pool == dec_pool else n_d * gd,
    )
    return data


def deployment_specs(p: ScheduleProblem) -> list[DeploymentSpec]:
    """Each deployment's resolved spec (its GPU's clock data among it); an input error
    names ``deployments[i].<field>``."""
    return [_spec(i, d, p) for i, d in enumerate(p.deployments)]


def _pair_count(d: DeploymentInput) -> int:
    """Setting pairs the deployment lists (1 without settings): an upper bound on the
    options per configuration, before repeats and dominated pairs are dropped."""
    return len(d.prefill_settings or ("",)) * len(d.decode_settings or ("",))


def candidate_counts(p: ScheduleProblem, specs: list[DeploymentSpec] | None = None) -> list[int]:
    """Each deployment's configurations (its candidates times its setting pairs, and the
    off state), what its tables hold per period; InputError naming the setting a GPU
    does not take (``deployments[i].settings.prefill[j]``). Builds no table."""
    specs = deployment_specs(p) if specs is None else specs
    for i, (d, s) in enumerate(zip(p.deployments, specs, strict=True)):
        setting_lists(i, d, s)
    return [
        1 + (candidate_count(d, *instance_gpus(s)) - 1) * _pair_count(d)
        for d, s in zip(p.deployments, specs, strict=True)
    ]


def check_memory(
    p: ScheduleProblem, specs: list[DeploymentSpec] | None = None
) -> memory.MemoryEstimate:
    """The estimated memory of solving ``p``; InputError naming the deployment's
    ``max_gpus`` when it exceeds ``p.host.memory_budget_mb``, or the setting a GPU does
    not take (``deployments[i].settings.prefill[j]``). Builds no table."""
    counts = candidate_counts(p, specs)
    return memory.check(
        p.n_periods,
        counts,
        p.host.memory_budget_mb,
        memory.workers(p.solver.threads),
        p.solver.time_limit_s,
        memory.builds_milp(len(p.deployments), p.solver.method),
    )


def check_initial(p: ScheduleProblem, specs: list[DeploymentSpec] | None = None) -> None:
    """Each deployment's initial state is off, or a candidate (within its bounds and
    max_gpus) that fits its GPU pool; InputError naming ``deployments[i].initial``
    otherwise. Builds no table."""
    specs = deployment_specs(p) if specs is None else specs
    for i, (d, spec) in enumerate(zip(p.deployments, specs, strict=True)):
        if not (d.initial_n_p or d.initial_n_d):
            continue
        gp, gd = instance_gpus(spec)
        cp, cd = deployment_candidates(d, gp, gd)
        if not np.any((cp == d.initial_n_p) & (cd == d.initial_n_d)):
            raise InputError(
                f"deployments[{i}].initial",
                f"({d.initial_n_p}, {d.initial_n_d}) is not a candidate: it breaks the "
                f"bounds or max_gpus = {d.max_gpus}",
            )
        pre, dec = d.phase_gpus
        need = Counter({pre: d.initial_n_p * gp}) + Counter({dec: d.initial_n_d * gd})
        for gpu, gpus in need.items():
            if gpus > p.site.gpu_inventory[gpu]:
                raise InputError(
                    f"deployments[{i}].initial",
                    f"uses {gpus} GPUs but site.gpu_inventory.{gpu} has "
                    f"{p.site.gpu_inventory[gpu]}",
                )


def build_data(p: ScheduleProblem, specs: list[DeploymentSpec] | None = None) -> ScheduleData:
    """Validate ``p`` and compute every table it needs (cached by the core). ``specs``:
    :func:`deployment_specs` of ``p`` when the caller has them (they depend on neither
    the counts nor the settings)."""
    validate(p)
    specs = deployment_specs(p) if specs is None else specs
    needs = check_memory(p, specs)  # before any table is built
    check_initial(p, specs)
    ready = _batched_tables(p, specs)
    deps = tuple(
        _deployment(i, d, p, s, r)
        for i, (d, s, r) in enumerate(zip(p.deployments, specs, ready, strict=True))
    )
    pools = tuple(sorted(p.site.gpu_inventory))
    pool_gpus = np.array([p.site.gpu_inventory[g] for g in pools], dtype=np.int64)
    pool_of = np.array([pools.index(d.phase_gpus[1]) for d in p.deployments], dtype=np.int64)
    prefill_pool_of = np.array(
        [pools.index(d.phase_gpus[0]) for d in p.deployments], dtype=np.int64
    )
    dt = p.period_hours
    price = np.asarray(p.grid.price_usd_per_mwh, dtype=float)
    carbon = np.asarray(p.grid.carbon_g_per_kwh, dtype=float)
    cprice = float(p.site.carbon_price_usd_per_tonne)
    cost_per_w = dt * p.site.pue * (price / 1e6 + carbon * cprice / 1e9)
    return ScheduleData(
        problem=p,
        n_periods=p.n_periods,
        period_hours=dt,
        deployments=deps,
        pools=pools,
        pool_gpus=pool_gpus,
        pool_of=pool_of,
        pue=float(p.site.pue),
        idle_gpu_power_w=float(p.site.idle_gpu_power_w),
        power_cap_w=np.asarray(p.grid.power_cap_w, dtype=float),
        cost_usd_per_w=cost_per_w,
        price_usd_per_mwh=price,
        carbon_g_per_kwh=carbon,
        carbon_price_usd_per_tonne=cprice,
        start_cost_usd=float(p.transitions.start_cost_usd),
        stop_cost_usd=float(p.transitions.stop_cost_usd),
        max_changes=p.transitions.max_instance_changes_per_period,
        prefill_pool_of=None if np.array_equal(prefill_pool_of, pool_of) else prefill_pool_of,
        milp_choices=needs.milp_budget_choices,
    )


def slice_periods(data: ScheduleData, start: int, stop: int) -> ScheduleData:
    """Periods ``start..stop-1`` of ``data`` as a problem of their own (same initial
    states, transition costs and limits; callers handle the boundary)."""
    return take_periods(data, np.arange(start, stop))


def take_periods(data: ScheduleData, idx: NDArray[np.int64]) -> ScheduleData:
    """The periods ``idx`` of ``data``, in that order, as a problem of their own."""
    import dataclasses

    deps = tuple(
        dataclasses.replace(
            d,
            demand_rps=d.demand_rps[idx],
            smax_rps=d.smax_rps[idx],
            unserved_usd_per_rps=d.unserved_usd_per_rps[idx],
            dominator=None if d.dominator is None else d.dominator[idx],
        )
        for d in data.deployments
    )
    return dataclasses.replace(
        data,
        n_periods=int(len(idx)),
        deployments=deps,
        power_cap_w=data.power_cap_w[idx],
        cost_usd_per_w=data.cost_usd_per_w[idx],
        price_usd_per_mwh=data.price_usd_per_mwh[idx],
        carbon_g_per_kwh=data.carbon_g_per_kwh[idx],
    )


def one_deployment(data: ScheduleData, m: int) -> ScheduleData:
    """Deployment ``m`` as a site of its own: the site's period arrays and settings, its
    own tables and request, no other deployment's (what its DP needs, and all a task on
    another machine is sent for it)."""
    import dataclasses

    problem = dataclasses.replace(data.problem, deployments=(data.problem.deployments[m],))
    prefill = None if data.prefill_pool_of is None else data.prefill_pool_of[m : m + 1]
    return dataclasses.replace(
        data,
        problem=problem,
        deployments=(data.deployments[m],),
        pool_of=data.pool_of[m : m + 1],
        prefill_pool_of=prefill,
    )


def site_constant_usd(data: ScheduleData) -> float:
    """Energy cost of the whole site idle (every deployment's net cost adds to it)."""
    return float(np.sum(data.cost_usd_per_w) * data.idle_gpu_power_w * data.total_gpus)
