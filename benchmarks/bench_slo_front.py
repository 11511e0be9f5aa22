"""Benchmark: the front's SLO filter in one process and in several (``pdwatt front
--ttft-p99 --tpot-p99 --slo-jobs N``), Qwen3-32B on H200.

For each workload, builds the front of ``--max-gpus`` GPUs and filters it at
``--at-load`` of capacity, once with ``--slo-jobs 1`` and once per value of ``--jobs``;
prints the wall time of each, how many checks ran and how many were simulated, and
whether every run gave the same report (it must). Trace presets need their trace files
(``$PDWATT_DATA_DIR``); they are skipped when absent.

    python benchmarks/bench_slo_front.py [--workloads mooncake fixed:8192:256]
                                         [--max-gpus 16] [--jobs 2] [--slo-method analytic]
"""

from __future__ import annotations

import argparse
import time

from model.errors import InputError
from model.operations import SpecRequest, front_report, resolve_spec
from service.cli import simulate as cli_simulate
from service.cli.app import build_parser


def _args(workload: str, extra: list[str]) -> argparse.Namespace:
    """``pdwatt front``'s own options (the command line's parser)."""
    base = ["front", "--model", "qwen3-32b", "--gpu", "h200", "--workload", workload]
    return build_parser().parse_args([*base, *extra])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["mooncake", "fixed:8192:256"])
    ap.add_argument("--max-gpus", type=int, default=16)
    ap.add_argument("--jobs", type=int, nargs="+", default=[2])
    ap.add_argument("--slo-method", choices=("analytic", "simulate"), default="analytic")
    ap.add_argument("--ttft-p99", default="60")
    ap.add_argument("--tpot-p99", default="0.2")
    ap.add_argument("--at-load", default="0.8")
    a = ap.parse_args()
    print(f"{'workload':<16} {'jobs':>4} {'wall s':>7} {'checked':>7} {'simulated':>9}  same")
    for wl in a.workloads:
        try:
            spec = resolve_spec(SpecRequest(workload=wl, read_files=True))
            report = front_report(spec, a.max_gpus)
        except InputError as e:
            print(f"{wl:<16} skipped: {e}")
            continue
        first = None
        for jobs in [1, *a.jobs]:
            args = _args(
                wl,
                [
                    "--slo-method", a.slo_method, "--ttft-p99", a.ttft_p99,
                    "--tpot-p99", a.tpot_p99, "--at-load", a.at_load,
                    "--slo-jobs", str(jobs), "--json",
                ],
            )  # fmt: skip
            t0 = time.perf_counter()
            try:
                out = cli_simulate.apply_slo(report, args)
            except InputError as e:
                print(f"{wl:<16} skipped: {e}")
                break
            wall = time.perf_counter() - t0
            first = out if first is None else first
            checked = sum(1 for c in out["configs"] if c["slo"]["checked"])
            simulated = sum(1 for c in out["configs"] if c["slo"].get("simulated"))
            print(
                f"{wl:<16} {jobs:>4} {wall:>7.1f} {checked:>7} {simulated:>9}  {out == first}",
                flush=True,
            )


if __name__ == "__main__":
    main()
