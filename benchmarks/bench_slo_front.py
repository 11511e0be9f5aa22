"""Benchmark: the front's SLO filter in one process and in several (``pdwatt front
--ttft-p99 --tpot-p99 --slo-jobs N``), Qwen3-32B on H200.

For each workload, builds the front of ``--max-gpus`` GPUs and filters it at
``--at-load`` of capacity, once with ``--slo-jobs 1`` and once per value of ``--jobs``;
then the same over GPU settings (``--settings``, the list searched for each phase, so
``k x k`` pairs; each configuration checked at its own settings; ``--settings none``
skips it). Prints the wall time of each (the front's build apart), how many
configurations and checks there were, how many checks were simulated, how many met the
targets (a target that binds fails some), and whether every run of one front gave the
same report (it must). Trace presets need their trace files (``$PDWATT_DATA_DIR``);
they are skipped when absent.

    python benchmarks/bench_slo_front.py [--workloads mooncake fixed:8192:256]
                                         [--max-gpus 16] [--jobs 2] [--slo-method analytic]
                                         [--settings 1980MHz,1590MHz,1185MHz]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

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
    ap.add_argument("--settings", default="1980MHz,1590MHz,1185MHz")
    a = ap.parse_args()
    lists = None if a.settings == "none" else [x.strip() for x in a.settings.split(",")]
    print(
        f"{'workload':<16} {'settings':>8} {'configs':>7} {'jobs':>4} {'wall s':>7} "
        f"{'checked':>7} {'simulated':>9} {'meeting':>7}  same"
    )
    for wl in a.workloads:
        try:
            spec = resolve_spec(SpecRequest(workload=wl, read_files=True))
            reports = [("1 x 1", front_report(spec, a.max_gpus))]
            if lists is not None:
                k = f"{len(lists)} x {len(lists)}"
                reports.append(
                    (
                        k,
                        front_report(
                            spec, a.max_gpus, prefill_settings=lists, decode_settings=lists
                        ),
                    )
                )
        except InputError as e:
            print(f"{wl:<16} skipped: {e}")
            continue
        for name, report in reports:
            if not _run(a, wl, name, report):
                break


def _run(a: argparse.Namespace, wl: str, name: str, report: dict[str, Any]) -> bool:
    """The runs of one front; False when the workload cannot be checked."""
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
            return False
        wall = time.perf_counter() - t0
        first = out if first is None else first
        checked = sum(1 for c in out["configs"] if c["slo"]["checked"])
        simulated = sum(1 for c in out["configs"] if c["slo"].get("simulated"))
        print(
            f"{wl:<16} {name:>8} {len(out['configs']):>7} {jobs:>4} {wall:>7.1f} "
            f"{checked:>7} {simulated:>9} {out['slo']['meeting']:>7}  {out == first}",
            flush=True,
        )
    return True


if __name__ == "__main__":
    main()
