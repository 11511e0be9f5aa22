"""Fit the shipped TensorRT-LLM engine calibrations to AIConfigurator's measured serving
runs.

Usage:

    python scripts/fit_engine_silicon.py [FILE] [--kernels DIR] [--out FILE] [--json]

FILE is a silicon file (``silicon_sample.csv``; default: the one the installed
aiconfigurator-core package ships), DIR the kernel tables (default: the installed
package's). The rows of the frameworks in :data:`FRAMEWORKS` are mapped to the catalog
and composed from the tables (:func:`model.measured.silicon.resolve_all`, every row not composed
counted with its reason), and each (GPU, framework) with at least :data:`MIN_ROWS`
composed rows of at least :data:`MIN_MODELS` models is fitted on every one of its rows
without MTP speculative decoding (those are composed, counted, and not fitted: the
engine model decodes one token per iteration)
(:func:`model.measured.silicon.fit_groups`, the closed loop of ``docs/validation-silicon.md``,
section 4: the ``in_sample_overheads`` of ``pdwatt predict --silicon --json``). Of the
four constants fitted, the decode iteration's ``t_layer`` and ``t_req`` are the engine
model's (``model/performance/engine.py``: ``t_D(B) = K_D(B) + t_iter + t_req B + t_layer
n_layers``) and are written with ``t_iter = 0`` (not fitted); ``t_first`` (latency
outside the iterations) and the bunching (a property of the benchmark's closed loop)
have no counterpart in the engine model and are not written. The standard errors of
``t_layer`` and ``t_req`` are estimated from the Jacobian of the log errors at the fit
(forward differences, the four constants together; the residuals' variance, not the
robust loss's weights).

The file written, ``model/data/engine_calibrations_silicon.json``, has the format of
``model/data/engine_calibrations.json`` (``scripts/fit_engine.py``), which wins for a
pair both calibrate (``model.performance.engine.shipped_document``). Its ``figures`` are the
accuracy figures of the fitted pairs, leave one model out
(:func:`model.measured.silicon.leave_one_model_out`: each model's rows predicted with constants
fitted to the other models' rows of the pair), beside the in-sample fit and the kernels
alone: median and 90th-percentile |error| of TTFT and TPOT. The fits are deterministic
(the same file and tables give the same numbers); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a plain script from a source checkout
    sys.path.insert(0, str(REPO_ROOT))

from model.errors import InputError  # noqa: E402
from model.measured import silicon  # noqa: E402
from model.measured.calibrate import std_errors  # noqa: E402
from model.performance.engine import (  # noqa: E402
    KERNEL_PACKAGE,
    SHIPPED_FORMAT,
    SHIPPED_SILICON_FILE,
    database_label,
    installed_kernels,
    open_database,
)
from model.performance.kernels import version_key  # noqa: E402
from model.workload import file_sha256  # noqa: E402

#: the frameworks whose pairs this script calibrates: TensorRT-LLM, which no
#: whole-server measurement of ``scripts/fit_engine.py`` covers (vLLM and SGLang are
#: calibrated there, on decode iteration times)
FRAMEWORKS = ("trtllm",)
#: how the source text names each framework
FRAMEWORK_NAMES = {"trtllm": "TensorRT-LLM"}
#: a pair is fitted only on at least this many composed rows: four constants are fitted
#: together (two log errors per row, TTFT and TPOT), and fewer rows leave each resting
#: on a handful of runs
MIN_ROWS = 30
#: ... of at least this many models: the constants of a pair are shared by every model
#: on it, and one model's rows cannot tell them from that model's own kernel error (a
#: composed time too long or too short for that model alone is taken up by the
#: constants, which another model would then carry); with two models or more a model's
#: own error shows as the fit's residual, and leave one model out can judge the fit
MIN_MODELS = 2
#: relative step (in the fit's scaled constants) of the forward differences of the
#: standard errors
JACOBIAN_STEP = 1e-3
#: the constants of the silicon fit that the engine model has, and the one it has that
#: this fit does not fit (written as 0)
CARRIED = ("t_layer_s", "t_req_s")
NOT_FITTED = "t_iter_s"


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def silicon_label(path: str) -> str:
    """How the source names the silicon file's origin: the installed package and its
    version for its own file, else the file's sha256 (never a machine path)."""
    if path == silicon.installed_silicon():
        try:
            return f"{KERNEL_PACKAGE} {importlib.metadata.version(KERNEL_PACKAGE)}"
        except importlib.metadata.PackageNotFoundError:
            return KERNEL_PACKAGE
    return f"sha256 {file_sha256(Path(path))[:12]}"


def constant_std(cases: Sequence[silicon.Case], fit: silicon.Fit) -> dict[str, float]:
    """Standard errors of :data:`CARRIED` at the fit, from the Jacobian of the log
    errors (forward differences of :data:`JACOBIAN_STEP` in the fit's scaled constants,
    backward at an upper bound; an unsolvable case counts as the fit counts it)."""
    names = silicon.OVERHEADS
    scale = np.array(silicon.OVERHEAD_SCALE)
    x = np.array([getattr(fit.overheads, n) for n in names]) / scale
    hi = np.array([silicon.OVERHEAD_BOUNDS[n][1] for n in names]) / scale

    def res(v: np.ndarray) -> np.ndarray:
        r = silicon.residuals(cases, silicon.solve(cases, silicon.overheads_of(v * scale)))
        return np.where(np.isfinite(r), r, 10.0)

    r0 = res(x)
    jac = np.empty((r0.size, x.size))
    for j in range(x.size):
        h = JACOBIAN_STEP * max(1.0, abs(float(x[j])))
        if x[j] + h > hi[j]:
            h = -h
        v = x.copy()
        v[j] += h
        jac[:, j] = (res(v) - r0) / h
    s = std_errors(jac, r0, x.size) * scale
    return {n: float(s[names.index(n)]) for n in CARRIED}


def _stats(errors: Sequence[float]) -> dict[str, float] | None:
    if not len(errors):
        return None
    a = np.abs(np.asarray(errors, dtype=float))
    return {"median_abs_error": float(np.median(a)), "p90_abs_error": float(np.quantile(a, 0.9))}


def group_figures(
    cases: Sequence[silicon.Case],
    bare: silicon.Solved,
    inside: silicon.Solved,
    lomo: silicon.Solved,
    judged: Sequence[bool],
) -> dict[str, Any]:
    """Per fitted pair: rows, models and the |error| statistics of TTFT and TPOT, leave
    one model out (the figures of accuracy), in sample and with the kernels alone."""
    out: dict[str, Any] = {}
    for group in sorted({c.pair for c in cases}):
        idx = [i for i, c in enumerate(cases) if c.pair == group]
        fig: dict[str, Any] = {
            "rows": len(idx),
            "models": sorted({cases[i].model for i in idx}),
            "modes": dict(sorted(Counter(cases[i].row.mode for i in idx).items())),
            "predicted_leave_one_model_out": sum(bool(judged[i]) for i in idx),
        }
        every = list(range(len(idx)))
        mine = [k for k in every if judged[idx[k]]]
        for what in ("ttft", "tpot"):
            meas = np.array([getattr(cases[i].row, f"{what}_ms") for i in idx]) * 1e-3
            fig[f"{what}_ms"] = {
                name: _stats([float(pred[k] / meas[k] - 1.0) for k in sel])
                for name, pred, sel in (
                    ("leave_one_model_out", getattr(lomo, what)[idx], mine),
                    ("in_sample", getattr(inside, what)[idx], every),
                    ("kernels_alone", getattr(bare, what)[idx], every),
                )
            }
        out[f"{group[0]} {group[1]}"] = fig
    return out


def chosen_version(cases: Sequence[silicon.Case]) -> tuple[str, dict[str, int]]:
    """The tables' version the pair's rows were composed with (the most rows', the
    newest on a tie) and the rows per version."""
    n = Counter(c.version for c in cases)
    best = max(n, key=lambda v: (n[v], version_key(v)))
    return best, dict(sorted(n.items()))


def calibrate(path: str, folder: str, progress: Callable[[str], None] = say) -> dict[str, Any]:
    """The document of the shipped silicon calibrations (see the module's docstring)."""
    open_database(folder)  # an error naming the folder before minutes of work
    rows = silicon.read_silicon(path)
    name = Path(path).name
    label = silicon_label(path)
    chosen = [r for r in rows if r.backend in FRAMEWORKS]
    progress(f"{len(rows)} rows in {name}, {len(chosen)} of {', '.join(FRAMEWORKS)}")
    cases, skipped = silicon.resolve_all(chosen, folder, progress)
    # runs with MTP speculative decoding are composed but not fitted: the engine model
    # the calibration is for decodes one token per iteration (docs/validation-silicon.md,
    # section 3)
    speculative = sum(1 for c in cases if c.draft_tokens)
    groups: dict[tuple[str, str], list[silicon.Case]] = {}
    for c in cases:
        if not c.draft_tokens:
            groups.setdefault(c.pair, []).append(c)
    fitted: list[silicon.Case] = []
    excluded = []
    for group, sel in sorted(groups.items()):
        models = sorted({c.model for c in sel})
        why = []
        if len(sel) < MIN_ROWS:
            why.append(f"{len(sel)} rows, fewer than {MIN_ROWS}")
        if len(models) < MIN_MODELS:
            why.append(f"{len(models)} model(s), fewer than {MIN_MODELS}")
        if why:
            reason = "; ".join(why)
            progress(f"{group[0]}/{group[1]}: not fitted ({reason})")
            excluded.append({"gpu": group[0], "framework": group[1], "rows": len(sel),
                             "models": models, "reason": reason})  # fmt: skip
        else:
            fitted.extend(sel)
    entries = []
    by_case: list[silicon.Overheads] = []
    fits = {}
    for group in sorted({c.pair for c in fitted}):
        sel = [c for c in fitted if c.pair == group]
        progress(f"{group[0]}/{group[1]}: fitting {len(sel)} rows in sample")
        fits[group] = silicon.fit_overheads(sel, f"{group[0]}/{group[1]}")
    for c in fitted:
        by_case.append(fits[c.pair].overheads)
    for group, fit in fits.items():
        gpu, framework = group
        sel = [c for c in fitted if c.pair == group]
        progress(f"{gpu}/{framework}: standard errors")
        std = constant_std(sel, fit)
        version, versions = chosen_version(sel)
        o = fit.overheads
        entry: dict[str, Any] = {
            "gpu": gpu,
            "framework": framework,
            "version": version,
            "overheads": {NOT_FITTED: 0.0, **{n: getattr(o, n) for n in CARRIED}},
            "std": std,
            "rows": fit.rows,
            "models": list(fit.models),
            "source": f"AIConfigurator {name} ({label}): {fit.rows} "
            f"{FRAMEWORK_NAMES.get(framework, framework)} rows of {', '.join(fit.models)} on "
            f"{gpu}, closed-loop fit in sample (docs/validation-silicon.md section 4); "
            "t_iter not fitted (0)",
            "not_carried": {"t_first_s": o.t_first_s, "bunching": o.bunching},
        }
        if len(versions) > 1:
            entry["versions_composed"] = versions
            progress(f"{gpu}/{framework}: rows composed with {versions}; version {version}")
        entries.append(entry)
    figures: dict[str, Any] = {}
    if fitted:
        bare = silicon.solve(fitted, silicon.Overheads())
        inside = silicon.solve(fitted, by_case)
        lomo, lomo_fits = silicon.leave_one_model_out(fitted, progress, key=lambda c: c.pair)
        figures = group_figures(fitted, bare, inside, lomo, [f is not None for f in lomo_fits])
    reasons = Counter(s.reason for s in skipped)
    return {
        "format": SHIPPED_FORMAT,
        "calibrations": entries,
        "figures": figures,
        "not_fitted": excluded,
        "rows": {
            "file": len(rows),
            "frameworks": len(chosen),
            "composed": len(cases),
            "speculative_not_fitted": speculative,
            "fitted": len(fitted),
            "not_composed": len(skipped),
        },
        "rows_not_composed": [
            {"reason": r, "rows": n}
            for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "rule": {"frameworks": list(FRAMEWORKS), "min_rows": MIN_ROWS, "min_models": MIN_MODELS},
        "source": {
            "silicon": {"file": name, "origin": label, "sha256": file_sha256(Path(path))},
            "kernels": database_label(folder),
        },
    }


def lines(doc: dict[str, Any]) -> list[str]:
    """The fitted constants and the figures, for a terminal."""
    out = []
    for e in doc["calibrations"]:
        o, s = e["overheads"], e["std"]
        out.append(
            f"{e['gpu']} / {e['framework']} {e['version']}: {e['rows']} rows of "
            f"{', '.join(e['models'])}: t_layer {o['t_layer_s'] * 1e6:.2f} ± "
            f"{s['t_layer_s'] * 1e6:.2f} us, t_req {o['t_req_s'] * 1e6:.2f} ± "
            f"{s['t_req_s'] * 1e6:.2f} us"
        )
    for k, f in doc["figures"].items():
        parts = []
        for what in ("ttft_ms", "tpot_ms"):
            v = f[what]
            parts.append(
                f"{what[:4].upper()} "
                + " / ".join(
                    "-" if v[n] is None else f"{v[n]['median_abs_error']:.1%}"
                    for n in ("leave_one_model_out", "in_sample", "kernels_alone")
                )
            )
        out.append(f"{k}: {f['rows']} rows; median |error| leave one model out / in sample "
                   f"/ kernels alone: {'; '.join(parts)}")  # fmt: skip
    for x in doc["not_fitted"]:
        out.append(f"{x['gpu']} / {x['framework']}: not fitted ({x['reason']})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("file", nargs="?", help="a silicon file (default: the installed package's)")
    ap.add_argument("--kernels", help="kernel tables' folder (default: the installed package's)")
    ap.add_argument("--out", type=Path, default=SHIPPED_SILICON_FILE)
    ap.add_argument("--json", action="store_true", help="print the document as JSON")
    args = ap.parse_args(argv)
    path = args.file or silicon.installed_silicon()
    folder = args.kernels or installed_kernels()
    try:
        if path is None:
            raise InputError("FILE", f"give a silicon file: {KERNEL_PACKAGE} is not installed")
        if folder is None:
            raise InputError("--kernels", f"give the kernel tables: {KERNEL_PACKAGE} is not "
                                          "installed")  # fmt: skip
        doc = calibrate(path, folder)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=1) if args.json else "\n".join(lines(doc)))
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
