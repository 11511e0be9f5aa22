"""Benchmark: a front over per-phase instance shapes (docs/shapes.md), under SPEC's
rooflines and under measured kernels.

Builds the front of DeepSeek-V3.1 on H200 at 8,192/1,024 tokens (``--model``, ``--gpu``,
``--workload``, ``--framework`` for others) over ``--max-gpus`` with both phases'
shapes ``auto``, once per performance source, and prints the shape pairs searched (and
those that do not fit), configurations, front points, the median time of ``--repeat``
runs after a first one (the kernel compositions are kept per process) and
configurations per second. The first run of the kernel path, which composes every
shape's passes from the tables, is printed on its own.

    python benchmarks/bench_shapes_front.py [--max-gpus 64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

from model.capacity import clear_kernel_cache
from model.operations import SpecRequest, front_over_shapes, resolve_spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-gpus", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", default="deepseek-v3.1")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--workload", default="fixed:8192:1024")
    ap.add_argument("--framework", default="sglang")
    a = ap.parse_args()
    q = SimpleNamespace(
        max_gpus=a.max_gpus,
        required_rps=5.0,
        headroom=1.0,
        budget_w=None,
        prefill_settings=None,
        decode_settings=None,
        prefill_shapes=["auto"],
        decode_shapes=["auto"],
    )
    print(f"{a.model} on {a.gpu}, {a.workload}, <= {a.max_gpus} GPUs, shapes auto per phase")
    head = f"{'performance':>12}  {'pairs':>5}  {'skipped':>7}  {'configs':>7}  {'front':>5}"
    print(f"{head}  {'first s':>7}  {'median ms':>9}  {'configs/s':>10}  least power for 5 req/s")
    for performance in ("spec", "kernels"):
        extra = {"framework": a.framework} if performance == "kernels" else {}
        spec = resolve_spec(
            SpecRequest(
                model=a.model, gpu=a.gpu, workload=a.workload, performance=performance, **extra
            )
        )
        clear_kernel_cache()
        t0 = time.perf_counter()
        rep = front_over_shapes(spec, q, False)  # type: ignore[arg-type]
        first = time.perf_counter() - t0
        times = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            rep = front_over_shapes(spec, q, False)  # type: ignore[arg-type]
            times.append(time.perf_counter() - t0)
        ms = statistics.median(times) * 1e3
        n = len(rep["configs"])
        pairs = len(rep["prefill_shapes"]) * len(rep["decode_shapes"])
        best = rep["min_power_for_rate"]["config"]
        pick = (
            "none"
            if best is None
            else f"{best['n_p']}P{best['n_d']}D ({best['prefill_shape']} / "
            f"{best['decode_shape']}), {best['capacity_rps']:.2f} req/s, {best['gpus']} GPUs"
        )
        print(
            f"{performance:>12}  {pairs:>5}  {len(rep['shapes_skipped']):>7}  {n:>7,}  "
            f"{len(rep['front']):>5}  {first:>7.2f}  {ms:>9.1f}  {n / (ms / 1e3):>10,.0f}  "
            f"{pick}"
        )


if __name__ == "__main__":
    main()
