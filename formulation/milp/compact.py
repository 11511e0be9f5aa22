"""The compact schedule MILP (SPEC 4) in Pyomo, solved with HiGHS.

Sets: deployments ``m``, periods ``t``, allowed configurations ``k`` of ``(m, t)``
("off" is index 0) and the segments ``j`` of each configuration's power curve clipped
to ``[0, smax[m,t,k]]``.

Variables:

* ``run_config[m,t,k]`` binary: configuration ``k`` runs in period ``t``;
* ``seg_load[m,t,k,j] >= 0``: load served on segment ``j`` (req/s); the served rate is
  ``served[m,t] = sum_{k,j} seg_load``;
* ``seg_full[m,t,k,j]`` binary for every segment but the last: segment ``j`` is full,
  which allows load on ``j+1``. The power curve is concave, so without these the LP
  would fill the cheaper, later segments first; with them the incremental (delta)
  representation is exact: ``P = P_k(0) run + sum_j slope_j seg_load_j``;
* ``starts/stops[m,t,phase] >= 0``: instances started/stopped (their costs are >= 0,
  so they settle at the positive and negative parts of the change).

Constraints: one configuration per ``(m, t)``; segment chain; site power
``PUE (sum_m P_m + p_idle idle GPUs) <= cap``; GPU inventory per pool; start/stop
balance; optional per-period change limit. Objective: energy and carbon cost of site
power, value of unserved demand, start and stop costs.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyomo.environ as pyo

from formulation.budget import HIGHS_AT_LEAST_S, HIGHS_SHARE, Deadline
from formulation.data import ScheduleData, site_constant_usd
from formulation.evaluate import Schedule
from formulation.milp.highs import PROCESS, lp_arrays
from formulation.milp.highs_child import stdout_discarded
from formulation.processes.interrupt import STOP

log = logging.getLogger(__name__)

Allowed = Sequence[Sequence[Sequence[int]]]  # [m][t] -> config indices

#: Pyomo build time of the compact model per (deployment, period, configuration)
#: choice: an upper envelope of the builds measured on the benchmark sites
#: (``benchmarks/bench_schedule.py`` reports each MILP's choices and build time)
BUILD_S_PER_CHOICE = 2e-4


def estimated_build_s(choices: int) -> float:
    """Seconds to build a compact model over ``choices`` choices (an upper estimate)."""
    return choices * BUILD_S_PER_CHOICE


#: HiGHS's root node per choice, an upper envelope of the root times measured on the
#: benchmark sites (a 14,376-choice corridor MILP of 32 deployments spent 38.7 s in one
#: round of root separation). HiGHS checks its time limit only between such rounds, so
#: a MILP whose root may outlast the time left is not started at all.
ROOT_S_PER_CHOICE = 2.7e-3


def estimated_root_s(choices: int) -> float:
    """Seconds HiGHS may spend at the root of a compact model over ``choices`` choices
    left free (:func:`free_choices`) before it looks at its time limit (an upper
    estimate)."""
    return choices * ROOT_S_PER_CHOICE


def free_choices(allowed: Allowed) -> int:
    """The choices of ``allowed`` in (deployment, period) rows that hold more than one:
    a row of one choice is fixed, and HiGHS's presolve removes it before the root. On
    256 deployments, corridor MILPs over time windows (the incumbent fixed outside, 82
    to 95 of the 96 periods) spent 1.7e-3 to 2.8e-3 s per free choice at the root and
    after it, 0.6e-3 to 1.5e-3 s per choice counting the fixed ones (docs/performance.md)."""
    return sum(len(c) for per in allowed for c in per if len(c) > 1)


def count_choices(data: ScheduleData, allowed: Allowed | None = None) -> int:
    """The (deployment, period, configuration) choices of the compact MILP over
    ``allowed`` (default: :func:`all_allowed`'s, each deployment's allowed candidates
    per period)."""
    if allowed is None:
        return sum(int(d.period_allowed().sum()) for d in data.deployments)
    return sum(len(c) for per in allowed for c in per)


def all_allowed(data: ScheduleData) -> list[list[list[int]]]:
    """Every candidate of every deployment in every period (less the setting pairs
    that others of their configuration dominate in the period)."""
    out = []
    for d in data.deployments:
        if d.useful is None:
            ks = np.flatnonzero(d.allowed).tolist()
            out.append([ks for _ in range(data.n_periods)])
        else:
            ok = d.period_allowed()
            out.append([np.flatnonzero(ok[t]).tolist() for t in range(data.n_periods)])
    return out


# --------------------------------------------------------------------------- builders


def _sets_and_params(m: pyo.ConcreteModel, data: ScheduleData, allowed: Allowed) -> None:
    """Index sets and the per-(m,t,k) curve data; the only builder that reads ``data``."""
    m.deployments = pyo.RangeSet(0, len(data.deployments) - 1)
    m.periods = pyo.RangeSet(0, data.n_periods - 1)
    m.pools = pyo.RangeSet(0, len(data.pools) - 1)
    mtk = [
        (i, t, k) for i in range(len(allowed)) for t in range(data.n_periods) for k in allowed[i][t]
    ]
    m.configs = pyo.Set(initialize=mtk, dimen=3, ordered=True)
    seg_index = []
    slope: dict[tuple[int, int, int, int], float] = {}
    length: dict[tuple[int, int, int, int], float] = {}
    p0: dict[tuple[int, int, int], float] = {}
    for i, t, k in mtk:
        d = data.deployments[i]
        xs, ys = d.curve(t, k)
        p0[i, t, k] = ys[0]
        pieces = [(xs[j], xs[j + 1], ys[j], ys[j + 1]) for j in range(len(xs) - 1)]
        for j, (x0, x1, y0, y1) in enumerate(p for p in pieces if p[1] > p[0]):
            key = (i, t, k, j)
            seg_index.append(key)
            slope[key] = (y1 - y0) / (x1 - x0)
            length[key] = x1 - x0
    m.segments = pyo.Set(initialize=seg_index, dimen=4, ordered=True)
    last: dict[tuple[int, int, int], int] = {}
    for key in seg_index:
        last[key[:3]] = max(last.get(key[:3], -1), key[3])
    m.chained = pyo.Set(
        initialize=[s for s in seg_index if s[3] < last[s[:3]]], dimen=4, ordered=True
    )
    # not ``_data``: Pyomo's scalar components keep theirs there, and a site's model is a
    # block of a fleet's (formulation.fleet.compact)
    m._schedule_data = data
    m._p0 = p0
    m._slope = slope
    m._length = length
    m._last = last
    m._allowed = allowed


def _variables(m: pyo.ConcreteModel) -> None:
    m.run_config = pyo.Var(m.configs, domain=pyo.Binary)
    m.seg_load = pyo.Var(m.segments, domain=pyo.NonNegativeReals)
    m.seg_full = pyo.Var(m.chained, domain=pyo.Binary)
    phase = [0, 1]
    m.phases = pyo.Set(initialize=phase)
    m.starts = pyo.Var(m.deployments, m.periods, m.phases, domain=pyo.NonNegativeReals)
    m.stops = pyo.Var(m.deployments, m.periods, m.phases, domain=pyo.NonNegativeReals)


def _expressions(m: pyo.ConcreteModel) -> None:
    data: ScheduleData = m._schedule_data
    by_mt: dict[tuple[int, int], list[int]] = {}
    for i, t, k in m.configs:
        by_mt.setdefault((i, t), []).append(k)
    segs_of: dict[tuple[int, int, int], list[int]] = {}
    for i, t, k, j in m.segments:
        segs_of.setdefault((i, t, k), []).append(j)
    m._by_mt = by_mt
    m._segs_of = segs_of

    def it_power(mm: pyo.ConcreteModel, i: int, t: int) -> pyo.Expression:
        return sum(
            mm._p0[i, t, k] * mm.run_config[i, t, k]
            + sum(
                mm._slope[i, t, k, j] * mm.seg_load[i, t, k, j] for j in segs_of.get((i, t, k), [])
            )
            for k in by_mt[i, t]
        )

    def served(mm: pyo.ConcreteModel, i: int, t: int) -> pyo.Expression:
        return sum(mm.seg_load[i, t, k, j] for k in by_mt[i, t] for j in segs_of.get((i, t, k), []))

    def count(phase: int):  # noqa: ANN202
        def rule(mm: pyo.ConcreteModel, i: int, t: int) -> pyo.Expression:
            d = data.deployments[i]
            arr = d.n_p if phase == 0 else d.n_d
            return sum(int(arr[k]) * mm.run_config[i, t, k] for k in by_mt[i, t])

        return rule

    def gpus(mm: pyo.ConcreteModel, i: int, t: int) -> pyo.Expression:
        d = data.deployments[i]
        return sum(int(d.gpus[k]) * mm.run_config[i, t, k] for k in by_mt[i, t])

    m.it_power_w = pyo.Expression(m.deployments, m.periods, rule=it_power)
    m.served_rps = pyo.Expression(m.deployments, m.periods, rule=served)
    m.n_prefill = pyo.Expression(m.deployments, m.periods, rule=count(0))
    m.n_decode = pyo.Expression(m.deployments, m.periods, rule=count(1))
    m.gpus_used = pyo.Expression(m.deployments, m.periods, rule=gpus)


def _choice_constraints(m: pyo.ConcreteModel) -> None:
    """``sum_k run_config[m,t,k] = 1``."""

    def one(mm: pyo.ConcreteModel, i: int, t: int) -> pyo.Expression:
        return sum(mm.run_config[i, t, k] for k in mm._by_mt[i, t]) == 1

    m.one_config_per_period = pyo.Constraint(m.deployments, m.periods, rule=one)


def _segment_constraints(m: pyo.ConcreteModel) -> None:
    """Delta method: ``seg_load_0 <= len_0 run``; ``seg_load_j >= len_j full_j``;
    ``seg_load_{j+1} <= len_{j+1} full_j``; ``full_j <= run`` is implied."""

    def upper(mm: pyo.ConcreteModel, i: int, t: int, k: int, j: int) -> pyo.Expression:
        gate = mm.run_config[i, t, k] if j == 0 else mm.seg_full[i, t, k, j - 1]
        return mm.seg_load[i, t, k, j] <= mm._length[i, t, k, j] * gate

    def lower(mm: pyo.ConcreteModel, i: int, t: int, k: int, j: int) -> pyo.Expression:
        return mm.seg_load[i, t, k, j] >= mm._length[i, t, k, j] * mm.seg_full[i, t, k, j]

    m.segment_gated = pyo.Constraint(m.segments, rule=upper)
    m.segment_filled_in_order = pyo.Constraint(m.chained, rule=lower)


def _site_constraints(m: pyo.ConcreteModel) -> None:
    """Site power within the cap; GPUs within the inventory of each pool."""
    data: ScheduleData = m._schedule_data
    idle = data.idle_gpu_power_w

    def cap(mm: pyo.ConcreteModel, t: int) -> pyo.Expression:
        it = sum(mm.it_power_w[i, t] - idle * mm.gpus_used[i, t] for i in mm.deployments)
        return data.pue * (it + idle * data.total_gpus) <= float(data.power_cap_w[t])

    def inventory(mm: pyo.ConcreteModel, g: int, t: int) -> pyo.Expression:
        members = [i for i in mm.deployments if data.pool_of[i] == g]
        # deployments whose prefill phase runs on another type than their decode phase
        # draw each phase's GPUs from its own pool (docs/mixed-gpus.md)
        parts = [(i, gpus) for i in mm.deployments for gg, gpus in data.pool_use(i) if gg == g]
        if not parts:
            return pyo.Constraint.Skip
        if len(parts) == len(members) and all(len(data.pool_use(i)) == 1 for i in members):
            return sum(mm.gpus_used[i, t] for i in members) <= int(data.pool_gpus[g])
        by_mt = mm._by_mt
        used = sum(int(gpus[k]) * mm.run_config[i, t, k] for i, gpus in parts for k in by_mt[i, t])
        return used <= int(data.pool_gpus[g])

    m.site_power_within_cap = pyo.Constraint(m.periods, rule=cap)
    m.gpus_within_inventory = pyo.Constraint(m.pools, m.periods, rule=inventory)


def _transition_constraints(m: pyo.ConcreteModel) -> None:
    """``starts - stops = n_t - n_{t-1}`` per phase (``n_{-1}`` = initial); limits."""
    data: ScheduleData = m._schedule_data

    def balance(mm: pyo.ConcreteModel, i: int, t: int, ph: int) -> pyo.Expression:
        d = data.deployments[i]
        cur = mm.n_prefill[i, t] if ph == 0 else mm.n_decode[i, t]
        if t == 0 and mm._entry is not None:
            return pyo.Constraint.Skip  # priced by the entry cost
        if t == 0:
            prev = int((d.n_p if ph == 0 else d.n_d)[d.initial])
        else:
            prev = mm.n_prefill[i, t - 1] if ph == 0 else mm.n_decode[i, t - 1]
        return mm.starts[i, t, ph] - mm.stops[i, t, ph] == cur - prev

    m.instance_balance = pyo.Constraint(m.deployments, m.periods, m.phases, rule=balance)
    if data.max_changes is not None:
        lim = data.max_changes

        def limit(mm: pyo.ConcreteModel, i: int, t: int) -> pyo.Expression:
            if t == 0 and mm._entry is not None:
                return pyo.Constraint.Skip
            return sum(mm.starts[i, t, ph] + mm.stops[i, t, ph] for ph in mm.phases) <= lim

        m.changes_within_limit = pyo.Constraint(m.deployments, m.periods, rule=limit)


def _objective(m: pyo.ConcreteModel) -> None:
    """Energy + carbon cost of site power, unserved value, start and stop costs."""
    data: ScheduleData = m._schedule_data
    idle = data.idle_gpu_power_w
    const = site_constant_usd(data)
    unserved_const = 0.0
    for d in data.deployments:
        unserved_const += float(np.sum(d.demand_rps * d.unserved_usd_per_rps))
    energy = sum(
        float(data.cost_usd_per_w[t]) * (m.it_power_w[i, t] - idle * m.gpus_used[i, t])
        for i in m.deployments
        for t in m.periods
    )
    unserved = -sum(
        float(data.deployments[i].unserved_usd_per_rps[t]) * m.served_rps[i, t]
        for i in m.deployments
        for t in m.periods
    )
    trans = sum(
        data.start_cost_usd * m.starts[i, t, ph] + data.stop_cost_usd * m.stops[i, t, ph]
        for i in m.deployments
        for t in m.periods
        for ph in m.phases
    )
    boundary = 0.0
    last = data.n_periods - 1
    if m._entry is not None:
        boundary += sum(
            float(m._entry[i][k]) * m.run_config[i, 0, k] for i, t, k in m.configs if t == 0
        )
    if m._exit is not None:
        boundary += sum(
            float(m._exit[i][k]) * m.run_config[i, last, k] for i, t, k in m.configs if t == last
        )
    m.total_cost_usd = pyo.Objective(
        expr=const + unserved_const + energy + unserved + trans + boundary, sense=pyo.minimize
    )


def build_model(
    data: ScheduleData,
    allowed: Allowed | None = None,
    entry_cost: Sequence[np.ndarray] | None = None,
    exit_cost: Sequence[np.ndarray] | None = None,
) -> pyo.ConcreteModel:
    """The compact MILP over ``allowed[m][t]`` configurations (default: all).

    ``entry_cost[m][k]`` (optional) replaces the transition from the initial state in
    the first period by a cost of entering configuration ``k`` (inf: unreachable), and
    ``exit_cost[m][k]`` adds a cost of leaving the last period in ``k``: a window of a
    longer horizon whose outside periods are solved by dynamic programming.
    """
    m = pyo.ConcreteModel(name="pdwatt_schedule")
    allowed = allowed if allowed is not None else all_allowed(data)
    if entry_cost is not None:
        allowed = [
            [
                [k for k in rows[t] if t > 0 or np.isfinite(entry_cost[i][k])]
                for t in range(len(rows))
            ]
            for i, rows in enumerate(allowed)
        ]
    m._entry = entry_cost
    m._exit = exit_cost
    _sets_and_params(m, data, allowed)
    _variables(m)
    _expressions(m)
    _choice_constraints(m)
    _segment_constraints(m)
    _site_constraints(m)
    _transition_constraints(m)
    _objective(m)
    return m


# --------------------------------------------------------------------------- solving


@dataclass
class MilpResult:
    status: str  # optimal | time_limit | infeasible | error | memory (not built)
    schedule: Schedule | None
    objective_usd: float | None
    bound_usd: float | None
    mip_gap: float | None
    build_s: float
    solve_s: float
    n_binaries: int
    termination: str


def set_start(m: pyo.ConcreteModel, sched: Schedule) -> None:
    """Load a schedule into the model's variables as a MIP start."""
    data: ScheduleData = m._schedule_data
    for v in m.run_config.values():
        v.set_value(0)
    for v in m.seg_load.values():
        v.set_value(0.0)
    for v in m.seg_full.values():
        v.set_value(0)
    for i, d in enumerate(data.deployments):
        for t in range(data.n_periods):
            k = int(sched.config[i, t])
            if (i, t, k) not in m.run_config:
                return
            m.run_config[i, t, k].set_value(1)
            s = float(sched.served_rps[i, t])
            for j in m._segs_of.get((i, t, k), []):
                take = min(s, m._length[i, t, k, j])
                m.seg_load[i, t, k, j].set_value(take)
                if (i, t, k, j) in m.seg_full:
                    m.seg_full[i, t, k, j].set_value(
                        1 if take >= m._length[i, t, k, j] - 1e-12 else 0
                    )
                s -= take
            for ph, arr in ((0, d.n_p), (1, d.n_d)):
                if t == 0 and m._entry is not None:
                    continue
                prev = int(arr[d.initial]) if t == 0 else int(arr[sched.config[i, t - 1]])
                cur = int(arr[k])
                m.starts[i, t, ph].set_value(max(cur - prev, 0))
                m.stops[i, t, ph].set_value(max(prev - cur, 0))


def extract(m: pyo.ConcreteModel) -> Schedule:
    data: ScheduleData = m._schedule_data
    M, T = len(data.deployments), data.n_periods
    cfg = np.zeros((M, T), dtype=np.int64)
    served = np.zeros((M, T))
    for (i, t, k), v in m.run_config.items():
        if v.value is not None and v.value > 0.5:
            cfg[i, t] = k
    for (i, t, k, _j), v in m.seg_load.items():
        if cfg[i, t] == k and v.value is not None:
            served[i, t] += max(float(v.value), 0.0)
    for i, d in enumerate(data.deployments):
        served[i] = np.minimum(served[i], d.smax_rps[np.arange(T), cfg[i]])
    return Schedule(cfg, served)


@dataclass
class Solved:
    """What HiGHS ended with on a Pyomo model (:func:`solve_pyomo`): its termination,
    the incumbent's objective (its values loaded into the model's variables) and the
    proven bound, both None when it has none."""

    termination: str
    objective: float | None
    bound: float | None
    n_binaries: int
    solve_s: float


def solve_pyomo(
    m: pyo.ConcreteModel,
    deadline: Deadline,
    mip_gap: float,
    threads: int | None = None,
    warm: bool = False,
) -> Solved:
    """Solve ``m`` (one active objective) with HiGHS by ``deadline``, with the
    variables' values as a MIP start when ``warm``: loading the model into HiGHS counts
    against it. Pyomo's appsi interface builds HiGHS's model; HiGHS runs in a process of
    its own (:class:`formulation.milp.highs.HighsProcess`), ended with the best solution
    it sent if it runs past the deadline (plus a grace) or the run is asked to stop."""
    from pyomo.contrib.appsi.solvers.highs import Highs

    opt = Highs()  # builds HiGHS's model from Pyomo's; HiGHS then runs in its process
    t0 = time.perf_counter()
    with stdout_discarded():  # HiGHS's banner (its log is off) never reaches the user
        opt.set_instance(m)
    highs = opt._solver_model
    col_of = opt._pyomo_var_to_solver_var_map
    variables = [v for v in m.component_data_objects(pyo.Var) if id(v) in col_of]
    n_bin = sum(1 for v in variables if v.is_binary())
    payload = lp_arrays(highs)
    if warm:
        values = np.zeros(payload["num_col"])
        for v in variables:
            if v.value is not None:
                values[col_of[id(v)]] = v.value
        payload["start_values"] = values
    # what is left, less a share for reading the solution back
    options: dict[str, Any] = {
        "mip_rel_gap": float(mip_gap),
        "mip_abs_gap": 1e-9,
        "time_limit": max(HIGHS_SHARE * deadline.remaining(), HIGHS_AT_LEAST_S),
    }
    if threads:
        options["threads"] = int(threads)
    payload["options"] = options
    out = PROCESS.solve(payload, deadline.at_least(HIGHS_AT_LEAST_S), STOP.get())
    solve_s = time.perf_counter() - t0
    if out.status == "infeasible":
        return Solved("infeasible", None, None, n_bin, solve_s)
    best: float | None = None
    bound: float | None = None
    if out.best is not None:
        x = out.best[1]
        for v in variables:
            v.set_value(float(x[col_of[id(v)]]), skip_validation=True)
        objective = next(m.component_data_objects(pyo.Objective, active=True))
        best = float(pyo.value(objective))
        if out.bound is not None and math.isfinite(out.bound):
            bound = out.bound + (best - out.best[0])
    if out.status in ("killed", "stopped", "lost"):
        found = "with" if best is not None else "without"
        log.info("HiGHS ended after %.1f s (%s), %s a solution", solve_s, out.status, found)
    return Solved(out.status, best, bound, n_bin, solve_s)


def solve_model(
    m: pyo.ConcreteModel,
    deadline: Deadline,
    mip_gap: float,
    threads: int | None = None,
    start: Schedule | None = None,
    build_s: float = 0.0,
) -> MilpResult:
    """The compact model ``m`` solved (:func:`solve_pyomo`), optionally from a MIP
    start, by ``deadline``; its schedule read back."""
    if start is not None:
        set_start(m, start)
    r = solve_pyomo(m, deadline, mip_gap, threads, warm=start is not None)
    term, n_bin, solve_s = r.termination, r.n_binaries, r.solve_s
    if term == "infeasible":
        return MilpResult("infeasible", None, None, None, None, build_s, solve_s, n_bin, term)
    has_sol = r.objective is not None
    sched = extract(m) if has_sol else None
    gap = None
    if r.objective is not None and r.bound is not None:
        gap = max(0.0, (r.objective - r.bound) / max(abs(r.objective), 1e-9))
    status = "optimal" if term == "optimal" else "time_limit" if has_sol else "error"
    return MilpResult(status, sched, r.objective, r.bound, gap, build_s, solve_s, n_bin, term)


def solve_compact(
    data: ScheduleData,
    deadline: Deadline,
    mip_gap: float,
    threads: int | None = None,
    allowed: Allowed | None = None,
    start: Schedule | None = None,
    entry_cost: Sequence[np.ndarray] | None = None,
    exit_cost: Sequence[np.ndarray] | None = None,
) -> MilpResult:
    """The compact MILP over ``allowed`` (default: every candidate), solved by
    ``deadline`` moved later by the model's build time: callers weigh the build before
    they start one (:func:`estimated_build_s`), and its time is not taken from the
    solve's. A MILP over more choices than ``data.milp_choices`` (what the solve's
    memory budget leaves for one, :mod:`formulation.memory`) is not built: status
    ``memory``, no schedule and no bound, as a MILP that found nothing."""
    cap = data.milp_choices
    if cap is not None:
        choices = count_choices(data, allowed)
        if choices > cap:
            log.info("compact MILP over %d choices not built: memory for %d", choices, cap)
            return MilpResult("memory", None, None, None, None, 0.0, 0.0, 0, "memory budget")
    t0 = time.perf_counter()
    m = build_model(data, allowed, entry_cost, exit_cost)
    build_s = time.perf_counter() - t0
    log.info("compact MILP built in %.2f s", build_s)
    return solve_model(m, deadline.later(build_s), mip_gap, threads, start, build_s)
