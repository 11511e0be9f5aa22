"""Charts (PNG) of fronts and schedules, drawn with matplotlib's Agg backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def front_chart(report: Mapping[str, Any], path: str) -> None:
    """Capacity-power plane: every configuration, the Pareto front highlighted."""
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
        "o-",
        color="#d1495b",
        ms=4,
        lw=1.5,
        label=f"Pareto front ({len(front)})",
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
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
