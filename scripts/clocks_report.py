"""The clock model against published series (docs/clocks.md section 6).

Prints the median errors per series (and their sensitivity to the assumed voltage
ratio), the B200 kernel-power check at full clock when the AIConfigurator tables are
given, and draws docs/clocks.png (predicted against measured relative throughput and
power against the locked SM clock, per series).

    python scripts/clocks_report.py [--kernels DIR] [--chart docs/clocks.png]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from model.catalog import load_calibration  # noqa: E402
from model.clock_validation import b200_kernel_check, evaluate_all  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="the AIConfigurator data directory (B200 check)")
    parser.add_argument("--chart", default="docs/clocks.png")
    args = parser.parse_args()

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
