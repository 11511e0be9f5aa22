"""AIConfigurator's own estimate of each measured serving run of a silicon file, and
pdwatt's errors beside its errors (docs/validation-silicon.md, "Beside AIConfigurator's
estimator").

    python scripts/silicon_aic_compare.py [FILE] --output AIC.csv [--ids ID,...] [--limit N]
    python scripts/silicon_aic_compare.py [FILE] --aic AIC.csv --pdwatt PDWATT.json \\
        [--markdown OUT.md] [--chart OUT.png] [--min-rows 20]

FILE defaults to the installed aiconfigurator-core package's ``silicon_sample.csv``.
Each row is estimated offline with the package's SDK, as AIConfigurator's accuracy
harness (``tools/accuracy_regression_testing`` of its repository) estimates it through
its ``cli_estimate``: the row's model, system, framework, ISL, OSL, quantisation and
parallelism; an aggregated row at its ``batch_size`` (an in-flight-batching run with the
prompt as the context-token budget); a disaggregated row from a context-only run of its
prefill worker at ``prefill_batch_size`` and a generation-only run of its decode worker
at ``decode_batch_size``, with the single-point corrections ``cli_estimate`` applies
(prefill latency x1.1, decode latency x1.08, TTFT x1.8 for the prefill queue). The
row's framework version is read where the package serves it, else the package's
default version (the harness's fallback for a version it has no database of).

Three things differ from the harness, which downloads model configurations and reads
the row's quantisation as written: a model whose configuration the package does not
bundle is read with its base model's (:data:`MODEL_ALIASES`, the row's own
quantisation given explicitly); gpt-oss, whose ``fp4`` rows are its MXFP4 release, is
read with its checkpoint's quantisation rather than the rows' ``nvfp4``; and the row's
parallelism is pdwatt's reading of it (:func:`model.measured.silicon.read_silicon`: an empty or
zero attention-DP or MoE width counts as 1). The CSV's ``aic_note`` says which applied.

``--output`` writes one line per row: its id, framework, system, mode and model, the
measured TTFT and TPOT (ms), AIConfigurator's predicted TTFT and TPOT, the tables'
version it read, or the reason it could not estimate the row. ``--aic`` reads such a
CSV instead of estimating again. With ``--pdwatt`` (the JSON of ``pdwatt predict
--silicon --json``) the rows are joined by id and, per (system, framework, mode), the
rows both predict are compared: median and 90th-percentile |predicted/measured - 1| of
TTFT and TPOT for each tool, and the better median. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import json
import logging
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.errors import InputError
from model.measured.silicon import Phase, SiliconRow, installed_silicon, read_silicon

#: cli_estimate's single-point disaggregated corrections: prefill and decode latency
#: scales (its DEFAULT_PREFILL/DECODE_LATENCY_CORRECTION_SCALE) and the TTFT factor of
#: the prefill queue (sdk/picking.py's _AUTOSCALE_TTFT_CORRECTION_FACTOR)
PREFILL_CORRECTION = 1.1
DECODE_CORRECTION = 1.08
TTFT_QUEUE_FACTOR = 1.8
#: model paths of the file whose configuration the package does not bundle -> the
#: bundled configuration of the same architecture
MODEL_ALIASES = {
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
}
#: model paths whose ``fp4`` rows are an MXFP4 checkpoint, read with its own quantisation
MXFP4_MODELS = ("openai/gpt-oss-",)
COLUMNS = (
    "id",
    "backend",
    "system",
    "mode",
    "model_path",
    "measured_ttft_ms",
    "measured_tpot_ms",
    "aic_ttft_ms",
    "aic_tpot_ms",
    "aic_tables",
    "aic_note",
    "reason",
)
METRICS = ("ttft", "tpot")
TOOLS = ("pdwatt", "aic")
#: groups of fewer rows predicted by both are left out of the markdown table and chart
MIN_ROWS = 20


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# AIConfigurator's estimate of one row


def _scrub(text: str) -> str:
    """An error message without the machine's paths (the package's own files are named
    from the package)."""
    text = re.sub(r"/\S*?/aiconfigurator_core/", "aiconfigurator_core/", text)
    return re.sub(r"(?<![\w.])/(?:[^/\s'\"]+/)+([^/\s'\"]+)", r"\1", text)


def reason_of(error: BaseException) -> str:
    """One line naming why a row was not estimated."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {_scrub(first)}"[:300]


def reason_kind(reason: str) -> str:
    """A reason's kind, for counting."""
    if "is required for disagg mode" in reason:
        return "disaggregated row without per-phase batch and worker counts"
    if "HuggingFace" in reason or "not cached in model_configs" in reason:
        return "model configuration not bundled"
    if reason.startswith("PerfDataNotAvailableError"):
        m = re.search(r"perf database error: (.*?)(?: for | at |;|:|$)", reason)
        return f"table missing: {m.group(1).strip() if m else reason}"
    if "OOM" in reason:
        return "does not fit in memory"
    return reason.split(":")[0] + ": " + re.sub(r"\d+", "N", reason.split(":", 1)[-1]).strip()[:80]


@dataclass
class Estimate:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tables: str = ""
    notes: list[str] = field(default_factory=list)
    reason: str = ""


class Estimator:
    """AIConfigurator's SDK, loaded once; :meth:`estimate` predicts one row."""

    def __init__(self) -> None:
        from aiconfigurator_core.sdk import config, config_builders, models, perf_database
        from aiconfigurator_core.sdk.backends import factory

        self.config = config
        self.builders = config_builders
        self.models = models
        self.perf = perf_database
        self.factory = factory
        self._databases: dict[tuple[str, str, str], tuple[Any, str]] = {}

    def database(self, system: str, backend: str, version: str) -> tuple[Any, str]:
        """The tables of ``system``'s ``backend`` at the row's version where the package
        serves it, else at the package's default version; and the version read."""
        key = (system, backend, version)
        if key not in self._databases:
            db = None
            if version:
                try:
                    db = self.perf.get_database_view(system, backend, version)
                except ValueError:  # a version the package does not serve
                    db = None
            used = version
            if db is None:
                default = self.perf.get_latest_database_version(system=system, backend=backend)
                if default is None:
                    raise ValueError(f"no database for system={system}, backend={backend}")
                used = default
                db = self.perf.get_database_view(system, backend, used)
                if db is None:
                    raise ValueError(
                        f"Failed to load perf database for system={system}, "
                        f"backend={backend}, version={used}."
                    )
            self._databases[key] = (db, used)
        return self._databases[key]

    def _model_config(self, model_path: str, p: Phase, gemm: str | None, moe: str | None) -> Any:
        moe_tp, moe_ep = p.moe_tp, p.moe_ep
        if self.models.check_is_moe(model_path):
            moe_tp, moe_ep = self.config.ModelConfig(
                tp_size=p.tp, attention_dp_size=p.dp, moe_tp_size=moe_tp, moe_ep_size=moe_ep
            ).resolve_moe_parallelism()
        mc = self.builders.build_model_config(
            p.tp, p.pp, p.dp, moe_tp, moe_ep, gemm, None, None, moe, None
        )
        self.builders.apply_nextn(mc, 0)
        return mc

    def _resolve(self, mc: Any, model_path: str, row: SiliconRow, db: Any | None) -> None:
        if db is not None:  # a worker that runs context attention
            self.models.resolve_context_fmha_by_data(
                mc, model_path, db, row.backend, is_context_role=True
            )
        self.models.resolve_dsv4_moe_arch(
            mc, model_path, system_name=row.system, backend_name=row.backend
        )
        self.models.resolve_nvfp4_for_system(mc, row.system, model_path)

    def estimate(self, row: SiliconRow) -> Estimate:
        """AIConfigurator's TTFT and TPOT of ``row``, or the reason it has none."""
        out = Estimate()
        try:
            self._estimate(row, out)
        except Exception as e:  # every refusal of the SDK is a row's reason
            out.ttft_ms = out.tpot_ms = None
            out.reason = reason_of(e)
        return out

    def _estimate(self, row: SiliconRow, out: Estimate) -> None:
        if row.mode == "disagg":
            for name, phase in (("prefill", row.prefill), ("decode", row.decode)):
                for what, value in (("batch_size", phase and phase.batch),
                                    ("num_workers", phase and phase.workers)):  # fmt: skip
                    if not value:
                        raise ValueError(f"{name}_{what} is required for disagg mode")
        model_path = MODEL_ALIASES.get(row.model_path, row.model_path)
        if model_path != row.model_path:
            out.notes.append(f"model configuration of {model_path}")
        gemm: str | None = row.gemm_quant or None
        moe: str | None = row.moe_quant or None
        if row.model_path.startswith(MXFP4_MODELS) and row.precision == "fp4":
            gemm = moe = None
            out.notes.append("the checkpoint's MXFP4 quantisation")
        db, used = self.database(row.system, row.backend, row.backend_version)
        out.tables = used
        if not row.backend_version:
            out.notes.append(f"tables {used} (the package's default; the row names no version)")
        elif used != row.backend_version:
            out.notes.append(f"tables {used} (the row's {row.backend_version} not served)")
        rc = self.config.RuntimeConfig(isl=row.isl, osl=row.osl)
        with contextlib.redirect_stdout(sys.stderr):
            if row.mode == "agg":
                assert row.agg is not None
                if not row.agg.batch:
                    raise ValueError("batch_size is required for agg mode")
                mc = self._model_config(model_path, row.agg, gemm, moe)
                self._resolve(mc, model_path, row, db)
                rc.batch_size = row.agg.batch
                summary = self.factory.get_backend(row.backend).run_agg(
                    self.models.get_model(model_path, mc, row.backend),
                    db,
                    rc,
                    ctx_tokens=row.isl,
                    max_seq_len=None,
                    free_gpu_memory_fraction=None,
                    decode_tokens_per_iteration=1.0,
                )
                if summary.check_oom():
                    raise RuntimeError("OOM: the model does not fit with the row's parallelism")
                result = summary.get_result_dict()
                if result is None:
                    raise RuntimeError("the estimate produced no result")
                out.ttft_ms, out.tpot_ms = float(result["ttft"]), float(result["tpot"])
                return
            assert row.prefill is not None and row.decode is not None
            runs = []
            phases: tuple[tuple[Phase, str, float, Any], ...] = (
                (row.prefill, "static_ctx", PREFILL_CORRECTION, db),
                (row.decode, "static_gen", DECODE_CORRECTION, None),
            )
            for phase, mode, scale, role_db in phases:
                mc = self._model_config(model_path, phase, gemm, moe)
                self._resolve(mc, model_path, row, role_db)
                prc = copy.deepcopy(rc)
                assert phase.batch is not None  # checked above
                prc.batch_size = phase.batch
                runs.append(
                    self.factory.get_backend(row.backend).run_static(
                        self.models.get_model(model_path, mc, row.backend),
                        db,
                        prc,
                        mode,
                        latency_correction_scale=scale,
                    )
                )
            prefill, decode = runs
            if any(s.check_oom() or s.check_kv_cache_oom() for s in runs):
                raise RuntimeError("OOM: a worker does not fit with the row's parallelism")
            ttft = prefill.get_summary_df().iloc[0]["ttft"] * TTFT_QUEUE_FACTOR
            out.ttft_ms, out.tpot_ms = float(ttft), float(decode.get_summary_df().iloc[0]["tpot"])


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.4f}"


def estimate_rows(rows: Sequence[SiliconRow], output: Path, verbose: bool = False) -> list[dict]:
    """Estimate every row, write the CSV at ``output`` and return its lines."""
    if not verbose:
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    est = Estimator()
    lines: list[dict] = []
    start = time.monotonic()
    done = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for n, row in enumerate(rows, start=1):
            e = est.estimate(row)
            line = {
                "id": row.id,
                "backend": row.backend,
                "system": row.system,
                "mode": row.mode,
                "model_path": row.model_path,
                "measured_ttft_ms": _fmt(row.ttft_ms),
                "measured_tpot_ms": _fmt(row.tpot_ms),
                "aic_ttft_ms": _fmt(e.ttft_ms),
                "aic_tpot_ms": _fmt(e.tpot_ms),
                "aic_tables": e.tables,
                "aic_note": "; ".join(e.notes),
                "reason": e.reason,
            }
            writer.writerow(line)
            lines.append(line)
            done += e.reason == ""
            if n % 100 == 0 or n == len(rows):
                f.flush()
                _say(f"[{n:5d}/{len(rows)}] {done} estimated, {time.monotonic() - start:.0f} s")
    return lines


def read_aic(path: Path) -> list[dict]:
    """The lines of a CSV this script wrote."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(path.name, f"missing the column(s) {', '.join(missing)}")
        return list(reader)


# --------------------------------------------------------------------------
# Beside pdwatt's predictions


def read_pdwatt(path: Path) -> dict[str, dict[str, tuple[float, float | None]]]:
    """id -> {"ttft": (measured, predicted), "tpot": ...} of ``pdwatt predict --silicon
    --json``'s rows (predicted None: composed but not predicted)."""
    doc = json.loads(path.read_text())
    out: dict[str, dict[str, tuple[float, float | None]]] = {}
    for r in doc.get("rows", []):
        out[r["id"]] = {
            m: (float(r[f"{m}_ms"]["measured"]), r[f"{m}_ms"]["predicted"]) for m in METRICS
        }
    return out


def _abs_err(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0)


@dataclass
class Side:
    """One group's comparison: its rows, how many each tool predicts and both do, and
    per tool and metric the median and 90th percentile of |error| over the rows both
    predict (None without such rows)."""

    key: str
    rows: int = 0
    aic: int = 0
    pdwatt: int = 0
    both: int = 0
    errors: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def stat(self, tool: str, metric: str, q: float) -> float | None:
        e = self.errors.get((tool, metric), [])
        return float(np.quantile(np.array(e), q)) if e else None

    def median(self, tool: str, metric: str) -> float | None:
        return self.stat(tool, metric, 0.5)

    def p90(self, tool: str, metric: str) -> float | None:
        return self.stat(tool, metric, 0.9)

    def better(self, metric: str) -> str:
        p, a = self.median("pdwatt", metric), self.median("aic", metric)
        if p is None or a is None:
            return "-"
        return "pdwatt" if p < a else "AIC" if a < p else "tie"


def group_key(line: Mapping[str, str]) -> str:
    return f"{line['system']} {line['backend']} {line['mode']}"


def compare(
    lines: Iterable[Mapping[str, str]], pdwatt: Mapping[str, Mapping[str, tuple[float, Any]]]
) -> dict[str, Side]:
    """Per (system, framework, mode) and overall ("all"), the rows both tools predict
    and their errors, measured against the silicon file's values."""
    sides: dict[str, Side] = {}
    total = Side("all")
    for line in lines:
        key = group_key(line)
        side = sides.setdefault(key, Side(key))
        aic_ok = bool(line["aic_ttft_ms"] and line["aic_tpot_ms"])
        mine = pdwatt.get(line["id"])
        pd_ok = mine is not None and all(mine[m][1] is not None for m in METRICS)
        for s in (side, total):
            s.rows += 1
            s.aic += aic_ok
            s.pdwatt += pd_ok
            s.both += aic_ok and pd_ok
        if not (aic_ok and pd_ok):
            continue
        assert mine is not None
        for m in METRICS:
            measured = float(line[f"measured_{m}_ms"])
            for tool, pred in (("aic", float(line[f"aic_{m}_ms"])), ("pdwatt", mine[m][1])):
                for s in (side, total):
                    s.errors.setdefault((tool, m), []).append(_abs_err(pred, measured))
    return {**dict(sorted(sides.items())), "all": total}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def text_table(sides: Mapping[str, Side]) -> str:
    head = (f"{'system framework mode':28s} {'rows':>5s} {'AIC':>5s} {'pdw':>5s} {'both':>5s}"
            "  TTFT pdwatt (p90)    AIC (p90)     better"
            "   TPOT pdwatt (p90)    AIC (p90)     better")  # fmt: skip
    out = [head]
    for s in sides.values():
        cells = [f"{s.key:28s} {s.rows:5d} {s.aic:5d} {s.pdwatt:5d} {s.both:5d}"]
        for m in METRICS:
            cells.append(
                f"  {_pct(s.median('pdwatt', m)):>7s} ({_pct(s.p90('pdwatt', m)):>7s})"
                f" {_pct(s.median('aic', m)):>7s} ({_pct(s.p90('aic', m)):>7s}) {s.better(m):>7s}"
            )
        out.append("".join(cells))
    return "\n".join(out)


def shown(sides: Mapping[str, Side], min_rows: int) -> list[Side]:
    """The groups with at least ``min_rows`` rows both predict, and "all"."""
    return [s for k, s in sides.items() if k == "all" or s.both >= min_rows]


def markdown_table(sides: Mapping[str, Side], min_rows: int) -> str:
    out = [
        "| system | framework | mode | rows | AIC estimates | pdwatt predicts | both "
        "| TTFT pdwatt | TTFT AIC | better | TPOT pdwatt | TPOT AIC | better |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for s in shown(sides, min_rows):
        sysname, fw, mode = s.key.split() if s.key != "all" else ("**all**", "", "")
        cells = [sysname, fw, mode, str(s.rows), str(s.aic), str(s.pdwatt), str(s.both)]
        for m in METRICS:
            cells += [
                f"{_pct(s.median('pdwatt', m))} ({_pct(s.p90('pdwatt', m))})",
                f"{_pct(s.median('aic', m))} ({_pct(s.p90('aic', m))})",
                s.better(m),
            ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def aic_summary(lines: Sequence[Mapping[str, str]]) -> str:
    """AIConfigurator's own coverage and errors per group over every row it estimates,
    and its reasons by kind."""
    groups: dict[str, list[Mapping[str, str]]] = {}
    for line in lines:
        groups.setdefault(group_key(line), []).append(line)
    groups["all"] = list(lines)
    out = [f"{'system framework mode':28s} {'rows':>5s} {'est':>5s}"
           "  TTFT med     p90  TPOT med     p90"]  # fmt: skip
    for key, sel in groups.items():
        ok = [r for r in sel if r["aic_ttft_ms"] and r["aic_tpot_ms"]]
        cells = f"{key:28s} {len(sel):5d} {len(ok):5d}"
        for m in METRICS:
            e = np.array([_abs_err(float(r[f"aic_{m}_ms"]), float(r[f"measured_{m}_ms"]))
                          for r in ok])  # fmt: skip
            if len(e):
                cells += f"  {_pct(float(np.median(e))):>8s} {_pct(float(np.quantile(e, 0.9))):>7s}"
            else:
                cells += f"  {'-':>8s} {'-':>7s}"
        out.append(cells)
    kinds: dict[str, int] = {}
    for line in lines:
        if line["reason"]:
            k = reason_kind(line["reason"])
            kinds[k] = kinds.get(k, 0) + 1
    out.append("")
    out.append("not estimated, by reason:")
    out += [f"{n:6d}  {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])]
    return "\n".join(out)


def chart(sides: Mapping[str, Side], min_rows: int, path: Path) -> None:
    """One panel per metric: per group (and overall), the two tools' median |error|."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = shown(sides, min_rows)[::-1]
    labels = [f"{s.key} ({s.both})" for s in groups]
    y = np.arange(len(groups))
    fig, axes = plt.subplots(1, 2, figsize=(10, 1.2 + 0.32 * len(groups)), sharey=True)
    for ax, m in zip(axes, METRICS, strict=True):
        for i, (tool, name, colour) in enumerate(
            (("pdwatt", "pdwatt", "tab:blue"), ("aic", "AIConfigurator", "tab:orange"))
        ):
            v = [100 * (s.median(tool, m) or 0.0) for s in groups]
            ax.barh(y + (0.2 if i == 0 else -0.2), v, height=0.4, color=colour, label=name)
        ax.set_title(f"{m.upper()} median |error| (%)", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
    axes[0].set_yticks(y, labels)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# --------------------------------------------------------------------------


def select(rows: Sequence[SiliconRow], ids: str | None, limit: int | None) -> list[SiliconRow]:
    out = list(rows)
    if ids:
        wanted = [i.strip() for i in ids.split(",") if i.strip()]
        have = {r.id: r for r in rows}
        unknown = [i for i in wanted if i not in have]
        if unknown:
            raise InputError("--ids", f"not in the file: {', '.join(unknown)}")
        out = [have[i] for i in wanted]
    return out[:limit] if limit else out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("silicon", nargs="?", help="a silicon file (default: the package's)")
    parser.add_argument("--output", type=Path, help="estimate the rows, write the CSV here")
    parser.add_argument("--aic", type=Path, help="read the estimates of an earlier --output")
    parser.add_argument("--ids", help="only these rows (comma-separated ids)")
    parser.add_argument("--limit", type=int, help="only the first N rows")
    parser.add_argument("--pdwatt", type=Path, help="pdwatt predict --silicon --json's output")
    parser.add_argument("--markdown", type=Path, help="write the side-by-side table here")
    parser.add_argument("--chart", type=Path, help="write the chart of the medians here")
    parser.add_argument(
        "--min-rows",
        type=int,
        default=MIN_ROWS,
        help=f"groups in the table and chart: rows both predict (default {MIN_ROWS})",
    )
    parser.add_argument("--verbose", action="store_true", help="the SDK's log on stderr")
    args = parser.parse_args(argv)
    if (args.output is None) == (args.aic is None):
        parser.error("give --output FILE.csv to estimate, or --aic FILE.csv to reuse one")
    if (args.markdown or args.chart) and not args.pdwatt:
        parser.error("--markdown and --chart need --pdwatt")
    try:
        if args.aic:
            lines = read_aic(args.aic)
        else:
            path = args.silicon or installed_silicon()
            if path is None:
                parser.error("no FILE and aiconfigurator-core is not installed")
            rows = select(read_silicon(path), args.ids, args.limit)
            _say(f"{len(rows)} rows of {Path(path).name}")
            lines = estimate_rows(rows, args.output, args.verbose)
        print(aic_summary(lines))
        if args.pdwatt:
            sides = compare(lines, read_pdwatt(args.pdwatt))
            print()
            print(text_table(sides))
            if args.markdown:
                args.markdown.write_text(markdown_table(sides, args.min_rows) + "\n")
            if args.chart:
                chart(sides, args.min_rows, args.chart)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
