"""What the console shows of a site at once (:mod:`service.console.routes`): its latest
plan in brief, the plan's period now, its events dated on its periods with the next one,
and each event's effect (the power and energy it shed and what it cost, between the plan
before it and the plan its re-plan made)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from formulation.problem import DeploymentInput
from formulation.shed_figures import cost_delta, demand_lost, power_shed
from model.errors import InputError
from service.runtime.records import EventRecord, Plan, PlanHead, Site
from service.runtime.store import Store
from service.sites.plans import n_periods, period, plan_head, plan_start
from service.sites.registry import NoPeriod, event_signals, periods_at

#: a period's site power at its cap within this relative tolerance is "at the cap"
AT_CAP_RTOL = 1e-6


def _events(site: Site, rows: list[EventRecord]) -> list[dict[str, Any]]:
    """The site's events with the periods they touch on its clock (``first_period``
    null for one that no longer lies in the horizon of the site as it is now) and when
    each was retracted (``retracted``, null while it holds)."""
    body = site.body
    start, step = plan_start(body), period(body)
    out = []
    for r in rows:
        ev: dict[str, Any] = {
            "id": r.id,
            "received": r.received.isoformat(),
            "programID": r.event.get("programID"),
            "eventName": r.event.get("eventName"),
            "first_period": None,
            "end_period": None,
            "types": [],
            "retracted": None if r.retracted is None else r.retracted.isoformat(),
        }
        try:
            sig = event_signals(body, r.event)
        except InputError as e:
            ev["note"] = f"{e.field}: {e.reason}"
        else:
            touched = sorted(sig["periods"])
            if touched:
                first, end = touched[0], touched[-1] + 1
                ev |= {
                    "first_period": first,
                    "end_period": end,
                    "start": (start + step * first).isoformat(),
                    "end": (start + step * end).isoformat(),
                }
            ev["types"] = sig["types"]
            caps = [v for v in sig.get("power_cap_w", {}).get("values", []) if v is not None]
            ev["cap_w"] = min(caps) if caps else None
        ev["source"] = "event"
        out.append(ev)
    return out


def _power(doc: dict[str, Any]) -> dict[int, float]:
    return {p["index"]: float(p["power_w"]) for p in doc["schedule"]["periods"]}


def _effects(
    store: Store, site: Site, events: list[dict[str, Any]], rows: list[EventRecord]
) -> None:
    """Each posted event's effect (``effect``, or null and ``effect_note`` saying why):
    between the plan before it (the newest made from an older site version than the
    one its merge made) and the plan its re-plan made (the first made from that
    version), the power it shed over its periods (largest and mean, W), the energy
    (kWh, over its periods and over the periods both plans cover) and the change of
    the objective and of each of its terms and the demand lost per deployment
    (:mod:`formulation.shed_figures`, the terms of a demand-response report); the cost
    only between plans over the same periods."""
    heads = store.plan_heads(site.id)  # newest first
    docs: dict[int, dict[str, Any]] = {}

    def doc(h: PlanHead) -> dict[str, Any]:
        if h.id not in docs:
            docs[h.id] = store.get_plan(site.id, h.id).response
        return docs[h.id]

    hours = float(site.body["period_minutes"]) / 60.0
    default = DeploymentInput.unserved_penalty_usd_per_request
    penalty = {
        d["name"]: float(d.get("unserved_penalty_usd_per_request", default))
        for d in site.body["deployments"]
    }
    for ev, r in zip(events, rows, strict=True):
        ev["effect"] = None
        before = next((h for h in heads if h.site_version < r.site_version), None)
        after = min(
            (h for h in heads if h.site_version == r.site_version), key=lambda h: h.id, default=None
        )
        if before is None or after is None:
            ev["effect_note"] = (
                "no plan before it" if before is None else "no plan was made from the site it made"
            )
            continue
        if ev["first_period"] is None:
            ev["effect_note"] = "outside the horizon"
            continue
        a, b = doc(before), doc(after)
        window = list(range(ev["first_period"], ev["end_period"]))
        shed = power_shed(_power(a), _power(b), window, hours)
        if shed is None:
            ev["effect_note"] = "neither plan covers its periods"
            continue
        shed.pop("power_shed_w")
        effect: dict[str, Any] = {"before_plan": before.id, "after_plan": after.id, **shed}
        effect["demand_lost"] = demand_lost(
            a["schedule"]["periods"], b["schedule"]["periods"], hours, penalty
        )
        if before.first_period == after.first_period:
            effect |= cost_delta(a["schedule"], b["schedule"])
        else:
            effect |= {"cost_delta_usd": None, "cost_delta_breakdown": None}
            ev["effect_note"] = "the plans cover different periods: no cost compared"
        ev["effect"] = effect


def _cap_windows(site: Site) -> list[dict[str, Any]]:
    """Runs of periods whose cap, in the site's own grid signals, lies below the
    horizon's highest (a cut written into the site, such as the demo's evening one, or
    left there by a merged event), each with its lowest cap (``cap_w``)."""
    body = site.body
    n = n_periods(body)
    cap = body["grid"]["power_cap_w"]
    caps = [float(c) for c in cap] if isinstance(cap, list) else [float(cap)]
    caps = caps * n if len(caps) == 1 else caps[:n]
    n = len(caps)
    top = max(caps)
    start, step = plan_start(body), period(body)
    out: list[dict[str, Any]] = []
    t = 0
    while t < n:
        if caps[t] < top:
            first = t
            while t < n and caps[t] < top:
                t += 1
            out.append(
                {
                    "source": "grid",
                    "eventName": "cap lowered in the site's grid signals",
                    "programID": None,
                    "first_period": first,
                    "end_period": t,
                    "start": (start + step * first).isoformat(),
                    "end": (start + step * t).isoformat(),
                    "types": ["IMPORT_CAPACITY_LIMIT"],
                    "cap_w": min(caps[first:t]),
                    "retracted": None,
                }
            )
        else:
            t += 1
    return out


def _next_event(events: list[dict[str, Any]], site: Site, now: datetime) -> dict[str, Any] | None:
    """The event that ends first after ``now`` among those posted (not retracted) and
    the site's own lowered-cap windows: the one starting first (one under way counts);
    a posted event before a window starting with it."""
    coming = [
        e
        for e in [*events, *_cap_windows(site)]
        if e.get("end") is not None
        and datetime.fromisoformat(e["end"]) > now
        and e["retracted"] is None  # a retracted event no longer comes
    ]
    if not coming:
        return None
    return min(coming, key=lambda e: (datetime.fromisoformat(e["start"]), e["source"] != "event"))


def _now(site: Site, plan: Plan, now: datetime) -> dict[str, Any] | None:
    """The plan's period now: site power against its cap, the headroom (cap - power, W
    and share of the cap), price and carbon, and each deployment's counts, power and
    settings; None when the plan does not cover now."""
    try:
        t, periods = periods_at(plan, now)
    except NoPeriod:
        return None
    p = periods[0]
    pue = float(site.body["site"].get("pue", 1.0))
    deployments = {}
    for name, d in p["deployments"].items():
        deployments[name] = {
            "n_p": d["n_p"],
            "n_d": d["n_d"],
            "gpus": d.get("gpus"),
            "power_w": d["power_w"] * pue,
            "served_rps": d.get("served_rps"),
            "demand_rps": d.get("demand_rps"),
            "prefill_setting": d.get("prefill_setting"),
            "decode_setting": d.get("decode_setting"),
        }
    headroom = p["power_cap_w"] - p["power_w"]
    return {
        "period": t,
        "start": p["start"],
        "end": p["end"],
        "power_w": p["power_w"],
        "cap_w": p["power_cap_w"],
        "headroom_w": headroom,
        "headroom_pct": 100.0 * headroom / p["power_cap_w"] if p["power_cap_w"] else None,
        "price_usd_per_mwh": p.get("price_usd_per_mwh"),
        "carbon_g_per_kwh": p.get("carbon_g_per_kwh"),
        "deployments": deployments,
    }


def _plan_brief(plan: Plan, site: Site) -> dict[str, Any]:
    sched = plan.response["schedule"]
    periods = sched["periods"]
    totals = sched["totals"]
    peak = max(periods, key=lambda p: p["power_w"])
    return {
        **plan_head(plan, site.version),
        "mip_gap": sched.get("mip_gap"),
        # the objective and its terms (formulation.evaluate.price_schedule)
        "objective_usd": sched["objective_usd"],
        "energy_cost_usd": totals["cost_usd"],
        "carbon_cost_usd": totals.get("carbon_cost_usd"),
        "unserved_value_usd": totals["unserved_value_usd"],
        "transition_cost_usd": totals.get("transition_cost_usd"),
        "first_period": plan.first_period,
        "peak_power_w": peak["power_w"],
        "peak_period": peak["index"],
        "cap_at_peak_w": peak["power_cap_w"],
        "periods_at_cap": sum(
            p["power_w"] >= p["power_cap_w"] * (1 - AT_CAP_RTOL) for p in periods
        ),
    }


def summary(
    site: Site, plan: Plan | None, rows: list[EventRecord], store: Store | None = None
) -> dict[str, Any]:
    """The site in brief; with ``store``, each event with its effect (:func:`_effects`)."""
    body = site.body
    events = _events(site, rows)
    if store is not None:
        _effects(store, site, events, rows)
    now = datetime.now(UTC)
    return {
        "id": site.id,
        "name": site.name,
        "version": site.version,
        "plan_start": body["plan_start"],
        "period_minutes": body["period_minutes"],
        "n_periods": n_periods(body),
        "gpu_inventory": body["site"]["gpu_inventory"],
        "deployments": [
            {"name": d["name"], "model": d["model"], "gpu": d["gpu"]} for d in body["deployments"]
        ],
        "plan": None if plan is None else _plan_brief(plan, site),
        "now": None if plan is None else _now(site, plan, now),
        "events": events,
        "next_event": _next_event(events, site, now),
    }
