"""Benchmark: capacity and power of every configuration with n_P + n_D <= 256.

Evaluates all 32,640 configurations on the azure-conv-2023 preset (Qwen3-32B, H200;
``--model``, ``--gpu`` and ``--tp`` for others, e.g. a mixture of experts) with the
vectorised core, beside a per-configuration scipy ``brentq`` loop on the memory
balance measured in the same run, and prints configurations per second and the
largest relative difference of ``B*`` between the two. ``--model-variant`` picks the
memory balance (the admission variant's brentq loop runs on ``--brentq-sample``
configurations, 2,000 by default). ``--performance kernels --kernels DIR`` takes the
times from measured kernel tables (the shipped engine calibration of the GPU under
``--framework``); it also prints the one-off cost of building the deployment's forms,
from a cold process state (tables read) and with the tables already read.

    python benchmarks/bench_capacity.py [--max-gpus 256] [--repeat 50] [--workload W]
                                        [--model-variant paper|admission]
                                        [--model M] [--gpu G] [--tp N]
                                        [--performance spec|kernels] [--kernels DIR]
                                        [--framework vllm|sglang]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import brentq

from model import admission
from model.capacity import (
    Coefficients,
    candidate_configs,
    clear_kernel_cache,
    evaluate,
    solve_batch,
)
from model.operations import SpecRequest, resolve_spec
from model.performance.engine import open_database
from model.spec import DEFAULT_VARIANT, FRAMEWORKS, MODEL_VARIANTS, PERFORMANCE_SOURCES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-gpus", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--workload", default="azure-conv-2023")
    ap.add_argument("--brentq-sample", type=int, default=None, help="0: every configuration")
    ap.add_argument("--model-variant", choices=MODEL_VARIANTS, default=DEFAULT_VARIANT)
    ap.add_argument("--model", default="qwen3-32b")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--tp", type=int, default=1, help="GPUs per instance")
    ap.add_argument("--performance", choices=PERFORMANCE_SOURCES, default="spec")
    ap.add_argument("--kernels", metavar="DIR", help="kernel database (--performance kernels)")
    ap.add_argument("--framework", choices=FRAMEWORKS, help="default vllm (with kernels)")
    a = ap.parse_args()
    if a.performance == "kernels" and not a.kernels:
        ap.error("--performance kernels needs --kernels DIR")

    spec = resolve_spec(
        SpecRequest(
            model=a.model,
            gpu=a.gpu,
            workload=a.workload,
            model_variant=a.model_variant,
            overrides={"serving": {"tensor_parallel": a.tp}},
            performance=a.performance,
            framework=a.framework,
            kernels=a.kernels if a.performance == "kernels" else None,
        )
    )
    t0 = time.perf_counter()
    c = Coefficients.of(spec)
    t_cold = time.perf_counter() - t0
    n_p, n_d = candidate_configs(a.max_gpus)
    n = len(n_p)
    print(
        f"{n:,} configurations (n_P + n_D <= {a.max_gpus}), {spec.model.name} on "
        f"{spec.gpu.name}, workload {a.workload}, {a.model_variant} variant, "
        f"performance {a.performance}"
    )
    if c.forms is not None and spec.kernel_source is not None:
        f = c.forms
        clear_kernel_cache()  # the tables stay read: the forms alone
        t0 = time.perf_counter()
        Coefficients.of(spec)
        t_warm = time.perf_counter() - t0
        clear_kernel_cache()
        open_database.cache_clear()  # nothing read: the tables as well
        t0 = time.perf_counter()
        c = Coefficients.of(spec)
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        Coefficients.of(spec)
        t_hit = time.perf_counter() - t0
        src = spec.kernel_source
        print(
            f"kernel forms ({src.framework} {src.version(spec.gpu.name)} tables): built in "
            f"{t_cold:.2f} s with the tables read, {t_warm:.3f} s with them already read; "
            f"{t_hit * 1e6:.0f} us once built; decode line over batches 1..{f.batch_max:.0f} "
            f"at {f.context_tokens:,.0f} tokens within {100 * f.decode.worst_deviation:.1f}%, "
            f"prefill curve to {f.longest_prompt_tokens:,.0f} tokens within "
            f"{100 * f.prefill.worst_deviation:.1f}%"
        )
    else:
        print(f"coefficients: {t_cold * 1e3:.2f} ms")
    evaluate(c, n_p, n_d)  # warm-up
    times = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        r = evaluate(c, n_p, n_d)
        times.append(time.perf_counter() - t0)
    t_full = statistics.median(times)
    print(
        f"vectorised evaluate (capacity + power): median {t_full * 1e3:.2f} ms, "
        f"{n / t_full:,.0f} configs/s (best {min(times) * 1e3:.2f} ms), "
        f"{r.root_passes} array passes"
    )
    if a.model_variant == "paper":
        root_times = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            solve_batch(c, n_p, n_d)
            root_times.append(time.perf_counter() - t0)
        t_root = statistics.median(root_times)
        print(f"  of which the root B*: median {t_root * 1e3:.2f} ms, {n / t_root:,.0f} configs/s")

    sample = a.brentq_sample
    if sample is None:  # the admission balance is slow to evaluate one point at a time
        sample = 2000 if a.model_variant == "admission" else 0
    idx = np.arange(n)
    if sample:
        idx = np.random.default_rng(0).choice(n, size=min(sample, n), replace=False)
    root_fn, hi, one = root_function_of(c, n_p, n_d)
    ref = np.empty(len(idx))
    t0 = time.perf_counter()
    for j, i in enumerate(idx):

        def f(x: float, i: int = int(i)) -> float:
            return root_fn(x, i)

        end = hi[i] * (1 - 1e-12)
        # the batch stops at the bracket's end where the function is not yet positive
        if f(end) <= 0.0:
            ref[j] = end
            continue
        ref[j] = brentq(f, 1e-300, end, xtol=1e-300, rtol=1e-12, maxiter=500)
    t_brent = time.perf_counter() - t0
    rel = np.abs(r.batch[idx] - ref) / ref
    print(
        f"scipy brentq loop: {len(idx):,} configurations in {t_brent:.2f} s, "
        f"{len(idx) / t_brent:,.0f} configs/s"
    )
    print(f"speed-up over brentq: {(t_brent / len(idx)) / (t_full / n):,.0f}x")
    print(f"max relative |B* - B*_brentq| / B*_brentq: {rel.max():.2e} (target <= 1e-9)")
    res = np.array([abs(root_fn(float(r.batch[i]), int(i))) for i in idx])
    loop, lone = ~one[idx], one[idx]
    if loop.any():
        print(f"max |f(B*)| / (C_tok - U): {res[loop].max() / c.kv_usable_tokens:.2e}")
    if lone.any():
        worst = res[lone].max() / c.mu_prefill_rps
        print(
            f"one prefill server per component ({int(lone.sum())} of them): "
            f"max |b lambda_D(B*) - mu_P (1 - p^b)| / mu_P: {worst:.2e}"
        )


def root_function_of(
    c: Coefficients, n_p: Any, n_d: Any
) -> tuple[Callable[[float, int], float], np.ndarray, np.ndarray]:
    """The function whose root is configuration ``i``'s batch, the end of its bracket and
    which configurations take the one-server form (docs/admission.md, section 6)."""
    hi = np.minimum(c.batch_max, c.batch_rho(n_p, n_d))
    if c.variant == "paper":
        return (
            lambda x, i: float(c.memory_balance(x, n_p[i], n_d[i])),
            hi,
            np.zeros(len(n_p), dtype=bool),
        )
    terms = c.loop_terms()
    hi = np.minimum(hi, admission.no_wait_batch(terms))
    _, a, b = admission.components(n_p, n_d, terms.random_dispatch)
    one = (a == 1) & terms.one_server_form

    def fn(x: float, i: int) -> float:
        at = np.array([x])
        if one[i]:
            return float(admission.idle_gap(terms, at, b[i : i + 1])[0])
        return float(admission.balance(terms, at, a[i : i + 1], b[i : i + 1])[0])

    return fn, hi, one


if __name__ == "__main__":
    main()
