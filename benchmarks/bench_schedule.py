"""Benchmark: schedule solve times, proven gaps and peak memory, from one deployment
to a 4,096-GPU site.

Sites, 96 periods of 15 minutes each (one day), change limit 4 instances per period:

* demo: the README's main job, ``pdwatt plan --demo`` (formulation.demo; 30 s limit);
* S64: one deployment of up to 64 GPUs (30 s limit);
* A: 4 deployments of up to 16 GPUs each on a 64-GPU site (10 s);
* B: 8 deployments of up to 32 GPUs each on a 256-GPU site (60 s);
* C: 16 deployments of up to 64 GPUs each on a 1,024-GPU site (120 s);
* D: 32 deployments of up to 128 GPUs each on a 4,096-GPU site (300 s).

Deployments mix models and workloads (see ``site_request``); demand follows diurnal
curves with random phases; the cap binds at the daily peak and a demand-response
event lowers it further for three evening hours. Each site runs under every model variant
asked for (default: both, ``paper`` and ``admission``), each in a fresh process (its own
peak RSS). Prints one JSON row per run (phases, bound history, MILPs, baselines) and
a table: wall time, final gap, time to a proven 1%, 0.5% and 0.1% gap, peak RSS.
``--growth LIMIT_S`` runs the growth table instead (2 to 32 deployments of 32 GPUs;
8 deployments of 16 to 128 GPUs); ``--fleet N`` fleets of N deployments, ``--mixed``
with every other one prefilling on H100 and decoding on H200.

    python benchmarks/bench_schedule.py [--sites demo S64 A B C D] [--methods auto volume compact]
        [--model-variants paper admission]
    python benchmarks/bench_schedule.py --growth 60
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time
from typing import Any

import numpy as np

from formulation.bounds.lagrange import uncoupled_schedule
from formulation.data import build_data
from formulation.demo import demo_request
from formulation.evaluate import price_schedule
from formulation.milp.highs import PROCESS
from formulation.problem import fill_model_variant, problem_from_dict
from formulation.solve import solve
from formulation.subproblems.dp import deployment_grid
from model.spec import DEFAULT_VARIANT, MODEL_VARIANTS

MIX = [
    ("qwen3-32b", "azure-conv-2023", 0.01),
    ("qwen3-32b", "azure-code-2023", 0.005),
    ("qwen3-8b", "azure-conv-2023", 0.004),
    ("qwen3-14b", "mooncake", 0.05),
    ("llama-3.1-8b", "azure-code-2023", 0.003),
    ("mistral-small-24b", "azure-conv-2023", 0.008),
    ("qwen3-32b", "mooncake", 0.06),
    ("qwen3-14b", "azure-conv-2023", 0.006),
]


def site_request(
    n_dep: int,
    gpus_each: int | list[int],
    site_gpus: int,
    seed: int,
    limit_s: float,
    variant: str = DEFAULT_VARIANT,
    mixed: bool = False,
) -> dict[str, Any]:
    """``n_dep`` deployments of ``gpus_each`` GPUs (or deployment ``i`` of
    ``gpus_each[i]``) on a site of ``site_gpus``; ``mixed``: every other deployment
    prefills on H100 and decodes on H200 (docs/mixed-gpus.md), the site's GPUs split
    between the two types as half those deployments' GPUs are H100s."""
    rng = np.random.default_rng(seed)
    each = [gpus_each] * n_dep if isinstance(gpus_each, int) else list(gpus_each)
    T = 96
    hours = (np.arange(T) + 0.5) / 4.0
    deps = []
    for i in range(n_dep):
        model, workload, value = MIX[i % len(MIX)]
        deps.append(
            {
                "name": f"d{i}-{model}-{workload}",
                "model": model,
                "gpu": "h200",
                "workload": workload,
                "demand_rps": [0.0] * T,  # filled below from capacity
                "unserved_penalty_usd_per_request": value,
                "headroom": 0.9,
                "max_gpus": each[i],
                "initial": {"n_p": 1, "n_d": 1},
                "model_variant": variant,
            }
        )
        if mixed and i % 2:
            deps[-1]["prefill_gpu"] = "h100-sxm"
    inventory = {"h200": site_gpus}
    if mixed:
        h100 = sum(each[i] for i in range(1, n_dep, 2)) // 2
        inventory = {"h200": site_gpus - h100, "h100-sxm": h100}
    body: dict[str, Any] = {
        "period_minutes": 15,
        "site": {"gpu_inventory": inventory, "pue": 1.25, "idle_gpu_power_w": 120},
        "deployments": deps,
        "grid": {"power_cap_w": 1e9, "price_usd_per_mwh": 50.0, "carbon_g_per_kwh": 300.0},
        "transitions": {"start_cost_usd": 0.02, "max_instance_changes_per_period": 4},
        "solver": {"time_limit_s": limit_s, "mip_gap": 0.001},
    }
    # demand: a diurnal curve peaking at ~70% of the largest capacity within max_gpus
    data = build_data(problem_from_dict(body))
    for dep, d in zip(deps, data.deployments, strict=True):
        peak = 0.7 * 0.9 * float(d.capacity_rps.max())
        phase = rng.uniform(11, 20)
        width = rng.uniform(2.5, 4.5)
        dist = np.minimum(np.abs(hours - phase), 24 - np.abs(hours - phase))
        curve = 0.15 + 0.85 * np.exp(-0.5 * (dist / width) ** 2)
        dep["demand_rps"] = np.round(peak * curve, 4).tolist()
    price = (
        45
        + 35 * np.exp(-0.5 * ((hours - 8) / 1.5) ** 2)
        + 110 * np.exp(-0.5 * ((hours - 18.5) / 1.5) ** 2)
    )
    body["grid"]["price_usd_per_mwh"] = np.round(price, 3).tolist()
    # cap: 90% of the uncapped schedule's peak power, 25% lower from 17:00 to 20:00;
    # without the cap the deployments are independent: one exact DP each
    data = build_data(problem_from_dict(body))
    peak_w = float(
        price_schedule(
            data, uncoupled_schedule(data, [deployment_grid(data, d) for d in data.deployments])
        ).site_power_w.max()
    )
    cap = np.full(T, 0.9 * peak_w)
    cap[(hours >= 17) & (hours < 20)] = 0.75 * 0.9 * peak_w
    body["grid"]["power_cap_w"] = np.round(cap, 1).tolist()
    return body


SITES = {
    "S64": (1, 64, 64, 30.0),
    "A": (4, 16, 64, 10.0),
    "B": (8, 32, 256, 60.0),
    "C": (16, 64, 1024, 120.0),
    "D": (32, 128, 4096, 300.0),
}


#: the fleets of the growth table over deployments (``--fleet``): N deployments of 100
#: to 212 GPUs, evenly (156 on average: 256 of them are the 39,936-GPU site)
FLEET_GPUS = (100, 112)


def fleet_gpus(n_dep: int) -> list[int]:
    lo, spread = FLEET_GPUS
    return [lo + round(spread * i / max(n_dep - 1, 1)) for i in range(n_dep)]


def fleet_run(args: tuple[str, int, int, float, str, bool]) -> dict[str, Any]:
    method, seed, n_dep, limit, variant, mixed = args
    gpus = fleet_gpus(n_dep)
    t0 = time.perf_counter()
    body = site_request(n_dep, gpus, sum(gpus), seed, limit, variant, mixed)
    setup_s = time.perf_counter() - t0
    row = run_body(f"{n_dep}x100-212{' mixed' if mixed else ''}", body, method)
    return row | {"model_variant": variant, "setup_s": round(setup_s, 1)}


#: the README's main job (formulation.demo), run with its own request and limits
DEMO = "demo"


def time_to_gap(trace: list[list[Any]], gap: float) -> float | None:
    """First time (s from the solve's start) at which the proven gap was <= ``gap``."""
    for t, ub, lb in trace:
        if ub is not None and lb is not None and (ub - lb) <= gap * max(abs(ub), 1e-9):
            return float(t)
    return None


def run_body(label: str, body: dict[str, Any], method: str) -> dict[str, Any]:
    body["solver"]["method"] = method
    t0 = time.perf_counter()
    problem = problem_from_dict(body)
    data = build_data(problem)
    tables_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    o = solve(problem)
    wall = time.perf_counter() - t1
    st = o.stats
    milps = st.get("windows", []) + st.get("neighbourhoods", [])
    relaxation = st.get("relaxation", {})
    return {
        "site": label,
        "method": method,
        "periods": data.n_periods,
        "deployments": len(data.deployments),
        "gpus": data.total_gpus,
        "candidates": sum(d.n_configs for d in data.deployments),
        "time_limit_s": problem.solver.time_limit_s,
        "tables_s": round(tables_s, 3),
        "phases": {p["name"]: p["seconds"] for p in st.get("phases", [])},
        "relaxation_iterations": relaxation.get("iterations"),
        "milp_build_s": round(sum(w.get("build_s", 0.0) for w in milps), 3),
        "milp_solve_s": round(sum(w.get("solve_s", 0.0) for w in milps), 3),
        "total_s": round(wall, 3),
        "status": o.status,
        "objective_usd": round(o.priced.objective_usd, 4),
        "lower_bound_usd": round(o.lower_bound_usd, 4),
        "gap_pct": round(100 * o.mip_gap, 4),
        "time_to_gap_s": {
            f"{g:g}%": time_to_gap(st.get("trace", []), g / 100) for g in (1.0, 0.5, 0.1)
        },
        "time_to_coarse_gap_s": {
            f"{g:g}%": time_to_gap(st.get("trace", []), g / 100) for g in (5.0, 2.0)
        },
        "incumbent_from": st.get("incumbent_from"),
        "baselines_usd": {k: round(v.objective_usd, 4) for k, v in o.baselines.items()},
        "baseline_violations": {k: v.violations() for k, v in o.baselines.items()},
        "windows": st.get("windows"),
        "neighbourhoods": st.get("neighbourhoods"),
        "exact_window": st.get("exact_window"),
        "lp_support": st.get("lp_support"),
        "choices_kept": st.get("choices_kept"),
        "choices_total": st.get("choices_total"),
        "bound_history": relaxation.get("history"),
        # this process and the HiGHS process beside it (formulation.milp.highs.PROCESS)
        "peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 + PROCESS.peak_rss_mb(), 1
        ),
    }


def run(name: str, method: str, seed: int, variant: str = DEFAULT_VARIANT) -> dict[str, Any]:
    if name == DEMO:  # its own request and limits, as `pdwatt plan --demo`
        body = fill_model_variant(demo_request(), variant)
    else:
        n_dep, gpus_each, site_gpus, limit = SITES[name]
        body = site_request(n_dep, gpus_each, site_gpus, seed, limit, variant)
    return run_body(name, body, method) | {"model_variant": variant}


#: the growth table: deployments at 32 GPUs each, and GPUs per deployment at 8
GROWTH = [(n, 32) for n in (2, 4, 8, 16, 32)] + [(8, g) for g in (16, 64, 128)]


def growth_run(args: tuple[str, int, int, int, float, str]) -> dict[str, Any]:
    method, seed, n_dep, gpus_each, limit, variant = args
    body = site_request(n_dep, gpus_each, n_dep * gpus_each, seed, limit, variant)
    return run_body(f"{n_dep}x{gpus_each}", body, method) | {"model_variant": variant}


def in_fresh_process(fn: Any, args: Any) -> dict[str, Any]:
    """Run ``fn(args)`` in a new process, so that each peak RSS is its own (a process
    that may start its own workers, unlike a daemonic ``multiprocessing.Pool`` one)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return dict(pool.submit(fn, args).result())


def site_run(args: tuple[str, str, int, str]) -> dict[str, Any]:
    return run(*args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sites", nargs="+", default=[DEMO, "S64", "A", "B"], choices=[DEMO, *SITES])
    ap.add_argument("--methods", nargs="+", default=["auto"], choices=["auto", "volume", "compact"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--model-variants",
        nargs="+",
        choices=MODEL_VARIANTS,
        default=sorted(MODEL_VARIANTS, key=lambda v: v != DEFAULT_VARIANT),
        help="run every site under each (default: all, the default variant first)",
    )
    ap.add_argument(
        "--growth",
        type=float,
        metavar="LIMIT_S",
        help="instead of the sites, the growth table with this time limit per instance",
    )
    ap.add_argument(
        "--fleet",
        type=int,
        nargs="+",
        metavar="N",
        help="instead of the sites, fleets of N deployments of 100 to 212 GPUs (256: "
        "39,936 GPUs), each with --fleet-limit",
    )
    ap.add_argument("--fleet-limit", type=float, default=600.0, help="seconds per fleet")
    ap.add_argument(
        "--mixed",
        action="store_true",
        help="fleets with every other deployment prefilling on H100, decoding on H200",
    )
    a = ap.parse_args()
    rows = []
    if a.fleet:
        for n_dep in a.fleet:
            for m in a.methods:
                for v in a.model_variants:
                    row = in_fresh_process(fleet_run, (m, a.seed, n_dep, a.fleet_limit, v, a.mixed))
                    rows.append(row)
                    print(json.dumps(row, default=_nan_none), flush=True)
    elif a.growth:
        for n_dep, gpus_each in GROWTH:
            for m in a.methods:
                for v in a.model_variants:
                    row = in_fresh_process(growth_run, (m, a.seed, n_dep, gpus_each, a.growth, v))
                    rows.append(row)
                    print(json.dumps(row, default=_nan_none), flush=True)
    else:
        for s in a.sites:
            for m in a.methods:
                for v in a.model_variants:
                    row = in_fresh_process(site_run, (s, m, a.seed, v))
                    rows.append(row)
                    print(json.dumps(row, default=_nan_none), flush=True)
    print()
    print(
        f"{'site':>8} {'method':>7} {'variant':>9} {'GPUs':>5} {'limit':>6} {'wall':>7} {'gap':>8} "
        f"{'to 1%':>7} {'to 0.5%':>7} {'to 0.1%':>7} {'RSS MB':>7}  objective / bound (USD)"
    )
    for r in rows:
        tt = r["time_to_gap_s"]
        cells = [f"{tt[k]:7.1f}" if tt[k] is not None else f"{'-':>7}" for k in tt]
        print(
            f"{r['site']:>8} {r['method']:>7} {r['model_variant']:>9} {r['gpus']:>5} "
            f"{r['time_limit_s']:>6g} "
            f"{r['total_s']:>7.1f} {r['gap_pct']:>7.3f}% {' '.join(cells)} "
            f"{r['peak_rss_mb']:>7.0f}  {r['objective_usd']:,.2f} / {r['lower_bound_usd']:,.2f}"
        )


def _nan_none(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


if __name__ == "__main__":
    main()
