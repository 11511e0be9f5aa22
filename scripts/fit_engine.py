"""Fit the shipped engine calibrations (overheads on top of measured kernels) and report
how well measured kernels predict whole-server measurements.

Usage:

    python scripts/fit_engine.py DATA_DIR [--out FILE] [--chart PNG] [--json] [--prompt-starts]

DATA_DIR holds the ML.ENERGY per-model files (``DATA_DIR/mlenergy/*.json``) and
AIConfigurator's kernel tables (``DATA_DIR/aiconfigurator/``), see their READMEs.

* H100 and B200 under vLLM: every ML.ENERGY row the kernel tables compose (the oldest
  vLLM tables of each GPU, the closest to the measurements' era), screened by the
  consistency screen of ``docs/calibration.md`` (section 9; a row screened for its power
  keeps its ITL), fitted with
  :func:`model.measured.engine_fit.fit_engine`;
* H200 under SGLang: the one measured pair, Qwen3-32B, through the paper's Tab. 3
  decode times (SPEC 2.3), taken as measurements at batches 1-256 and contexts of
  512-4,096 tokens;
* the pairs no measurement covers (:data:`TRANSFERS`: H200 under vLLM, H100 and B200
  under SGLang): the overheads of a fitted pair, transferred, over kernel tables of their
  own GPU and framework (the oldest version, as for the fitted pairs), each marked
  ``transferred_from``.

It prints, per GPU and for dense models and mixtures of experts apart, the median
|error| of the decode time in sample, with the kernels alone (nothing fitted), fitted
on small models only (dense <= 14B, MoE <= 4B active) and predicting the larger ones,
and leave-one-model-out; on B200 the kernels' measured power against the measured
power; how well overheads carry from one pair to another where both are known
(:func:`model.measured.engine_fit.transfer_check`), what the tables' version costs such a
transfer, and the H200's decode kernels against the H100's. It writes the fitted
numbers (never the measurements), with the files' sha256, to
``model/data/engine_calibrations.json`` and, with ``--chart``, a chart of predicted
against measured.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a plain script from a source checkout
    sys.path.insert(0, str(REPO_ROOT))

from model.catalog import load_calibration, load_gpu, load_model  # noqa: E402
from model.measured import engine_fit  # noqa: E402
from model.measured.calibrate import Usable, screened_rows  # noqa: E402
from model.measured.measurements import Measurement, read_measurements  # noqa: E402
from model.measured.screen import Screened, counts  # noqa: E402
from model.performance.engine import SHIPPED_FILE, KernelSource, KernelTimes  # noqa: E402
from model.performance.roofline import DecodeTerms  # noqa: E402
from model.workload import file_sha256  # noqa: E402

#: the small models a new user has measured (dense <= 14B, MoE <= 4B active)
SMALL_DENSE = 15.0e9
SMALL_ACTIVE = 4.5e9
MLENERGY = {
    "description": "ML.ENERGY Leaderboard v3 per-model files (vLLM on H100 and B200)",
    "repository": "https://github.com/ml-energy/leaderboard",
    "commit": "0cd52dab897c",
}
KERNELS = {
    "description": "NVIDIA AIConfigurator's measured kernel tables",
    "repository": "https://github.com/ai-dynamo/aiconfigurator",
    "commit": "095f58a51c4c",
}
#: (GPU, framework) pairs with no whole-server measurement, and the measured pair whose
#: engine overheads each takes (docs/calibration.md, section 8, "Pairs without
#: measurements"): H200 is the H100's die with more, faster HBM, so its host- and
#: launch-side overheads are the H100's under the same framework; SGLang's only fit is
#: on H200, whose overheads carry to H100 and B200 under SGLang
TRANSFERS = (
    (("h200", "vllm"), ("h100-sxm", "vllm")),
    (("h100-sxm", "sglang"), ("h200", "sglang")),
    (("b200", "sglang"), ("h200", "sglang")),
)
#: the transfers checked where both pairs are measured (or, for SGLang, taken from Tab. 3)
TRANSFER_CHECKS = (
    (("h100-sxm", "vllm"), ("b200", "vllm")),
    (("b200", "vllm"), ("h100-sxm", "vllm")),
    (("h100-sxm", "vllm"), ("h200", "sglang")),
    (("b200", "vllm"), ("h200", "sglang")),
    (("h200", "sglang"), ("h100-sxm", "vllm")),
    (("h200", "sglang"), ("b200", "vllm")),
)
#: the paper's pair: batches and contexts at which SPEC's Tab. 3 decode time is taken
PAPER_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PAPER_CONTEXTS = (512.0, 1024.0, 2048.0, 4096.0)


def small(c: engine_fit.Composed) -> bool:
    m = c.u.model
    return m.active_params <= SMALL_ACTIVE if m.experts else m.params <= SMALL_DENSE


def median_abs(v: Sequence[float]) -> float:
    return float(np.median(np.abs(v))) if len(v) else float("nan")


def paper_rows() -> list[Usable]:
    """Qwen3-32B on H200 under SGLang: SPEC 2.3's decode time with the paper's Tab. 3
    calibration, as measurements."""
    model, gpu = load_model("qwen3-32b"), load_gpu("h200")
    cal = load_calibration("qwen3-32b", "h200")
    rows = []
    for c in PAPER_CONTEXTS:
        for b in PAPER_BATCHES:
            t = DecodeTerms.of(model, gpu, 1, c).time_s(cal, b)
            m = Measurement(
                file="SPEC Tab. 3",
                row=f"B={b}, c={c:g}",
                model="qwen3-32b",
                gpu="h200",
                stack="sglang",
                task="",
                tp=1,
                ep=1,
                precision="bf16",
                architecture="dense",
                batch=float(b),
                output_tokens=1.0,
                output_weighted_tokens=1.0,
                prompt_tokens=None,
                context_tokens=c,
                itl_s=t,
                power_w=None,
                prefill_tokens_per_s=None,
            )
            rows.append(Usable(m, model, gpu))
    return rows


def b200_power(
    comp: Sequence[engine_fit.Composed], fit: engine_fit.EngineFit, folder: str
) -> list[tuple[engine_fit.Composed, float]]:
    """B200 rows: the kernels' time-weighted measured power (vLLM 0.24.0 tables, the B200
    vLLM tables with power) against the measured power per GPU."""
    out = []
    source = KernelSource(folder, "vllm", (("b200", "0.24.0"),))
    for c in comp:
        m = c.u.m
        if c.gpu != "b200" or m.power_w is None:
            continue
        try:
            kt = KernelTimes.of(
                source, c.u.model, "b200", m.tp * m.dp, m.ep, fit.overheads[("b200", "vllm")]
            )
            ctx = fit.prompts.get(m.task, engine_fit.PROMPT_DEFAULT) + m.output_weighted_tokens / 2
            p = kt.decode_power_w(max(round(m.batch), 1), ctx)
        except Exception:  # a shape the 0.24.0 tables do not measure: not compared
            continue
        if p is not None:
            out.append((c, p / m.power_w - 1.0))
    return out


def report(
    comp: list[engine_fit.Composed],
    say: Callable[[str], None],
    start: dict[str, float] | None = None,
) -> tuple[engine_fit.EngineFit, dict[str, Any], dict[int, float]]:
    fit = engine_fit.fit_engine(comp, start=start)
    small_fit = engine_fit.fit_engine([c for c in comp if small(c)], start=start)
    lomo = engine_fit.leave_one_model_out(comp, progress=say, start=start)
    inside = engine_fit.errors(comp, fit)
    bare = engine_fit.unfitted(comp, fit.prompts)
    figures: dict[str, Any] = {}
    for gpu in sorted({c.gpu for c in comp}):
        for kind, moe in (("dense", False), ("moe", True)):
            idx = [i for i, c in enumerate(comp) if c.gpu == gpu and bool(c.u.model.experts) == moe]
            if not idx:
                continue
            large = [i for i in idx if not small(comp[i])]
            s2l = [small_fit.predict_s(comp[i]) / comp[i].u.m.itl_s - 1.0 for i in large]
            lo = [lomo[i] for i in idx if i in lomo]
            figures[f"{gpu} {kind}"] = {
                "rows": len(idx),
                "in_sample": median_abs([inside[i] for i in idx]),
                "kernels_alone": median_abs([bare[i] for i in idx]),
                "kernels_alone_signed": float(np.median([bare[i] for i in idx])),
                "small_to_large_rows": len(large),
                "small_to_large": median_abs(s2l),
                "leave_one_model_out": median_abs(lo),
                "leave_one_model_out_worst": float(np.max(np.abs(lo))) if lo else float("nan"),
            }
    return fit, figures, lomo


#: where each task's effective prompt length starts, per fit, for --prompt-starts
#: (tokens: the prompt grid's low end, its middle and near its top)
PROMPT_STARTS = (32.0, 256.0, 2048.0)


def prompt_starts(
    comp: list[engine_fit.Composed], say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """The same fits (in sample, small models to larger, leave-one-model-out) started
    from every combination of :data:`PROMPT_STARTS` for the tasks' prompt lengths: each
    start's robust loss, fitted prompt lengths and judged figures. The fit is not
    convex in the prompt lengths; this shows how far its figures depend on the start."""
    tasks = engine_fit.open_tasks(comp)
    out = []
    for n, combo in enumerate(itertools.product(PROMPT_STARTS, repeat=len(tasks))):
        start = dict(zip(tasks, combo, strict=True))
        say(f"prompt start {n + 1}/{len(PROMPT_STARTS) ** len(tasks)}: {start}")
        fit, figures, _ = report(comp, lambda _m: None, start)
        out.append(
            {
                "start": start,
                "cost": fit.cost,
                "prompts": fit.prompts,
                "figures": {
                    k: {n: v[n] for n in ("in_sample", "leave_one_model_out", "small_to_large")}
                    for k, v in figures.items()
                },
            }
        )
    return sorted(out, key=lambda r: r["cost"])


def kind_medians(rows: Sequence[engine_fit.Composed], errs: Sequence[float]) -> dict[str, Any]:
    """Median |error| of dense models and mixtures of experts apart."""
    out: dict[str, Any] = {}
    for kind, moe in (("dense", False), ("moe", True)):
        v = [e for c, e in zip(rows, errs, strict=True) if bool(c.u.model.experts) == moe]
        if v:
            out[kind] = {"rows": len(v), "median_abs": median_abs(v)}
    return out


def transfer_figures(
    rows: Sequence[engine_fit.Composed],
    source: tuple[str, str],
    target: tuple[str, str],
    prompts: dict[str, float] | None = None,
) -> dict[str, Any]:
    """:func:`model.measured.engine_fit.transfer_check` as figures: per kind, the median |error| of
    the target's rows with the source's overheads, with the target's own fit and with its
    kernels alone; and both pairs' overheads."""
    t = engine_fit.transfer_check(rows, source, target, prompts)
    out: dict[str, Any] = {
        "source_overheads": t.overheads.as_dict(),
        "target_own_overheads": t.own_overheads.as_dict(),
    }
    for name, errs in (("transferred", t.transferred), ("own", t.own), ("alone", t.alone)):
        for kind, v in kind_medians(t.target_rows, errs).items():
            out.setdefault(kind, {"rows": v["rows"]})[name] = v["median_abs"]
    return out


def transfers(
    comp: Sequence[engine_fit.Composed], paper: Sequence[engine_fit.Composed]
) -> dict[str, Any]:
    """:data:`TRANSFER_CHECKS` as figures. The Tab. 3 rows state their context and fit no
    prompt length: carried from H200 under SGLang to one vLLM GPU, the overheads predict
    that GPU's rows at the prompt lengths fitted on the other vLLM GPU's rows alone."""
    rows = [*comp, *paper]
    alone = {
        g: engine_fit.fit_engine([c for c in comp if c.gpu == g]).prompts
        for g in ("h100-sxm", "b200")
    }
    other = {"h100-sxm": "b200", "b200": "h100-sxm"}
    out = {}
    for source, target in TRANSFER_CHECKS:
        prompts = alone[other[target[0]]] if source == ("h200", "sglang") else None
        name = f"{source[0]} {source[1]} -> {target[0]} {target[1]}"
        out[name] = transfer_figures(rows, source, target, prompts)
    return out


def version_check(
    usable: Sequence[Usable],
    comp: Sequence[engine_fit.Composed],
    folder: str,
    verdicts: dict[str, Screened],
) -> dict[str, Any]:
    """H100 rows under vLLM with overheads fitted against the 0.14.0 tables (the H100's
    rows only) and kernels of the 0.24.0 tables (the only vLLM tables of the H200), beside
    the overheads fitted against 0.24.0 and the 0.14.0 fit itself: what the tables'
    version costs a transferred calibration."""
    h14 = [c for c in comp if c.gpu == "h100-sxm"]
    every, _ = engine_fit.compose(
        [u for u in usable if u.gpu.name == "h100-sxm"], folder, {"h100-sxm": "0.24.0"}
    )
    keep = {c.u.m.where for c in h14}
    h24 = [c for c in engine_fit.fitted(every, verdicts) if c.u.m.where in keep]
    both = {c.u.m.where for c in h24}
    h14 = [c for c in h14 if c.u.m.where in both]
    f14 = engine_fit.fit_engine(h14)
    f24 = engine_fit.fit_engine(h24, f14.prompts)
    f24.prompts = f14.prompts | f24.prompts
    return {
        "rows": len(h24),
        "overheads_0.14.0": f14.overheads[("h100-sxm", "vllm")].as_dict(),
        "overheads_0.24.0": f24.overheads[("h100-sxm", "vllm")].as_dict(),
        "0.14.0 overheads, 0.14.0 kernels": kind_medians(h14, engine_fit.errors(h14, f14)),
        "0.14.0 overheads, 0.24.0 kernels": kind_medians(h24, engine_fit.errors(h24, f14)),
        "0.24.0 overheads, 0.24.0 kernels": kind_medians(h24, engine_fit.errors(h24, f24)),
    }


def hopper_kernels(folder: str) -> dict[str, Any]:
    """Qwen3-32B (TP1) decode kernels on H200 against H100, the same framework and version
    on both (vLLM 0.24.0, SGLang 0.5.14), at a context of 1,024 tokens: the part of a
    transferred calibration that is the H200's own."""
    model = load_model("qwen3-32b")
    out: dict[str, Any] = {}
    for framework, version in (("vllm", "0.24.0"), ("sglang", "0.5.14")):
        ratio = {}
        for b in (1, 16, 64, 256):
            t = {
                g: KernelTimes.of(
                    KernelSource(folder, framework, ((g, version),)), model, g, 1
                ).decode_kernels_s(b, 1024.0)
                for g in ("h100-sxm", "h200")
            }
            ratio[str(b)] = t["h200"] / t["h100-sxm"]
        out[f"{framework} {version}"] = ratio
    return out


def chart(comp: list[engine_fit.Composed], lomo: dict[int, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = sorted({c.gpu for c in comp})
    fig, axes = plt.subplots(1, len(gpus), figsize=(6 * len(gpus), 5.5), squeeze=False)
    for ax, gpu in zip(axes[0], gpus, strict=True):
        for moe, colour, label in ((False, "tab:blue", "dense"), (True, "tab:orange", "MoE")):
            pts = [
                (c.u.m.itl_s * 1e3, c.u.m.itl_s * (1 + lomo[i]) * 1e3)
                for i, c in enumerate(comp)
                if c.gpu == gpu and bool(c.u.model.experts) == moe and i in lomo
            ]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, s=12, alpha=0.7, color=colour, label=label)
        lim = [1, 200]
        ax.plot(lim, lim, color="black", lw=0.8)
        ax.fill_between(
            lim, [v * 0.9 for v in lim], [v * 1.1 for v in lim], color="grey", alpha=0.15
        )
        ax.set(
            xscale="log",
            yscale="log",
            xlim=lim,
            ylim=lim,
            xlabel="measured median ITL (ms)",
            ylabel="predicted, leave-one-model-out (ms)",
            title=f"{gpu}, vLLM: kernels + fitted engine overheads",
        )
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--out", type=Path, default=SHIPPED_FILE)
    ap.add_argument("--chart", type=Path)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument(
        "--prompt-starts",
        action="store_true",
        help="refit from every start of the prompt lengths and print each start's loss, "
        "prompt lengths and figures (writes nothing)",
    )
    args = ap.parse_args(argv)
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    folder = str(args.data_dir / "aiconfigurator")
    files = sorted((args.data_dir / "mlenergy").glob("*.json"))
    if not files:
        raise SystemExit(f"no ML.ENERGY files in {args.data_dir / 'mlenergy'}")
    usable, skipped, found = screened_rows(read_measurements(files))
    verdicts = {u.m.where: v for u, v in zip(usable, found, strict=True) if v is not None}
    every, not_composed = engine_fit.compose(usable, folder, progress=say)
    comp = engine_fit.fitted(every, verdicts)
    screened = list(verdicts.values())
    if args.prompt_starts:
        for r in prompt_starts(comp, say):
            print(json.dumps(r) if args.json else _start_line(r))
        return 0
    fit, figures, lomo = report(comp, say)
    # the power comparison leaves out the powers the screen keeps out
    power = b200_power([c for c in comp if c.u.m.where not in verdicts], fit, folder)
    figures["b200 power (kernels)"] = {
        "rows": len(power),
        "median_abs": median_abs([e for _, e in power]),
        "signed_median": float(np.median([e for _, e in power])) if power else float("nan"),
    }
    paper_comp, _ = engine_fit.compose(paper_rows(), folder, {"h200": "0.5.14"})
    paper = engine_fit.fit_engine(paper_comp)
    figures["h200 sglang (Tab. 3)"] = {
        "rows": len(paper_comp),
        "in_sample": median_abs(engine_fit.errors(paper_comp, paper)),
        "worst": float(np.max(np.abs(engine_fit.errors(paper_comp, paper)))),
    }
    figures["transfer"] = transfers(comp, paper_comp)
    figures["transfer version (h100 vllm)"] = version_check(usable, comp, folder, verdicts)
    figures["h200 / h100 decode kernels (qwen3-32b)"] = hopper_kernels(folder)
    doc = document(fit, paper, files, figures, len(skipped), not_composed, screened, folder)
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        for k, v in figures.items():
            print(k, {n: round(x, 4) if isinstance(x, float) else x for n, x in v.items()})
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.chart:
        chart(comp, lomo, args.chart)
    return 0


def _start_line(r: dict[str, Any]) -> str:
    prompts = " ".join(f"{t}={p:.0f}" for t, p in r["prompts"].items())
    figs = "; ".join(
        f"{k}: {v['in_sample']:.1%} / {v['leave_one_model_out']:.1%} / {v['small_to_large']:.1%}"
        for k, v in r["figures"].items()
    )
    start = " ".join(f"{t}={p:.0f}" for t, p in r["start"].items())
    return f"start {start} -> loss {r['cost']:.4f}, prompts {prompts}; {figs}"


def document(
    fit: engine_fit.EngineFit,
    paper: engine_fit.EngineFit,
    files: Sequence[Path],
    figures: dict[str, Any],
    n_skipped: int,
    not_composed: Sequence[Any],
    screened: Sequence[Screened],
    folder: str,
) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for f, src in ((fit, "ML.ENERGY Leaderboard v3 (vLLM), measured"), (paper, "SPEC Tab. 3")):
        for (gpu, framework), o in sorted(f.overheads.items()):
            entries.append(
                {
                    "gpu": gpu,
                    "framework": framework,
                    "version": f.versions[(gpu, framework)],
                    "overheads": o.as_dict(),
                    "std": f.std[(gpu, framework)],
                    "rows": f.rows[(gpu, framework)],
                    "models": f.models[(gpu, framework)],
                    "source": f"{src}; kernels: AIConfigurator {framework} "
                    f"{f.versions[(gpu, framework)]} tables",
                }
            )
    fitted = {(e["gpu"], e["framework"]): e for e in entries}
    for (gpu, framework), (src_gpu, src_framework) in TRANSFERS:
        if (gpu, framework) in fitted:  # measured: the fit replaces the transfer
            continue
        base = fitted[(src_gpu, src_framework)]
        version = engine_fit.default_version(folder, gpu, framework)
        entries.append(
            {
                "gpu": gpu,
                "framework": framework,
                "version": version,
                "overheads": dict(base["overheads"]),
                "std": dict(base["std"]),
                "rows": 0,
                "models": [],
                "transferred_from": {
                    "gpu": src_gpu,
                    "framework": src_framework,
                    "version": base["version"],
                },
                "source": f"transferred: no whole-server measurement of {gpu} under "
                f"{framework}; engine overheads of {src_gpu} / {src_framework} "
                f"{base['version']} ({base['source'].split(';')[0]}); kernels: "
                f"AIConfigurator {framework} {version} tables of {gpu}",
            }
        )
    entries.sort(key=lambda e: (e["gpu"], e["framework"]))
    return {
        "format": "pdwatt-engine-calibration/1",
        "calibrations": entries,
        "prompt_tokens": fit.prompts,
        "prompt_tokens_std": fit.prompt_std,
        "figures": figures,
        "rows_not_described": n_skipped,
        "rows_not_composed": len(not_composed),
        "rows_screened": counts(screened),
        "source": {
            "measurements": MLENERGY | {"files": {f.name: file_sha256(f) for f in files}},
            "kernels": KERNELS,
        },
    }


if __name__ == "__main__":
    raise SystemExit(main())
