"""The ``pdwatt`` command line: a thin shell over the calls the HTTP service makes.

Readable tables by default; ``--json`` prints the same document as the HTTP API.
Errors are printed as ``error: <field>: <reason>`` with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from collections.abc import Sequence
from typing import Any

from model.capacity import DEFAULT_VARIANT, MODEL_VARIANTS
from model.catalog import load_override_file, parse_set_flags
from model.errors import InputError, PdwattError
from model.operations import SpecRequest, capacity_report, front_report, resolve_spec


def add_variant_arg(p: argparse.ArgumentParser, per_deployment: bool = False) -> None:
    """``--model-variant``: the memory balance every command's capacities come from."""
    p.add_argument(
        "--model-variant",
        choices=MODEL_VARIANTS,
        help="memory balance: paper (SPEC 2.5) or admission (docs/admission.md); default "
        + DEFAULT_VARIANT
        + (" (for deployments that do not name their own model_variant)" if per_deployment else ""),
    )


def add_spec_args(
    p: argparse.ArgumentParser, workload_help: str | None = None, variant: bool = True
) -> None:
    """The deployment options shared by the sub-commands (``variant``: the memory balance
    option, for the commands whose numbers come from it)."""
    p.add_argument("--model", default="qwen3-32b", help="model name (default: qwen3-32b)")
    p.add_argument("--gpu", default="h200", help="GPU name (default: h200)")
    p.add_argument(
        "--workload",
        default="azure-conv-2023",
        help=workload_help
        or "fixed:IN:OUT, a preset (azure-conv-2023, azure-code-2023, mooncake), "
        "trace:PATH (CSV or Mooncake JSONL) or moments:PATH.json (default: azure-conv-2023)",
    )
    p.add_argument(
        "--override",
        metavar="FILE",
        help="JSON or TOML file with sections model/gpu/calibration/serving overriding fields",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one field, e.g. --set calibration.mfu=0.6 "
        "--set serving.kv_pool_tokens=200000",
    )
    p.add_argument(
        "--calibration",
        metavar="CAL.json",
        help="calibration file from pdwatt calibrate (its entry for --gpu; --set and "
        "--override still apply on top)",
    )
    p.add_argument("--dispatch", choices=["round_robin", "random"], help="router dispatch policy")
    if variant:
        add_variant_arg(p)
    p.add_argument("--json", action="store_true", help="machine output (same as the HTTP API)")


def spec_from_args(a: argparse.Namespace) -> tuple[Any, bool]:
    """The deployment the options describe, and whether any field was overridden."""
    overrides: dict[str, dict[str, Any]] = {}
    if a.override:
        for sec, vals in load_override_file(a.override).items():
            overrides.setdefault(sec, {}).update(vals)
    for sec, vals in parse_set_flags(a.sets).items():
        overrides.setdefault(sec, {}).update(vals)
    if a.dispatch:
        overrides.setdefault("serving", {})["dispatch"] = a.dispatch
    base = None
    if getattr(a, "calibration", None):
        from service.cli_calibrate import calibration_for_gpu

        base = calibration_for_gpu(a.calibration, a.gpu)
    req = SpecRequest(
        model=a.model,
        gpu=a.gpu,
        workload=a.workload,
        overrides=overrides,
        read_files=True,
        calibration=base,
        model_variant=getattr(a, "model_variant", None) or DEFAULT_VARIANT,
    )
    return resolve_spec(req), bool(overrides)


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "inf"
        return f"{v:,.{nd}f}"
    return str(v)


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths, strict=False))
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=False)) for r in rows]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def _calibration_line(rep: dict[str, Any]) -> str:
    cal = rep["calibration"]
    kind = "measured" if cal["measured"] else "ESTIMATED (no measurement for this pair)"
    extra = ", with user overrides" if cal.get("overridden") else ""
    return f"calibration: {kind}{extra}; {cal['source']}; model variant {rep['model_variant']}"


def cmd_capacity(a: argparse.Namespace) -> dict[str, Any]:
    spec, overridden = spec_from_args(a)
    rep = capacity_report(spec, a.np, a.nd, a.load, overridden=overridden)
    if not a.json:
        print(
            f"{rep['model']} on {rep['gpu']}, workload {rep['workload']}: "
            f"{rep['n_p']}P{rep['n_d']}D"
        )
        print(_calibration_line(rep))
        at = (
            f"at served load {_fmt(rep['load_rps'])} req/s" if a.load is not None else "at capacity"
        )
        items = [
            ("capacity", f"{_fmt(rep['capacity_rps'])} req/s"),
            (f"power {at}", f"{_fmt(rep['power_w'], 1)} W"),
            ("prefill capacity / instance", f"{_fmt(rep['mu_p_rps'])} req/s"),
            ("decode capacity / instance", f"{_fmt(rep['mu_d_rps'])} req/s (coupled)"),
            ("decode capacity / instance, no reservations", f"{_fmt(rep['mu_d_max_rps'])} req/s"),
            ("operating batch B*", _fmt(rep["batch"], 2)),
            ("prefill utilisation at capacity", _fmt(rep["rho_star"], 4)),
            ("uncoupled bottleneck", rep["bottleneck"]),
            ("active context", f"{_fmt(rep['ctx_tokens'], 1)} tokens"),
            ("KV pool per decode instance", f"{rep['kv_pool_tokens']:,} tokens"),
            (
                "power idle .. saturated",
                f"{_fmt(rep['power_idle_w'], 0)} .. {_fmt(rep['power_saturated_w'], 0)} W",
            ),
        ]
        w = max(len(k) for k, _ in items)
        for k, v in items:
            print(f"  {k.ljust(w)}  {v}")
    return rep


def cmd_front(a: argparse.Namespace) -> dict[str, Any]:
    spec, overridden = spec_from_args(a)
    rep = front_report(
        spec, a.max_gpus, a.required_rps, a.headroom, a.budget_w, overridden=overridden
    )
    from service import cli_simulate

    rep = cli_simulate.apply_slo(rep, a)
    if a.plot:
        from service.charts import front_chart

        front_chart(rep, a.plot)
    if not a.json:
        print(
            f"{rep['model']} on {rep['gpu']}, workload {rep['workload']}: "
            f"{len(rep['configs'])} configurations with <= {rep['max_gpus']} GPUs, "
            f"{len(rep['front'])} on the capacity-power front"
        )
        print(_calibration_line(rep))
        rows = [
            [
                f"{c['n_p']}P{c['n_d']}D",
                str(c["gpus"]),
                _fmt(c["capacity_rps"]),
                _fmt(c["power_w"], 0),
                _fmt(c["power_w"] / c["capacity_rps"] if c["capacity_rps"] else None, 1),
                _fmt(c["rho_star"], 3),
                c["bottleneck"],
            ]
            for c in rep["front"]
        ]
        print(_table(rows, ["config", "GPUs", "req/s", "W", "J/req", "rho*", "bottleneck"]))
        if "slo" in rep:
            slo = rep["slo"]
            print(
                f"latency targets (TTFT p99 <= {slo['ttft_p99_s']} s, TPOT p99 <= "
                f"{slo['tpot_p99_s']} s at {slo['at_load']:g} x capacity, simulated): "
                f"{slo['meeting']} of {slo['simulated']} simulated configurations meet them; "
                "the front above keeps only those"
            )
        for key, label in (
            ("min_power_for_rate", "least power for"),
            ("max_capacity_under_budget", "most capacity within"),
        ):
            if key in rep:
                sel = rep[key]
                what = (
                    f"{sel['required_rps']} req/s (headroom {sel['headroom']})"
                    if key == "min_power_for_rate"
                    else f"{sel['budget_w']} W"
                )
                c = sel["config"]
                res = (
                    "none on the front qualifies"
                    if c is None
                    else f"{c['n_p']}P{c['n_d']}D: {_fmt(c['capacity_rps'])} req/s "
                    f"at {_fmt(c['power_w'], 0)} W"
                )
                print(f"{label} {what}: {res}")
        if a.plot:
            print(f"chart written to {a.plot}")
    return rep


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pdwatt",
        description="Power-aware provisioning of prefill/decode disaggregated LLM inference.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("capacity", help="capacity and power of one (n_P, n_D) configuration")
    add_spec_args(c)
    c.add_argument("--np", type=int, required=True, help="prefill instances")
    c.add_argument("--nd", type=int, required=True, help="decode instances")
    c.add_argument("--load", type=float, help="served load (req/s) for power_w; default: capacity")
    c.set_defaults(func=cmd_capacity)

    f = sub.add_parser("front", help="every configuration and the capacity-power Pareto front")
    add_spec_args(f)
    f.add_argument("--max-gpus", type=int, default=16, help="n_P + n_D <= this (default 16)")
    f.add_argument(
        "--required-rps", type=float, help="also select the least-power config for this rate"
    )
    f.add_argument(
        "--headroom", type=float, default=1.0, help="utilisation headroom rho_bar (default 1)"
    )
    f.add_argument("--budget-w", type=float, help="also select the most capacity within this power")
    f.add_argument("--plot", metavar="FILE.png", help="draw the capacity-power plane")
    f.set_defaults(func=cmd_front)

    from service import cli_plan, cli_simulate

    cli_simulate.add_slo_args(f)
    cli_simulate.register(sub)
    cli_plan.register(sub)
    from service import cli_calibrate, cli_dr

    cli_dr.register(sub)
    cli_calibrate.register(sub)

    sv = sub.add_parser("serve", help="run the HTTP service (OpenAPI docs at /docs)")
    sv.add_argument("--host", help="bind address (default: PDWATT_HOST or 127.0.0.1)")
    sv.add_argument("--port", type=int, help="port (default: PDWATT_PORT or 8000)")
    sv.add_argument("--workers", type=int, help="concurrent solves (default: PDWATT_WORKERS or 2)")
    sv.set_defaults(func=cmd_serve)

    wk = sub.add_parser(
        "worker",
        help="run queued jobs from Redis (PDWATT_REDIS_URL), as many machines as wanted",
    )
    wk.add_argument("--workers", type=int, help="concurrent solves (default: PDWATT_WORKERS or 2)")
    wk.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    wk.set_defaults(func=cmd_worker)

    db = sub.add_parser("db", help="the service's database")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser(
        "upgrade",
        help="migrate PDWATT_DATABASE_URL to the current schema (the service does "
        "this on start too)",
    )
    up.set_defaults(func=cmd_db_upgrade)
    return p


def cmd_worker(a: argparse.Namespace) -> None:
    import logging
    import os

    from service.settings import get_settings

    if a.workers is not None:
        os.environ["PDWATT_WORKERS"] = str(a.workers)
    settings = get_settings()
    if settings.redis_url is None:
        raise InputError("PDWATT_REDIS_URL", "not set: a worker takes its jobs from Redis")
    from service.queue import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(f"pdwatt worker: {settings.workers} solver processes", file=sys.stderr)
    run_worker(settings, burst=a.burst)


def cmd_db_upgrade(a: argparse.Namespace) -> None:
    from service.settings import get_settings
    from service.store import SCHEMA_REVISION, make_engine, migrate

    before = migrate(make_engine(get_settings().database_url))
    print(f"database schema: {before} -> {SCHEMA_REVISION}")


def cmd_serve(a: argparse.Namespace) -> None:
    import os

    import uvicorn

    from service.settings import get_settings

    if a.workers is not None:
        os.environ["PDWATT_WORKERS"] = str(a.workers)
    settings = get_settings()
    host = a.host or settings.host
    port = a.port or settings.port
    print(
        f"pdwatt service on http://{host}:{port} (docs: http://{host}:{port}/docs)", file=sys.stderr
    )
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal with the handler
    # that was in place before it started; make that one a normal exit (status 0, atexit
    # hooks run so the solver worker processes are joined) instead of death by signal.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    config = uvicorn.Config(
        "service.main:app", host=host, port=port, log_level="info", timeout_graceful_shutdown=10
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # running solves answer with their best schedule at once, instead of
            # holding the shutdown until their time limits
            from service.main import app, begin_shutdown

            if not self.should_exit:
                begin_shutdown(app)
            super().handle_exit(sig, frame)

    Server(config).run()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        out = a.func(a)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except PdwattError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if getattr(a, "json", False) and out is not None:
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
