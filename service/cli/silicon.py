"""``pdwatt predict`` on AIConfigurator's measured serving runs (a thin shell over
:mod:`model.measured.silicon`)::

    pdwatt predict --silicon [--kernels DIR] [--chart FILE.png] [--json]
    pdwatt predict silicon_sample.csv [...]

``--silicon`` reads the ``silicon_sample.csv`` the installed aiconfigurator-core package
ships; a FILE whose header has ``silicon_ttft_ms`` and ``silicon_tpot_ms`` is read the
same way. Kernel tables: ``--kernels DIR``, else the installed package's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from model.errors import InputError
from model.measured import silicon
from model.performance.engine import NO_KERNEL_PACKAGE, installed_kernels


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def silicon_path(a: argparse.Namespace) -> str | None:
    """The silicon file the command reads: the installed package's with ``--silicon``,
    else the one FILE given when its header is a silicon file's (None: not a silicon
    run)."""
    if getattr(a, "silicon", False):
        if a.files:
            raise InputError("--silicon", "reads the installed package's file: give no FILE")
        path = silicon.installed_silicon()
        if path is None:
            raise InputError("--silicon", NO_KERNEL_PACKAGE)
        return path
    found = [f for f in a.files if silicon.is_silicon_file(f)]
    if not found:
        return None
    if len(a.files) > 1:
        raise InputError(
            "FILE", f"{Path(found[0]).name} is a silicon file: predict it alone, without others"
        )
    return found[0]


def _pct(s: dict[str, float] | None, key: str) -> str:
    return "-" if s is None else f"{s[key]:.1%}"


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The per (GPU, framework, mode) table of a silicon prediction."""
    head = (
        f"{'system framework mode':28} {'rows':>5} {'pred':>5}  "
        f"{'TTFT med':>8} {'p90':>7} {'alone':>7}  {'TPOT med':>8} {'p90':>7} {'alone':>7}"
    )
    out = [head]
    items = [*summary["per_group"].items(), *summary["per_mode"].items(), ("all", summary["all"])]
    for label, s in items:
        if not s["rows"]:
            continue
        t, p = s["ttft_ms"], s["tpot_ms"]
        out.append(
            f"{label:28} {s['rows']:5d} {s['predicted']:5d}  "
            f"{_pct(t['leave_one_model_out'], 'median_abs_error'):>8} "
            f"{_pct(t['leave_one_model_out'], 'p90_abs_error'):>7} "
            f"{_pct(t['kernels_alone'], 'median_abs_error'):>7}  "
            f"{_pct(p['leave_one_model_out'], 'median_abs_error'):>8} "
            f"{_pct(p['leave_one_model_out'], 'p90_abs_error'):>7} "
            f"{_pct(p['kernels_alone'], 'median_abs_error'):>7}"
        )
    return out


def cmd_predict_silicon(a: argparse.Namespace, path: str) -> dict[str, Any]:
    folder = a.kernels or installed_kernels()
    if not folder:
        raise InputError("kernels", NO_KERNEL_PACKAGE)
    rows = silicon.read_silicon(path)
    _say(f"{len(rows)} rows from {Path(path).name}")
    cases, skipped = silicon.resolve_all(rows, folder, _say)
    bare = silicon.solve(cases, silicon.Overheads())
    lomo, fits = silicon.leave_one_model_out(cases, _say)
    groups = silicon.fit_groups(cases) if cases else {}
    doc = silicon.report(cases, skipped, bare, lomo, fits, groups)
    if a.chart:
        from service.charts.schedule import silicon_chart

        silicon_chart(doc["rows"], a.chart, f"pdwatt predict: {Path(path).name}")
    if not a.json:
        for line in summary_lines(doc["summary"]):
            print(line)
        print(
            "med, p90: |error| leave one model out (overheads fitted without the row's "
            "model); alone: kernels alone, median |error|"
        )
        if skipped:
            print(f"{len(skipped)} rows not predicted:")
            for r in doc["reasons"][:12]:
                print(f"  {r['rows']:5d}  {r['reason'][:150]}")
            if len(doc["reasons"]) > 12:
                print(f"  ... {len(doc['reasons']) - 12} more reasons (see --json)")
        if a.chart:
            print(f"chart written to {a.chart}")
    return doc
