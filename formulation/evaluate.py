"""Independent pricing of a schedule, and the exact served loads for fixed configurations.

``price_schedule`` recomputes everything from the schedule's decisions (configuration
and served rate per deployment and period) with the same objective as the MILP
(SPEC 4), so that baselines, solver output and tests are all priced one way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from formulation.data import DeploymentData, ScheduleData

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Relative tolerance of feasibility checks (cap, inventory, served <= limit).
FEAS_RTOL = 1e-7


@dataclass
class Schedule:
    """Decisions: configuration index and served rate per (deployment, period)."""

    config: IntArray  # (M, T) candidate index of each deployment's DeploymentData
    served_rps: FloatArray  # (M, T)


@dataclass
class Priced:
    """A schedule with its power, totals and violations."""

    schedule: Schedule
    it_power_w: FloatArray  # (M, T) deployment IT power
    site_power_w: FloatArray  # (T,) after PUE, idle GPUs included
    gpus_used: IntArray  # (G, T)
    starts: IntArray  # (M, T) instances started (both phases)
    stops: IntArray  # (M, T)
    totals: dict[str, float]
    cap_violations: list[int] = field(default_factory=list)
    inventory_violations: list[int] = field(default_factory=list)
    limit_violations: list[tuple[int, int]] = field(default_factory=list)
    served_violations: list[tuple[int, int]] = field(default_factory=list)

    @property
    def objective_usd(self) -> float:
        return self.totals["objective_usd"]

    @property
    def violation_free(self) -> bool:
        return not (
            self.cap_violations
            or self.inventory_violations
            or self.limit_violations
            or self.served_violations
        )

    def violations(self) -> dict[str, Any]:
        return {
            "cap_violations": len(self.cap_violations),
            "inventory_violations": len(self.inventory_violations),
            "limit_violations": len(self.limit_violations),
        }


def transitions(d: DeploymentData, ks: IntArray) -> tuple[IntArray, IntArray]:
    """Instances started and stopped per period, from the initial state."""
    prev = np.concatenate([[d.initial], ks[:-1]])
    dp = d.n_p[ks] - d.n_p[prev]
    dd = d.n_d[ks] - d.n_d[prev]
    starts = np.maximum(dp, 0) + np.maximum(dd, 0)
    stops = np.maximum(-dp, 0) + np.maximum(-dd, 0)
    return starts.astype(np.int64), stops.astype(np.int64)


def _priced_load(d: DeploymentData, ks: IntArray, s: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The most deployment ``d`` may serve in each period at choices ``ks``, and the
    served loads ``s`` clipped to ``[0, that]``: the loads its power is priced at."""
    smax = d.smax_rps[np.arange(ks.shape[0]), ks]
    return smax, np.clip(s, 0.0, smax)


def phase_power_w(data: ScheduleData, sched: Schedule) -> tuple[FloatArray, FloatArray]:
    """(M, T) the prefill and the decode instances' parts of
    :attr:`Priced.it_power_w`, at the loads :func:`price_schedule` prices."""
    out = np.zeros((2, *sched.config.shape))
    for m, d in enumerate(data.deployments):
        ks = sched.config[m]
        out[0, m], out[1, m] = d.phase_power_w(ks, _priced_load(d, ks, sched.served_rps[m])[1])
    return out[0], out[1]


def price_schedule(data: ScheduleData, sched: Schedule) -> Priced:
    """Price ``sched`` with the objective of SPEC 4 and list every violation."""
    m_count, t_count = sched.config.shape
    it = np.zeros((m_count, t_count))
    starts = np.zeros((m_count, t_count), dtype=np.int64)
    stops = np.zeros((m_count, t_count), dtype=np.int64)
    gpus = np.zeros((len(data.pools), t_count), dtype=np.int64)
    served_viol: list[tuple[int, int]] = []
    limit_viol: list[tuple[int, int]] = []
    unserved_usd = 0.0
    served_req = 0.0
    unserved_req = 0.0
    sec = 3600.0 * data.period_hours
    for m, d in enumerate(data.deployments):
        ks = sched.config[m]
        s = sched.served_rps[m]
        smax, s_c = _priced_load(d, ks, s)
        bad = (s < -1e-9) | (s > smax * (1 + FEAS_RTOL) + 1e-9) | ~d.allowed[ks]
        served_viol.extend((m, int(t)) for t in np.flatnonzero(bad))
        it[m] = d.power_w(ks, s_c)
        starts[m], stops[m] = transitions(d, ks)
        if data.max_changes is not None:
            for tt in np.flatnonzero(starts[m] + stops[m] > data.max_changes):
                limit_viol.append((m, int(tt)))
        data.add_pool_use(gpus, m, ks)
        unserved = np.maximum(d.demand_rps - s_c, 0.0)
        unserved_usd += float(np.sum(unserved * d.unserved_usd_per_rps))
        served_req += float(np.sum(s_c) * sec)
        unserved_req += float(np.sum(unserved) * sec)
    idle_gpus = data.pool_gpus[:, None] - gpus
    it_site = it.sum(axis=0) + data.idle_gpu_power_w * np.maximum(idle_gpus, 0).sum(axis=0)
    site = data.pue * it_site
    cap_viol = [int(t) for t in np.flatnonzero(site > data.power_cap_w * (1 + FEAS_RTOL) + 1e-6)]
    inv_viol = [int(t) for t in np.flatnonzero((idle_gpus < 0).any(axis=0))]
    energy_kwh = float(np.sum(site) * data.period_hours / 1e3)
    energy_cost = float(np.sum(site * data.price_usd_per_mwh) * data.period_hours / 1e6)
    carbon_kg = float(np.sum(site * data.carbon_g_per_kwh) * data.period_hours / 1e6)
    carbon_cost = carbon_kg / 1e3 * data.carbon_price_usd_per_tonne
    trans_cost = float(starts.sum() * data.start_cost_usd + stops.sum() * data.stop_cost_usd)
    totals = {
        "objective_usd": energy_cost + carbon_cost + unserved_usd + trans_cost,
        "energy_kwh": energy_kwh,
        "cost_usd": energy_cost,
        "carbon_kg": carbon_kg,
        "carbon_cost_usd": carbon_cost,
        "served_requests": served_req,
        "unserved_requests": unserved_req,
        "unserved_value_usd": unserved_usd,
        "transition_cost_usd": trans_cost,
        "instance_starts": int(starts.sum()),
        "instance_stops": int(stops.sum()),
    }
    return Priced(
        schedule=sched,
        it_power_w=it,
        site_power_w=site,
        gpus_used=gpus,
        starts=starts,
        stops=stops,
        totals=totals,
        cap_violations=cap_viol,
        inventory_violations=inv_viol,
        limit_violations=limit_viol,
        served_violations=served_viol,
    )


def best_served(data: ScheduleData, t: int, ks: IntArray) -> tuple[FloatArray, bool]:
    """Exact cost-minimising served loads in period ``t`` for fixed configurations ``ks``.

    With configurations fixed, period cost is ``sum_m cw P_m(s_m) - u_m s_m`` (concave in
    each ``s_m``) subject to ``sum_m P_m(s_m) <= budget``. In the power variables
    ``p_m`` the served load is convex in ``p_m`` and the feasible set is a box cut by one
    halfspace, so an optimum lies at a vertex: every deployment serves 0 or its maximum
    except at most one, which serves the most that fits. This enumerates those vertices
    (``M 2^M`` of them, for up to 12 deployments). Returns ``(served, feasible)``; when
    even serving nothing breaks the cap, serves nothing and reports infeasible.
    """
    deps = data.deployments
    m_count = len(deps)
    if m_count > 12:
        raise ValueError("best_served enumerates vertices for at most 12 deployments")
    used = np.zeros(len(data.pools), dtype=np.int64)
    for m in range(m_count):
        data.add_pool_use(used, m, ks[m])
    idle = data.idle_gpu_power_w * float(np.maximum(data.pool_gpus - used, 0).sum())
    budget = float(data.it_cap_w[t]) - idle
    cw = float(data.cost_usd_per_w[t])
    smax = np.array([d.smax_rps[t, ks[m]] for m, d in enumerate(deps)])
    p0 = np.array([d.power_w(int(ks[m]), 0.0)[0] for m, d in enumerate(deps)])
    p1 = np.array([d.power_w(int(ks[m]), smax[m])[0] for m, d in enumerate(deps)])
    u = np.array([d.unserved_usd_per_rps[t] for d in deps])
    tol = abs(budget) * FEAS_RTOL + 1e-6
    if p0.sum() > budget + tol:
        return np.zeros(m_count), False
    masks = np.arange(1 << m_count)
    full = ((masks[:, None] >> np.arange(m_count)[None, :]) & 1).astype(bool)
    power = np.where(full, p1, p0).sum(axis=1)
    cost = np.where(full, cw * p1 - u * smax, cw * p0).sum(axis=1)
    best_cost = np.inf
    best = np.zeros(m_count)
    ok = power <= budget + tol
    if ok.any():
        i = int(np.flatnonzero(ok)[np.argmin(cost[ok])])
        best_cost = float(cost[i])
        best = np.where(full[i], smax, 0.0)
    # the partial one: for each deployment f, every feasible vertex where f serves 0,
    # with f raised to the most that fits (one vectorised evaluation per deployment)
    feasible = np.flatnonzero(ok)
    for f in range(m_count):
        rows = feasible[~full[feasible, f]]
        if rows.size == 0:
            continue
        room = budget - (power[rows] - p0[f])
        fit = deps[f].max_load_within(int(ks[f]), room)
        s_f = np.minimum(fit, float(smax[f]))
        usable = (fit >= 0) & (s_f > 0)
        if not usable.any():
            continue
        p_f = deps[f].power_w(int(ks[f]), np.where(usable, s_f, 0.0))
        c = np.where(usable, cost[rows] - cw * p0[f] + cw * p_f - u[f] * s_f, np.inf)
        j = int(np.argmin(c))
        if c[j] < best_cost - 1e-12:
            best_cost = float(c[j])
            best = np.where(full[rows[j]], smax, 0.0)
            best[f] = float(s_f[j])
    return best, True
