"""Charts (PNG) of a demand-response what-if and of a flexibility curve (Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import IO, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from service.charts.schedule import COLOURS, period_edges, stairs  # noqa: E402

Target = str | IO[bytes]
#: step lines to draw: the periods, the key of each period's value, the line's style
Lines = tuple[tuple[Sequence[Mapping[str, Any]], str, dict[str, Any]], ...]


def dr_chart(result: Mapping[str, Any], path: Target, title: str = "demand response") -> None:
    """Site power of baseline and response against both caps (event window shaded),
    and served vs. demand per deployment in both plans."""
    base = result["baseline"]["periods"]
    resp = result["response"]["periods"]
    ev = result["event"]
    edges, step = period_edges(base)
    h0, h1 = ev["start_minute"] / 60.0, ev["end_minute"] / 60.0
    fig, axes = plt.subplots(2, 1, figsize=(10, 7.5), dpi=110, sharex=True)
    ax = axes[0]
    site_lines: Lines = (
        (base, "power_w", {"color": "#8d99ae", "lw": 1.4, "label": "baseline site power"}),
        (resp, "power_w", {"color": "#1f77b4", "lw": 1.6, "label": "response site power"}),
        (
            resp,
            "power_cap_w",
            {"color": "#d1495b", "lw": 1.2, "ls": "--", "label": "cap (with the event)"},
        ),
    )
    for periods, key, style in site_lines:
        stairs(ax, [p[key] / 1e3 for p in periods], edges, **style)
    ax.axvspan(h0, h1, color="#d1495b", alpha=0.08, lw=0)
    ax.set_ylabel("kW")
    ax.legend(loc="upper left", fontsize=8)
    lost = sum(d["value_usd"] for d in result["demand_lost"].values())
    name = f" '{ev['name']}'" if ev.get("name") else ""
    ax.set_title(
        f"{title}{name}: shed up to {result['max_shed_w'] / 1e3:.1f} kW, "
        f"cost {result['cost_delta_usd']:+.2f} USD (demand lost {lost:.2f} USD)",
        fontsize=9,
    )
    ax = axes[1]
    names = list(base[0]["deployments"])
    for i, n in enumerate(names):
        c = COLOURS[i % len(COLOURS)]
        deployment_lines: Lines = (
            (base, "demand_rps", {"lw": 0.7, "ls": ":"}),
            (base, "served_rps", {"lw": 0.9, "ls": "--", "alpha": 0.7}),
            (resp, "served_rps", {"lw": 1.4, "label": f"{n} served (response)"}),
        )
        for periods, key, style in deployment_lines:
            stairs(ax, [p["deployments"][n][key] for p in periods], edges, color=c, **style)
    ax.axvspan(h0, h1, color="#d1495b", alpha=0.08, lw=0)
    ax.set_ylabel("req/s (dashed: baseline, dotted: demand)")
    ax.set_xlabel("hour")
    ax.legend(loc="upper left", fontsize=7, ncol=max(1, len(names)))
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def _hhmm(minute: float) -> str:
    h = minute / 60.0
    return f"{int(h):02d}:{int(round((h % 1) * 60)):02d}"


def flex_chart(result: Mapping[str, Any], path: Target, title: str = "flexibility") -> None:
    """One period: served value and served load per deployment against the cap. Several
    periods: the served-value curves of up to eight of them."""
    periods: Sequence[Mapping[str, Any]] = result["periods"]
    names: Sequence[str] = result["deployments"]
    if len(periods) == 1:
        per = periods[0]
        pts = per["points"]
        caps = [p["cap_w"] / 1e3 for p in pts]
        fig, axes = plt.subplots(2, 1, figsize=(9, 7.5), dpi=110, sharex=True)
        ax = axes[0]
        tw = ax.twinx()
        for a, key, fmt, colour, label in (
            (ax, "served_value_usd_per_h", "o-", "#1f77b4", "value of served demand"),
            (tw, "energy_cost_usd_per_h", "s-", "#8d99ae", None),
        ):
            a.plot(caps, [p[key] for p in pts], fmt, color=colour, ms=3, label=label)
        ax.set_ylabel("value of served demand (USD/h)")
        tw.set_ylabel("energy and carbon cost (USD/h)", color="#777777")
        ax.legend(loc="upper left", fontsize=8)
        ax.set_title(
            f"{title}: period {per['period']} ({_hhmm(per['start_minute'])}), "
            f"{per['min_site_power_w'] / 1e3:.1f} .. {per['unconstrained_power_w'] / 1e3:.1f} kW"
            " (transitions ignored)",
            fontsize=9,
        )
        ax = axes[1]
        bottom = [0.0] * len(pts)
        for i, n in enumerate(names):
            vals = [p["served_rps"][n] for p in pts]
            top = [b + v for b, v in zip(bottom, vals, strict=True)]
            ax.fill_between(
                caps, bottom, top, step="post", color=COLOURS[i % len(COLOURS)], alpha=0.6, label=n
            )
            bottom = top
        for p, c, y in zip(
            pts[:: max(1, len(pts) // 8)],
            caps[:: max(1, len(pts) // 8)],
            bottom[:: max(1, len(pts) // 8)],
            strict=False,
        ):
            cfg = " ".join(f"{v['n_p']}P{v['n_d']}D" for v in p["configurations"].values())
            ax.annotate(
                cfg, (c, y), textcoords="offset points", xytext=(2, 4), fontsize=6, rotation=60
            )
        ax.set_ylim(0, max(max(bottom), 1e-9) * 1.45)
        ax.set_ylabel("served req/s (stacked)")
        ax.set_xlabel("site power cap (kW)")
        ax.legend(loc="upper left", fontsize=8)
        for a in axes:
            a.grid(alpha=0.3)
    else:
        fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
        stride = max(1, len(periods) // 8)
        for i, per in enumerate(periods[::stride]):
            pts = per["points"]
            ax.plot(
                [p["cap_w"] / 1e3 for p in pts],
                [p["served_value_usd_per_h"] for p in pts],
                "-",
                color=COLOURS[i % len(COLOURS)],
                lw=1.3,
                label=f"{_hhmm(per['start_minute'])} (period {per['period']})",
            )
        ax.set_xlabel("site power cap (kW)")
        ax.set_ylabel("value of served demand (USD/h)")
        ax.set_title(f"{title}: {len(periods)} periods (transitions ignored)", fontsize=9)
        ax.legend(loc="upper left", fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
