"""``pdwatt simulate`` and the SLO options of ``pdwatt front`` (a thin shell over
:mod:`model.simulator`).

``register(subparsers)`` adds the ``simulate`` sub-command::

    pdwatt simulate --model M --gpu G --workload W --np 3 --nd 1 --rate 5 [--seeds 3] --json
    pdwatt simulate ... --find-capacity [--seeds 3] [--requests N] --json
    pdwatt simulate --workload trace:FILE.csv ... --trace-arrivals [--rate R] --json

``add_slo_args(front_parser)`` adds ``--ttft-p99 S``, ``--tpot-p99 S`` and
``--at-load FRACTION`` to ``pdwatt front``; ``apply_slo(report, args)`` then keeps
only the configurations whose p99 latencies meet the targets at that fraction of their
capacity (and returns the report unchanged when no target is set): analytic
(:mod:`model.queueing.latency`, simulating only where admission waits for pool memory make the
analytic TTFT optimistic) or, with ``--slo-method simulate``, simulated. The checks of
each round run side by side in ``--slo-jobs`` processes, each printing a progress line.

The simulator needs per-request lengths: fixed workloads have them; a trace preset
reads its public trace from the directory named by ``PDWATT_DATA_DIR``; otherwise
pass ``trace:PATH``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from types import TracebackType
from typing import Any

from model.capacity import Coefficients
from model.errors import InputError
from model.operations import DEFAULT_WORKLOAD
from model.queueing.latency import latency_at
from model.queueing.slo import SloTargets, slo_restricted_front
from model.simulator.reports import (
    capacity_search_report,
    simulate_report,
)
from model.simulator.samples import resolve_samples
from model.simulator.search import default_requests
from model.spec import DeploymentSpec
from service.cli.common import add_spec_args, spec_from_args
from service.cli.solving import Progress

WORKLOAD_HELP = (
    "fixed:IN:OUT, a preset (its trace must be in $PDWATT_DATA_DIR) or trace:PATH "
    f"(CSV or Mooncake JSONL) (default: {DEFAULT_WORKLOAD})"
)


def _add_spec_args(p: argparse.ArgumentParser) -> None:
    """The deployment options, as in the other sub-commands (the simulator needs samples,
    so moments are not accepted; it never uses the memory balance, so it has no
    ``--model-variant``)."""
    add_spec_args(p, WORKLOAD_HELP, variant=False)


def _spec_from_args(a: argparse.Namespace) -> DeploymentSpec:
    spec: DeploymentSpec = spec_from_args(a)[0]
    return spec


def register(subparsers: Any) -> None:
    """Add the ``simulate`` sub-command to an ``add_subparsers()`` object."""
    p = subparsers.add_parser(
        "simulate",
        help="discrete-event simulation of one (n_P, n_D) configuration: "
        "latency at a rate, or the simulated capacity",
    )
    _add_spec_args(p)
    p.add_argument("--np", type=int, required=True, help="prefill instances")
    p.add_argument("--nd", type=int, required=True, help="decode instances")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--rate", type=float, help="Poisson arrival rate (req/s)")
    mode.add_argument(
        "--find-capacity",
        action="store_true",
        help="search the largest stable arrival rate (saturated throughput, checked open-loop)",
    )
    p.add_argument(
        "--trace-arrivals",
        action="store_true",
        help="replay the trace's own arrival times (rescaled to --rate if given)",
    )
    p.add_argument("--seeds", type=int, default=3, help="independent runs (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="simulated seconds per run at a given rate, the second half measured (default: "
        "long enough for --requests arrivals in the measured half); with --find-capacity, "
        "the horizon of the open-loop check runs",
    )
    p.add_argument(
        "--requests",
        type=int,
        help="requests measured per seed (default: 4000 at a rate; for --find-capacity "
        "twice the trace's rows, between 10000 and 40000)",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="with --find-capacity: skip the open-loop check at +-5%% of the estimate",
    )
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(a: argparse.Namespace) -> dict[str, Any]:
    """Run ``pdwatt simulate``; print a summary unless ``--json``; return the report."""
    if a.rate is None and not a.find_capacity and not a.trace_arrivals:
        raise InputError("rate", "give --rate R, --find-capacity or --trace-arrivals")
    if a.find_capacity and a.trace_arrivals:
        raise InputError("trace_arrivals", "cannot be combined with --find-capacity")
    if a.seeds < 1:
        raise InputError("seeds", "must be >= 1")
    if a.requests is not None and a.requests < 1:
        raise InputError("requests", "must be >= 1")
    spec = _spec_from_args(a)
    samples = resolve_samples(a.workload or spec.workload)
    if a.find_capacity:
        rep = capacity_search_report(
            spec,
            samples,
            a.np,
            a.nd,
            seeds=a.seeds,
            first_seed=a.seed,
            requests=a.requests or default_requests(samples),
            check_margin=None if a.no_check else 0.05,
            check_duration_s=a.duration,
        )
    else:
        rep = simulate_report(
            spec,
            samples,
            a.np,
            a.nd,
            a.rate,
            seeds=a.seeds,
            first_seed=a.seed,
            requests=a.requests or 4000,
            duration_s=a.duration,
            replay=a.trace_arrivals,
        )
        if not a.trace_arrivals:  # Poisson arrivals: the analytic figures beside
            lat = latency_at(Coefficients.of(spec), a.np, a.nd, a.rate, samples.l_in, samples.l_out)
            rep["analytic"] = lat.record()
    if not a.json:
        print(_summary(rep))
    return rep


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if not math.isfinite(v) else f"{v:,.{nd}f}"
    return str(v)


def _summary(rep: dict[str, Any]) -> str:
    head = (
        f"{rep['model']} on {rep['gpu']}, workload {rep['workload']} "
        f"({rep['samples']['count']:,} samples): {rep['n_p']}P{rep['n_d']}D, "
        f"{rep['seeds']} seed(s), simulated"
    )
    lines = [head]
    if rep["mode"] == "find_capacity":
        lines.append(
            f"  capacity            {_f(rep['capacity_rps'])} req/s "
            f"(95% CI +- {_f(rep['capacity_ci95_rps'])})"
        )
        chk = rep.get("check")
        if chk:
            verdict = "passed" if chk["passed"] else "FAILED"
            lines.append(
                f"  open-loop check     {verdict}: stable at {_f(chk['lower_rps'])} req/s "
                f"= {chk['lower_stable']}, at {_f(chk['upper_rps'])} req/s = "
                f"{chk['upper_stable']}"
            )
            lines.append(f"  latency at          {_f(rep['latency_at_rps'])} req/s")
        stats = rep["at_capacity"]
        lines.append(f"  mean batch at cap.  {_f(stats['mean_batch'], 1)}")
    else:
        lines.append(
            f"  offered / served    {_f(rep['rate_rps'])} / {_f(rep['throughput_rps'])} req/s "
            f"({'stable' if rep['stable'] else 'NOT stable'})"
        )
        lines.append(f"  mean decode batch   {_f(rep['mean_batch'], 1)}")
        pool = rep["kv_pool"]
        lines.append(
            f"  KV pool             active {_f(pool['active_frac'])}, prefill-reserved "
            f"{_f(pool['prefill_reserved_frac'])}, free {_f(pool['free_frac'])}"
        )
        q = rep["queues"]
        lines.append(
            f"  queues (mean)       admission {_f(q['admission_mean'], 2)}, "
            f"prefill {_f(q['prefill_mean'], 2)}"
        )
    an = rep.get("analytic")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        if key in rep:
            v = rep[key]
            line = (
                f"  {label} p50/p90/p99   {_f(v['p50'], 4)} / {_f(v['p90'], 4)} / "
                f"{_f(v['p99'], 4)} s"
            )
            if an is not None:
                q = an[f"{label.lower()}_quantile_s"]
                line += f"   (analytic p99 {_f(q, 4)} s)"
            lines.append(line)
    if an is not None and an["admission_bound"]:
        lines.append(
            "  note: admission waits for KV pool memory matter at this rate; the analytic "
            "TTFT leaves them out (docs/latency.md)"
        )
    return "\n".join(lines)


def add_slo_args(front_parser: argparse.ArgumentParser) -> None:
    """Add the latency-SLO options to the ``front`` sub-command's parser."""
    g = front_parser.add_argument_group(
        "latency SLOs (analytic, docs/latency.md, or simulated; needs per-request "
        "lengths, see pdwatt simulate)"
    )
    g.add_argument("--ttft-p99", type=float, metavar="S", help="p99 time to first token (s)")
    g.add_argument("--tpot-p99", type=float, metavar="S", help="p99 time per output token (s)")
    g.add_argument(
        "--at-load",
        type=float,
        default=SloTargets.at_load,
        metavar="FRACTION",
        help="check the SLOs at this fraction of each configuration's capacity "
        f"(default {SloTargets.at_load:g})",
    )
    g.add_argument(
        "--slo-method",
        choices=("analytic", "simulate"),
        default="analytic",
        help="analytic: the queue model's p99s, simulating only where admission waits for "
        "KV pool memory make its TTFT optimistic; simulate: every check simulated "
        "(default analytic)",
    )
    g.add_argument(
        "--slo-seeds",
        type=int,
        default=SloTargets.seeds,
        help=f"seeds per SLO check (default {SloTargets.seeds})",
    )
    g.add_argument(
        "--slo-jobs",
        type=int,
        default=None,
        metavar="N",
        help="processes that run SLO checks side by side (default: the machine's CPUs)",
    )
    g.add_argument(
        "--slo-requests",
        type=int,
        default=SloTargets.requests,
        help=f"requests measured per seed in an SLO check (default {SloTargets.requests})",
    )


class SloChecks:
    """Runs the SLO checks of each round of :func:`model.pareto.restrict_front` in up to
    ``jobs`` processes (started once, on the first round with more than one check, and
    reused), and tells ``say`` of each round and each verdict."""

    def __init__(self, jobs: int, say: Callable[[str], None]) -> None:
        if jobs < 1:
            raise InputError("slo_jobs", "must be >= 1")
        self.jobs = jobs
        self.say = say
        self.done = 0
        self._pool: Executor | None = None

    def __enter__(self) -> SloChecks:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __call__(
        self, check: Callable[[dict[str, Any]], dict[str, Any]], configs: list[dict[str, Any]]
    ) -> Iterator[dict[str, Any]]:
        if self.jobs > 1 and len(configs) > 1:
            if self._pool is None:
                # spawn: a fresh interpreter per worker, whatever threads this one runs
                ctx = multiprocessing.get_context("spawn")
                self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx)
            verdicts: Iterator[dict[str, Any]] = self._pool.map(check, configs)
        else:
            verdicts = map(check, configs)
        self.say(f"checking {len(configs)} configurations on the front")
        for cfg, v in zip(configs, verdicts, strict=True):
            self.done += 1
            how = "simulated" if v["simulated"] else "analytic"
            verdict = "meets the targets" if v["meets"] else "misses"
            at = (
                f" at {cfg['prefill_setting']}/{cfg['decode_setting']}"
                if "prefill_setting" in cfg
                else ""
            )
            self.say(f"SLO check {self.done}: {cfg['n_p']}P{cfg['n_d']}D{at} {how}, {verdict}")
            yield v


def apply_slo(
    report: dict[str, Any], args: argparse.Namespace, spec: DeploymentSpec | None = None
) -> dict[str, Any]:
    """The front report restricted to configurations meeting the SLOs (``slo`` added;
    :func:`model.queueing.slo.slo_restricted_front`).

    Returns `report` itself when neither ``--ttft-p99`` nor ``--tpot-p99`` is given.
    Progress goes to stderr unless ``--json`` is given.
    """
    ttft = getattr(args, "ttft_p99", None)
    tpot = getattr(args, "tpot_p99", None)
    if ttft is None and tpot is None:
        return report
    targets = SloTargets(
        ttft_p99_s=ttft,
        tpot_p99_s=tpot,
        at_load=args.at_load,
        method=getattr(args, "slo_method", "analytic"),
        seeds=args.slo_seeds,
        requests=args.slo_requests,
    )
    targets.check()
    spec = _spec_from_args(args) if spec is None else spec
    samples = resolve_samples(args.workload or spec.workload)
    jobs = getattr(args, "slo_jobs", None)
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    with Progress(quiet=getattr(args, "json", False)) as say, SloChecks(jobs, say) as checks:
        return slo_restricted_front(report, spec, samples, targets, checks)
