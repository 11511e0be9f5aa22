"""Charts (PNG) of fronts and schedules, drawn with matplotlib's Agg backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def front_chart(report: Mapping[str, Any], path: str) -> None:
    """Capacity-power plane: every configuration, the Pareto front highlighted; a front
    searched over GPU settings marks each front point by its setting pair."""
    configs: Sequence[Mapping[str, Any]] = report["configs"]
    front: Sequence[Mapping[str, Any]] = report["front"]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    ax.scatter(
        [c["capacity_rps"] for c in configs],
        [c["power_w"] / 1e3 for c in configs],
        s=10,
        c="#b0b7c3",
        label=f"configurations ({len(configs)})",
    )
    ax.plot(
        [c["capacity_rps"] for c in front],
        [c["power_w"] / 1e3 for c in front],
        "-" if "prefill_settings" in report else "o-",
        color="#d1495b",
        ms=4,
        lw=1.5,
        label=f"Pareto front ({len(front)})",
    )
    if "prefill_settings" in report:  # one marker and colour per setting pair
        pairs = [(a, b) for a in report["prefill_settings"] for b in report["decode_settings"]]
        markers = "osD^v<>PX*hp"
        for j, (sp, sd) in enumerate(pairs):
            pts = [c for c in front if (c["prefill_setting"], c["decode_setting"]) == (sp, sd)]
            if pts:
                ax.scatter(
                    [c["capacity_rps"] for c in pts],
                    [c["power_w"] / 1e3 for c in pts],
                    s=22,
                    marker=markers[j % len(markers)],
                    color=COLOURS[j % len(COLOURS)],
                    zorder=3,
                    label=f"P {sp} / D {sd} ({len(pts)})",
                )
    for c in front[:: max(1, len(front) // 8)]:
        ax.annotate(
            f"{c['n_p']}P{c['n_d']}D",
            (c["capacity_rps"], c["power_w"] / 1e3),
            textcoords="offset points",
            xytext=(4, -10),
            fontsize=7,
        )
    cal = report.get("calibration", {})
    flag = "measured" if cal.get("measured") else "ESTIMATED"
    ax.set_title(
        f"{report['model']} on {report['gpu']}, {report['workload']} "
        f"(calibration {flag}, <= {report['max_gpus']} GPUs)",
        fontsize=10,
    )
    ax.set_xlabel("capacity (req/s)")
    ax.set_ylabel("power at capacity (kW)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=7 if "prefill_settings" in report else None)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


#: One colour per deployment, in order.
COLOURS = ["#1f77b4", "#d1495b", "#2a9d8f", "#e9c46a", "#6d597a", "#8d99ae", "#f4a261", "#264653"]


def period_edges(periods: Sequence[Mapping[str, Any]]) -> tuple[list[float], float]:
    """Period boundaries in hours (and the period length) for step plots."""
    hours = [p["start_minute"] / 60.0 for p in periods]
    step = (hours[1] - hours[0]) if len(hours) > 1 else 1.0
    return [*hours, hours[-1] + step], step


def stairs(ax: Any, values: Sequence[float], edges: Sequence[float], **kw: Any) -> None:
    """A step line without the drop to zero at both ends."""
    ax.stairs(values, edges, baseline=None, **kw)


def schedule_chart(resp: Mapping[str, Any], path: str, title: str = "pdwatt schedule") -> None:
    """Site power vs cap (with price), instances per deployment, served vs demand."""
    periods: Sequence[Mapping[str, Any]] = resp["periods"]
    edges, _ = period_edges(periods)
    names = list(periods[0]["deployments"])
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), dpi=110, sharex=True)
    ax = axes[0]
    for key, style in (
        ("power_w", {"color": "#333333", "lw": 1.6, "label": "site power"}),
        ("power_cap_w", {"color": "#d1495b", "lw": 1.2, "ls": "--", "label": "power cap"}),
    ):
        stairs(ax, [p[key] / 1e3 for p in periods], edges, **style)
    ax.set_ylabel("kW")
    tw = ax.twinx()
    stairs(tw, [p["price_usd_per_mwh"] for p in periods], edges, color="#999999", lw=0.8, alpha=0.7)
    tw.set_ylabel("price ($/MWh)", color="#777777")
    ax.legend(loc="upper left", fontsize=8)
    tot = resp["totals"]
    ax.set_title(
        f"{title}: {resp['status']}, gap {100 * resp['mip_gap']:.2f}%, objective "
        f"${resp['objective_usd']:.2f}, energy {tot['energy_kwh']:.0f} kWh, "
        f"unserved {tot['unserved_requests']:.0f} req",
        fontsize=9,
    )
    ax = axes[1]
    for i, n in enumerate(names):
        c = COLOURS[i % len(COLOURS)]
        for key, style in (
            ("n_p", {"lw": 1.4, "label": f"{n} prefill"}),
            ("n_d", {"lw": 1.0, "ls": ":", "label": f"{n} decode"}),
        ):
            stairs(ax, [p["deployments"][n][key] for p in periods], edges, color=c, **style)
    ax.set_ylabel("instances")
    ax.legend(loc="upper left", fontsize=7, ncol=len(names))
    ax = axes[2]
    for i, n in enumerate(names):
        c = COLOURS[i % len(COLOURS)]
        for key, style in (
            ("demand_rps", {"lw": 0.8, "ls": "--"}),
            ("served_rps", {"lw": 1.4, "label": f"{n} served"}),
        ):
            stairs(ax, [p["deployments"][n][key] for p in periods], edges, color=c, **style)
    ax.set_ylabel("req/s (dashed: demand)")
    ax.set_xlabel("hour")
    ax.legend(loc="upper left", fontsize=7, ncol=len(names))
    for a in axes:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def calibration_chart(rows: Sequence[Mapping[str, Any]], path: str, title: str) -> None:
    """Predicted against measured, decode iteration time and power per GPU, one colour
    per GPU and one marker per kind of model (dense: circles, mixtures of experts:
    triangles), with the identity and +-10% lines; values the consistency screen keeps
    out (``screened_rule``, ``model.measured.screen``) as grey crosses."""
    from model.measured.screen import EXCLUDES

    def out(r: Mapping[str, Any], key: str) -> bool:
        return key in EXCLUDES.get(str(r.get("screened_rule")), ())

    fig, axes = plt.subplots(1, 2, figsize=(11, 5), dpi=120)
    gpus = sorted({r["gpu"] for r in rows})
    kinds = [k for k in ("dense", "moe") if any(r.get("kind", "dense") == k for r in rows)]
    marker = {"dense": "o", "moe": "^"}
    for ax, key, unit in ((axes[0], "itl_ms", "ms"), (axes[1], "power_w", "W")):
        lo, hi = float("inf"), 0.0
        for i, g in enumerate(gpus):
            for kind in kinds:
                pts = [
                    (r[key]["measured"], r[key]["predicted"])
                    for r in rows
                    if r["gpu"] == g
                    and r.get("kind", "dense") == kind
                    and r[key]["measured"] is not None
                    and r[key]["predicted"] is not None
                    and not out(r, key)
                ]
                if not pts:
                    continue
                xs, ys = zip(*pts, strict=True)
                label = f"{g}, {'MoE' if kind == 'moe' else kind} ({len(pts)})"
                ax.scatter(
                    xs,
                    ys,
                    s=14,
                    marker=marker[kind],
                    color=COLOURS[i % len(COLOURS)],
                    alpha=0.8,
                    label=label,
                )
                lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
        gone = [
            (r[key]["measured"], r[key]["predicted"])
            for r in rows
            if out(r, key) and r[key]["measured"] is not None and r[key]["predicted"] is not None
        ]
        if gone:
            xs, ys = zip(*gone, strict=True)
            ax.scatter(xs, ys, s=18, marker="x", color="0.55", label=f"screened ({len(gone)})")
            lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
        if hi > 0:
            span = [lo * 0.9, hi * 1.1]
            ax.plot(span, span, "k-", lw=0.8)
            for f in (0.9, 1.1):
                ax.plot(span, [v * f for v in span], "k:", lw=0.6)
            if key == "itl_ms":
                ax.set_xscale("log")
                ax.set_yscale("log")
        name = "decode iteration (median ITL)" if key == "itl_ms" else "power per GPU"
        ax.set_xlabel(f"measured {name} ({unit})")
        ax.set_ylabel(f"predicted ({unit})")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def silicon_chart(rows: Sequence[Mapping[str, Any]], path: str, title: str) -> None:
    """Predicted (leave one model out) against measured TTFT and TPOT of the silicon
    rows (``model.measured.silicon.report``), one colour per GPU and framework, with the
    identity and +-20% lines, both axes logarithmic."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), dpi=120)
    keys = sorted({(r["catalog"]["gpu"], r["config"]["backend"]) for r in rows})
    for ax, key, name in ((axes[0], "ttft_ms", "TTFT"), (axes[1], "tpot_ms", "TPOT")):
        lo, hi = float("inf"), 0.0
        for i, (gpu, framework) in enumerate(keys):
            pts = [
                (r[key]["measured"], r[key]["predicted"])
                for r in rows
                if (r["catalog"]["gpu"], r["config"]["backend"]) == (gpu, framework)
                and r[key]["predicted"] is not None
            ]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            ax.scatter(xs, ys, s=10, color=COLOURS[i % len(COLOURS)], alpha=0.7,
                       label=f"{gpu} {framework} ({len(pts)})")  # fmt: skip
            lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
        if hi > 0:
            span = [lo * 0.8, hi * 1.25]
            ax.plot(span, span, "k-", lw=0.8)
            for f in (0.8, 1.2):
                ax.plot(span, [v * f for v in span], "k:", lw=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {name} (ms)")
        ax.set_ylabel(f"predicted {name} (ms)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
