"""The clock model against published series (docs/clocks.md section 6).

Prints the median errors per series (and their sensitivity to the assumed voltage
ratio), the B200 kernel-power check at full clock when the AIConfigurator tables are
given, and draws docs/clocks.png (predicted against measured relative throughput and
power against the locked SM clock, per series). With ``--series`` (the clock-series
data's ``series.json``), also DynamoLLM's H100 series and Samsi et al.'s A100 power caps
against the model, printed and drawn in docs/clocks_published.png.

    python scripts/clocks_report.py [--kernels DIR] [--chart docs/clocks.png]
        [--series series.json] [--published-chart docs/clocks_published.png]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from model.catalog import load_calibration  # noqa: E402
from model.measured.clock_validation import (  # noqa: E402
    b200_kernel_check,
    evaluate_all,
    evaluate_dynamollm,
    evaluate_samsi,
)


def published(path: str, chart: str) -> None:
    """DynamoLLM's H100 series and Samsi et al.'s A100 power caps against the model
    (docs/clocks.md section 6): the medians printed, the chart drawn."""
    after, before = evaluate_dynamollm(path), evaluate_dynamollm(path, line_model=True)
    samsi = evaluate_samsi(path)
    print("\n| series | before | after |")
    print("|---|---:|---:|")
    for a, b in zip(after, before, strict=True):
        print(f"| {a.id} | {100 * b.median_error:.1f}% | {100 * a.median_error:.1f}% |")
    for time, power in samsi:
        for r in (time, power):
            pred = ", ".join(f"{v:.3f}" for v in r.predicted)
            meas = ", ".join(f"{v:.3f}" for v in r.measured)
            print(f"| {r.id} | model {pred} | measured {meas}: {100 * r.median_error:.1f}% |")
    fig, axes = plt.subplots(1, len(after) + 2, figsize=(4 * (len(after) + 2), 3.8))
    for ax, a, b in zip(axes, after, before, strict=False):
        ax.plot(a.clocks_mhz, a.measured, "o", label="measured (DynamoLLM)")
        ax.plot(
            b.clocks_mhz, b.predicted, "--", label=f"model before ({100 * b.median_error:.1f}%)"
        )
        ax.plot(a.clocks_mhz, a.predicted, "-", label=f"model ({100 * a.median_error:.1f}%)")
        ax.set_title(a.id, fontsize=8)
        ax.set_xlabel("locked SM clock (MHz)")
        ax.set_ylabel("latency / unlocked")
    for ax, k, what in ((axes[-2], 0, "time"), (axes[-1], 1, "power")):
        for pair in samsi:
            r = pair[k]
            label = r.id.split("-")[-1].split(":")[0]
            (line,) = ax.plot(r.clocks_mhz, r.predicted, "-", label=f"model {label}")
            ax.plot(
                r.clocks_mhz, r.measured, "o", color=line.get_color(), label=f"measured {label}"
            )
        ax.set_title(f"Samsi et al. A100 power caps: {what} / at 250 W", fontsize=8)
        ax.set_xlabel("power limit (W)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(
        "Clock model against DynamoLLM (H100) and Samsi et al. (A100): nothing fitted", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(chart, dpi=110)
    print(f"\nchart: {chart}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="the AIConfigurator data directory (B200 check)")
    parser.add_argument("--chart", default="docs/clocks.png")
    parser.add_argument("--series", help="the clock-series data's series.json")
    parser.add_argument("--published-chart", default="docs/clocks_published.png")
    args = parser.parse_args()
    if args.series:
        published(args.series, args.published_chart)

    results = evaluate_all()
    print("| series | phase | GPU | points | throughput median error | power median error |")
    print("|---|---|---|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.id} | {r.phase} | {r.gpu} | {len(r.clocks_mhz)} | "
            f"{100 * r.throughput_median_error:.1f}% | {100 * r.power_median_error:.1f}% |"
        )
    print("\nsensitivity to v_min_ratio (throughput / power median error):")
    for v in (0.6, 0.7, 0.8):
        row = ", ".join(
            f"{r.id} {100 * r.throughput_median_error:.1f}%/{100 * r.power_median_error:.1f}%"
            for r in evaluate_all(v)
        )
        print(f"  {v}: {row}")

    if args.kernels:
        cal = load_calibration("qwen3-32b", "b200")
        check = b200_kernel_check(args.kernels, cal.psat_prefill_w, cal.p_idle_w)
        print(f"\nB200 at full clock ({check.power_limit_w:g} W limit):")
        print(
            f"  compute-bound bf16 GEMMs ({check.gemms_compute_bound}): median "
            f"{check.compute_bound_median_w:.0f} W; model's prefill draw "
            f"{check.prefill_draw_w:.0f} W "
            f"({100 * (check.prefill_draw_w / check.compute_bound_median_w - 1):+.1f}%)"
        )
        floor = check.static_w + check.hbm_w
        print(
            f"  memory-bound bf16 GEMMs ({check.gemms_memory_bound}): median "
            f"{check.memory_bound_median_w:.0f} W at {check.memory_bound_bytes_per_s / 1e12:.2f} "
            f"TB/s; static {check.static_w:.0f} W + HBM {check.hbm_w:.0f} W = {floor:.0f} W, "
            f"leaving {check.memory_bound_median_w - floor:.0f} W to the SMs "
            f"(HBM share of the power above static "
            f"{check.hbm_w / (check.memory_bound_median_w - check.static_w):.2f})"
        )

    fig, axes = plt.subplots(2, len(results), figsize=(4 * len(results), 6.5), sharex="col")
    for col, r in enumerate(results):
        top, bottom = axes[0][col], axes[1][col]
        top.plot(r.clocks_mhz, r.throughput_measured, "o", ms=3, label="measured")
        top.plot(r.clocks_mhz, r.throughput_predicted, "-", label="model")
        top.set_title(f"{r.id}\n({r.phase}, {r.gpu})", fontsize=9)
        bottom.plot(r.clocks_mhz, r.power_measured, "o", ms=3, label="measured")
        bottom.plot(r.clocks_mhz, r.power_predicted, "-", label="model")
        top.text(
            0.03,
            0.9,
            f"median {100 * r.throughput_median_error:.1f}%",
            transform=top.transAxes,
            fontsize=8,
        )
        bottom.text(
            0.03,
            0.9,
            f"median {100 * r.power_median_error:.1f}%",
            transform=bottom.transAxes,
            fontsize=8,
        )
        bottom.set_xlabel("locked SM clock (MHz)")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("throughput / at top clock")
    axes[1][0].set_ylabel("power / at top clock")
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        "Clock model against published series (Perseus, SOSP 2024): nothing fitted", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(args.chart, dpi=110)
    print(f"\nchart: {args.chart}")


if __name__ == "__main__":
    main()
