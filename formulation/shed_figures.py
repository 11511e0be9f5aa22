"""What a cap took off a site's draw, and what it cost: the figures a demand-response
report gives (``pdwatt dr``, ``POST /v1/demand-response``: :func:`formulation.whatif.dr.report`),
computed here from two schedules' site power and totals, so that a posted event's
effect (the console's events table) is told in the same terms:

* ``power_shed_w``: site power before less after, per period (after PUE);
* ``max_shed_w``, ``mean_shed_w``: the largest and the mean of it over the window;
* ``window_energy_shed_kwh``: its energy over the window;
* ``energy_shed_kwh``: its energy over every period both schedules cover;
* ``cost_delta_usd`` and ``cost_delta_breakdown``: the change of the objective and of
  each of its terms (energy, carbon, unserved demand, transitions);
* ``demand_lost``: per deployment, the requests left unserved after less before, and
  their value, over every period both schedules cover (as ``pdwatt dr``'s, which is
  over its whole horizon: load moved before or after the window shows too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: the objective's terms in a schedule's totals, and their names in a breakdown
COST_TERMS = {
    "energy_usd": "cost_usd",
    "carbon_usd": "carbon_cost_usd",
    "unserved_value_usd": "unserved_value_usd",
    "transition_usd": "transition_cost_usd",
}


def power_shed(
    before_w: Mapping[int, float],
    after_w: Mapping[int, float],
    window: Sequence[int],
    period_hours: float,
) -> dict[str, Any] | None:
    """The power shed from ``before_w`` to ``after_w`` (site power per period index),
    over the periods both cover and, of those, the ``window``'s; None when the window
    has no period both cover."""
    both = sorted(set(before_w) & set(after_w))
    shed = {t: float(before_w[t]) - float(after_w[t]) for t in both}
    inside = [shed[t] for t in window if t in shed]
    if not inside:
        return None
    kwh = period_hours / 1e3
    return {
        "power_shed_w": {t: shed[t] for t in both},
        "max_shed_w": max(inside),
        "mean_shed_w": sum(inside) / len(inside),
        "window_energy_shed_kwh": sum(inside) * kwh,
        "energy_shed_kwh": sum(shed.values()) * kwh,
    }


def cost_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The change of the objective (``objective_usd``) from schedule ``before`` to
    ``after`` and of each of its terms (their ``totals``), a missing term counted 0."""
    bt, at = before["totals"], after["totals"]
    return {
        "cost_delta_usd": float(after["objective_usd"]) - float(before["objective_usd"]),
        "cost_delta_breakdown": {
            name: float(at.get(key) or 0.0) - float(bt.get(key) or 0.0)
            for name, key in COST_TERMS.items()
        },
    }


def demand_lost(
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    period_hours: float,
    penalty_usd_per_request: Mapping[str, float],
) -> dict[str, dict[str, float]]:
    """Per deployment of ``penalty_usd_per_request``: the requests unserved in the
    schedule periods ``after`` less those in ``before`` (``requests``: demand less
    served rate, never below 0, times the period's seconds) and their value
    (``value_usd``), over the periods (by ``index``) both give."""
    seconds = 3600.0 * period_hours
    b = {int(p["index"]): p for p in before}
    both = [(b[int(p["index"])], p) for p in after if int(p["index"]) in b]

    def unserved(p: Mapping[str, Any], name: str) -> float:
        d = p["deployments"][name]
        return max(float(d["demand_rps"]) - float(d["served_rps"]), 0.0) * seconds

    out = {}
    for name, penalty in penalty_usd_per_request.items():
        req = sum(unserved(pa, name) - unserved(pb, name) for pb, pa in both)
        out[name] = {"requests": req, "value_usd": req * float(penalty)}
    return out
