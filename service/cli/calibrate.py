"""``pdwatt calibrate`` and ``pdwatt predict`` (a thin shell over
:mod:`model.measured.calibrate`)::

    pdwatt calibrate FILE... [-o CAL.json] [--chart FIT.png] [--leave-one-model-out]
                             [--no-screen] [--json]
    pdwatt predict FILE... [--calibration CAL.json] [--chart FIT.png] [--no-screen] [--json]
    pdwatt predict --silicon [--kernels DIR] [--chart FIT.png] [--json]

``FILE`` is an ML.ENERGY Leaderboard model file or a generic CSV (``docs/calibration.md``),
or AIConfigurator's ``silicon_sample.csv`` of measured serving runs (by its header;
``--silicon``: the installed package's copy; ``docs/validation-silicon.md``).
Rows the consistency screen keeps out (``model.measured.screen``) are counted in every report;
``--no-screen`` fits and judges every row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from model import jsondoc
from model.catalog import Calibration, load_gpu
from model.errors import InputError
from model.measured import engine_fit
from model.measured import screen as screening
from model.measured.calibrate import (
    Fit,
    fit,
    from_document,
    leave_one_model_out,
    predict,
    to_document,
)
from model.measured.measurements import read_measurements
from model.performance.engine import shipped_document
from service.cli.calibrate_kernels import cmd_calibrate_kernels, cmd_predict_kernels
from service.cli.shared import fit_lines, summary_lines, write_fit
from service.cli.silicon import cmd_predict_silicon, silicon_path


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def register(subparsers: Any) -> None:
    c = subparsers.add_parser(
        "calibrate", help="fit a calibration per (GPU, serving stack) to measurements"
    )
    c.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="ML.ENERGY JSON, generic CSV, or bench_serving JSON with an nvidia-smi power CSV",
    )
    c.add_argument("-o", "--output", metavar="CAL.json", help="write the calibration file here")
    c.add_argument("--chart", metavar="FILE.png", help="predicted against measured")
    c.add_argument(
        "--leave-one-model-out",
        action="store_true",
        help="also fit without each model in turn and predict it (out-of-sample errors)",
    )
    c.add_argument("--json", action="store_true", help="print the calibration document")
    _screen_arg(c)
    _bench_args(c)
    _kernel_args(c)
    c.set_defaults(func=cmd_calibrate)
    p = subparsers.add_parser("predict", help="the model's predictions beside measurements")
    p.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="ML.ENERGY JSON, generic CSV, or AIConfigurator's silicon_sample.csv",
    )
    p.add_argument(
        "--silicon",
        action="store_true",
        help="predict TTFT and TPOT of the silicon_sample.csv the installed "
        "aiconfigurator-core package ships (docs/validation-silicon.md)",
    )
    p.add_argument(
        "--calibration",
        metavar="CAL.json",
        help="from pdwatt calibrate (default: the shipped calibration of each row's model "
        "and GPU, as every other command uses, with the shipped prompt lengths; with "
        "--kernels, the shipped engine calibration of each row's GPU and framework)",
    )
    p.add_argument("--chart", metavar="FILE.png", help="predicted against measured")
    p.add_argument("--json", action="store_true", help="rows and summary as JSON")
    _screen_arg(p)
    _bench_args(p)
    _kernel_args(p)
    p.set_defaults(func=cmd_predict)


def _screen_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-screen",
        action="store_true",
        help="fit and judge every row, also those no iteration model describes (by "
        "default they are kept out and listed: docs/calibration.md, section 9)",
    )


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu", help="GPU of the bench_serving runs (default: the power log's name column)"
    )
    p.add_argument(
        "--tp",
        type=int,
        help="GPUs per instance of the bench_serving runs (default: the "
        "number of GPUs in the power log)",
    )
    p.add_argument(
        "--utc-offset",
        metavar="+HH:MM",
        help="the bench_serving machine's local time against UTC, to place its runs in a "
        "DCGM power log from Prometheus (whose times are UTC)",
    )


def _kernel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kernels",
        metavar="DIR",
        help="a kernel database in AIConfigurator's layout: times composed from measured "
        "kernels, only the engine's overheads fitted (docs/kernels.md)",
    )
    p.add_argument(
        "--kernel-version",
        action="append",
        metavar="GPU=VERSION",
        help="the framework version of a GPU's kernel tables (default: the oldest, the "
        "closest to published measurements' era); repeat per GPU",
    )


def _read_json(path: str) -> Any:
    return jsondoc.read(path, "calibration")


def read_calibration_file(path: str) -> Fit:
    return from_document(jsondoc.read(path, "calibration"), Path(path).name)


def calibration_for_gpu(path: str, gpu: str, f: Fit | None = None) -> Calibration:
    """The file's calibration for ``gpu`` (it must hold exactly one, whatever the
    stack); ``f``: the file already read."""
    f = f or read_calibration_file(path)
    name = load_gpu(gpu).name
    found = [g for (g_name, _), g in f.groups.items() if g_name == name]
    have = ", ".join(f"{g}/{s}" for g, s in f.groups)
    if not found:
        raise InputError(
            "calibration", f"{Path(path).name} has no calibration for {name}; it has {have}"
        )
    if len(found) > 1:
        raise InputError(
            "calibration",
            f"{Path(path).name} has {len(found)} calibrations for {name} ({have}); keep one",
        )
    return found[0].calibration


def _screen_lines(screened: list[dict[str, Any]], usable: int) -> list[str]:
    """The rows the screen kept out, per rule and GPU, and their share of the usable
    rows (flagged above the share the screen is meant for)."""
    out = []
    for rule, what in (
        ("itl", "rows screened out by the ITL rule"),
        ("gpu", "rows screened out by the GPU rule"),
        ("power", "rows' power screened out by the power rule (their ITL kept)"),
    ):
        sel = [s for s in screened if s["rule"] == rule]
        if not sel:
            continue
        gpus: dict[str, int] = {}
        for s in sel:
            gpus[s["gpu"]] = gpus.get(s["gpu"], 0) + 1
        per_gpu = ", ".join(f"{g} {n}" for g, n in sorted(gpus.items()))
        share = len(sel) / usable if usable else 0.0
        flag = (
            f" -- more than the {screening.MAX_SHARE:.0%} the screen is meant for"
            if share > screening.MAX_SHARE
            else ""
        )
        out.append(f"{len(sel)} {what} ({per_gpu}; {share:.1%} of {usable} rows){flag}")
    return out


def cmd_calibrate(a: argparse.Namespace) -> dict[str, Any]:
    if a.kernels:
        return cmd_calibrate_kernels(a)
    screen = not a.no_screen
    rows = read_measurements(a.files, a.gpu, a.tp, a.utc_offset)
    _say(f"{len(rows)} measurements from {len(a.files)} file(s)")
    f = fit(rows, _say, screen)
    doc = to_document(f, rows)
    if a.leave_one_model_out:
        doc["leave_one_model_out"] = leave_one_model_out(rows, _say, screen)
    kind = "leave-one-model-out" if a.leave_one_model_out else "in-sample"
    write_fit(
        doc,
        a.output,
        a.chart,
        f"pdwatt calibrate: {kind} predictions",
        lambda: predict(rows, f, screen)["rows"],
    )
    if not a.json:
        for g in doc["calibrations"]:
            c = g["calibration"]
            print(
                f"{g['gpu']} / {g['stack']}: {g['rows']} rows of {', '.join(g['models'])}\n"
                f"  mbu {c['mbu']:.3f}, t_iter {c['t_iter_s'] * 1e3:.3f} ms, t_req "
                f"{c['t_req_s'] * 1e3:.4f} ms, mfu_decode {c['mfu_decode']:.3f}, t_coll "
                f"{c['t_coll_s'] * 1e6:.1f} us; decode power {c['p0_decode_w']:.0f} W + "
                f"{c['gamma_decode_w']:.0f} W x load, at most {c['psat_decode_w']:.0f} W\n"
                f"  not fitted: {', '.join(sorted(g['not_fitted']))}"
            )
        for t, v in doc["prompt_tokens"].items():
            print(f"task {t}: mean prompt {v['value']:.0f} tokens (fitted)")
        if doc["skipped"]:
            reasons: dict[str, int] = {}
            for s in doc["skipped"]:
                reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
            print(f"{len(doc['skipped'])} rows not used:")
            for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
                print(f"  {n:4d}  {r}")
        if not screen:
            print("screen off (--no-screen): every row fitted and judged")
        for line in _screen_lines(doc["screened"], doc["in_sample"]["all"]["rows"]):
            print(line)
        for line in fit_lines(doc, a.leave_one_model_out, a.output):
            print(line)
        if a.chart:
            print(f"chart written to {a.chart}")
    return doc


def cmd_predict(a: argparse.Namespace) -> dict[str, Any]:
    found = silicon_path(a)
    if found is not None:
        return cmd_predict_silicon(a, found)
    if not a.files:
        raise InputError("FILE", "give at least one measurement file, or --silicon")
    if a.calibration is not None:
        doc = _read_json(a.calibration)
        if engine_fit.is_document(doc):
            return cmd_predict_kernels(a, doc)
    elif a.kernels:  # measured kernels: the shipped engine calibrations
        return cmd_predict_kernels(a, shipped_document())
    f = None if a.calibration is None else read_calibration_file(a.calibration)
    rows = read_measurements(a.files, a.gpu, a.tp, a.utc_offset)
    res = predict(rows, f, not a.no_screen)
    used = "the shipped calibrations" if a.calibration is None else Path(a.calibration).name
    if a.chart:
        from service.charts.schedule import calibration_chart

        calibration_chart(res["rows"], a.chart, f"pdwatt predict with {used}")
    if not a.json:
        if a.calibration is None:
            print(_shipped_line(res["rows"]))
        for line in summary_lines(res["summary"]):
            print(line)
        screened = [r for r in res["rows"] if "screened" in r]
        if screened:
            out_rows = sum(r["screened_rule"] in ("itl", "gpu") for r in screened)
            print(
                f"{len(screened)} rows screened, left out of the errors ({out_rows} whole, "
                f"the power of {len(screened) - out_rows}; see --json for each and why)"
            )
        if res["skipped"]:
            print(f"{len(res['skipped'])} rows not predicted (see --json for each and why)")
        if a.chart:
            print(f"chart written to {a.chart}")
    return res


def _shipped_line(rows: list[dict[str, Any]]) -> str:
    """Which shipped calibrations the rows were predicted with, per GPU."""
    kinds: dict[str, set[str]] = {}
    for r in rows:
        kinds.setdefault(r["gpu"], set()).add(r["calibration"])
    per_gpu = ", ".join(f"{g} {'/'.join(sorted(k))}" for g, k in sorted(kinds.items()))
    return f"calibration: the shipped one of each model and GPU ({per_gpu or 'no rows'})"
