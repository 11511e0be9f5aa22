"""Calibration from measurements (``pdwatt calibrate``) and the model's predictions
beside them (``pdwatt predict``); the equations and their derivation are in
``docs/calibration.md``.

One calibration is fitted per (GPU, serving stack) and shared by every model on it:
``mbu``, ``t_iter_s``, ``t_req_s``, ``mfu_decode`` and ``t_coll_s`` from the decode
iteration times, the decode power ramp ``(p0, gamma, psat)`` from power per GPU
against decode load, and ``mfu`` where prefill rates are given. The decode time of a
measurement is :class:`model.performance.roofline.DecodeTerms` at its batch and mean
context, the same function the capacity model uses.

Files that give no prompt lengths (ML.ENERGY) get one mean prompt length per task,
fitted with the rest and shared by every model and GPU that ran the task (they all
served the same dataset). A request's mean context while it decodes is its prompt
plus half its output, output weighted by length (a request is in the batch for as
many iterations as it has output tokens).

Fits use :func:`scipy.optimize.least_squares` on relative residuals with bounds;
parameter standard errors come from the Jacobian at the optimum. A fit that the rows
cannot determine is refused with what is missing.

Rows no iteration model can describe (:mod:`model.measured.screen`) stay out of the fits and
of the error statistics, unless the screen is turned off (``screen=False``); every
report counts them and predictions mark them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from model.capacity import instance_power_w, kv_memory_bytes
from model.catalog import (
    PRECISION_BYTES,
    Calibration,
    GpuSpec,
    ModelArch,
    estimated_calibration,
    load_calibration,
    load_gpu,
    load_model,
    shipped_prompt_tokens,
)
from model.errors import InputError, NotFoundError
from model.measured import screen as screening
from model.measured.measurements import Measurement
from model.measured.screen import Screened
from model.performance.roofline import DecodeTerms, prefill_coefficients

FloatArray = NDArray[np.float64]

#: the KV pool's share of GPU memory in the measured servers (vLLM's default
#: ``gpu_memory_utilization``), for the batch that saturates decode
MEM_FRACTION = 0.9
#: bounds of the fitted decode parameters (SI units)
BOUNDS = {
    "mbu": (0.05, 1.0),
    "t_iter_s": (0.0, 0.05),
    "t_req_s": (0.0, 1e-3),
    "mfu_decode": (0.02, 1.0),
    "t_coll_s": (0.0, 1e-3),
    "t_moe_layer_s": (0.0, 1e-3),
    "t_fp8_layer_s": (0.0, 1e-3),
    "mbu_expert": (0.05, 1.0),
    "mbu_expert_fp4": (0.05, 1.0),
}
#: where the terms SPEC does not have start (the others start from the catalog's set)
START = {
    "mfu_decode": 0.5,
    "t_coll_s": 1e-5,
    "t_moe_layer_s": 1e-5,
    "t_fp8_layer_s": 1e-5,
    "mbu_expert": 0.7,
    "mbu_expert_fp4": 0.7,
}
PROMPT_BOUNDS = (1.0, 32768.0)
#: bytes per weight of the precisions a whole model may be released in (FP8 releases
#: quantise every linear layer; their few bf16 tensors, embeddings and norms, are under
#: 1% of the bytes)
WEIGHT_BYTES = {p: PRECISION_BYTES[p] for p in ("bf16", "fp8")}
#: robust loss: relative residuals beyond F_SCALE weigh in linearly, not squared, so
#: that a few measurements far from every model do not pull the fit
LOSS = "soft_l1"
F_SCALE = 0.05
#: a task's prompt length starts here (tokens)
PROMPT_START = 512.0


@dataclass(frozen=True)
class Skipped:
    row: str
    reason: str


@dataclass
class Usable:
    """A measurement the model can describe, with its catalog entries."""

    m: Measurement
    model: ModelArch
    gpu: GpuSpec


def usable_rows(rows: Sequence[Measurement]) -> tuple[list[Usable], list[Skipped]]:
    """The rows the model describes, and every other row with the reason it is not."""
    ok: list[Usable] = []
    skipped: list[Skipped] = []
    for r in rows:
        if r.architecture == "hybrid":
            skipped.append(
                Skipped(
                    r.where, "Mamba-Transformer hybrid: its state is not a KV cache (out of scope)"
                )
            )
            continue
        try:
            arch = load_model(r.model)
        except NotFoundError:
            skipped.append(Skipped(r.where, f"model {r.model!r} is not in the catalog"))
            continue
        if r.precision != arch.precision and r.precision not in WEIGHT_BYTES:
            skipped.append(
                Skipped(
                    r.where,
                    f"{r.precision} weights of {arch.name} are not in the catalog (it "
                    f"describes its {arch.precision} release)",
                )
            )
            continue
        if arch.experts and r.architecture == "dense" or not arch.experts and r.ep > 1:
            skipped.append(Skipped(r.where, f"the file's architecture differs from {arch.name}'s"))
            continue
        if r.precision != arch.precision:
            # the same model released with other weights (e.g. -FP8): its weight bytes
            arch = dataclasses.replace(
                arch, bytes_per_param=WEIGHT_BYTES[r.precision], expert_bytes_per_param=0.0
            )
        if r.prompt_tokens is None and r.context_tokens is None and not r.task:
            skipped.append(Skipped(r.where, "no prompt or context length and no task"))
            continue
        ok.append(Usable(r, arch, load_gpu(r.gpu)))
    return ok, skipped


def screened_rows(
    rows: Sequence[Measurement], screen: bool = True
) -> tuple[list[Usable], list[Skipped], list[Screened | None]]:
    """:func:`usable_rows` and the consistency screen's verdict on each usable row
    (:func:`model.measured.screen.verdicts`; all None with ``screen`` off): the one place fits,
    predictions and their reports take the screen from."""
    usable, skipped = usable_rows(rows)
    verdicts: list[Screened | None] = [None] * len(usable)
    if screen:
        verdicts = screening.verdicts([u.m for u in usable])
    return usable, skipped, verdicts


def _prompt(u: Usable, prompts: dict[str, float]) -> float:
    if u.m.prompt_tokens is not None:
        return u.m.prompt_tokens
    return prompts[u.m.task]


def context_tokens(u: Usable, prompts: dict[str, float]) -> float:
    """Mean context of a running request: as stated, else prompt + weighted output / 2."""
    if u.m.context_tokens is not None:
        return u.m.context_tokens
    return _prompt(u, prompts) + u.m.output_weighted_tokens / 2.0


def terms_of(u: Usable, prompts: dict[str, float]) -> DecodeTerms:
    return DecodeTerms.of(u.model, u.gpu, u.m.tp, context_tokens(u, prompts), u.m.dp, u.m.ep)


def iteration_s(u: Usable, cal: Calibration, prompts: dict[str, float]) -> float:
    """The model's decode iteration time at the measurement's batch (with the experts
    that batch touches, for a mixture of experts)."""
    return terms_of(u, prompts).time_s(cal, u.m.batch)


def decode_load(u: Usable, cal: Calibration, prompts: dict[str, float]) -> float:
    """Decode load ``x`` of SPEC 2.6 at the measured batch: the token rate ``B / t(B)``
    over the rate at the batch that fills the KV pool (``MEM_FRACTION`` of memory less
    the weights, over the context), at most 1."""
    ctx = context_tokens(u, prompts)
    terms = terms_of(u, prompts)
    mem = kv_memory_bytes(u.model, u.gpu, u.m.tp, MEM_FRACTION, u.m.dp)
    b_max = max(mem / u.model.kv_bytes_at(ctx), u.m.batch)
    rate = u.m.batch / terms.time_s(cal, u.m.batch)
    return min(rate / (b_max / terms.time_s(cal, b_max)), 1.0)


@dataclass
class GroupFit:
    """One (GPU, stack) calibration and how well it fits."""

    gpu: str
    stack: str
    calibration: Calibration
    std: dict[str, float]  # standard error of each fitted parameter (SI)
    fitted: list[str]
    not_fitted: dict[str, str]  # parameter -> why it keeps its estimated value
    rows: int
    models: list[str]


@dataclass
class Fit:
    groups: dict[tuple[str, str], GroupFit]
    prompts: dict[str, float]  # task -> fitted mean prompt length
    prompts_std: dict[str, float]
    skipped: list[Skipped] = field(default_factory=list)
    #: rows the consistency screen kept out of the fit (:mod:`model.measured.screen`)
    screened: list[Screened] = field(default_factory=list)
    screen: bool = True  # whether the screen was applied

    def calibration(self, gpu: str, stack: str) -> Calibration:
        key = (gpu, stack)
        if key not in self.groups:
            known = ", ".join(f"{g}/{s}" for g, s in self.groups)
            raise InputError("calibration", f"no calibration for {gpu}/{stack}; has {known}")
        return self.groups[key].calibration


def _base(gpu: str, model: str) -> Calibration:
    """What a fit starts from and keeps where the rows say nothing: the catalog's
    estimation rule for the pair (never a measured set, so that a fit does not depend
    on an earlier one)."""
    return estimated_calibration(model, gpu)


def std_errors(jac: FloatArray, resid: FloatArray, n_par: int) -> FloatArray:
    """Standard errors of a least-squares fit from its Jacobian at the optimum,
    ``sqrt(diag((J^T J)^-1) s^2)`` with ``s^2`` the residuals' variance."""
    dof = max(resid.size - n_par, 1)
    s2 = float(resid @ resid) / dof
    try:
        cov = np.linalg.pinv(jac.T @ jac) * s2
    except np.linalg.LinAlgError:
        return np.full(n_par, np.inf)
    return np.sqrt(np.maximum(np.diag(cov), 0.0))


def robust_fit(
    residuals: Callable[[FloatArray], FloatArray],
    x0: Sequence[float] | FloatArray,
    lo: Sequence[float] | FloatArray,
    hi: Sequence[float] | FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """The bounded least-squares fit of relative residuals with the robust loss
    (:data:`LOSS`, :data:`F_SCALE`) from ``x0``: the parameters and their standard errors."""
    res = least_squares(
        residuals,
        np.array(x0),
        bounds=(np.array(lo), np.array(hi)),
        x_scale="jac",
        loss=LOSS,
        f_scale=F_SCALE,
    )
    return res.x, std_errors(res.jac, res.fun, len(x0))


def robust_cost(resid: FloatArray) -> float:
    """The robust loss of relative residuals, as ``least_squares`` minimises it with
    :data:`LOSS` and :data:`F_SCALE`: ``0.5 f^2 sum rho((r / f)^2)``, ``rho(z) = 2
    (sqrt(1 + z) - 1)``. Two fits of the same rows compare by it."""
    z = (np.asarray(resid) / F_SCALE) ** 2
    return float(0.5 * F_SCALE**2 * np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))


def _check_determined(key: tuple[str, str], rows: list[Usable]) -> None:
    where = f"{key[0]}/{key[1]}"
    batches = {round(u.m.batch, 3) for u in rows}
    if len(batches) < 2:
        raise InputError(
            "measurements", f"{where}: one batch size only; need at least two to fit t(B)"
        )
    weights = {u.model.weight_bytes / u.m.tp for u in rows}
    if len(weights) < 2:
        raise InputError(
            "measurements",
            f"{where}: every row reads the same weight bytes per GPU; need two models or "
            "tensor-parallel sizes to tell mbu from t_iter",
        )


#: the terms only mixtures of experts determine (fitted in the second stage)
EXPERT_TERMS = ("t_moe_layer_s", "mbu_expert", "mbu_expert_fp4")


def _tasks(rows: Sequence[Usable]) -> list[str]:
    """Tasks whose prompt length the rows do not give (fitted with the calibration)."""
    return sorted(
        {u.m.task for u in rows if u.m.prompt_tokens is None and u.m.context_tokens is None}
    )


def _determined(rows: list[Usable]) -> bool:
    """Whether ``rows`` alone determine the shared decode terms (two batch sizes and
    two weight sizes per GPU; see :func:`_check_determined`)."""
    if not rows:
        return False
    groups: dict[tuple[str, str], list[Usable]] = {}
    for u in rows:
        groups.setdefault((u.gpu.name, u.m.stack), []).append(u)
    try:
        for key, g_rows in groups.items():
            _check_determined(key, g_rows)
    except InputError:
        return False
    return True


def _started(base: Calibration, free: list[str]) -> Calibration:
    """``base`` with the terms SPEC does not have at 0 unless fitted, and every fitted
    term at its starting point."""
    v: dict[str, Any] = {n: 0.0 for n in START}
    for n in free:
        a, b = BOUNDS[n]
        v[n] = min(max(START.get(n, getattr(base, n)), a), b)
    return dataclasses.replace(base, **v)


def _fit_decode(
    rows: list[Usable],
    free: dict[tuple[str, str], list[str]],
    start: dict[tuple[str, str], Calibration],
    known_prompts: dict[str, float],
) -> tuple[
    dict[tuple[str, str], Calibration],
    dict[str, float],
    dict[tuple[tuple[str, str] | None, str], float],
]:
    """Least squares of the decode times of ``rows`` over the groups' ``free`` terms
    (the others as in ``start``) and the prompt lengths of the tasks not in
    ``known_prompts``. Returns the calibrations, the fitted prompt lengths and the
    standard error of every fitted value."""
    keys = sorted(start)
    tasks = [t for t in _tasks(rows) if t not in known_prompts]
    index: list[tuple[tuple[str, str] | None, str]] = []
    lo: list[float] = []
    hi: list[float] = []
    x0: list[float] = []
    for key in keys:
        for n in free.get(key, []):
            index.append((key, n))
            a, b = BOUNDS[n]
            lo.append(a)
            hi.append(b)
            x0.append(min(max(getattr(start[key], n), a), b))
    for t in tasks:
        index.append((None, t))
        lo.append(PROMPT_BOUNDS[0])
        hi.append(PROMPT_BOUNDS[1])
        x0.append(PROMPT_START)

    def unpack(x: FloatArray) -> tuple[dict[tuple[str, str], Calibration], dict[str, float]]:
        vals: dict[tuple[str, str], dict[str, Any]] = {k: {} for k in keys}
        prompts = dict(known_prompts)
        for (key, n), v in zip(index, x, strict=True):
            if key is None:
                prompts[n] = float(v)
            else:
                vals[key][n] = float(v)
        return {k: dataclasses.replace(start[k], **vals[k]) for k in keys}, prompts

    def residuals(x: FloatArray) -> FloatArray:
        cals, prompts = unpack(x)
        return np.array(
            [iteration_s(u, cals[(u.gpu.name, u.m.stack)], prompts) / u.m.itl_s - 1.0 for u in rows]
        )

    if not index:
        return dict(start), {}, {}
    x, std = robust_fit(residuals, x0, lo, hi)
    cals, prompts = unpack(x)
    fitted_prompts = {t: prompts[t] for t in tasks}
    return cals, fitted_prompts, {k: float(v) for k, v in zip(index, std, strict=True)}


def fit(
    rows: Sequence[Measurement],
    progress: Callable[[str], None] | None = None,
    screen: bool = True,
) -> Fit:
    """Fit every (GPU, stack) the rows cover (see the module docstring), without the
    rows the consistency screen keeps out (``screen``)."""
    say = progress or (lambda _m: None)
    usable, skipped, verdicts = screened_rows(rows, screen)
    if not usable:
        reasons = sorted({s.reason for s in skipped})
        raise InputError("measurements", "no row the model describes: " + "; ".join(reasons))
    screened = screening.ordered(verdicts)
    if screened:
        per_rule = screening.counts(screened)
        say(
            f"screened: {per_rule['itl']} rows out, the power of {per_rule['power']} more "
            "(docs/calibration.md)"
        )
    usable = screening.apply(usable, verdicts)
    groups: dict[tuple[str, str], list[Usable]] = {}
    for u in usable:
        groups.setdefault((u.gpu.name, u.m.stack), []).append(u)
    for key, g_rows in groups.items():
        _check_determined(key, g_rows)
    keys = sorted(groups)
    names = list(BOUNDS)
    # which parameters each group can determine
    free: dict[tuple[str, str], list[str]] = {}
    not_fitted: dict[tuple[str, str], dict[str, str]] = {}
    for key in keys:
        g_rows = groups[key]
        nf: dict[str, str] = {}
        if not any(u.m.tp * u.m.dp > 1 for u in g_rows):
            nf["t_coll_s"] = "no rows on more than one GPU"
        if not any(u.model.experts for u in g_rows):
            nf["t_moe_layer_s"] = "no rows of a mixture-of-experts model"
            nf["mbu_expert"] = "no rows of a mixture-of-experts model (the experts read at mbu)"
        if not any(u.model.fp4_experts for u in g_rows):
            nf["mbu_expert_fp4"] = "no rows with 4-bit experts (they read at mbu_expert)"
        if not any(u.model.fp8_layers for u in g_rows):
            nf["t_fp8_layer_s"] = "no rows of a model with FP8 weights"
        free[key] = [n for n in names if n not in nf]
        not_fitted[key] = nf
    bases = {key: _base(key[0], groups[key][0].model.name) for key in keys}
    start = {key: _started(bases[key], free[key]) for key in keys}
    # two stages: the terms every model shares from the dense rows, where the model
    # describes all the work; then the experts' own terms from the MoE rows, the
    # shared ones held (docs/calibration.md, section 4). A group whose dense rows
    # cannot determine the shared terms alone is fitted in one stage.
    split = {
        key: _determined([u for u in groups[key] if not u.model.experts])
        and any(u.model.experts for u in groups[key])
        for key in keys
    }
    first = {key: [n for n in free[key] if not (split[key] and n in EXPERT_TERMS)] for key in keys}
    rows1 = [u for u in usable if not (split[(u.gpu.name, u.m.stack)] and u.model.experts)]
    say(
        f"fitting decode times: {len(rows1)} rows, {len(keys)} GPU/stack groups, "
        f"{len(_tasks(rows1))} tasks"
    )
    cals, prompts, std = _fit_decode(rows1, first, start, {})
    rows2 = [u for u in usable if split[(u.gpu.name, u.m.stack)] and u.model.experts]
    if rows2:
        second = {key: [n for n in free[key] if n not in first[key]] for key in keys}
        say(f"fitting the experts' terms: {len(rows2)} rows of mixtures of experts")
        cals, more, std2 = _fit_decode(rows2, second, cals, prompts)
        prompts.update(more)
        std.update(std2)
    prompts_std = {n: s for (key, n), s in std.items() if key is None}
    out: dict[tuple[str, str], GroupFit] = {}
    for key in keys:
        g_rows = groups[key]
        cal = cals[key]
        g_std = {n: s for (k, n), s in std.items() if k == key}
        fitted = list(free[key])
        nf = dict(not_fitted[key])
        # like the shared decode terms, the power ramp comes from the dense rows when
        # they determine it alone
        p_rows = [u for u in g_rows if not (split[key] and u.model.experts)]
        if not any(u.m.power_w is not None for u in p_rows):
            p_rows = g_rows  # only the mixtures of experts measured power
        cal, p_std, p_nf = _fit_power(p_rows, cal, prompts, say)
        g_std.update(p_std)
        nf.update(p_nf)
        fitted += [n for n in p_std]
        cal, m_std, m_nf = _fit_prefill(g_rows, cal)
        g_std.update(m_std)
        nf.update(m_nf)
        fitted += [n for n in m_std]
        for n in ("c_attn", "p0_prefill_w", "gamma_prefill_w", "psat_prefill_w", "p_idle_w"):
            nf.setdefault(
                n, "not identifiable from these measurements; kept from the catalog's estimate"
            )
        models = sorted({u.model.name for u in g_rows})
        source = (
            f"fitted to {len(g_rows)} measurements of {', '.join(models)} on {key[0]} under "
            f"{key[1]} ({', '.join(sorted({u.m.file for u in g_rows}))}); not fitted: "
            + ", ".join(sorted(nf))
        )
        cal = dataclasses.replace(cal, measured=True, source=source)
        out[key] = GroupFit(key[0], key[1], cal, g_std, fitted, nf, len(g_rows), models)
    return Fit(out, prompts, prompts_std, skipped, screened, screen)


def _fit_power(
    rows: list[Usable], cal: Calibration, prompts: dict[str, float], say: Callable[[str], None]
) -> tuple[Calibration, dict[str, float], dict[str, str]]:
    names = ("p0_decode_w", "gamma_decode_w", "psat_decode_w")
    pts = [(decode_load(u, cal, prompts), u.m.power_w) for u in rows if u.m.power_w is not None]
    if not pts:
        return cal, {}, {n: "no power measurements" for n in names}
    xs = np.array([p[0] for p in pts])
    ps = np.array([p[1] for p in pts], dtype=float)
    if np.ptp(xs) < 0.05:
        raise InputError(
            "measurements",
            f"{rows[0].gpu.name}: power measured at one decode load only; need loads that "
            "differ to fit the ramp",
        )
    say(f"fitting the decode power ramp of {rows[0].gpu.name}: {len(pts)} rows")
    tdp = rows[0].gpu.tdp_w

    def resid(v: FloatArray) -> FloatArray:
        p0, gamma, rise = v
        return instance_power_w(p0, gamma, p0 + rise, xs) / ps - 1.0

    x0 = np.array([float(np.min(ps)), float(np.ptp(ps)) * 2.0, float(np.ptp(ps))])
    x, s = robust_fit(resid, x0, [0.0, 0.0, 0.0], [tdp * 1.2, tdp * 20.0, tdp * 1.2])
    p0, gamma, rise = (float(v) for v in x)
    std = {
        "p0_decode_w": float(s[0]),
        "gamma_decode_w": float(s[1]),
        "psat_decode_w": float(math.hypot(s[0], s[2])),
    }
    return (
        dataclasses.replace(cal, p0_decode_w=p0, gamma_decode_w=gamma, psat_decode_w=p0 + rise),
        std,
        {},
    )


def _fit_prefill(
    rows: list[Usable], cal: Calibration
) -> tuple[Calibration, dict[str, float], dict[str, str]]:
    """``mfu`` from prefill rates: a prompt of ``l`` tokens takes
    ``(2N l + c_a L d l^2) / (pi G mfu)`` (SPEC 2.2, ``N`` the active parameters, ``G``
    the instance's GPUs), so each row gives ``mfu = rate (2N + c_a L d l) / (pi G)``."""
    pts = [
        u for u in rows if u.m.prefill_tokens_per_s is not None and u.m.prompt_tokens is not None
    ]
    if not pts:
        return cal, {}, {"mfu": "no prefill rates with prompt lengths"}
    rates = []
    for u in pts:
        l_in = u.m.prompt_tokens or 0.0
        # t_P at full peak (mfu 1) per token: a_P + b_P l (sliding layers included)
        a_p, b_p = prefill_coefficients(
            u.model, cal, u.gpu.peak_flops(u.model) * u.m.tp * u.m.dp, l_in, l_in * l_in
        )
        rates.append((u.m.prefill_tokens_per_s or 0.0) * (a_p + b_p * l_in))
    est = np.array(rates)
    mfu = float(np.mean(est))
    if not 0 < mfu <= 1:
        raise InputError(
            "measurements", f"{rows[0].gpu.name}: prefill rates imply mfu {mfu:.3g}, outside (0, 1]"
        )
    std = float(np.std(est, ddof=1) / math.sqrt(len(est))) if len(est) > 1 else math.inf
    return dataclasses.replace(cal, mfu=mfu), {"mfu": std}, {}


def predict(
    rows: Sequence[Measurement], f: Fit | None = None, screen: bool = True
) -> dict[str, Any]:
    """The model's ITL and power per GPU beside each measurement (rows the model cannot
    describe, or whose GPU and stack the fit lacks, are listed with the reason). A row
    the consistency screen keeps out (``screen``) is predicted too and says why
    (``screened``, its rule in ``screened_rule``); the summary leaves it out.

    With no fit ``f``, each row is predicted with the shipped calibration of its model
    and GPU (:func:`model.catalog.load_calibration`, as every other command uses it:
    measured where the catalog has a measured set, estimated elsewhere) and the
    shipped prompt lengths of the tasks; each row says which (``calibration``)."""
    usable, skipped, verdicts = screened_rows(rows, screen)
    prompts = shipped_prompt_tokens() if f is None else f.prompts
    out_rows = []
    for u, verdict in zip(usable, verdicts, strict=True):
        key = (u.gpu.name, u.m.stack)
        if f is not None and key not in f.groups:
            skipped.append(Skipped(u.m.where, f"no calibration for {key[0]}/{key[1]} in the file"))
            continue
        task = u.m.task
        if u.m.prompt_tokens is None and u.m.context_tokens is None and task not in prompts:
            why = "fitted" if f is not None else "shipped"
            skipped.append(Skipped(u.m.where, f"task {task!r} has no {why} prompt length"))
            continue
        if f is not None:
            cal = f.groups[key].calibration
        else:
            cal = load_calibration(u.model.name, u.gpu.name)
        itl = iteration_s(u, cal, prompts)
        power = None
        if u.m.power_w is not None:
            x = decode_load(u, cal, prompts)
            power = float(
                instance_power_w(cal.p0_decode_w, cal.gamma_decode_w, cal.psat_decode_w, x)
            )
        label = "measured" if cal.measured else "estimated"
        row = prediction_row(u, itl, power, label, verdict)
        out_rows.append(row)
    return {
        "rows": out_rows,
        "summary": summarise(out_rows),
        "skipped": [dataclasses.asdict(s) for s in skipped],
    }


def prediction_row(
    u: Usable,
    itl_s: float,
    power_w: float | None,
    calibration: str,
    verdict: Screened | None = None,
) -> dict[str, Any]:
    """One predicted row beside its measurement, in the shape every prediction report
    shares (``pdwatt predict``, leave-one-model-out, the kernel-based fit)."""
    row: dict[str, Any] = {
        "where": u.m.where,
        "model": u.m.model,
        "gpu": u.gpu.name,
        "tp": u.m.tp,
        "ep": u.m.ep,
        "kind": "moe" if u.model.experts else "dense",
        "batch": u.m.batch,
        "itl_ms": {"measured": u.m.itl_s * 1e3, "predicted": itl_s * 1e3},
        "power_w": {"measured": u.m.power_w, "predicted": power_w},
        "calibration": calibration,
    }
    if verdict is not None:
        row["screened"] = verdict.reason
        row["screened_rule"] = verdict.rule
    return row


def judged(r: dict[str, Any], key: str) -> bool:
    """Whether a predicted row's ``key`` (``itl_ms``, ``power_w``) enters the error
    statistics: measured, predicted and not kept out by the screen."""
    rule = r.get("screened_rule")
    return (
        r[key]["measured"] is not None
        and r[key]["predicted"] is not None
        and not (rule and key in screening.EXCLUDES[rule])
    )


def _errors(rows: list[dict[str, Any]], key: str) -> FloatArray:
    return np.array(
        [r[key]["predicted"] / r[key]["measured"] - 1.0 for r in rows if judged(r, key)]
    )


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst relative error, ITL and power, overall, per GPU and per GPU and
    kind (dense or mixture of experts), and the rows the screen kept out of them per
    rule (``screened``; ``rows`` counts every row, each error its rows judged)."""

    def stats(sel: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rows": len(sel),
            "screened": {
                rule: sum(r.get("screened_rule") == rule for r in sel) for rule in screening.RULES
            },
        }
        for key in ("itl_ms", "power_w"):
            e = _errors(sel, key)
            out[key] = (
                {
                    "median_abs_error": float(np.median(np.abs(e))),
                    "worst_error": float(e[np.argmax(np.abs(e))]),
                    "rows": int(e.size),
                }
                if e.size
                else None
            )
        return out

    per_gpu = {
        g: stats([r for r in rows if r["gpu"] == g]) for g in sorted({r["gpu"] for r in rows})
    }
    per_kind = {
        f"{g}/{k}": stats([r for r in rows if r["gpu"] == g and r.get("kind") == k])
        for g in sorted({r["gpu"] for r in rows})
        for k in ("dense", "moe")
        if any(r["gpu"] == g and r.get("kind") == k for r in rows)
    }
    return {"all": stats(rows), "per_gpu": per_gpu, "per_gpu_and_kind": per_kind}


def leave_one_model_out(
    rows: Sequence[Measurement],
    progress: Callable[[str], None] | None = None,
    screen: bool = True,
) -> dict[str, Any]:
    """For each model, fit on the others and predict its rows (``docs/calibration.md``);
    the screen (a rule within each file) applies to both sides."""
    say = progress or (lambda _m: None)
    usable, _ = usable_rows(rows)
    models = sorted({u.model.name for u in usable})
    out_rows: list[dict[str, Any]] = []
    refused: dict[str, str] = {}
    for i, name in enumerate(models):
        say(f"leave-one-model-out {i + 1}/{len(models)}: {name}")
        test = [u.m for u in usable if u.model.name == name]
        held = set(test)
        train = [r for r in rows if r not in held]
        try:
            f = fit(train, screen=screen)
        except InputError as e:
            refused[name] = str(e)
            continue
        res = predict(test, f, screen)
        for r in res["rows"]:
            r["held_out"] = name
        out_rows.extend(res["rows"])
    return {"rows": out_rows, "summary": summarise(out_rows), "refused": refused}


# --------------------------------------------------------------------------
# Calibration files

#: the ``format`` a calibration file states
FILE_FORMAT = "pdwatt-calibration/1"


def _finite_or_none(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def to_document(f: Fit, rows: Sequence[Measurement] | None = None) -> dict[str, Any]:
    """The calibration file's content: one entry per (GPU, stack), SI units, with each
    fitted parameter's standard error and why the others were not fitted, the rows
    the consistency screen kept out; with ``rows``, also the in-sample errors."""
    doc: dict[str, Any] = {
        "format": FILE_FORMAT,
        "calibrations": [
            {
                "gpu": g.gpu,
                "stack": g.stack,
                "calibration": dataclasses.asdict(g.calibration),
                "std": {k: _finite_or_none(v) for k, v in g.std.items()},
                "fitted": g.fitted,
                "not_fitted": g.not_fitted,
                "rows": g.rows,
                "models": g.models,
            }
            for g in f.groups.values()
        ],
        "prompt_tokens": {
            t: {"value": v, "std": _finite_or_none(f.prompts_std.get(t, math.inf))}
            for t, v in f.prompts.items()
        },
        "skipped": [dataclasses.asdict(s) for s in f.skipped],
        "screen": {"applied": f.screen, **screening.counts(f.screened)},
        "screened": [dataclasses.asdict(s) for s in f.screened],
    }
    if rows is not None:
        doc["in_sample"] = predict(rows, f, f.screen)["summary"]
    return doc


def from_document(doc: object, where: str = "calibration") -> Fit:
    """A :class:`Fit` from a calibration file's content (errors name the field)."""
    if not isinstance(doc, dict):
        raise InputError(where, "must be a JSON object")
    if doc.get("format") != FILE_FORMAT:
        raise InputError(f"{where}.format", f"must be {FILE_FORMAT!r}, got {doc.get('format')!r}")
    entries = doc.get("calibrations")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{where}.calibrations", "must be a non-empty list")
    groups: dict[tuple[str, str], GroupFit] = {}
    names = {f.name for f in dataclasses.fields(Calibration)}
    for i, e in enumerate(entries):
        at = f"{where}.calibrations[{i}]"
        if not isinstance(e, dict):
            raise InputError(at, "must be an object")
        try:
            gpu = load_gpu(str(e.get("gpu"))).name
        except NotFoundError as err:
            raise InputError(f"{at}.gpu", err.reason) from None
        stack = str(e.get("stack", "")).strip().lower()
        if not stack:
            raise InputError(f"{at}.stack", "missing")
        values = e.get("calibration")
        if not isinstance(values, dict):
            raise InputError(f"{at}.calibration", "must be an object")
        unknown = set(values) - names
        if unknown:
            raise InputError(f"{at}.calibration.{sorted(unknown)[0]}", "unknown field")
        try:
            cal = Calibration(**values)
        except InputError as err:
            raise InputError(f"{at}.calibration.{err.field}", err.reason) from None
        except TypeError as err:
            raise InputError(f"{at}.calibration", str(err)) from None
        std = {
            str(k): _optional_number(f"{at}.std.{k}", v)
            for k, v in _mapping(f"{at}.std", e.get("std")).items()
        }
        rows = e.get("rows", 0)
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise InputError(f"{at}.rows", f"must be a count, got {rows!r}")
        groups[(gpu, stack)] = GroupFit(
            gpu,
            stack,
            cal,
            std,
            [str(x) for x in _sequence(f"{at}.fitted", e.get("fitted"))],
            {str(k): str(v) for k, v in _mapping(f"{at}.not_fitted", e.get("not_fitted")).items()},
            rows,
            [str(x) for x in _sequence(f"{at}.models", e.get("models"))],
        )
    prompts: dict[str, float] = {}
    prompts_std: dict[str, float] = {}
    for t, v in _mapping(f"{where}.prompt_tokens", doc.get("prompt_tokens")).items():
        if not isinstance(v, dict):
            raise InputError(f"{where}.prompt_tokens.{t}", "must be {value, std}")
        value = _optional_number(f"{where}.prompt_tokens.{t}.value", v.get("value"))
        if not math.isfinite(value):
            raise InputError(f"{where}.prompt_tokens.{t}.value", "missing")
        prompts[str(t)] = value
        prompts_std[str(t)] = _optional_number(f"{where}.prompt_tokens.{t}.std", v.get("std"))
    return Fit(groups, prompts, prompts_std)


def _mapping(field: str, value: object) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(field, "must be an object")
    return value


def _sequence(field: str, value: object) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(field, "must be a list")
    return value


def _optional_number(field: str, value: object) -> float:
    """A number, or inf for null (a standard error the fit could not give)."""
    if value is None:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(field, f"must be a number or null, got {value!r}")
    return float(value)
