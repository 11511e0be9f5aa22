"""The chart (PNG) of a fleet's plan (docs/fleet.md): each site's draw against its cap
and its price, and for each region where its demand is served."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from service.charts.schedule import COLOURS, period_edges, stairs  # noqa: E402


def fleet_chart(resp: Mapping[str, Any], path: str, title: str = "pdwatt fleet plan") -> None:
    """Two panels for the sites (power against cap, price), then one per region: the
    rate each of its servers takes, stacked, under the region's demand; what is left
    above the stack is unserved."""
    sites: Sequence[Mapping[str, Any]] = resp["sites"]
    regions: Sequence[Mapping[str, Any]] = resp["regions"]
    edges, _ = period_edges(sites[0]["periods"])
    rows = 2 + len(regions)
    fig, axes = plt.subplots(rows, 1, figsize=(10, 2.6 * rows + 0.6), dpi=110, sharex=True)
    colour = {s["name"]: COLOURS[i % len(COLOURS)] for i, s in enumerate(sites)}
    ax = axes[0]
    for s in sites:
        c = colour[s["name"]]
        stairs(ax, [p["power_w"] / 1e3 for p in s["periods"]], edges, color=c, lw=1.5,
               label=f"{s['name']} power")  # fmt: skip
        stairs(ax, [p["power_cap_w"] / 1e3 for p in s["periods"]], edges, color=c, lw=1.0,
               ls="--", label=f"{s['name']} cap")  # fmt: skip
    ax.set_ylabel("kW (dashed: cap)")
    ax.legend(loc="upper center", fontsize=7, ncol=len(sites))
    ax.set_title(
        f"{title}: {resp['status']}, gap {100 * resp['mip_gap']:.2f}%, objective "
        f"${resp['objective_usd']:,.2f} ({resp['method']})",
        fontsize=9,
    )
    ax = axes[1]
    for s in sites:
        stairs(ax, [p["price_usd_per_mwh"] for p in s["periods"]], edges, color=colour[s["name"]],
               lw=1.2, label=s["name"])  # fmt: skip
    ax.set_ylabel("price ($/MWh)")
    ax.legend(loc="upper center", fontsize=7, ncol=len(sites))
    left = edges[:-1]
    width = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    for ax, reg in zip(axes[2:], regions, strict=True):
        base = [0.0] * len(left)
        for sh in reg["shares"]:
            vals = list(sh["served_rps"])
            ax.bar(left, vals, width=width, bottom=base, align="edge", alpha=0.75,
                   color=colour[sh["site"]], edgecolor="none",
                   label=f"{sh['site']}/{sh['deployment']}")  # fmt: skip
            base = [b + v for b, v in zip(base, vals, strict=True)]
        stairs(ax, list(reg["demand_rps"]), edges, color="#333333", lw=1.2, label="demand")
        lost = sum(reg["unserved_rps"]) / max(sum(reg["demand_rps"]), 1e-12)
        ax.set_ylim(0, 1.2 * max([*reg["demand_rps"], *base, 1e-9]))  # room for the legend
        ax.set_ylabel("req/s")
        ax.set_title(
            f"region {reg['name']} ({reg['model']}): where its demand is served, "
            f"{100 * lost:.1f}% unserved",
            fontsize=8,
        )
        ax.legend(loc="upper center", fontsize=7, ncol=len(reg["shares"]) + 1)
    axes[-1].set_xlabel("hour")
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


#: each plan of a fleet's what-if, as the chart draws it
PLANS = (("baseline", "#8d99ae", "baseline"), ("local", "#f4a261", "local response"),
         ("rerouted", "#1f77b4", "re-routed response"))  # fmt: skip
#: the baseline drawn wide and pale under the responses, where they coincide with it
WIDTH = {"baseline": 3.0, "local": 1.5, "rerouted": 1.2}


def fleet_dr_chart(result: Mapping[str, Any], path: str, title: str = "fleet what-if") -> None:
    """A fleet's demand-response what-if (``POST /v1/fleet/demand-response``): the cut
    site's draw under each plan against its caps, the other sites' draw, and the
    regions' unserved rate; the event's window shaded."""
    ev = result["event"]
    site = ev["site"]
    periods = result["baseline"]["sites"][0]["periods"]
    edges, _ = period_edges(periods)
    fig, axes = plt.subplots(3, 1, figsize=(10, 8.5), dpi=110, sharex=True)

    def by_name(plan: str) -> dict[str, Mapping[str, Any]]:
        return {s["name"]: s for s in result[plan]["sites"]}

    for ax in axes:
        ax.axvspan(edges[ev["start_period"]], edges[ev["end_period"]], color="#d1495b",
                   alpha=0.08, lw=0)  # fmt: skip
    ax = axes[0]
    for plan, colour, label in PLANS:
        s = by_name(plan)[site]
        stairs(ax, [p["power_w"] / 1e3 for p in s["periods"]], edges, color=colour,
               lw=WIDTH[plan], label=label)  # fmt: skip
    for plan, ls in (("baseline", ":"), ("local", "--")):
        cap = [p["power_cap_w"] / 1e3 for p in by_name(plan)[site]["periods"]]
        stairs(ax, cap, edges, color="#d1495b", lw=1.0, ls=ls,
               label="cap" if plan == "baseline" else "cap, cut")  # fmt: skip
    ax.set_ylabel(f"{site} kW")
    ax.legend(loc="upper left", fontsize=7, ncol=5)
    ax.set_title(
        f"{title}: responding costs {result['local_cost_usd']:,.2f} USD at {site} alone, "
        f"{result['rerouted_cost_usd']:,.2f} USD with the fleet re-routing (saving "
        f"{result['saving_usd']:,.2f} USD, at least {result['saving_at_least_usd']:,.2f})",
        fontsize=9,
    )
    ax = axes[1]
    for plan, colour, label in PLANS:
        others = [s for name, s in by_name(plan).items() if name != site]
        total = [sum(s["periods"][t]["power_w"] for s in others) / 1e3 for t in range(len(periods))]
        stairs(ax, total, edges, color=colour, lw=WIDTH[plan], label=label)
    ax.set_ylabel("other sites kW")
    ax.legend(loc="upper left", fontsize=7, ncol=3)
    ax = axes[2]
    for plan, colour, label in PLANS:
        regions = result[plan]["regions"]
        lost = [sum(r["unserved_rps"][t] for r in regions) for t in range(len(periods))]
        stairs(ax, lost, edges, color=colour, lw=WIDTH[plan], label=label)
    ax.set_ylabel("regions unserved req/s")
    ax.set_xlabel("hour (shaded: the event)")
    ax.legend(loc="upper left", fontsize=7, ncol=3)
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
