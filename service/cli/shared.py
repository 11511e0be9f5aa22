"""Pieces several commands share that need nothing else of the command line: the
``--kernel-version GPU=VERSION`` options, the text of a prediction summary, and a fit's
report and files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model.errors import InputError


def parse_kernel_versions(pairs: list[str] | None) -> dict[str, str]:
    """``GPU=VERSION`` options as a mapping; an error naming the option otherwise."""
    out: dict[str, str] = {}
    for p in pairs or []:
        gpu, sep, version = p.partition("=")
        if not sep or not gpu.strip() or not version.strip():
            raise InputError("--kernel-version", f"expected GPU=VERSION, got {p!r}")
        out[gpu.strip()] = version.strip()
    return out


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """A prediction summary (``model.measured.calibrate.summarise``) as text lines: overall, per
    GPU and per GPU and kind, with the rows the screen kept out."""
    out = []
    per_kind = summary.get("per_gpu_and_kind", {})
    for label, s in [("all", summary["all"]), *summary["per_gpu"].items(), *per_kind.items()]:
        n = s.get("screened", {})
        out_rows, power = n.get("itl", 0) + n.get("gpu", 0), n.get("power", 0)
        screened = (
            f" ({out_rows} screened out, the power of {power} more)" if out_rows or power else ""
        )
        parts = [f"{label}: {s['rows']} rows{screened}"]
        for key, name in (("itl_ms", "ITL"), ("power_w", "power")):
            if s[key]:
                parts.append(
                    f"{name} median |error| {s[key]['median_abs_error']:.1%}, "
                    f"worst {s[key]['worst_error']:+.1%}"
                )
        out.append("; ".join(parts))
    return out


def fit_lines(doc: dict[str, Any], leave_one_model_out: bool, output: str | None) -> list[str]:
    """The end of a fit's text report: its in-sample summary, its leave-one-model-out one
    when it was asked for, and the file the calibration was written to."""
    out = ["in-sample:", *(f"  {line}" for line in summary_lines(doc["in_sample"]))]
    if leave_one_model_out:
        out.append("leave-one-model-out:")
        out += [f"  {line}" for line in summary_lines(doc["leave_one_model_out"]["summary"])]
    if output:
        out.append(f"calibration written to {output}")
    return out


def write_fit(
    doc: dict[str, Any],
    output: str | None,
    chart: str | None,
    title: str,
    in_sample: Callable[[], list[dict[str, Any]]],
) -> None:
    """A fit's document to ``output`` and its predictions against the measurements to
    ``chart``: the leave-one-model-out ones where the document has them, else
    ``in_sample()``."""
    if output:
        Path(output).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    if chart:
        from service.charts.schedule import calibration_chart

        lomo = "leave_one_model_out" in doc
        calibration_chart(doc["leave_one_model_out"]["rows"] if lomo else in_sample(), chart, title)
