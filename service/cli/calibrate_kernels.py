"""``pdwatt calibrate --kernels DIR`` and ``pdwatt predict`` with an engine calibration:
measured kernels plus fitted engine overheads (a thin shell over
:mod:`model.measured.engine_fit`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from model.errors import InputError
from model.measured import engine_fit
from model.measured import screen as screening
from model.measured.calibrate import screened_rows, summarise
from model.measured.measurements import read_measurements
from service.cli.shared import fit_lines, parse_kernel_versions, summary_lines, write_fit


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _pm(o: dict[str, float], std: dict[str, float], name: str, unit: float, digits: int) -> str:
    """An overhead in ``unit`` with its standard error where the calibration has one."""
    text = f"{o[name] * unit:.{digits}f}"
    return text if name not in std else f"{text} ± {std[name] * unit:.{digits}f}"


def cmd_calibrate_kernels(a: argparse.Namespace) -> dict[str, Any]:
    rows = read_measurements(a.files, a.gpu, a.tp, a.utc_offset)
    _say(f"{len(rows)} measurements from {len(a.files)} file(s)")
    usable, skipped, found = screened_rows(rows, not a.no_screen)
    verdicts = {u.m.where: v for u, v in zip(usable, found, strict=True) if v is not None}
    every, not_composed = engine_fit.compose(
        usable, a.kernels, parse_kernel_versions(a.kernel_version), _say
    )
    skipped += not_composed
    comp = engine_fit.fitted(every, verdicts)
    fit = engine_fit.fit_engine(comp)
    doc = engine_fit.to_document(fit, a.kernels)
    doc["screen"] = {"applied": not a.no_screen, **screening.counts(list(verdicts.values()))}
    doc["screened"] = [dataclasses.asdict(v) for v in screening.ordered(list(verdicts.values()))]
    doc["in_sample"] = summarise(engine_fit.predict_rows(every, fit, verdicts))
    bare = engine_fit.unfitted(comp, fit.prompts)
    doc["kernels_alone"] = {
        "rows": len(bare),
        "median_abs_error": float(np.median(np.abs(bare))) if bare else None,
    }
    doc["skipped"] = [{"row": s.row, "reason": s.reason} for s in skipped]
    if a.leave_one_model_out:
        lomo = engine_fit.leave_one_model_out(comp, _say)
        lo_rows = engine_fit.predict_rows([comp[i] for i in sorted(lomo)], fit, verdicts)
        for r, i in zip(lo_rows, sorted(lomo), strict=True):
            r["itl_ms"]["predicted"] = comp[i].u.m.itl_s * (1.0 + lomo[i]) * 1e3
        doc["leave_one_model_out"] = {"rows": lo_rows, "summary": summarise(lo_rows)}
    write_fit(
        doc,
        a.output,
        a.chart,
        "pdwatt calibrate --kernels: predictions",
        lambda: engine_fit.predict_rows(every, fit, verdicts),
    )
    if not a.json:
        for e in doc["calibrations"]:
            o, s = e["overheads"], e.get("std", {})
            print(
                f"{e['gpu']} / {e['framework']} {e['version']} tables: {e['rows']} rows of "
                f"{', '.join(e['models'])}\n"
                f"  t_iter {_pm(o, s, 't_iter_s', 1e3, 3)} ms, t_req {_pm(o, s, 't_req_s', 1e6, 1)}"
                f" us, t_layer {_pm(o, s, 't_layer_s', 1e6, 1)} us"
            )
        for t, v in doc["prompt_tokens"].items():
            print(f"task {t}: effective prompt {v:.0f} tokens (fitted)")
        alone = doc["kernels_alone"]["median_abs_error"]
        print(f"kernels alone (nothing fitted): median |error| {alone:.1%}")
        if skipped:
            print(f"{len(skipped)} rows not used (see --json for each and why)")
        n = doc["screen"]
        if n["applied"]:
            print(
                f"screened: {n['itl']} rows out, the power of {n['power']} more "
                "(docs/calibration.md, section 9)"
            )
        for line in fit_lines(doc, a.leave_one_model_out, a.output):
            print(line)
    return doc


def cmd_predict_kernels(a: argparse.Namespace, doc: dict[str, Any]) -> dict[str, Any]:
    """Predict with an engine calibration file (without ``--calibration``, the shipped
    one): its kernel folder unless ``--kernels`` names another."""
    name = Path(a.calibration).name if a.calibration else "the shipped engine calibrations"
    fit, named = engine_fit.from_document(doc, name)
    folder = a.kernels or named
    if not folder:
        raise InputError("kernels", f"{name} names no kernel folder: give --kernels DIR")
    rows = read_measurements(a.files, a.gpu, a.tp, a.utc_offset)
    usable, skipped, found = screened_rows(rows, not a.no_screen)
    verdicts = {u.m.where: v for u, v in zip(usable, found, strict=True) if v is not None}
    comp, not_composed = engine_fit.compose(usable, folder, fit.versions, _say)
    skipped += not_composed
    known = [c for c in comp if (c.gpu, c.framework) in fit.overheads]
    for c in comp:
        if (c.gpu, c.framework) not in fit.overheads:
            skipped.append(
                engine_fit.Skipped(c.u.m.where, f"no calibration for {c.gpu}/{c.framework}")
            )
    out_rows = engine_fit.predict_rows(known, fit, verdicts)
    res: dict[str, Any] = {
        "rows": out_rows,
        "summary": summarise(out_rows),
        "skipped": [{"row": s.row, "reason": s.reason} for s in skipped],
    }
    if not a.json:
        for gpu, framework in sorted({(c.gpu, c.framework) for c in known}):
            t = fit.transferred.get((gpu, framework))
            moved = (
                f", overheads transferred from {t['gpu']} / {t['framework']} {t['version']}"
                if t
                else ""
            )
            version = fit.versions[(gpu, framework)]
            print(f"engine calibration {gpu} / {framework}: {name} ({version} tables{moved})")
        for line in summary_lines(res["summary"]):
            print(line)
        if skipped:
            print(f"{len(skipped)} rows not predicted (see --json for each and why)")
    return res
