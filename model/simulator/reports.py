"""JSON-able reports of the simulator (:mod:`model.simulator`), which the CLI and the
service print.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from model.errors import InputError
from model.pareto import CheckMap, SettingPair
from model.simulator.engine import STABLE_SHARE, SimResult, percentiles, simulate
from model.simulator.samples import Samples, SimTiming
from model.simulator.search import default_requests, find_capacity, pooled_stable
from model.spec import DeploymentSpec


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(vals)) if vals else None


def _latency(runs: Sequence[SimResult]) -> dict[str, Any]:
    ttft = np.concatenate([r.ttft_s for r in runs]) if runs else np.zeros(0)
    tpot = np.concatenate([r.tpot_s for r in runs]) if runs else np.zeros(0)
    return {"ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot)}


def _run_stats(runs: Sequence[SimResult]) -> dict[str, Any]:
    """Statistics of runs at one rate, averaged over seeds (latencies pooled)."""
    arrived = sum(r.arrived for r in runs)
    completed = sum(r.completed for r in runs)
    window = sum(r.window_s for r in runs)
    out: dict[str, Any] = {
        "throughput_rps": _num(completed / window) if window > 0 else None,
        **_latency(runs),
        "mean_batch": _mean(r.mean_batch for r in runs),
        "mean_active_ctx_tokens": _mean(r.mean_active_ctx_tokens for r in runs),
        "kv_pool": {
            "active_frac": _mean(r.kv_active_frac for r in runs),
            "prefill_reserved_frac": _mean(r.kv_prefill_frac for r in runs),
            "free_frac": _mean(r.kv_free_frac for r in runs),
            "headroom_frac": _mean(r.kv_headroom_frac for r in runs),
            "peak_tokens": max(r.kv_peak_tokens for r in runs),
        },
        "queues": {
            "admission_mean": _mean(r.admission_queue_mean for r in runs),
            "prefill_mean": _mean(r.prefill_queue_mean for r in runs),
        },
        "prefill_utilisation": _mean(r.prefill_utilisation for r in runs),
        "waits_s": {
            "admission": _mean(r.admission_wait_s for r in runs),
            "prefill": _mean(r.prefill_wait_s for r in runs),
            "join": _mean(r.join_wait_s for r in runs),
        },
        "retractions": sum(r.retractions for r in runs),
        "requests_measured": int(arrived),
        "incomplete": sum(r.incomplete for r in runs),
        "completed_share": _num(completed / arrived) if arrived else None,
        "stable": pooled_stable(runs),
    }
    return out


def _context(spec: DeploymentSpec, samples: Samples, timing: SimTiming) -> dict[str, Any]:
    cal = spec.calibration
    return {
        "model": spec.model.name,
        "gpu": spec.gpu.name,
        "workload": spec.workload.name,
        "samples": {"name": samples.name, "count": len(samples), "source": samples.source},
        "calibration": {"measured": bool(cal.measured), "source": cal.source},
        "performance": spec.performance,
        "kv_pool_tokens": int(timing.kv_pool_tokens),
        "dispatch": spec.serving.dispatch,
    }


def simulate_report(
    spec: DeploymentSpec,
    samples: Samples,
    n_p: int,
    n_d: int,
    rate_rps: float | None,
    *,
    seeds: int = 3,
    first_seed: int = 0,
    requests: int = 4000,
    duration_s: float | None = None,
    replay: bool = False,
) -> dict[str, Any]:
    """``pdwatt simulate --rate``: statistics at one offered rate, over ``seeds`` seeds.

    With ``replay`` the trace's own arrival times are used (rescaled to ``rate_rps``
    if given) and every request is measured (no warm-up).
    """
    if seeds < 1:
        raise InputError("seeds", "must be >= 1")
    if rate_rps is not None and not (math.isfinite(rate_rps) and rate_rps > 0):
        raise InputError("rate", "must be finite and > 0")
    timing = SimTiming.of(spec)
    runs = [
        simulate(
            timing,
            samples,
            n_p,
            n_d,
            rate_rps,
            requests=requests,
            duration_s=duration_s,
            warmup_fraction=0.0 if replay else 0.5,
            seed=first_seed + s,
            dispatch=spec.serving.dispatch,
            replay=replay,
        )
        for s in range(1 if replay else seeds)
    ]
    out = _context(spec, samples, timing)
    out.update(
        {
            "n_p": int(n_p),
            "n_d": int(n_d),
            "mode": "replay" if replay else "rate",
            "rate_rps": _num(rate_rps) if not replay else _num(runs[0].arrived / runs[0].window_s),
            "seeds": len(runs),
            "duration_s": _num(runs[0].window_end_s),
            "window_s": [_num(runs[0].window_start_s), _num(runs[0].window_end_s)],
            "stability_criterion": f"completions >= {STABLE_SHARE:g} x arrivals over the window",
        }
    )
    out.update(_run_stats(runs))
    return out


def capacity_search_report(
    spec: DeploymentSpec,
    samples: Samples,
    n_p: int,
    n_d: int,
    *,
    seeds: int = 3,
    first_seed: int = 0,
    requests: int | None = None,
    check_margin: float | None = 0.05,
    check_duration_s: float | None = None,
) -> dict[str, Any]:
    """``pdwatt simulate --find-capacity``: the simulated capacity with its confidence,
    the open-loop check and the latency at the check's lower rate."""
    timing = SimTiming.of(spec)
    n_req = requests or default_requests(samples)
    est = find_capacity(
        timing,
        samples,
        n_p,
        n_d,
        seeds=seeds,
        requests=n_req,
        dispatch=spec.serving.dispatch,
        check_margin=check_margin,
        check_duration_s=check_duration_s,
        first_seed=first_seed,
    )
    out = _context(spec, samples, timing)
    out.update(
        {
            "n_p": int(n_p),
            "n_d": int(n_d),
            "mode": "find_capacity",
            "capacity_rps": _num(est.capacity_rps),
            "capacity_ci95_rps": _num(est.ci95_rps),
            "seeds": est.seeds,
            "requests_per_seed": n_req,
            "per_seed_rps": [_num(r.throughput_rps) for r in est.runs],
            "criterion": (
                "capacity = saturated throughput (every decode queue unbounded), measured over "
                f"{n_req} completions per seed after "
                f"{round(n_req / 3)} warm-up completions; 95% CI by batch means; "
                f"checked open-loop: stable means completions >= {STABLE_SHARE:g} x arrivals "
                "over the second half of the horizon"
            ),
            "at_capacity": {
                k: v
                for k, v in _run_stats(est.runs).items()
                if k in ("mean_batch", "mean_active_ctx_tokens", "kv_pool", "prefill_utilisation")
            },
        }
    )
    if est.check_margin is not None:
        lower_rps = (1.0 - est.check_margin) * est.capacity_rps
        out["check"] = {
            "margin": est.check_margin,
            "lower_rps": _num(lower_rps),
            "lower_stable": est.lower_stable,
            "lower_completed_share": _run_stats(est.lower)["completed_share"],
            "upper_rps": _num((1.0 + est.check_margin) * est.capacity_rps),
            "upper_stable": est.upper_stable,
            "upper_completed_share": _run_stats(est.upper)["completed_share"],
            "passed": est.check_passed,
        }
        out["latency_at_rps"] = _num(lower_rps)
        out.update(_latency(est.lower))
    return out


def simulated_slo(
    timing: SimTiming,
    samples: Samples,
    n_p: int,
    n_d: int,
    load_rps: float,
    targets: tuple[float | None, float | None],
    *,
    seeds: int = 2,
    requests: int = 4000,
    dispatch: str = "round_robin",
) -> dict[str, Any]:
    """Whether ``(n_p, n_d)`` meets p99 latency ``targets`` (TTFT, TPOT; None: no
    target) when simulated with Poisson arrivals at ``load_rps``: stable (completions
    >= 98% of arrivals) and its p99s (pooled over ``seeds`` seeds) within them."""
    from model.pareto import within_targets

    runs = [
        simulate(timing, samples, n_p, n_d, load_rps, requests=requests, seed=s, dispatch=dispatch)
        for s in range(seeds)
    ]
    lat = _latency(runs)
    ttft, tpot = lat["ttft_s"]["p99"], lat["tpot_s"]["p99"]
    stable = pooled_stable(runs)
    return {
        "simulated": True,
        "load_rps": float(load_rps),
        "ttft_p99_s": ttft,
        "tpot_p99_s": tpot,
        "stable": stable,
        "meets": stable and within_targets((ttft, tpot), targets),
    }


def simulated_slo_check(
    cfg: Mapping[str, Any],
    timing: SimTiming | Mapping[SettingPair, SimTiming],
    samples: Samples,
    targets: tuple[float | None, float | None],
    at_load: float,
    *,
    seeds: int = 2,
    requests: int = 4000,
    dispatch: str = "round_robin",
) -> dict[str, Any]:
    """:func:`simulated_slo` for one configuration of a front report, at ``at_load``
    times its capacity (a module-level function, so that a process pool can run it),
    with ``timing`` or, given per setting pair, the configuration's pair's timing."""
    from model.pareto import at_setting

    return simulated_slo(
        at_setting(timing, cfg),
        samples,
        int(cfg["n_p"]),
        int(cfg["n_d"]),
        at_load * float(cfg["capacity_rps"]),
        targets,
        seeds=seeds,
        requests=requests,
        dispatch=dispatch,
    )


def slo_front(
    report: Mapping[str, Any],
    timing: SimTiming | Mapping[SettingPair, SimTiming],
    samples: Samples,
    *,
    ttft_p99_s: float | None,
    tpot_p99_s: float | None,
    at_load: float,
    seeds: int = 2,
    requests: int = 4000,
    dispatch: str = "round_robin",
    map_checks: CheckMap = map,
) -> dict[str, Any]:
    """A front report (``pdwatt front``) restricted to configurations meeting latency SLOs.

    A configuration meets the SLOs when, simulated with Poisson arrivals at
    ``at_load`` times its capacity in the report, it is stable (completions >= 98% of
    arrivals) and its p99 TTFT and p99 TPOT (pooled over ``seeds`` seeds, requests of
    the measurement window) are within the targets given. The new front is the
    capacity-power front of the configurations that meet them. Only configurations
    that reach the front of the remaining candidates are simulated: a candidate
    dominated by one that meets the SLOs can never be on the new front, so the result
    is the same as filtering every configuration first. The selections
    (``min_power_for_rate``, ``max_capacity_under_budget``) are redone on the new front.
    ``map_checks`` runs each round's simulations (:func:`model.pareto.restrict_front`).
    A front over GPU settings (docs/clocks.md) gives ``timing`` per setting pair: each
    configuration is simulated with its own pair's timing.
    """
    from model.pareto import check_slo_targets, restrict_to_slo

    check_slo_targets(ttft_p99_s, tpot_p99_s, at_load)

    def fields(checked: int, _verdicts: list[dict[str, Any]]) -> dict[str, Any]:
        return {"seeds": seeds, "requests_per_seed": requests, "simulated": checked}

    rule = (
        "simulated at at_load x capacity with Poisson arrivals; meets = stable "
        f"(completions >= {STABLE_SHARE:g} x arrivals) and p99 within the targets; "
        "configurations never simulated are dominated by ones that meet the targets"
    )
    return restrict_to_slo(
        dict(report),
        simulated_slo_check,
        map_checks,
        (ttft_p99_s, tpot_p99_s),
        at_load,
        fields,
        rule,
        timing=timing,
        samples=samples,
        seeds=seeds,
        requests=requests,
        dispatch=dispatch,
    )
