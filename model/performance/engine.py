"""Iteration times from measured kernels plus the serving engine's own overheads.

A forward pass composed from kernel tables (:mod:`model.performance.kernels`) holds only the
measured kernels; a serving engine adds what no table measures: its scheduler and
sampler once per iteration, a per-request share of both (sampling, detokenising,
bookkeeping) and, per layer, the small kernels no table holds (norms, activation,
rotary embedding, the KV-cache write) with the gaps between kernels. So, per GPU,

    t_D(B, c) = K_D(B, c) + t_iter + t_req B / D + t_layer n_layers
    t_P(l)    = K_P(l)    + t_iter + t_layer n_layers

with ``K`` the composed kernels' time and three overheads per (GPU, framework) fitted
to whole-server measurements (:mod:`model.measured.engine_fit`, ``docs/kernels.md``). ``D`` is
the instance's data-parallel attention ranks (1 without): each rank is a process of
its own that schedules and samples its share ``B / D`` of the batch, all at once.

The capacity model (SPEC 2.2-2.5) keeps its forms, ``t_D(B) = alpha + g B`` at the
deployment's context and ``t_P(l) = a_P l + b_P l^2``: :func:`decode_line` and
:func:`prefill_curve` give the least-squares coefficients (in relative error) of those
forms through the composed times over the batches and prompt lengths the deployment
meets, with the largest relative deviation of the form from the composed times, so
fronts and schedule tables keep their speed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, overload

import numpy as np

from model.catalog import ModelArch, load_gpu
from model.errors import InputError, OutsideTableError
from model.performance.kernels import (
    KernelDatabase,
    KernelModel,
    KernelSetup,
    PhaseTime,
    version_key,
)
from model.performance.speculative import check_draft, model_accepted_tokens

#: GPUs of the catalog and the folder names of AIConfigurator's tables
GPU_FOLDERS = {
    "h100-sxm": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
}
#: points per decade of batch or prompt length sampled for the linear forms
POINTS_PER_DECADE = 8
#: tokens per prefill chunk (the engines' chunked-prefill size; SGLang and vLLM default
#: to 8,192 on 80 GB-class GPUs)
PREFILL_CHUNK = 8192


#: an overhead's value for one case, or an array of them (one per case)
Num = float | np.ndarray


@overload
def engine_overhead_s(
    t_iter_s: float, t_req_s: float, t_layer_s: float, per_rank: float, layers: float
) -> float: ...


@overload
def engine_overhead_s(
    t_iter_s: Num, t_req_s: Num, t_layer_s: Num, per_rank: Num, layers: np.ndarray
) -> np.ndarray: ...


def engine_overhead_s(
    t_iter_s: Num, t_req_s: Num, t_layer_s: Num, per_rank: Num, layers: Num
) -> Num:
    """What the engine adds to one iteration's kernels (module docstring): ``t_iter +
    t_req B / D + t_layer n_layers``, with ``per_rank`` the requests of each data-parallel
    rank (``B / D``; 0 for a prefill iteration). Floats, or arrays with one per case."""
    return t_iter_s + t_req_s * per_rank + t_layer_s * layers


@dataclass(frozen=True)
class EngineOverheads:
    """What the serving engine adds to the composed kernels, per GPU (seconds)."""

    t_iter_s: float = 0.0  # per iteration (scheduler, sampler launch)
    t_req_s: float = 0.0  # per request per decode iteration (sampling, bookkeeping)
    t_layer_s: float = 0.0  # per layer per iteration (kernels no table holds, gaps)

    def __post_init__(self) -> None:
        for name in ("t_iter_s", "t_req_s", "t_layer_s"):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not (math.isfinite(v) and v >= 0)
            ):
                raise InputError(name, f"must be a finite number >= 0 (seconds), got {v!r}")
            object.__setattr__(self, name, float(v))

    def as_dict(self) -> dict[str, float]:
        return {"t_iter_s": self.t_iter_s, "t_req_s": self.t_req_s, "t_layer_s": self.t_layer_s}


@dataclass(frozen=True)
class KernelSource:
    """Which kernel tables a composition reads: the database folder, and per GPU (catalog
    name) the framework and version of its tables."""

    folder: str
    framework: str
    versions: tuple[tuple[str, str], ...]  # (catalog GPU, version)
    #: how the versions were chosen where not as asked (:func:`choose_version`)
    notes: tuple[str, ...] = ()

    def version(self, gpu: str) -> str:
        for g, v in self.versions:
            if g == gpu:
                return v
        raise InputError(
            "kernels",
            f"no {self.framework} kernel tables chosen for {gpu} (have: "
            f"{', '.join(g for g, _ in self.versions) or 'none'})",
        )

    def describe(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "framework": self.framework,
            "versions": {g: v for g, v in self.versions},
            **({"notes": list(self.notes)} if self.notes else {}),
        }


#: the PyPI package that ships AIConfigurator's kernel tables (its ``systems/data``)
KERNEL_PACKAGE = "aiconfigurator-core"
#: why a command that needs kernel tables cannot have them without a folder
NO_KERNEL_PACKAGE = (
    f"no kernel database is set and the {KERNEL_PACKAGE} package, which ships one, is not "
    f"installed (pip install {KERNEL_PACKAGE}: wheels for Linux x86_64 and aarch64, "
    "Python 3.11-3.13)"
)


@cache
def installed_kernels() -> str | None:
    """The kernel database the installed :data:`KERNEL_PACKAGE` ships (its
    ``systems/data`` folder, AIConfigurator's layout), found without importing the
    package; None when it is not installed."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "systems" / "data"
        if folder.is_dir():
            return str(folder)
    return None


def database_label(folder: str) -> str:
    """How reports name a kernel database: the package and its version for the
    installed package's, else the folder's name (never a machine path)."""
    if folder == installed_kernels():
        try:
            return f"{KERNEL_PACKAGE} {importlib.metadata.version(KERNEL_PACKAGE)}"
        except importlib.metadata.PackageNotFoundError:
            return KERNEL_PACKAGE
    return Path(folder).name


def choose_version(
    folder: str, gpu: str, framework: str, asked: str | None, calibrated: str
) -> tuple[str, tuple[str, ...]]:
    """The version of ``framework``'s tables for catalog GPU ``gpu`` in ``folder``, and
    a note when it is not the one meant: ``asked`` when given (a missing one is refused
    later, naming what the database has); else the engine calibration's version
    (``calibrated``, the tables its overheads were fitted with) when the database has
    it, else the newest it has, said in the note (the overheads then come from other
    tables of the same framework)."""
    if asked:
        return asked, ()
    have = sorted(
        (v for f, v in open_database(folder).versions(gpu_folder(gpu), "gemm") if f == framework),
        key=version_key,
    )
    if not have or calibrated in have:
        return calibrated, ()
    newest = have[-1]
    return newest, (
        f"{gpu} {framework} {calibrated} tables, which its engine calibration was fitted "
        f"with, are not in {database_label(folder)}: its newest, {newest}, is read, with "
        f"the overheads fitted on {calibrated}",
    )


def gpu_folder(gpu: str) -> str:
    """The tables' folder name of a catalog GPU."""
    try:
        return GPU_FOLDERS[gpu]
    except KeyError:
        raise InputError(
            "gpu", f"no kernel tables for {gpu!r} (have: {', '.join(GPU_FOLDERS)})"
        ) from None


@cache
def open_database(folder: str) -> KernelDatabase:
    """One :class:`KernelDatabase` per folder per process (tables load on first use)."""
    path = Path(folder)
    if not path.is_dir():
        raise InputError("kernels", f"kernel database folder {folder!r} does not exist")
    return KernelDatabase(path)


def weight_dtype(model: ModelArch) -> str:
    """The GEMM tables' dtype of a model's weights."""
    return "fp8" if model.bytes_per_param == 1.0 else "bfloat16"


@dataclass
class KernelTimes:
    """Composed kernel times of one (model, GPU, stack, TP, EP) with engine overheads,
    memoised per shape (a composition costs a few hundred table lookups). With
    ``draft_tokens`` (speculative decoding with the model's MTP module,
    :mod:`model.performance.speculative`), a decode iteration drafts and verifies that many tokens
    per request and gains :func:`model.performance.speculative.model_accepted_tokens` of them:
    :meth:`decode_s` is then the iteration per token gained, the time each request
    waits per output token, so that every form built on it (throughput ``B / t_D``,
    TPOT ``t_D``) reads as one token per iteration."""

    kernels: KernelModel
    overheads: EngineOverheads = field(default_factory=EngineOverheads)
    draft_tokens: int = 0
    _decode: dict[tuple[float, float], PhaseTime] = field(default_factory=dict, repr=False)
    _prefill: dict[int, PhaseTime] = field(default_factory=dict, repr=False)

    @classmethod
    def of(
        cls,
        source: KernelSource,
        model: ModelArch,
        gpu: str,
        tp: int,
        ep: int = 1,
        overheads: EngineOverheads | None = None,
        kv_dtype: str = "bfloat16",
        attention_dp: int = 1,
        draft_tokens: int = 0,
    ) -> KernelTimes:
        setup = KernelSetup(
            gpu_folder(gpu),
            source.framework,
            source.version(gpu),
            tp=tp,
            ep=ep,
            weight_dtype=weight_dtype(model),
            kv_dtype=kv_dtype,
            attention_dp=attention_dp,
            fabric=load_gpu(gpu).fabric,
        )
        km = KernelModel(open_database(source.folder), model, setup)
        check_draft(model, draft_tokens)
        return cls(km, overheads or EngineOverheads(), draft_tokens)

    @property
    def layers(self) -> int:
        return self.kernels.model.layers

    def decode_phase(self, batch: float, context: float) -> PhaseTime:
        """One decode iteration's kernels; a fractional batch (a measured mean) is the
        linear interpolation between its floor and ceiling (:meth:`KernelModel.decode`)."""
        key = (float(batch), float(context))
        if key not in self._decode:
            self._decode[key] = self.kernels.decode(batch, context)
        return self._decode[key]

    def prefill_phase(self, tokens: int) -> PhaseTime:
        if tokens not in self._prefill:
            self._prefill[tokens] = self.kernels.prefill(tokens)
        return self._prefill[tokens]

    def decode_kernels_s(self, batch: float, context: float) -> float:
        """Composed kernels of one decode iteration."""
        return self.decode_phase(batch, context).time_s

    def decode_s(self, batch: float, context: float) -> float:
        """``t_D(B, c)``: kernels plus the engine's overheads; with ``draft_tokens``, the
        speculative iteration (:meth:`KernelModel.t_decode_speculative`) with its
        overheads, over the tokens it gains per request."""
        o = self.overheads
        per_rank = batch / self.kernels.setup.attention_dp  # each rank its own share
        extra = engine_overhead_s(o.t_iter_s, o.t_req_s, o.t_layer_s, per_rank, self.layers)
        d = self.draft_tokens
        if not d:
            return self.decode_kernels_s(batch, context) + extra
        verify = self.decode_phase(batch * (1 + d), context)  # kept, as decode_power_w reads it
        k = self.kernels.speculative_s(verify, self.decode_phase(batch, context), batch, d)
        return (k + extra) / model_accepted_tokens(self.kernels.model, d)

    def prefill_s(self, tokens: int) -> float:
        """``t_P(l)`` of one prompt: kernels plus the engine's per-iteration overheads."""
        o = self.overheads
        return self.prefill_phase(tokens).time_s + engine_overhead_s(
            o.t_iter_s, 0.0, o.t_layer_s, 0.0, self.layers
        )

    def decode_power_w(self, batch: float, context: float) -> float | None:
        """Mean power of a decode iteration where the tables measure each kernel's power:
        the kernels' time-weighted power, over the whole iteration. The engine's overheads
        are mostly the small per-layer kernels no table holds (norms, activation, rotary
        embedding, the KV-cache write), run between the measured ones, and the GPU keeps
        its clocks through them; counting them at idle power instead puts B200 decode
        power 25% below the measured (``docs/calibration.md``, section 8). With
        ``draft_tokens``, the verifying pass's (``B (1 + d)`` tokens), which takes most of
        the iteration. None where a kernel's power is unmeasured."""
        return self.decode_phase(batch * (1 + self.draft_tokens), context).power_w


def _grid(lo: float, hi: float) -> np.ndarray:
    """Integers from ``lo`` to ``hi``, geometrically spaced, both ends included."""
    if hi <= lo:
        return np.array([max(1, round(lo))])
    n = max(2, math.ceil(math.log10(hi / lo) * POINTS_PER_DECADE) + 1)
    return np.unique(np.round(np.geomspace(lo, hi, n)).astype(int))


@dataclass(frozen=True)
class LinearForm:
    """Coefficients of a capacity-model form through composed times, and how far the
    form strays from them (largest relative deviation over the points). ``extends_beyond``
    (prefill only): the longest prompt whose attention the tables measure, when the
    workload's longest prompt lies beyond it and the form carries it there (None: every
    length is measured)."""

    coefficients: tuple[float, float]
    worst_deviation: float
    points: int
    domain: tuple[float, float] = (1.0, 1.0)  # the batches or prompt lengths sampled
    extends_beyond: float | None = None


def all_experts_batch(model: ModelArch) -> float:
    """The batch from which a decode iteration reads (nearly) every routed expert:
    ``(1 - k/E)^B < 1%``, ``B > ln(0.01) / ln(1 - k/E)`` (1 for a dense model)."""
    if not model.experts or model.experts_per_token >= model.experts:
        return 1.0
    return math.log(0.01) / math.log(1.0 - model.experts_per_token / model.experts)


def decode_line(times: KernelTimes, context: float, batch_max: float) -> LinearForm:
    """``(alpha, g)`` of ``t_D(B) = alpha + g B`` at ``context``: least squares in relative
    error over a geometric grid of batches up to ``batch_max``, from 1 for a dense model
    and, for a mixture of experts, from :func:`all_experts_batch` (below it the batch
    leaves experts unread and the time bends; the roofline line reads every expert too,
    ``docs/calibration.md`` section 7), or from 1 where the pool holds no such batch."""
    top = max(1.0, math.floor(batch_max))
    first = all_experts_batch(times.kernels.model)
    start = float(math.ceil(first)) if first < top else 1.0
    b = _grid(start, top)
    t = np.array([times.decode_s(int(x), context) for x in b])
    if len(b) == 1:  # one point: the line through it with the composed marginal cost
        x = int(b[0])
        g = times.decode_s(x + 1, context) - t[0]
        line = (float(t[0] - g * x), float(g))
        return LinearForm(line, 0.0, 1, (float(x), float(x)))
    a = np.column_stack([np.ones_like(b, dtype=float), b.astype(float)]) / t[:, None]
    (alpha, g), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    fit = alpha + g * b
    worst = float(np.max(np.abs(fit / t - 1.0)))
    return LinearForm((float(alpha), float(g)), worst, len(b), (float(b[0]), float(b[-1])))


#: prompt lengths from which the attention term is fitted (tokens): below, a prompt's
#: attention is its kernels' launch floor, which a chunked prefill shares between the
#: prompts of a chunk (one attention call per layer over all of them)
ATTENTION_FIT_FROM = 512.0


def prefill_curve(
    times: KernelTimes, longest: float, chunk_tokens: int = PREFILL_CHUNK
) -> LinearForm:
    """``(a_P, b_P)`` of ``t_P(l) = a_P l + b_P l^2`` (SPEC 2.2) from composed prefills.

    A loaded prefill instance runs prompts in chunks of ``chunk_tokens`` tokens (chunked
    prefill), so a prompt's share of everything but attention (the GEMMs, which read the
    weights once per chunk, the collectives, the engine's overheads) is its tokens' share
    of a full chunk: ``a_0 = (K_P(chunk) - attention(chunk) + t_iter + t_layer n) / chunk``
    per token. Attention is the prompt's own, ``attention(l)`` over its ``l`` tokens
    (:meth:`KernelModel.prefill_attention`), and ``a_1 l + b_P l^2`` is its non-negative
    least-squares fit over prompt lengths from :data:`ATTENTION_FIT_FROM` (or the longest,
    if shorter) to ``longest``, in seconds (the long prompts, whose attention matters,
    weigh most). ``a_P = a_0 + a_1``; the deviation reported is the form's against
    ``a_0 l + attention(l)`` over those lengths. A longest prompt beyond what the
    attention table measures is carried by the form (attention work grows as ``l^2``)
    and said in ``extends_beyond``."""
    from scipy.optimize import nnls

    full = times.prefill_phase(chunk_tokens)
    o = times.overheads
    rest = full.time_s - full.by_name().get("attention", 0.0)
    a0 = (rest + engine_overhead_s(o.t_iter_s, 0.0, o.t_layer_s, 0.0, times.layers)) / chunk_tokens
    top = max(1.0, longest)
    lengths = _grid(min(ATTENTION_FIT_FROM, top), top)
    attn: list[float] = []
    for x in lengths:
        try:
            attn.append(times.kernels.prefill_attention(int(x)).time_s)
        except OutsideTableError:
            if len(attn) < 2:
                raise
            break
    ll = lengths[: len(attn)].astype(float)
    at = np.array(attn)
    (a1, b_p), _ = nnls(np.column_stack([ll, ll * ll]), at)
    a_p = a0 + float(a1)
    total = a0 * ll + at
    fit = a_p * ll + b_p * ll * ll
    worst = float(np.max(np.abs(fit / total - 1.0)))
    beyond = float(ll[-1]) if len(attn) < len(lengths) else None
    return LinearForm((a_p, float(b_p)), worst, len(ll), (float(ll[0]), float(ll[-1])), beyond)


#: fitted engine overheads shipped with the product, from ML.ENERGY's whole-server
#: measurements (``scripts/fit_engine.py``)
SHIPPED_FILE = Path(__file__).parents[1] / "data" / "engine_calibrations.json"
#: fitted engine overheads shipped with the product, from AIConfigurator's measured
#: serving runs (``scripts/fit_engine_silicon.py``: TensorRT-LLM)
SHIPPED_SILICON_FILE = Path(__file__).parents[1] / "data" / "engine_calibrations_silicon.json"
#: the shipped files' format (``model.measured.engine_fit.FORMAT``)
SHIPPED_FORMAT = "pdwatt-engine-calibration/1"


@dataclass(frozen=True)
class TransferredFrom:
    """The fitted (GPU, framework) whose overheads a calibration carries, and the version
    of the tables they were fitted against."""

    gpu: str
    framework: str
    version: str


@dataclass(frozen=True)
class EngineCalibration:
    """Engine overheads for one (GPU, framework) over kernel tables of one version (the
    version the composition reads), with where they come from: fitted to measurements of
    the pair, or, for a pair no measurement covers, ``transferred_from`` a fitted pair
    (its overheads over this pair's own kernel tables; ``docs/calibration.md``,
    section 8)."""

    gpu: str
    framework: str
    version: str
    overheads: EngineOverheads
    source: str
    transferred_from: TransferredFrom | None = None

    @property
    def fitted_version(self) -> str:
        """The version of the tables the overheads were fitted against: ``version``, or
        for a transferred calibration its source's."""
        t = self.transferred_from
        return self.version if t is None else t.version

    def describe(self) -> dict[str, Any]:
        """Where the overheads come from, for outputs: the source text, the version they
        were fitted against and, for a transferred calibration, the pair and version it
        carries (None if fitted)."""
        t = self.transferred_from
        return {
            "source": self.source,
            "fitted_version": self.fitted_version,
            "transferred_from": None
            if t is None
            else {"gpu": t.gpu, "framework": t.framework, "version": t.version},
        }


def _read_document(path: Path) -> dict[str, Any]:
    """One shipped calibration file, parsed (no calibration if it is absent); an error
    naming the file for one that is not such a document."""
    if not path.exists():
        return {"format": SHIPPED_FORMAT, "calibrations": []}
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InputError(
            path.name, f"cannot read the shipped engine calibrations: {error}"
        ) from None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != SHIPPED_FORMAT
        or not isinstance(doc.get("calibrations"), list)
    ):
        raise InputError(path.name, f"not a {SHIPPED_FORMAT} document with a list of calibrations")
    return doc


def _shipped_entries() -> tuple[dict[str, Any], list[tuple[str, int, dict[str, Any]]]]:
    """:data:`SHIPPED_FILE`'s document, and the shipped calibration entries with the
    file and index each comes from: the ML.ENERGY file's, then the silicon file's for
    the (GPU, framework) pairs the first lacks."""
    doc = _read_document(SHIPPED_FILE)
    out = [(SHIPPED_FILE.name, i, e) for i, e in enumerate(doc["calibrations"])]
    have = {(e.get("gpu"), e.get("framework")) for _, _, e in out if isinstance(e, dict)}
    for i, e in enumerate(_read_document(SHIPPED_SILICON_FILE)["calibrations"]):
        if not isinstance(e, dict) or (e.get("gpu"), e.get("framework")) not in have:
            out.append((SHIPPED_SILICON_FILE.name, i, e))
    return doc, out


def shipped_document() -> dict[str, Any]:
    """The shipped engine calibrations, parsed: :data:`SHIPPED_FILE`'s document (the
    ML.ENERGY fits and their transfers, with its figures and sources), its
    ``calibrations`` followed by those of :data:`SHIPPED_SILICON_FILE` (the TensorRT-LLM
    fits to AIConfigurator's serving runs) for every (GPU, framework) the first does not
    have. Where both files calibrate a pair, the ML.ENERGY entry wins: it is fitted to
    decode iteration times measured on the whole server, the quantity the engine model
    composes, where the silicon fit reaches them through the benchmark's closed loop. A
    missing file adds nothing."""
    doc, entries = _shipped_entries()
    return {**doc, "calibrations": [e for _, _, e in entries]}


@cache
def _shipped() -> tuple[EngineCalibration, ...]:
    """The shipped engine calibrations in :func:`shipped_document`'s order (a pair in
    both files: the ML.ENERGY entry, the silicon one unread); an error naming the file,
    the entry and the field for a malformed entry."""
    out = []
    for name, i, e in _shipped_entries()[1]:
        where = f"{name}: calibrations[{i}]"
        try:
            out.append(
                EngineCalibration(
                    str(e["gpu"]),
                    str(e["framework"]),
                    str(e["version"]),
                    EngineOverheads(**e["overheads"]),
                    str(e["source"]),
                    TransferredFrom(**e["transferred_from"]) if e.get("transferred_from") else None,
                )
            )
        except KeyError as error:
            raise InputError(f"{where}.{error.args[0]}", "missing") from None
        except InputError as error:
            raise InputError(f"{where}.overheads.{error.field}", error.reason) from None
        except (TypeError, AttributeError) as error:
            raise InputError(where, f"malformed: {error}") from None
    return tuple(out)


def shipped_calibration(gpu: str, framework: str) -> EngineCalibration:
    """The shipped engine calibration of (`gpu`, `framework`); an error naming what is
    shipped when there is none."""
    for e in _shipped():
        if e.gpu == gpu and e.framework == framework:
            return e
    have = ", ".join(f"{e.gpu}/{e.framework}" for e in _shipped()) or "none"
    raise InputError(
        "performance",
        f"no engine calibration shipped for {gpu} under {framework} (shipped: {have}); "
        "fit one with `pdwatt calibrate --kernels DIR`",
    )
