"""``pdwatt capacity`` and ``pdwatt front``: one configuration, and every configuration
with the capacity-power Pareto front."""

from __future__ import annotations

import argparse
from typing import Any

from model.capacity import settings_record
from model.operations import (
    capacity_report,
    front_over_gpus,
    front_over_shapes,
    gpu_pair_specs,
    resolve_spec,
)
from model.spec import with_settings, with_targets
from service.cli import simulate
from service.cli.common import (
    add_spec_args,
    calibration_line,
    fmt,
    spec_from_args,
    spec_request_from_args,
    table,
)


def cmd_capacity(a: argparse.Namespace) -> dict[str, Any]:
    spec, overridden = spec_from_args(a)
    spec = with_settings(spec, a.prefill_setting, a.decode_setting)
    spec = with_targets(spec, a.ttft_p99, a.tpot_p99)
    rep = capacity_report(spec, a.np, a.nd, a.load, overridden=overridden)
    rep.update(settings_record(spec))
    if not a.json:
        print(
            f"{rep['model']} on {rep['gpu']}, workload {rep['workload']}: "
            f"{rep['n_p']}P{rep['n_d']}D"
        )
        print(calibration_line(rep))
        at = f"at served load {fmt(rep['load_rps'])} req/s" if a.load is not None else "at capacity"
        items = [
            ("capacity", f"{fmt(rep['capacity_rps'])} req/s"),
            *(
                [("load asked", f"{fmt(rep['requested_load_rps'])} req/s ("
                                f"{fmt(rep['unserved_rps'])} req/s above capacity: not served)")]
                if "requested_load_rps" in rep else []
            ),  # fmt: skip
            (f"power {at}", f"{fmt(rep['power_w'], 1)} W"),
            ("prefill capacity / instance", f"{fmt(rep['mu_p_rps'])} req/s"),
            ("decode capacity / instance", f"{fmt(rep['mu_d_rps'])} req/s (coupled)"),
            ("decode capacity / instance, no reservations", f"{fmt(rep['mu_d_max_rps'])} req/s"),
            (
                "operating batch" if "latency_targets" in rep else "operating batch B*",
                fmt(rep["batch"], 2),
            ),
            ("prefill utilisation at capacity", fmt(rep["rho_star"], 4)),
            ("uncoupled bottleneck", rep["bottleneck"]),
            ("active context", f"{fmt(rep['ctx_tokens'], 1)} tokens"),
            ("KV pool per decode instance", f"{rep['kv_pool_tokens']:,} tokens"),
            (
                "power idle .. saturated",
                f"{fmt(rep['power_idle_w'], 0)} .. {fmt(rep['power_saturated_w'], 0)} W",
            ),
        ]
        for phase in ("prefill", "decode"):
            if f"{phase}_setting" in rep:
                items.append(
                    (
                        f"{phase} setting",
                        f"{rep[f'{phase}_setting']}: SM clock "
                        f"{fmt(rep[f'{phase}_clock_mhz'], 0)} MHz, "
                        f"{fmt(rep[f'{phase}_draw_w'], 0)} W per GPU at capacity",
                    )
                )
        if "prefill_gpu" in rep:
            items.append(("GPUs prefill / decode", f"{rep['prefill_gpu']} / {rep['decode_gpu']}"))
        if "kv_transfer_s" in rep:
            items.append(
                (
                    f"KV transfer ({rep['interconnect']}, {rep['interconnect_gb_per_s']:g} GB/s)",
                    f"{fmt(rep['kv_transfer_s'] * 1e3, 2)} ms per request, links carry "
                    f"{fmt(rep['kv_link_rps'])} req/s",
                )
            )
        if "speculative" in rep:
            sp = rep["speculative"]
            items.append(
                (
                    "speculative decoding",
                    f"MTP, {sp['draft_tokens']} drafted token(s) per iteration, "
                    f"{fmt(sp['tokens_per_iteration'], 3)} gained: decode times are per "
                    "token gained",
                )
            )
        if "latency_targets" in rep:
            items += _target_items(rep)
        w = max(len(k) for k, _ in items)
        for k, v in items:
            print(f"  {k.ljust(w)}  {v}")
    return rep


def _target_items(rep: dict[str, Any]) -> list[tuple[str, str]]:
    """The text lines of a capacity under latency targets (docs/admission.md, 8)."""
    goals = rep["latency_targets"]
    given = ", ".join(
        f"{name} p99 <= {fmt(goals[key], 4)} s"
        for name, key in (("TTFT", "ttft_p99_s"), ("TPOT", "tpot_p99_s"))
        if goals[key] is not None
    )
    out = [("latency targets", given)]
    if rep.get("unmet"):
        out.append(("unmet", rep["unmet"]))
        return out
    out.append(("batch capped by", rep.get("batch_capped_by") or "nothing"))
    it = rep.get("decode_iteration_s")
    if it is not None:
        what = "per token gained" if "speculative" in rep else "iteration"
        out.append((f"decode {what} at the batch", f"{fmt(1e3 * it, 2)} ms"))
    out.append(("capacity decided by", rep.get("limited_by") or "-"))
    return out


def _at(c: dict[str, Any]) -> str:
    """A front point's shapes and settings as the text names them (nothing without)."""
    out = ""
    if "prefill_shape" in c:
        out += f" ({c['prefill_shape']} / {c['decode_shape']})"
    if "prefill_setting" in c:
        out += f" at {c['prefill_setting']}/{c['decode_setting']}"
    return out


def _limit_cells(c: dict[str, Any]) -> list[str]:
    """A front point's decode batch, what capped it, its iteration (ms) and which bound
    decides its capacity (docs/admission.md, section 8)."""
    it = c.get("decode_iteration_s")
    return [
        fmt(c.get("batch"), 1),
        c.get("batch_capped_by") or "-",
        fmt(None if it is None else 1e3 * it, 1),
        c.get("limited_by") or "-",
    ]


def _setting_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",")]


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a comma-separated list of integers, got {text!r}"
        ) from None


def cmd_front(a: argparse.Namespace) -> dict[str, Any]:
    req, overridden = spec_request_from_args(a)

    def restrict(report: dict[str, Any], at: Any) -> dict[str, Any]:
        return simulate.apply_slo(report, a, at)

    if a.gpus is not None:  # every pair of the listed GPU types (docs/mixed-gpus.md)
        rep = front_over_gpus(gpu_pair_specs(req, a.gpus), a, overridden, restrict)
    else:
        rep = front_over_shapes(resolve_spec(req), a, overridden, restrict)
    if a.plot:
        from service.charts.schedule import front_chart

        front_chart(rep, a.plot)
    if not a.json:
        print(
            f"{rep['model']} on {rep['gpu']}, workload {rep['workload']}: "
            f"{len(rep['configs'])} configurations with <= {rep['max_gpus']} GPUs, "
            f"{len(rep['front'])} on the capacity-power front"
        )
        print(calibration_line(rep))
        named = "prefill_settings" in rep
        shaped = "prefill_shapes" in rep
        typed = "gpu_pairs" in rep
        drafted = "mtp_draft_tokens" in rep
        limited = "slo" in rep  # capacities under targets name their batch and limit
        rows = [
            [
                f"{c['n_p']}P{c['n_d']}D",
                *([f"{c['prefill_setting']}/{c['decode_setting']}"] if named else []),
                *([f"{c['prefill_shape']} / {c['decode_shape']}"] if shaped else []),
                *([f"{c['prefill_gpu']} / {c['decode_gpu']}"] if typed else []),
                *([str(c["mtp_draft_tokens"])] if drafted else []),
                str(c["gpus"]),
                fmt(c["capacity_rps"]),
                fmt(c["power_w"], 0),
                fmt(c["power_w"] / c["capacity_rps"] if c["capacity_rps"] else None, 1),
                fmt(c["rho_star"], 3),
                c["bottleneck"],
                *(_limit_cells(c) if limited else []),
            ]
            for c in rep["front"]
        ]
        head = [
            "config",
            *(["settings P/D"] if named else []),
            *(["shapes P / D"] if shaped else []),
            *(["GPUs P / D"] if typed else []),
            *(["MTP"] if drafted else []),
            *["GPUs", "req/s", "W", "J/req"],
        ]
        more = ["batch", "capped by", "t_D ms", "limited by"] if limited else []
        print(table(rows, [*head, "rho*", "bottleneck", *more]))
        if "slo" in rep:
            slo = rep["slo"]
            analytic = slo.get("method") == "analytic"
            checked = slo["checked"] if analytic else slo["simulated"]
            how = (
                f"analytic, {slo['simulated']} simulated where pool admission binds"
                if analytic
                else "simulated"
            )
            given = ", ".join(
                f"{name} p99 <= {slo[key]} s"
                for name, key in (("TTFT", "ttft_p99_s"), ("TPOT", "tpot_p99_s"))
                if slo[key] is not None
            )
            at = ", each at its settings" if named else ""
            print(
                f"capacity under the targets ({given}): decode at the largest batch within "
                f"the TPOT target ({slo['batch_capped']} of {len(rep['configs'])} "
                f"configurations capped), prefill up to the utilisation within the TTFT "
                f"target; {slo['unmet']} meet them at no rate"
            )
            for c in rep["configs"]:
                if c.get("unmet") is not None:
                    print(f"  {c['n_p']}P{c['n_d']}D{_at(c)}: {c['unmet']}")
                    break
            print(
                f"latency targets ({given} at {slo['at_load']:g} x capacity{at}; {how}): "
                f"{slo['meeting']} of {checked} checked configurations meet them; "
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
                    else f"{c['n_p']}P{c['n_d']}D{_at(c)}: {fmt(c['capacity_rps'])} req/s "
                    f"at {fmt(c['power_w'], 0)} W"
                )
                print(f"{label} {what}: {res}")
        if a.plot:
            print(f"chart written to {a.plot}")
    return rep


def register(sub: Any) -> None:
    """Add ``capacity`` and ``front`` to an ``add_subparsers()`` object."""
    c = sub.add_parser("capacity", help="capacity and power of one (n_P, n_D) configuration")
    add_spec_args(c)
    c.add_argument("--np", type=int, required=True, help="prefill instances")
    c.add_argument("--nd", type=int, required=True, help="decode instances")
    c.add_argument("--load", type=float, help="served load (req/s) for power_w; default: capacity")
    for phase in ("prefill", "decode"):
        c.add_argument(
            f"--{phase}-setting",
            metavar="SETTING",
            help=f"the {phase} GPUs' setting: '<N>MHz' (locked SM clock) or '<N>W' "
            "(power limit per GPU); default: the full clock (docs/clocks.md)",
        )
    g = c.add_argument_group(
        "latency targets: the capacity is the highest rate at which they hold "
        "(docs/admission.md, section 8)"
    )
    g.add_argument("--ttft-p99", type=float, metavar="S", help="p99 time to first token (s)")
    g.add_argument("--tpot-p99", type=float, metavar="S", help="p99 time per output token (s)")
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
    for phase, example in (("prefill", "1980MHz,1500MHz"), ("decode", "1980MHz,1200MHz,500W")):
        f.add_argument(
            f"--{phase}-settings",
            type=_setting_list,
            metavar="LIST",
            help=f"search the {phase} GPUs' settings in this comma-separated list, e.g. "
            f"{example} ('default': the full clock; docs/clocks.md); each point names "
            "its settings. Default: the full clock only, the front as without settings",
        )
    for phase in ("prefill", "decode"):
        f.add_argument(
            f"--{phase}-shapes",
            nargs="+",
            metavar="SHAPE",
            help=f"search these {phase} instance shapes, e.g. tp2 tp4 or tp8 tp1,dp8,ep8, "
            "or auto (tp 1-8; for a mixture of experts also tp<G>,ep<G> and "
            "tp1,dp<G>,ep<G>); each point names its shapes (docs/shapes.md)",
        )
    f.add_argument(
        "--mtp-draft-tokens",
        type=_int_list,
        metavar="LIST",
        help="search these MTP draft depths, e.g. 0,1,2,3 (speculative decoding with the "
        "model's next-token-prediction module; --performance kernels); each point names "
        "its depth (docs/kernels.md)",
    )
    f.add_argument(
        "--gpus",
        type=_setting_list,
        metavar="LIST",
        help="search each phase on each of these GPU types, e.g. h100-sxm,h200 (every "
        "pair); each point names its prefill and decode GPU (docs/mixed-gpus.md)",
    )
    f.add_argument("--plot", metavar="FILE.png", help="draw the capacity-power plane")
    f.set_defaults(func=cmd_front)
    simulate.add_slo_args(f)
