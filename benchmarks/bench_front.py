"""Benchmark: ``pdwatt front`` over GPU settings against the front at the full clock.

Builds the front (every configuration, its Pareto set, both selections) of Qwen3-32B on
H200 (``--model``, ``--gpu``, ``--workload`` for others) at each ``--max-gpus``, once at
the full clock (no settings: today's report) and once over the GPU's default settings
of gpus.json for each phase (for H200 1980, 1590 and 1185 MHz: 3 x 3 pairs), and
prints the median time of ``--repeat`` runs of each, configurations, front points and
the ratio.

    python benchmarks/bench_front.py [--max-gpus 16 64 256] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

from model.catalog import load_gpu_clocks
from model.operations import SpecRequest, front_report, resolve_spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-gpus", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--model", default="qwen3-32b")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--workload", default="azure-conv-2023")
    a = ap.parse_args()
    spec = resolve_spec(SpecRequest(model=a.model, gpu=a.gpu, workload=a.workload))
    clocks = load_gpu_clocks(a.gpu)
    if clocks is None:
        ap.error(f"{a.gpu} has no clock data in the catalog")
    settings = list(clocks.settings)
    print(f"{a.model} on {a.gpu}, {a.workload}; settings per phase: {', '.join(settings)}")
    print(f"{'max GPUs':>8}  {'settings':>8}  {'configs':>8}  {'front':>5}  {'median ms':>9}")
    for max_gpus in a.max_gpus:
        base_ms = None
        for label, lists in (("1 x 1", None), (f"{len(settings)} x {len(settings)}", settings)):
            times = []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                rep = front_report(
                    spec,
                    max_gpus,
                    required_rps=10.0,
                    budget_w=1000.0 * max_gpus,
                    prefill_settings=lists,
                    decode_settings=lists,
                )
                times.append(time.perf_counter() - t0)
            ms = statistics.median(times) * 1e3
            ratio = "" if base_ms is None else f"  x{ms / base_ms:.1f}"
            base_ms = base_ms or ms
            print(
                f"{max_gpus:>8}  {label:>8}  {len(rep['configs']):>8,}  "
                f"{len(rep['front']):>5}  {ms:>9.1f}{ratio}"
            )


if __name__ == "__main__":
    main()
