"""Benchmark: speed of the discrete-event simulator (Qwen3-32B on H200).

Prints, per workload and configuration:

* simulated requests per second of wall time, open loop (Poisson at 80% of the
  simulated capacity) and saturated;
* the wall time of one capacity search with the defaults of ``pdwatt simulate
  --find-capacity`` (3 seeds, the default measured requests, the open-loop check
  at +-5%); target <= 10 s.

Trace presets need their trace files (``$PDWATT_DATA_DIR``); they are skipped
when absent.

    python benchmarks/bench_simulator.py [--workloads W ...] [--configs 1x1 4x4 8x8]
"""

from __future__ import annotations

import argparse
import math
import time

from model.errors import InputError
from model.operations import SpecRequest, resolve_spec
from model.simulator.engine import simulate
from model.simulator.reports import capacity_search_report
from model.simulator.samples import SimTiming, resolve_samples
from model.simulator.search import default_requests

WORKLOADS = ("fixed:4096:256", "azure-conv-2023", "azure-code-2023", "mooncake")
CONFIGS = ("1x1", "4x4", "8x8", "8x1", "1x8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), help="NPxND")
    ap.add_argument("--requests", type=int, default=20_000, help="requests per speed run")
    a = ap.parse_args()

    print(
        f"{'workload':>16} {'config':>6} | {'open req/s':>10} {'events/s':>10} | "
        f"{'sat. req/s':>10} | {'search s':>8} {'capacity':>10} {'+-95%':>7} {'check':>6}"
    )
    worst = 0.0
    for w in a.workloads:
        try:
            samples = resolve_samples(w)
        except InputError as e:
            print(f"{w:>16} skipped: {e.reason}")
            continue
        spec = resolve_spec(SpecRequest(workload=w))
        timing = SimTiming.of(spec)
        for cfg in a.configs:
            n_p, n_d = (int(x) for x in cfg.split("x"))
            t0 = time.perf_counter()
            sat = simulate(timing, samples, n_p, n_d, math.inf, requests=a.requests)
            t_sat = time.perf_counter() - t0
            sat_rps = sat.total_completed / t_sat
            rate = 0.8 * sat.throughput_rps
            t0 = time.perf_counter()
            op = simulate(timing, samples, n_p, n_d, rate, requests=a.requests // 2, tail=False)
            t_open = time.perf_counter() - t0
            t0 = time.perf_counter()
            rep = capacity_search_report(
                spec, samples, n_p, n_d, requests=default_requests(samples)
            )
            t_search = time.perf_counter() - t0
            worst = max(worst, t_search)
            print(
                f"{w:>16} {cfg:>6} | {op.total_arrived / t_open:>10,.0f} "
                f"{op.events / t_open:>10,.0f} | {sat_rps:>10,.0f} | {t_search:>8.2f} "
                f"{rep['capacity_rps']:>10.3f} {rep['capacity_ci95_rps']:>7.3f} "
                f"{'ok' if rep['check']['passed'] else 'FAIL':>6}"
            )
    print(f"slowest capacity search: {worst:.2f} s (target <= 10 s)")


if __name__ == "__main__":
    main()
