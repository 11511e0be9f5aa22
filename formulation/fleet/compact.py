"""The fleet's compact MILP: each site's compact model (:func:`formulation.milp.compact.
build_model`, its cap, inventories and transitions) as a block, with the routing of the
regions' demand between them (docs/fleet.md, section 2).

Each site's block is built over the site's data with every deployment's demand set to
the most it can be sent (its own demand plus every region's it may serve) and no value
on unserved requests; the fleet's rows then say where each served request comes from:

    served[i,k,t] = own[i,k,t] + sum_r flow[r,(i,k),t]     own <= own demand
    sum_j flow[r,j,t] <= demand[r,t]

and the objective prices what is not served, per deployment's own demand and per
region, and each flow's penalty per request. A ramp bounds the change of each flow's
share of its region's demand between periods where both demands are positive."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pyomo.environ as pyo
from numpy.typing import NDArray

from formulation.data import ScheduleData, build_data
from formulation.fleet.problem import FleetProblem
from formulation.milp.compact import build_model

FloatArray = NDArray[np.float64]


def own_demand(fp: FleetProblem, i: int) -> FloatArray:
    """(K_i, T) the own demand of site ``i``'s deployments."""
    return np.array([d.demand_rps for d in fp.sites[i].deployments], dtype=float)


def routable(fp: FleetProblem, i: int) -> FloatArray:
    """(K_i, T) the most each deployment of site ``i`` may be sent from the regions."""
    out = np.zeros((len(fp.sites[i].deployments), fp.n_periods))
    for r in fp.regions:
        for s in r.servers:
            if s.site == i:
                out[s.deployment] += np.asarray(r.demand_rps)
    return out


def site_data(fp: FleetProblem, i: int, demand: FloatArray, penalties: bool) -> ScheduleData:
    """Site ``i``'s data with its deployments' demand replaced by ``demand`` (K_i, T),
    their values on unserved requests kept or (not ``penalties``) set to 0."""
    p = fp.sites[i]
    deps = tuple(
        dataclasses.replace(
            d,
            demand_rps=tuple(float(x) for x in demand[k]),
            unserved_penalty_usd_per_request=(
                d.unserved_penalty_usd_per_request if penalties else 0.0
            ),
        )
        for k, d in enumerate(p.deployments)
    )
    return build_data(dataclasses.replace(p, deployments=deps))


@dataclass
class FleetModel:
    model: pyo.ConcreteModel
    datas: list[ScheduleData]
    #: (region, server index within the region) of each flow, in the model's order
    flows: list[tuple[int, int]]


def build_fleet_model(
    fp: FleetProblem, datas: list[ScheduleData], flow_caps: FloatArray | None = None
) -> FleetModel:
    """The joint MILP over the sites' data (:func:`site_data` without penalties); with
    ``flow_caps`` (flows, T), each flow at most its cap as well as its region's demand
    (a response that may not move demand between sites: formulation.fleet.dr)."""
    T = fp.n_periods
    sec = 3600.0 * fp.period_hours
    m = pyo.ConcreteModel(name="pdwatt_fleet")
    blocks = []
    for i, data in enumerate(datas):
        b = build_model(data)
        b.total_cost_usd.deactivate()
        setattr(m, f"site{i}", b)
        blocks.append(b)
    periods = range(T)
    owns = [own_demand(fp, i) for i in range(len(datas))]
    m.own_index = pyo.Set(
        initialize=[
            (i, k, t) for i, o in enumerate(owns) for k in range(o.shape[0]) for t in periods
        ],
        dimen=3,
    )
    m.own = pyo.Var(m.own_index, bounds=lambda _m, i, k, t: (0.0, float(owns[i][k, t])))
    flows = [(r, q) for r, reg in enumerate(fp.regions) for q in range(len(reg.servers))]
    m.flow_index = pyo.Set(initialize=[(f, t) for f in range(len(flows)) for t in periods], dimen=2)

    def flow_bounds(_m: pyo.ConcreteModel, f: int, t: int) -> tuple[float, float]:
        most = float(fp.regions[flows[f][0]].demand_rps[t])
        if flow_caps is not None:
            most = min(most, max(float(flow_caps[f, t]), 0.0))
        return (0.0, most)

    m.flow = pyo.Var(m.flow_index, bounds=flow_bounds)
    into: dict[tuple[int, int], list[int]] = {}
    of_region: dict[int, list[int]] = {}
    for f, (r, q) in enumerate(flows):
        s = fp.regions[r].servers[q]
        into.setdefault((s.site, s.deployment), []).append(f)
        of_region.setdefault(r, []).append(f)

    def balance(mm: pyo.ConcreteModel, i: int, k: int, t: int) -> pyo.Expression:
        sent = sum(mm.flow[f, t] for f in into.get((i, k), []))
        return blocks[i].served_rps[k, t] == mm.own[i, k, t] + sent

    # what is served is what is sent (serving more would only cost power)
    m.served_is_sent = pyo.Constraint(m.own_index, rule=balance)
    m.region_periods = pyo.Set(
        initialize=[(r, t) for r in range(len(fp.regions)) for t in periods], dimen=2
    )

    def within_demand(mm: pyo.ConcreteModel, r: int, t: int) -> pyo.Expression:
        return sum(mm.flow[f, t] for f in of_region[r]) <= fp.regions[r].demand_rps[t]

    m.sent_within_demand = pyo.Constraint(m.region_periods, rule=within_demand)
    if fp.max_share_change is not None:
        ramp = float(fp.max_share_change)
        steps = []
        for f, (r, _q) in enumerate(flows):
            d = fp.regions[r].demand_rps
            steps += [(f, t) for t in range(1, T) if d[t] > 0 and d[t - 1] > 0]
        m.ramp_index = pyo.Set(initialize=steps, dimen=2)

        def share_change(mm: pyo.ConcreteModel, f: int, t: int) -> pyo.Expression:
            d = fp.regions[flows[f][0]].demand_rps
            return pyo.inequality(-ramp, mm.flow[f, t] / d[t] - mm.flow[f, t - 1] / d[t - 1], ramp)

        m.share_change_within_ramp = pyo.Constraint(m.ramp_index, rule=share_change)
    sites_cost = sum(b.total_cost_usd.expr for b in blocks)
    own_unserved = sum(
        sec
        * fp.sites[i].deployments[k].unserved_penalty_usd_per_request
        * (float(owns[i][k, t]) - m.own[i, k, t])
        for i, k, t in m.own_index
    )
    region_unserved = sum(
        sec
        * reg.unserved_penalty_usd_per_request
        * (reg.demand_rps[t] - sum(m.flow[f, t] for f in of_region[r]))
        for r, reg in enumerate(fp.regions)
        for t in periods
    )
    routing = sum(
        sec * fp.regions[flows[f][0]].servers[flows[f][1]].penalty_usd_per_request * m.flow[f, t]
        for f, t in m.flow_index
    )
    m.total_cost_usd = pyo.Objective(
        expr=sites_cost + own_unserved + region_unserved + routing, sense=pyo.minimize
    )
    return FleetModel(m, datas, flows)


def flow_values(fm: FleetModel, fp: FleetProblem) -> FloatArray:
    """(flows, T) the flows of the model's incumbent (req/s)."""
    out = np.zeros((len(fm.flows), fp.n_periods))
    for (f, t), v in fm.model.flow.items():
        out[f, t] = max(float(v.value or 0.0), 0.0)
    return out
