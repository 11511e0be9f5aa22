"""A demand-response event at one site of a fleet: the site answering alone against the
fleet answering together, where the regions' demand may move to the other sites
(docs/fleet.md, section 4).

Three plans within one ``solver.time_limit_s`` (a third each): the baseline (the request
as given); the local response, where the event site's cap is cut and no flow of any
region may exceed its baseline value (demand may be dropped, not moved: each site
answers with what it runs); and the re-routed response, where the flows are free again
(within the ramp). The saving of re-routing is the local response's cost less the
re-routed one's; what the solves prove of it, the local response's lower bound less the
re-routed cost."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from formulation.fleet.problem import FleetProblem, fleet_from_dict
from formulation.fleet.results import fleet_response
from formulation.fleet.solve import FleetOutcome, solve_fleet
from formulation.problem import Host
from formulation.whatif.dr import event_caps, parse_event, with_caps
from model.errors import InputError

Progress = Callable[[str], None]
#: the solves of a fleet's what-if, each given this share of its time limit
SOLVES = ("baseline", "local", "rerouted")


def fleet_demand_response(
    body: FleetProblem | dict[str, Any],
    event: Any,
    progress: Progress | None = None,
    host: Host | None = None,
) -> dict[str, Any]:
    """The baseline, the local and the re-routed responses to ``event`` (a site
    schedule's event, plus ``site``: the name of the site whose cap it cuts)."""
    say = progress or (lambda _msg: None)
    fp = fleet_from_dict(body, host)
    if not isinstance(event, Mapping):
        raise InputError("event", f"must be an object, got {type(event).__name__}")
    name = event.get("site")
    if not isinstance(name, str) or name not in fp.site_names:
        raise InputError(
            "event.site",
            f"must name a site of the fleet ({', '.join(fp.site_names)}), got {name!r}",
        )
    i = fp.site_names.index(name)
    ev = parse_event({k: v for k, v in event.items() if k != "site"}, fp.sites[i])
    share = fp.solver.time_limit_s / len(SOLVES)
    timed = dataclasses.replace(fp, solver=dataclasses.replace(fp.solver, time_limit_s=share))

    def step(label: str) -> Progress:
        return lambda msg: say(f"{label}: {msg}")

    say("baseline: the request as given")
    base = solve_fleet(timed, step("baseline"))
    request_cap = np.asarray(fp.sites[i].grid.power_cap_w, dtype=float)
    caps = request_cap.copy()
    caps[ev.start : ev.end] = event_caps(ev, request_cap, base.sites[i].priced.site_power_w)
    sites = list(timed.sites)
    sites[i] = with_caps(sites[i], caps)
    cut = dataclasses.replace(timed, sites=tuple(sites))
    say(f"local: {name}'s cap lowered in periods {ev.start}..{ev.end - 1}, no demand moved")
    local = solve_fleet(cut, step("local"), flow_caps=base.flows if fp.coupled else None)
    say("rerouted: the regions' demand free to move between the sites")
    moved = solve_fleet(cut, step("rerouted"))
    sec = 3600.0 * fp.period_hours
    return {
        "event": {
            "site": name,
            "name": ev.name,
            "start_period": ev.start,
            "end_period": ev.end,
            "kind": ev.kind,
            "value": ev.value,
            "request_cap_w": request_cap[ev.start : ev.end].tolist(),
            "cap_w": caps[ev.start : ev.end].tolist(),
        },
        "baseline": fleet_response(base),
        "local": fleet_response(local),
        "rerouted": fleet_response(moved),
        "local_cost_usd": local.objective_usd - base.objective_usd,
        "rerouted_cost_usd": moved.objective_usd - base.objective_usd,
        "saving_usd": local.objective_usd - moved.objective_usd,
        # what the bounds prove: the local response costs at least its lower bound
        "saving_at_least_usd": max(local.lower_bound_usd - moved.objective_usd, 0.0),
        "moved_requests": _moved(fp, i, base, moved, ev.start, ev.end) * sec,
    }


def _moved(
    fp: FleetProblem, site: int, base: FleetOutcome, moved: FleetOutcome, start: int, end: int
) -> float:
    """Req/s-periods served at other sites than ``site`` in the window, above the
    baseline's, summed over the regions whose servers include ``site``."""
    out, f = 0.0, 0
    for reg in fp.regions:
        touches = any(s.site == site for s in reg.servers)
        for s in reg.servers:
            if touches and s.site != site:
                gain = moved.flows[f, start:end] - base.flows[f, start:end]
                out += float(np.maximum(gain, 0.0).sum())
            f += 1
    return out
