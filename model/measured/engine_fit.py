"""Fit the serving engine's overheads on top of measured kernels (``docs/kernels.md``).

Each measurement row (a median inter-token latency at a mean running batch) is
composed from the kernel tables of its GPU and framework (:mod:`model.performance.kernels`), and
the three overheads of :class:`model.performance.engine.EngineOverheads` per (GPU, framework) are
fitted with ``scipy.optimize.least_squares`` to the relative residuals
``(K_D(B, c) + t_iter + t_req B + t_layer n_layers) / measured - 1``, with the same
robust loss as the roofline calibration (:mod:`model.measured.calibrate`). Tasks whose prompt
length the files do not give get one effective prompt length each, shared by every
GPU, fitted with the overheads. Nothing else is fitted: the kernels are measured.

Rows whose shape no table covers (a model the composition does not describe, a
context beyond the tables) are listed with the reason, never dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model.errors import InputError
from model.measured.calibrate import Skipped, Usable, robust_cost, robust_fit
from model.measured.screen import EXCLUDES, Screened
from model.performance.engine import (
    EngineOverheads,
    KernelSource,
    KernelTimes,
    gpu_folder,
    open_database,
)

FloatArray = np.ndarray
#: prompt lengths (tokens) at which each row's kernels are composed; between them the
#: kernel time is interpolated in log-log (the context enters through attention only)
PROMPT_GRID = (16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0)
#: bounds of a fitted effective prompt length (tokens)
PROMPT_BOUNDS = (PROMPT_GRID[0], PROMPT_GRID[-1])
#: the prompt length of a task no fitted row ran (tokens; the grid's geometric middle)
PROMPT_DEFAULT = 256.0
#: bounds of the overheads (s): per iteration, per request, per layer
OVERHEAD_BOUNDS = {"t_iter_s": (0.0, 0.05), "t_req_s": (0.0, 1e-3), "t_layer_s": (0.0, 1e-3)}
OVERHEADS = tuple(OVERHEAD_BOUNDS)


@dataclass
class Composed:
    """One usable row with its composed kernel time on the prompt grid (or at its
    stated context, ``fixed``)."""

    u: Usable
    framework: str
    version: str
    layers: int
    kernel_s: FloatArray  # over PROMPT_GRID, or one value when the context is given
    fixed: bool

    @property
    def gpu(self) -> str:
        return self.u.gpu.name

    def kernels_at(self, prompt: float) -> float:
        if self.fixed:
            return float(self.kernel_s[0])
        grid = np.log(PROMPT_GRID)
        return float(np.exp(np.interp(math.log(prompt), grid, np.log(self.kernel_s))))


def default_version(source_folder: str, gpu: str, framework: str) -> str:
    """The tables' version for measurements that do not state theirs: the oldest of the
    framework's versions for the GPU (published measurements predate the newest tables;
    the closest era is the earliest)."""
    db = open_database(source_folder)
    versions = sorted(
        {v for f, v in db.versions(gpu_folder(gpu), "gemm") if f == framework},
        key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()),
    )
    if not versions:
        raise InputError("kernels", f"the kernel database has no {framework} tables for {gpu}")
    return versions[0]


def compose(
    rows: Sequence[Usable],
    folder: str,
    versions: Mapping[Any, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[Composed], list[Skipped]]:
    """Compose every row's decode iteration from the kernel tables of its GPU and stack
    (the stack names the framework: ``vllm``, ``sglang``). ``versions`` chooses a
    version per (GPU, framework) or per GPU, else :func:`default_version`."""
    say = progress or (lambda _m: None)
    given = dict(versions or {})
    chosen: dict[tuple[str, str], str] = {}  # (GPU, framework) -> version
    times: dict[tuple[Any, ...], KernelTimes | Exception] = {}
    out: list[Composed] = []
    skipped: list[Skipped] = []
    for i, u in enumerate(rows):
        if i % 50 == 0:
            say(f"composing rows {i + 1}-{min(i + 50, len(rows))} of {len(rows)}")
        gpu, framework = u.gpu.name, u.m.stack
        if u.m.dp > 1:
            skipped.append(
                Skipped(u.m.where, "kernels: data-parallel attention is not composed yet")
            )
            continue
        try:
            if (gpu, framework) not in chosen:
                chosen[(gpu, framework)] = (
                    given.get((gpu, framework)) or given.get(gpu)
                ) or default_version(folder, gpu, framework)
            version = chosen[(gpu, framework)]
            source = KernelSource(folder, framework, ((gpu, version),))
            key = (u.model, gpu, framework, version, u.m.tp, u.m.ep)
            if key not in times:
                try:
                    times[key] = KernelTimes.of(source, u.model, gpu, u.m.tp, u.m.ep)
                except InputError as error:
                    times[key] = error
            kt = times[key]
            if isinstance(kt, Exception):
                raise kt
            out_w = u.m.output_weighted_tokens / 2.0
            batch = u.m.batch
            if u.m.context_tokens is not None or u.m.prompt_tokens is not None:
                ctx = (
                    u.m.context_tokens
                    if u.m.context_tokens is not None
                    else (u.m.prompt_tokens or 0.0) + out_w
                )
                k = np.array([kt.decode_kernels_s(batch, max(ctx, 1.0))])
                fixed = True
            else:
                k = np.array([kt.decode_kernels_s(batch, p + out_w) for p in PROMPT_GRID])
                fixed = False
        except InputError as error:
            skipped.append(Skipped(u.m.where, f"kernels: {error}"))
            continue
        out.append(Composed(u, framework, version, u.model.layers, k, fixed))
    return out, skipped


@dataclass
class EngineFit:
    """Fitted overheads per (GPU, framework), the effective prompt lengths of the tasks
    the rows leave open, and standard errors of every fitted value."""

    overheads: dict[tuple[str, str], EngineOverheads]
    versions: dict[tuple[str, str], str]
    std: dict[tuple[str, str], dict[str, float]]
    prompts: dict[str, float]
    prompt_std: dict[str, float]
    rows: dict[tuple[str, str], int] = field(default_factory=dict)
    models: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    #: pairs whose overheads are another pair's, carried (a file's ``transferred_from``)
    transferred: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    #: the robust loss at the fit (:func:`model.measured.calibrate.robust_cost`); fits of the same
    #: rows from different starts compare by it
    cost: float = float("nan")

    def predict_s(self, c: Composed, prompts: dict[str, float] | None = None) -> float:
        o = self.overheads[(c.gpu, c.framework)]
        p = (prompts or self.prompts).get(c.u.m.task, PROMPT_DEFAULT)
        return c.kernels_at(p) + o.t_iter_s + o.t_req_s * c.u.m.batch + o.t_layer_s * c.layers


def open_tasks(rows: Sequence[Composed], known: Mapping[str, float] | None = None) -> list[str]:
    """The tasks whose prompt length :func:`fit_engine` fits: those of rows composed over
    the prompt grid (no stated context or prompt), less those ``known`` gives."""
    return sorted({c.u.m.task for c in rows if not c.fixed and c.u.m.task not in (known or {})})


def fit_engine(
    rows: Sequence[Composed],
    prompts: dict[str, float] | None = None,
    start: Mapping[str, float] | None = None,
) -> EngineFit:
    """Least squares of the rows' decode times over each (GPU, framework)'s overheads and
    the prompt lengths of tasks not in ``prompts``, fitted from ``start`` (a task's
    prompt length in tokens, within :data:`PROMPT_BOUNDS`; else :data:`PROMPT_DEFAULT`).
    The fit is not convex in the prompt lengths: another start may end elsewhere
    (``docs/calibration.md``, section 8, compares them by :attr:`EngineFit.cost`)."""
    if not rows:
        raise InputError("measurements", "no row composes from the kernel tables")
    keys = sorted({(c.gpu, c.framework) for c in rows})
    known = dict(prompts or {})
    tasks = open_tasks(rows, known)
    for key in keys:
        batches = {round(c.u.m.batch, 3) for c in rows if (c.gpu, c.framework) == key}
        if len(batches) < 2:
            raise InputError(
                "measurements",
                f"{key[0]}/{key[1]}: one batch size only; need two to fit t_req",
            )
    n_o = len(OVERHEADS)
    lo = [OVERHEAD_BOUNDS[n][0] for _ in keys for n in OVERHEADS]
    hi = [OVERHEAD_BOUNDS[n][1] for _ in keys for n in OVERHEADS]
    x0 = [min(1e-4, OVERHEAD_BOUNDS[n][1] / 2) for _ in keys for n in OVERHEADS]
    lo += [math.log(PROMPT_BOUNDS[0])] * len(tasks)
    hi += [math.log(PROMPT_BOUNDS[1])] * len(tasks)
    begin = dict(start or {})
    for t, v in begin.items():
        if not (PROMPT_BOUNDS[0] <= v <= PROMPT_BOUNDS[1]):
            raise InputError(
                f"start.{t}",
                f"a prompt length to start from must be within {PROMPT_BOUNDS[0]:g}-"
                f"{PROMPT_BOUNDS[1]:g} tokens, got {v!r}",
            )
    x0 += [math.log(begin.get(t, PROMPT_DEFAULT)) for t in tasks]
    k_index = {k: i for i, k in enumerate(keys)}
    measured = np.array([c.u.m.itl_s for c in rows])
    batch = np.array([c.u.m.batch for c in rows])
    layers = np.array([float(c.layers) for c in rows])
    which = np.array([k_index[(c.gpu, c.framework)] for c in rows])

    def unpack(x: FloatArray) -> tuple[FloatArray, dict[str, float]]:
        o = np.asarray(x[: n_o * len(keys)]).reshape(len(keys), n_o)
        pr = dict(known)
        pr.update({t: float(math.exp(v)) for t, v in zip(tasks, x[n_o * len(keys) :], strict=True)})
        return o, pr

    def residuals(x: FloatArray) -> FloatArray:
        o, pr = unpack(x)
        k = np.array([c.kernels_at(pr.get(c.u.m.task, PROMPT_DEFAULT)) for c in rows])
        t = k + o[which, 0] + o[which, 1] * batch + o[which, 2] * layers
        return t / measured - 1.0

    x, std = robust_fit(residuals, x0, lo, hi)
    o, pr = unpack(x)
    fit = EngineFit({}, {}, {}, {t: pr[t] for t in tasks}, {}, cost=robust_cost(residuals(x)))
    for key, i in k_index.items():
        fit.overheads[key] = EngineOverheads(*(float(v) for v in o[i]))
        fit.std[key] = {n: float(std[i * n_o + j]) for j, n in enumerate(OVERHEADS)}
        sel = [c for c in rows if (c.gpu, c.framework) == key]
        fit.versions[key] = sel[0].version
        fit.rows[key] = len(sel)
        fit.models[key] = sorted({c.u.model.name for c in sel})
    for j, t in enumerate(tasks):  # a log-scale parameter's error, carried to tokens
        fit.prompt_std[t] = float(pr[t] * std[n_o * len(keys) + j])
    return fit


def unfitted(rows: Sequence[Composed], prompts: dict[str, float]) -> list[float]:
    """Relative errors of the kernels alone (no overhead), at the given prompt lengths."""
    return [c.kernels_at(prompts.get(c.u.m.task, PROMPT_DEFAULT)) / c.u.m.itl_s - 1.0 for c in rows]


def errors(rows: Sequence[Composed], fit: EngineFit) -> list[float]:
    return [fit.predict_s(c) / c.u.m.itl_s - 1.0 for c in rows]


def leave_one_model_out(
    rows: Sequence[Composed],
    progress: Callable[[str], None] | None = None,
    start: Mapping[str, float] | None = None,
) -> dict[int, float]:
    """Each model's rows predicted by a fit to the other models' rows (from ``start``,
    :func:`fit_engine`): the relative error per row (index into ``rows``)."""
    say = progress or (lambda _m: None)
    names = sorted({c.u.model.name for c in rows})
    out: dict[int, float] = {}
    for n, name in enumerate(names):
        say(f"leave-one-model-out {n + 1}/{len(names)}: {name}")
        train = [c for c in rows if c.u.model.name != name]
        f = fit_engine(train, start=start)
        for i, c in enumerate(rows):
            if c.u.model.name == name and (c.gpu, c.framework) in f.overheads:
                out[i] = f.predict_s(c) / c.u.m.itl_s - 1.0
    return out


@dataclass
class TransferCheck:
    """How well one (GPU, framework)'s engine overheads carry to another whose rows they
    never saw: the source fitted on its own rows alone (overheads and the tasks' prompt
    lengths), the target's rows predicted from the target's own kernel tables plus the
    source's overheads at the source's prompt lengths (a task's prompts are the task's,
    not the GPU's; a task the source never ran takes :data:`PROMPT_DEFAULT`). Beside it, on
    the same target rows and at the same prompt lengths, the target's own fit (the best
    three overheads can do there) and its kernels alone (nothing fitted). Errors are
    relative, per target row, in ``target_rows``' order."""

    source: tuple[str, str]
    target: tuple[str, str]
    overheads: EngineOverheads  # the source's, carried over
    prompts: dict[str, float]
    own_overheads: EngineOverheads  # the target's own fit, for comparison
    target_rows: list[Composed]
    transferred: list[float]
    own: list[float]
    alone: list[float]


def transfer_check(
    rows: Sequence[Composed],
    source: tuple[str, str],
    target: tuple[str, str],
    prompts: Mapping[str, float] | None = None,
) -> TransferCheck:
    """Fit ``source``'s rows only and predict ``target``'s rows with their own kernels and
    the source's overheads (:class:`TransferCheck`). ``prompts``: prompt lengths of tasks
    held fixed in the source's fit instead of fitted (for a source whose rows state their
    context and so fit none; never lengths fitted to the target's rows)."""
    src = [c for c in rows if (c.gpu, c.framework) == source]
    tgt = [c for c in rows if (c.gpu, c.framework) == target]
    for name, key, sel in (("source", source, src), ("target", target, tgt)):
        if not sel:
            raise InputError(name, f"no composed rows of {key[0]}/{key[1]}")
    if source == target:
        raise InputError("target", "must differ from the source")
    given = dict(prompts or {})
    f_src = fit_engine(src, given)
    carried = f_src.overheads[source]
    prompts = given | f_src.prompts
    moved = EngineFit({target: carried}, {}, {}, prompts, {})
    # the target's own fit at the source's prompt lengths; a task the source never ran
    # takes PROMPT_DEFAULT in the transfer (nothing of the target's rows is fitted for
    # it) and its own fitted length in the target's fit (fit_engine returns the lengths
    # it fitted, not those it was given)
    f_own = fit_engine(tgt, prompts)
    f_own.prompts = prompts | f_own.prompts
    return TransferCheck(
        source,
        target,
        carried,
        prompts,
        f_own.overheads[target],
        list(tgt),
        errors(tgt, moved),
        errors(tgt, f_own),
        unfitted(tgt, prompts),
    )


FORMAT = "pdwatt-engine-calibration/1"


def predict_rows(
    rows: Sequence[Composed],
    fit: EngineFit,
    verdicts: Mapping[str, Screened] | None = None,
) -> list[dict[str, Any]]:
    """Rows in the shape of :func:`model.measured.calibrate.predict`'s: the decode time from the
    kernels and the fitted overheads; the power from the shipped calibration's ramp
    (``power_model``), there being no kernel power on most GPUs. ``verdicts``: the
    consistency screen's, by row (``where``), marked on the rows it names."""
    from model.capacity import instance_power_w
    from model.catalog import load_calibration
    from model.measured.calibrate import decode_load, prediction_row

    out = []
    for c in rows:
        u = c.u
        power = None
        if u.m.power_w is not None:
            cal = load_calibration(u.model.name, u.gpu.name)
            x = decode_load(u, cal, {u.m.task: fit.prompts.get(u.m.task, PROMPT_DEFAULT)})
            power = float(
                instance_power_w(cal.p0_decode_w, cal.gamma_decode_w, cal.psat_decode_w, x)
            )
        row = prediction_row(
            u, fit.predict_s(c), power, "measured", (verdicts or {}).get(u.m.where)
        )
        row["performance"] = "kernels"
        row["kernels"] = f"{c.framework} {c.version}"
        moved = fit.transferred.get((c.gpu, c.framework))
        if moved is not None:  # the overheads are another pair's (docs/calibration.md, 8)
            row["transferred_from"] = dict(moved)
        row["power_model"] = "ramp of the shipped calibration"
        out.append(row)
    return out


def fitted(rows: Sequence[Composed], verdicts: Mapping[str, Screened]) -> list[Composed]:
    """The rows a fit of decode times takes: all but those the screen keeps out whole
    (the ITL and GPU rules; a row screened for its power keeps its ITL)."""
    out = []
    for c in rows:
        v = verdicts.get(c.u.m.where)
        if v is None or "itl_ms" not in EXCLUDES[v.rule]:
            out.append(c)
    return out


def to_document(fit: EngineFit, folder: str) -> dict[str, Any]:
    """The calibration file: the fitted overheads per (GPU, framework) with the kernel
    tables they were fitted against (folder as given, framework, version)."""
    return {
        "format": FORMAT,
        "kernels": {"folder": folder},
        "calibrations": [
            {
                "gpu": gpu,
                "framework": framework,
                "version": fit.versions[(gpu, framework)],
                "overheads": o.as_dict(),
                "std": fit.std[(gpu, framework)],
                "rows": fit.rows.get((gpu, framework), 0),
                "models": fit.models.get((gpu, framework), []),
            }
            for (gpu, framework), o in sorted(fit.overheads.items())
        ],
        "prompt_tokens": dict(fit.prompts),
        "prompt_tokens_std": dict(fit.prompt_std),
    }


def is_document(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def from_document(doc: object, where: str = "calibration") -> tuple[EngineFit, str | None]:
    """An :class:`EngineFit` and its kernel folder read back from :func:`to_document`'s
    output or the shipped file (which names no folder: None); errors name the field."""
    if not is_document(doc):
        raise InputError(where, f"not a {FORMAT} document")
    assert isinstance(doc, dict)
    try:
        folder = str(doc["kernels"]["folder"]) if "kernels" in doc else None
        fit = EngineFit({}, {}, {}, {}, {})
        for i, e in enumerate(doc["calibrations"]):
            key = (str(e["gpu"]), str(e["framework"]))
            try:
                fit.overheads[key] = EngineOverheads(**e["overheads"])
            except (TypeError, InputError) as error:
                raise InputError(f"{where}: calibrations[{i}].overheads", str(error)) from None
            fit.versions[key] = str(e["version"])
            fit.std[key] = {k: float(v) for k, v in e.get("std", {}).items()}
            if e.get("transferred_from"):
                t = e["transferred_from"]
                fit.transferred[key] = {n: str(t[n]) for n in ("gpu", "framework", "version")}
        fit.prompts = {str(k): float(v) for k, v in doc.get("prompt_tokens", {}).items()}
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(where, f"malformed {FORMAT} document: {error}") from None
    return fit, folder
