"""Kernel performance source: measured kernel tables composed into one forward pass.

Reads a kernel database in NVIDIA AIConfigurator's published layout,
``<root>/<gpu>/<op>/<framework>/<version>/<kind>_perf.parquet`` (the files as
published, through pyarrow), and composes the kernels of one forward pass of a catalog
model into ``t_prefill(L)`` (one prompt of ``L`` tokens) and ``t_decode(B, c)`` (one
decode iteration of ``B`` requests at a context of ``c`` tokens each), in seconds, for
one (model, GPU, framework and version, TP, EP, weight and KV dtype). Where the tables
carry each kernel's measured power (B200), each phase also gets the time-weighted
mean power of its kernels. ``docs/kernels.md`` documents the composition.

Tables (:data:`TABLE_SPECS`): each column of a table is either an exact key (dtype,
``n`` and ``k`` are not among them; heads, head dim, top-k, experts, TP/EP sizes,
backend, ...) or a size axis (GEMM ``m``, ``n``, ``k``; MoE ``num_tokens``; attention
batch and context; collective message size).

Interpolation. Exact keys must match a measured value. Along the size axes the lookup
is multilinear in (log size, log latency): with the query inside the cell of the
measured grid that encloses it, the log latency is the tensor-product linear
interpolation of the cell's corners in log size, so a latency that follows a power law
between two measured sizes (``t ~ size^a``) is reproduced exactly, and a flat,
launch-bound floor at small sizes (``a = 0``) stays flat. Kernel latencies are close to
that: memory-bound GEMMs grow as ``n k`` at small ``m``, compute-bound ones as
``m n k``, attention as ``batch x context`` (decode) or ``context^2`` (prefill), each
with a floor of a few microseconds of launch and synchronisation. Linear
interpolation in the sizes themselves is exact only for a cost affine in the size and
replaces a superlinear one (prefill attention's ``context^2``) by its chord, above it;
log-log is exact for any power law and for the floor, and errs only across the bend
between them. Left-one-out on the published tables (``docs/kernels.md``) the two are
equal on GEMMs and MoE, log-log is better on prefill attention and slightly worse on
decode attention. At a measured shape the result is the measured value (all weight on
one corner). Power, where measured, is interpolated linearly with the same weights
(it is bounded by the power limit, not a power law).

Refusal. A query below the smallest or above the largest measured value of an axis,
with an exact key no row has, or inside a grid cell whose corners are not all
measured, raises :class:`~model.errors.OutsideTableError` naming the table's file and
the shape: nothing is extrapolated. Three decompositions are applied, each computing
the same work as a sum of measured kernels, so never faster than the one kernel (by
one launch per extra piece at most): a GEMM wider (``n``) than the table's widest
measured ``n`` (the LM head over a 152k vocabulary) is the sum of column blocks of
measured widths; a collective of a message larger than the largest measured one (the
logits all-gather of 2,045 requests over Qwen3's vocabulary, 311M elements against
the NCCL table's 268M) is the sum of equal pieces no larger; and decode attention
over a batch the generation table does not measure at that context (it measures
``batch x context`` up to about 130k tokens) is the sum of equal sub-batches (halving
until measured), each request's attention being independent of the others'. Every
call of a pass, with its shape and count, is in :attr:`PhaseTime.calls`. A collective
whose GPU count the setup's table does not measure is read from another table of the
GPU that does (the framework's other versions, the other frameworks, then NCCL's
all-reduce for a custom all-reduce; the GPU's other NCCL tables for an NCCL
collective), said in :attr:`KernelModel.substitutions`. A GPU count beyond every table
is scaled from the largest measured one by a ring's traffic and the GPU's link
bandwidths where the setup gives its fabric, else refused, naming the tables searched
(``docs/kernels.md``, "Collectives over more GPUs than measured").

Duplicates. Where a table measures the same shape more than once, the rows of the
kernel that the table measures most (its ``kernel_source`` with the most rows) are
kept and their latencies (and powers) averaged.

Composition (:class:`KernelModel`), per layer and per rank under tensor parallelism
``tp``: QKV and O projection GEMMs (heads split over ranks; KV heads replicated when
``tp`` exceeds them); context attention (a batch of one prompt of ``L`` tokens) or
generation attention (batch ``B``, past length ``c``, at the fastest split of each
request's context the split-KV kernels may take, ``B s`` requests of ``c / s`` tokens
for ``s`` in :data:`KV_SPLITS`), per group of layers: full
layers at the whole context; sliding-window layers (Gemma 3, gpt-oss) from the
table's rows of their window where it measures the shape, else as full attention
over the ``min(c, window)`` tokens they attend to (the same work; a prefill longer
than the window, which no full-attention kernel matches, is refused); chunked layers
(Llama 4) as full attention within their first chunk, a prefill beyond it as one
prompt per chunk (a decode beyond it is refused). Then the dense MLP (gate-up and
down GEMMs, intermediate width split over ranks) in the dense layers, and in the MoE
layers the router GEMM (bf16), the fused-MoE table at the rank's tokens with
``moe_tp = tp / ep`` and ``moe_ep = ep`` and the load ``distribution``: by default
``uniform`` routing, read off the ``balanced`` rows at the tokens that make each rank
read as many experts as the busiest expert-parallel rank does (:func:`uniform_tokens`),
or a load the tables measure by name, and the
shared experts as two dense GEMMs of their
width split over ranks; two all-reduces of the residual stream when ``tp > 1``
(custom all-reduce table; its graph-captured backend for decode batches the engine
captures in CUDA graphs, :func:`decode_in_graph`, eager for larger ones and for
prefill, as the engines run them). Weights are bf16, or FP8 as the catalog says the model's
FP8 release stores them (block-scaled ``fp8_block`` or per-tensor ``fp8`` tables;
only the weights of its scope, the router and LM head always bf16), or NVFP4 where
the catalog's NVFP4 release of a mixture of experts stores them (its `fp4_weights`,
the others bf16; dense models in NVFP4: every linear layer); experts stored in MXFP4,
NVFP4 or INT4 use the MoE table's 4-bit dtype. Once per pass: the embedding's
all-reduce under TP (the lookup itself has no kernel table and is not counted), the
LM head GEMM on the tokens whose logits are computed (the prompt's last for a
prefill, every request's for decode) and the all-gather of the logits under TP (NCCL
table). A decode at a fractional batch (a measured mean) is the linear interpolation
of the compositions at its floor and ceiling. Multi-head latent attention (DeepSeek)
from the framework's MLA module tables where it has them, else from its MLA attention,
batched-GEMM and GEMM tables; data-parallel attention (``attention_dp``) with the
collectives around each MoE layer AIConfigurator charges (``docs/kernels.md``,
"Multi-head latent attention (DeepSeek)"). Hybrid linear attention (Qwen3.5's Gated
DeltaNet): in its linear layers the input and output projections and the ``gdn``
table's causal convolution and delta rule in place of attention, the QKV projection
with the output gate's queries in its full ones (``docs/kernels.md``, "Hybrid linear
attention (Qwen3.5)"). Not counted, because no
table measures them: norms, activation, rotary embedding, sampling, scheduling and
launch gaps (the serving engine's overheads, fitted elsewhere).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from model.catalog import Fabric, ModelArch, load_model
from model.errors import InputError, NotFoundError, OutsideTableError

MS = 1e-3


@dataclass(frozen=True)
class TableSpec:
    """How to read one kind of table: its op folder, file name, exact-key columns,
    size-axis columns (interpolated, in this order), defaults for key columns that
    older files lack, and other names a framework's files give a key column."""

    kind: str
    folder: str
    keys: tuple[str, ...]
    axes: tuple[str, ...]
    defaults: tuple[tuple[str, object], ...] = ()
    #: (column, the name some files give it)
    aliases: tuple[tuple[str, str], ...] = ()
    #: for a table without a ``latency`` column (ms): the columns whose sum is its
    #: latency, and their unit in ms
    latency_from: tuple[str, ...] = ()
    latency_unit_ms: float = 1.0

    @property
    def filename(self) -> str:
        return f"{self.kind}_perf.parquet"


_ATTN_KEYS = (
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "attn_dtype",
    "kv_cache_dtype",
    "window_size",
    "beam_width",
)
#: the table kinds this module reads, by kind (the file name without ``_perf.parquet``)
TABLE_SPECS: dict[str, TableSpec] = {
    s.kind: s
    for s in (
        TableSpec("gemm", "gemm", ("gemm_dtype",), ("m", "n", "k")),
        TableSpec(
            "moe",
            "moe",
            (
                "moe_dtype",
                "hidden_size",
                "inter_size",
                "topk",
                "num_experts",
                "moe_tp_size",
                "moe_ep_size",
                "distribution",
            ),
            ("num_tokens",),
        ),
        TableSpec(
            "context_attention",
            "attention",
            _ATTN_KEYS,
            ("batch_size", "isl"),
            (("window_size", 0), ("beam_width", 1)),
        ),
        TableSpec(
            "generation_attention",
            "attention",
            _ATTN_KEYS,
            ("batch_size", "step"),
            (("window_size", 0), ("beam_width", 1)),
        ),
        TableSpec(
            "custom_allreduce",
            "comm",
            ("allreduce_dtype", "num_gpus", "backend"),
            ("message_size",),
            # TensorRT-LLM's files name the all-reduce's implementation column so
            aliases=(("backend", "implementation"),),
        ),
        TableSpec("nccl", "comm", ("op_name", "nccl_dtype", "num_gpus"), ("message_size",)),
        # Gated DeltaNet (linear attention): the causal convolution and the delta rule's
        # scan (prefill: ``batch_size`` prompts of ``seq_len`` tokens) or its one-token
        # update (decode: ``seq_len`` 1), at the heads per GPU
        TableSpec(
            "gdn",
            "linear_attention",
            ("kernel_source", "phase", "d_model", "d_conv", "num_k_heads", "head_k_dim",
             "num_v_heads", "head_v_dim"),
            ("batch_size", "seq_len"),
        ),  # fmt: skip
        # DeepEP's low-latency all-to-all (SGLang's ``moe-a2a-backend: deepep`` in
        # ``low_latency`` mode): one MoE layer's dispatch and combine, per rank's tokens
        TableSpec(
            "wideep_deepep_ll",
            "comm",
            ("kernel_source", "node_num", "hidden_size", "num_topk", "num_experts"),
            ("num_token",),
            latency_from=("dispatch_avg_t_us", "combine_avg_t_us"),
            latency_unit_ms=1e-3,
        ),
        # TensorRT-LLM's all-to-all over a multi-node NVLink domain (MNNVL): one MoE
        # layer's prepare, dispatch and combine, each its own row, per rank's tokens
        TableSpec(
            "trtllm_alltoall",
            "comm",
            ("op_name", "kernel_source", "moe_dtype", "hidden_size", "topk", "num_experts",
             "moe_ep_size", "distribution"),
            ("num_tokens",),
        ),  # fmt: skip
        # DeepEP's normal all-to-all (``deepep-mode: normal``): one MoE layer's
        # dispatch and combine, per rank's tokens, at the SMs DeepEP gives them
        TableSpec(
            "wideep_deepep_normal",
            "comm",
            ("kernel_source", "node_num", "hidden_size", "num_topk", "num_experts",
             "dispatch_sms"),
            ("num_token",),
            latency_from=("dispatch_transmit_us", "dispatch_notify_us",
                          "combine_transmit_us", "combine_notify_us"),
            latency_unit_ms=1e-3,
        ),  # fmt: skip
        # SGLang's experts behind DeepEP (its ``DeepEPMoE`` runner: DeepGEMM's grouped
        # GEMMs), per phase, at the tokens of every rank
        *(
            TableSpec(
                kind,
                "moe",
                ("moe_dtype", "hidden_size", "inter_size", "topk", "num_experts",
                 "moe_tp_size", "moe_ep_size", "distribution"),
                ("num_tokens",),
            )  # fmt: skip
            for kind in ("wideep_context_moe", "wideep_generation_moe")
        ),
        # multi-head latent attention: the attention kernel alone (its heads per GPU)...
        TableSpec(
            "context_mla",
            "mla",
            ("mla_dtype", "kv_cache_dtype", "num_heads"),
            ("batch_size", "isl"),
        ),
        TableSpec(
            "generation_mla",
            "mla",
            ("mla_dtype", "kv_cache_dtype", "num_heads", "isl"),
            ("batch_size", "step"),
        ),
        # ... the decode's absorbed key and value up-projections (batched GEMMs per head)...
        TableSpec("mla_bmm", "mla_bmm", ("op_name", "bmm_dtype", "num_heads"), ("num_tokens",)),
        # ... or the whole attention module of one model (projections and attention)
        TableSpec(
            "mla_context_module",
            "mla",
            ("model", "mla_dtype", "kv_cache_dtype", "gemm_type", "num_heads"),
            ("batch_size", "isl"),
        ),
        TableSpec(
            "mla_generation_module",
            "mla",
            ("model", "mla_dtype", "kv_cache_dtype", "gemm_type", "num_heads", "isl"),
            ("batch_size", "step"),
        ),
    )
}


@dataclass(frozen=True)
class KernelTime:
    """One kernel call's measured (or interpolated) time (s) and mean power (W; None
    where the table has no power)."""

    time_s: float
    power_w: float | None = None


# --------------------------------------------------------------------------
# One table


@dataclass
class _Grid:
    """The rows of one exact-key combination on the rectilinear grid of their sizes."""

    axes: tuple[np.ndarray, ...]
    log_axes: tuple[np.ndarray, ...]
    log_time: np.ndarray  # log seconds, NaN where not measured
    power: np.ndarray | None


class KernelTable:
    """One measured table: :meth:`lookup` returns a kernel's time at a shape."""

    def __init__(self, name: str, spec: TableSpec, columns: Mapping[str, list[Any]]) -> None:
        self.name = name
        self.spec = spec
        self.kind = spec.kind
        if spec.latency_from and "latency" not in columns and all(
            c in columns for c in spec.latency_from
        ):
            parts = [columns[c] for c in spec.latency_from]
            columns = {
                **columns,
                "latency": [
                    None if any(v is None for v in vs) else sum(vs) * spec.latency_unit_ms
                    for vs in zip(*parts, strict=True)
                ],
            }
        n = len(columns.get("latency", []))
        columns = {
            **columns,
            **{c: columns[a] for c, a in spec.aliases if c not in columns and a in columns},
        }
        defaults = dict(spec.defaults)
        missing = [
            c for c in (*spec.keys, *spec.axes, "latency") if c not in columns and c not in defaults
        ]
        if missing:
            raise InputError("kernels", f"{name}: missing columns {', '.join(missing)}")
        cols = {c: columns[c] if c in columns else [defaults[c]] * n for c in spec.keys}
        self.has_power = "power" in columns
        power = columns["power"] if self.has_power else [math.nan] * n
        sources = columns.get("kernel_source", [""] * n)
        rank = {s: i for i, (s, _) in enumerate(Counter(sources).most_common())}
        # (key, sizes) -> best kernel rank, [(time_s, power)]
        best: dict[tuple[tuple[Any, ...], tuple[float, ...]], tuple[int, list[tuple[float, float]]]]
        best = {}
        for i in range(n):
            lat = columns["latency"][i]
            if lat is None or not lat > 0 or not math.isfinite(lat):
                continue
            sizes = tuple(float(columns[a][i]) for a in spec.axes)
            if not all(s > 0 for s in sizes):
                continue
            key = tuple(cols[c][i] for c in spec.keys)
            r = rank[sources[i]]
            p = power[i] if power[i] is not None else math.nan
            entry = (lat * MS, float(p))
            old = best.get((key, sizes))
            if old is None or r < old[0]:
                best[(key, sizes)] = (r, [entry])
            elif r == old[0]:
                old[1].append(entry)
        groups: dict[tuple[Any, ...], list[tuple[tuple[float, ...], float, float]]]
        groups = defaultdict(list)
        for (key, sizes), (_, entries) in best.items():
            t = sum(e[0] for e in entries) / len(entries)
            p = sum(e[1] for e in entries) / len(entries)
            groups[key].append((sizes, t, p))
        self._grids = {key: self._grid(rows) for key, rows in groups.items()}

    def _grid(self, rows: list[tuple[tuple[float, ...], float, float]]) -> _Grid:
        sizes = np.array([r[0] for r in rows], dtype=float).reshape(len(rows), -1)
        found = [np.unique(sizes[:, d], return_inverse=True) for d in range(sizes.shape[1])]
        axes = tuple(values for values, _ in found)
        idx = tuple(inverse.ravel() for _, inverse in found)
        log_time = np.full(tuple(len(a) for a in axes), np.nan)
        log_time[idx] = np.log([r[1] for r in rows])
        power = None
        if self.has_power:
            power = np.full(log_time.shape, np.nan)
            power[idx] = [r[2] for r in rows]
        return _Grid(axes, tuple(np.log(a) for a in axes), log_time, power)

    def growth(self, key: Mapping[str, Any], axis: str, lo: float, hi: float,
               min_rest: float = 0.0) -> tuple[float, int]:  # fmt: skip
        """The median, over the table's measured points of the other size axes (whose
        product is at least ``min_rest``), of the time at ``axis = hi`` over the time at
        ``axis = lo`` for one exact-key combination, and the number of points: how the
        kernel's time grows with one size (NaN, 0 where neither is measured)."""
        grid = self._grids.get(tuple(key[c] for c in self.spec.keys))
        if grid is None or axis not in self.spec.axes:
            return math.nan, 0
        d = self.spec.axes.index(axis)
        values = grid.axes[d]
        i, j = np.searchsorted(values, lo), np.searchsorted(values, hi)
        if i >= len(values) or j >= len(values) or values[i] != lo or values[j] != hi:
            return math.nan, 0
        ratio = np.moveaxis(grid.log_time, d, 0)
        ratio = np.exp(ratio[j] - ratio[i])
        rest = [a for e, a in enumerate(grid.axes) if e != d]
        size = np.ones(ratio.shape)
        for e, a in enumerate(rest):
            shape = [1] * len(rest)
            shape[e] = len(a)
            size = size * a.reshape(shape)
        keep = np.isfinite(ratio) & (size >= min_rest)
        if not keep.any():
            return math.nan, 0
        return float(np.median(ratio[keep])), int(keep.sum())

    def measured_keys(self) -> list[dict[str, Any]]:
        """The exact-key combinations the table measures."""
        return [dict(zip(self.spec.keys, k, strict=True)) for k in self._grids]

    def axis_values(self, **key: Any) -> dict[str, list[float]]:
        """The measured values of each size axis for one exact-key combination (empty
        if the table does not measure it)."""
        grid = self._grids.get(tuple(key[c] for c in self.spec.keys))
        if grid is None:
            return {}
        return {a: v.tolist() for a, v in zip(self.spec.axes, grid.axes, strict=True)}

    def lookup(self, **shape: Any) -> KernelTime:
        """The kernel's time (and power) at `shape` (every exact key and size axis by
        column name); :class:`OutsideTableError` if the table does not cover it."""
        spec = self.spec
        unknown = set(shape) - set(spec.keys) - set(spec.axes)
        absent = [c for c in (*spec.keys, *spec.axes) if c not in shape]
        if unknown or absent:
            raise InputError(
                "shape",
                f"{self.name}: expected the columns {', '.join((*spec.keys, *spec.axes))}"
                f" (unknown: {sorted(unknown)}, missing: {absent})",
            )
        key = tuple(shape[c] for c in spec.keys)
        grid = self._grids.get(key)
        if grid is None:
            raise OutsideTableError(self.name, shape, self._no_key_reason(key))
        corners: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
        for a, values, logs in zip(spec.axes, grid.axes, grid.log_axes, strict=True):
            x = float(shape[a])
            if not x >= values[0] or not x <= values[-1]:
                raise OutsideTableError(
                    self.name,
                    shape,
                    f"{a}={x:g} is outside the measured range "
                    f"[{values[0]:g}, {values[-1]:g}]; not extrapolated",
                )
            i = int(np.searchsorted(values, x))
            if values[i] == x:
                steps = [(i, 1.0)]
            else:
                w = (math.log(x) - logs[i - 1]) / (logs[i] - logs[i - 1])
                steps = [(i - 1, 1.0 - w), (i, w)]
            corners = [(c + (j,), cw * w) for c, cw in corners for j, w in steps]
        log_t = 0.0
        p = 0.0
        for idx, w in corners:
            v = grid.log_time[idx]
            if math.isnan(v):
                at = ", ".join(
                    f"{a}={grid.axes[d][j]:g}"
                    for d, (a, j) in enumerate(zip(spec.axes, idx, strict=True))
                )
                raise OutsideTableError(
                    self.name,
                    shape,
                    f"the measured cell around it lacks the corner {at}; not extrapolated",
                )
            log_t += w * v
            if grid.power is not None:
                p += w * grid.power[idx]
        power = p if grid.power is not None and math.isfinite(p) else None
        return KernelTime(math.exp(log_t), power)

    def _no_key_reason(self, key: tuple[Any, ...]) -> str:
        """Which exact key has no row: the first column whose value, with the ones
        before it, no measured combination has, with the values measured there."""
        known = list(self._grids)
        for d, c in enumerate(self.spec.keys):
            match = [k for k in known if k[d] == key[d]]
            if not match:
                values = sorted({k[d] for k in known}, key=str)
                shown = ", ".join(str(v) for v in values[:24])
                more = f" (and {len(values) - 24} more)" if len(values) > 24 else ""
                return f"no measured rows with {c}={key[d]!r}; measured: {shown}{more}"
            known = match
        return "no measured rows with this combination"  # pragma: no cover


# --------------------------------------------------------------------------
# The database


def version_key(version: str) -> tuple[tuple[int, str], ...]:
    """A table version's order: numeric parts as numbers (``0.5.14`` after ``0.5.9``,
    ``1.3.0rc23`` after ``1.3.0rc20``)."""
    return tuple(
        (int(p), "") if p.isdigit() else (-1, p) for p in re.findall(r"\d+|[A-Za-z]+", version)
    )


@dataclass(frozen=True)
class TableRef:
    """One table file of a database: (gpu, op folder, framework, version, kind) and its
    path relative to the database's root."""

    gpu: str
    op: str
    framework: str
    version: str
    kind: str
    name: str


class KernelDatabase:
    """A folder in AIConfigurator's layout, indexed per (gpu, op, framework, version);
    tables are read on first use and kept."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise InputError("kernels", f"not a directory: {root}")
        refs = []
        for path in sorted(self.root.glob("*/*/*/*/*_perf.parquet")):
            rel = path.relative_to(self.root)
            gpu, op, framework, version, filename = rel.parts
            kind = filename.removesuffix("_perf.parquet")
            refs.append(TableRef(gpu, op, framework, version, kind, rel.as_posix()))
        self.refs: tuple[TableRef, ...] = tuple(refs)
        self._tables: dict[str, KernelTable] = {}

    def index(self) -> dict[tuple[str, str, str, str], list[str]]:
        """(gpu, op, framework, version) -> the table kinds there."""
        out: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
        for r in self.refs:
            out[(r.gpu, r.op, r.framework, r.version)].append(r.kind)
        return dict(out)

    def gpus(self) -> list[str]:
        return sorted({r.gpu for r in self.refs})

    def versions(self, gpu: str, kind: str) -> list[tuple[str, str]]:
        """(framework, version) pairs with a table of `kind` for `gpu`."""
        return sorted(
            {(r.framework, r.version) for r in self.refs if (r.gpu, r.kind) == (gpu, kind)}
        )

    def table(self, gpu: str, kind: str, framework: str, version: str) -> KernelTable:
        """The table of `kind` for (gpu, framework, version); InputError naming what the
        database holds if there is none."""
        spec = TABLE_SPECS.get(kind)
        if spec is None:
            raise InputError(
                "kernels", f"unknown table kind {kind!r}; known: {sorted(TABLE_SPECS)}"
            )
        name = _table_name(gpu, kind, framework, version)
        if name not in self._tables:
            if not (self.root / name).is_file():
                have = ", ".join(f"{f} {v}" for f, v in self.versions(gpu, kind)) or "none"
                raise InputError(
                    "kernels", f"no table {name} in the kernel database; {kind} for {gpu}: {have}"
                )
            self._tables[name] = KernelTable(name, spec, read_parquet(self.root / name))
        return self._tables[name]


def read_parquet(path: Path) -> dict[str, list[Any]]:
    """Columns of a Parquet file as lists."""
    import pyarrow.parquet as pq

    try:
        return dict(pq.read_table(path).to_pydict())
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(
            "kernels", f"{path.name}: not a readable Parquet table ({error})"
        ) from None


# --------------------------------------------------------------------------
# Composition

_DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16"}
#: weight dtypes that mean FP8 weights: ``fp8`` is the model's FP8 release, in the
#: catalog's format (128 x 128-block scales where the release has them, the table's
#: ``fp8_block``, else the table's per-tensor ``fp8``); ``fp8_tensor`` forces ``fp8``
_FP8_WEIGHTS = ("fp8", "fp8_block", "fp8_tensor")
#: the screen of a GEMM table (docs/kernels.md, "Screened tables"): a dtype whose time
#: at :data:`SCREEN_ROWS` rows is below its time at one row, in the median over the
#: weight shapes of at least :data:`SCREEN_WEIGHTS` elements, measures a fixed cost of
#: its harness, not the GEMM (4,096 times the work cannot take less time than one
#: row's), and the same dtype is read from another framework's table of the GPU
SCREEN_ROWS = 4096
SCREEN_WEIGHTS = 1 << 22
#: the MoE tables' dtype of experts stored in a 4-bit block format (catalog precision):
#: gpt-oss's MXFP4 experts run with bf16 activations (``w4a16_mxfp4``), INT4 experts with
#: group scales too (weight-only, ``int4_wo``), NVFP4 experts with NVFP4 activations
_EXPERT_DTYPES = {"mxfp4": "w4a16_mxfp4", "nvfp4": "nvfp4", "int4": "int4_wo"}
#: GPUs on which TensorRT-LLM's default MoE backend for MXFP4 experts (TRTLLM) runs them
#: with MXFP8 activations, the MoE tables' ``w4a8_mxfp4_mxfp8`` (TensorRT-LLM's gpt-oss
#: deployment guide, "MoE Backend Support Matrix": B200/GB200/B300/GB300, MXFP8
#: activations, MXFP4 weights, TRTLLM; Hopper: BF16 activations, TRITON)
MXFP8_ACTIVATION_GPUS = {"trtllm": frozenset({"b200_sxm", "b300_sxm", "gb200", "gb300"})}

#: MoE kernels a framework runs that its own tables do not measure, and the framework
#: whose tables of the same GPU measure them: (framework, expert dtype) -> (GPUs, the
#: framework read). TensorRT-LLM on Blackwell runs DeepSeek's block-FP8 and NVFP4
#: experts with its TRTLLM MoE backend (TensorRT-LLM-gen kernels) where attention is not
#: data-parallel: SemiAnalysis InferenceX's DeepSeek-R1 servers set MOE_BACKEND=TRTLLM
#: unless attention is data-parallel (benchmarks/dsr1_fp8_b200_trt.sh: DEEPGEMM then;
#: dsr1_fp4_b200_trt.sh: CUTLASS then), and the NVIDIA Dynamo recipes they ran
#: (NVIDIA/srt-slurm recipes/trtllm/b200-fp8) give the tensor-parallel decode workers
#: backend TRTLLM and the data-parallel ones DEEPGEMM. TensorRT-LLM 1.3.0rc20's tables
#: measure those experts only under DeepGEMM (block-FP8) and CUTLASS (NVFP4, mostly);
#: SGLang 0.5.14's tables of the same GPUs measure the TensorRT-LLM-gen kernels
#: (through FlashInfer, ``sglang_flashinfer_trtllm_moe``), and are read for them.
MOE_KERNELS = ("deployed", "own")
#: how passes under data-parallel attention move tokens to their experts: ``""`` the
#: framework's collectives (:meth:`KernelModel._dispatch`); SGLang's ``moe-a2a-backend:
#: deepep`` in ``deepep-mode: low_latency`` (``deepep_ll``: decode iterations read the
#: GPU's ``wideep_deepep_ll`` table) or ``normal`` (``deepep_normal``: every pass reads
#: ``wideep_deepep_normal``). Behind DeepEP SGLang runs its experts with DeepGEMM
#: (``DeepEPMoE``), read from the ``wideep_context_moe`` and ``wideep_generation_moe``
#: tables (:meth:`KernelModel._deepep_moe`)
MOE_A2A = ("", "deepep_ll", "deepep_normal")
#: the SMs DeepEP's normal kernels run on (its ``Buffer.num_sms`` default, as
#: AIConfigurator reads its table)
DEEPEP_NORMAL_SMS = 20
#: the GPUs of the largest NVLink domain within one node (an HGX board): a fabric whose
#: domain is larger joins nodes by NVLink (multi-node NVLink, GB200 and GB300 NVL72),
#: where TensorRT-LLM moves tokens to their experts by its all-to-all
#: (:meth:`KernelModel._mnnvl_alltoall`)
NODE_NVLINK_GPUS = 8
#: the GPU whose ``trtllm_alltoall`` table stands for another's, by the other's table
#: folder: the GB300 NVL72 rack has the GB200 NVL72's NVLink 5 switch fabric (1.8 TB/s
#: per GPU, 72 GPUs per domain; the catalog's fabrics), which the all-to-all runs over
ALLTOALL_FABRIC_TWIN = {"gb300": "gb200"}
TRTLLM_GEN_MOE: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    ("trtllm", dtype): (frozenset({"b200_sxm", "b300_sxm", "gb200", "gb300"}), "sglang")
    for dtype in ("fp8_block", "nvfp4")
}


@dataclass(frozen=True)
class KernelSetup:
    """What a composition reads: the GPU, the serving stack (framework and version of
    its tables), tensor- and expert-parallel sizes, and the tables' dtype names of the
    weights' GEMMs (``bfloat16``; ``fp8``: the model's FP8 release, block-scaled
    (``fp8_block``) where the catalog says so, per-tensor otherwise, and only the
    weights the release stores in FP8; ``fp8_block`` or ``fp8_tensor`` to force one
    table; ``nvfp4``: every linear layer, or, for a model whose catalog entry is an
    NVFP4 release of a mixture of experts, the weights it stores in NVFP4 (its
    `fp4_weights`), the others bf16), the MoE experts (default: the weights', or the
    table's 4-bit dtype of experts the catalog stores in MXFP4, NVFP4 or INT4), the KV
    cache
    (``bfloat16``, ``fp8``), the MoE load `distribution` (``uniform``: each token's
    experts drawn uniformly, :func:`uniform_tokens`; or a load the tables measure:
    ``balanced``, a skew such as ``power_law_1.2``), the NCCL version (default: the newest the
    database has for the GPU) and the data-parallel attention size `attention_dp` (1: none;
    else ``tp x attention_dp`` GPUs, each rank attending its own requests, the experts
    split ``moe_tp x ep`` over all of them). `moe_kernels`: ``deployed`` (the MoE kernels
    the framework's deployments run, :data:`TRTLLM_GEN_MOE`) or ``own`` (the
    framework's own MoE tables, as AIConfigurator's estimator reads them). `moe_a2a`:
    how passes under data-parallel attention move tokens to the experts and back
    (:data:`MOE_A2A`: ``""`` the framework's gather and scatter collectives, or
    TensorRT-LLM's all-to-all where it runs one; ``deepep_ll`` DeepEP's low-latency
    all-to-all in decode, ``deepep_normal`` its normal one, each with SGLang's DeepEP
    experts). `redundant_experts`: replicas of the busiest experts that expert-parallel
    load balancing (EPLB) adds, ``E + redundant_experts`` expert slots split over the
    ``ep`` ranks (docs/kernels.md, "Redundant experts"). `fabric`: the
    GPU's NVLink domain and network (:attr:`model.catalog.GpuSpec.fabric`), by which a
    collective over more GPUs than any table measures is scaled from the largest count
    measured (:meth:`KernelModel._collective_scaled`); None: such a collective is
    refused."""

    gpu: str
    framework: str
    version: str
    tp: int = 1
    ep: int = 1
    weight_dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    moe_dtype: str = ""
    distribution: str = "uniform"
    nccl_version: str = ""
    attention_dp: int = 1
    moe_kernels: str = "deployed"
    fabric: Fabric | None = None
    moe_a2a: str = ""
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        if self.moe_a2a not in MOE_A2A:
            raise InputError("moe_a2a", f"must be one of {', '.join(map(repr, MOE_A2A))}, got "
                                        f"{self.moe_a2a!r}")  # fmt: skip
        if self.moe_kernels not in MOE_KERNELS:
            raise InputError("moe_kernels", f"must be one of {', '.join(MOE_KERNELS)}, got "
                                            f"{self.moe_kernels!r}")  # fmt: skip
        for name in ("tp", "ep", "attention_dp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(name, f"must be a positive integer, got {v!r}")
        r = self.redundant_experts
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise InputError("redundant_experts", f"must be a whole number >= 0, got {r!r}")
        if self.gpus % self.ep:
            if self.attention_dp == 1:
                raise InputError("ep", f"must divide tp ({self.tp}), got {self.ep}")
            raise InputError(
                "ep",
                f"must divide the instance's {self.gpus} GPUs (tp {self.tp} x attention_dp "
                f"{self.attention_dp}), got {self.ep}",
            )
        for name in ("weight_dtype", "kv_dtype", "moe_dtype"):
            v = getattr(self, name)
            object.__setattr__(self, name, _DTYPE_NAMES.get(v, v))

    @property
    def gpus(self) -> int:
        """The instance's GPUs: ``tp x attention_dp`` (each attention data-parallel rank
        a tensor-parallel group of ``tp``), which the MoE layers split as
        ``moe_tp x ep``."""
        return self.tp * self.attention_dp

    @property
    def moe_tp(self) -> int:
        """Tensor-parallel size of each expert: the GPUs over the expert-parallel size."""
        return self.gpus // self.ep


@dataclass(frozen=True)
class KernelCall:
    """One kernel of a forward pass: `count` calls of `table` at `shape`, each taking
    `time_s` (s) at `power_w` (W, None where unmeasured). `weight` is 1, except in a
    decode iteration at a fractional batch, which holds the calls of the compositions
    at the batch's floor and ceiling, weighted by their interpolation weights."""

    name: str
    table: str
    shape: tuple[tuple[str, Any], ...]
    count: int
    time_s: float
    power_w: float | None
    weight: float = 1.0

    @property
    def total_s(self) -> float:
        """Seconds this entry adds to its pass (``weight x count x time_s``)."""
        return self.weight * self.count * self.time_s


@dataclass(frozen=True)
class PhaseTime:
    """One forward pass: its summed kernel time (s), its kernels' time-weighted mean
    power (W; None unless every kernel's power is measured) and the kernels."""

    time_s: float
    power_w: float | None
    calls: tuple[KernelCall, ...] = field(repr=False)

    def by_name(self) -> dict[str, float]:
        """Seconds per kernel name (summed over its calls)."""
        out: dict[str, float] = defaultdict(float)
        for c in self.calls:
            out[c.name] += c.total_s
        return dict(out)


#: the largest decode batch a framework runs in a CUDA graph by default, where known:
#: vLLM's V1 engine captures up to ``min(2 max_num_seqs, 512)`` tokens
#: (``max_cudagraph_capture_size`` of its ``VllmConfig``) and runs a larger batch without a
#: graph; a running batch never exceeds ``max_num_seqs``, so every batch up to 512 runs
#: in a graph and none above
CUDA_GRAPH_MAX_BATCH = {"vllm": 512}


def decode_in_graph(framework: str, batch: int) -> bool:
    """Whether a decode iteration of `batch` requests runs in a CUDA graph under
    `framework` (:data:`CUDA_GRAPH_MAX_BATCH`; a framework without a known limit: at
    every batch). The all-reduces of one that does not are the eager ones."""
    limit = CUDA_GRAPH_MAX_BATCH.get(framework)
    return limit is None or batch <= limit


#: the shapes an MLA attention module's kernels depend on besides its heads per GPU (and
#: the dtypes the tables key): the hidden size, the queries' and the latent's low-rank
#: widths, the rotary and the whole query/key head width and the value head width
MLA_MODULE_SHAPES = ("hidden_size", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                     "head_dim", "v_head_dim")  # fmt: skip

#: the splits of a decode request's context the split-KV attention kernels may take: 1 to
#: 32, vLLM's cap under CUDA graphs (``VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH``,
#: default 32); FlashAttention picks the split that fills the GPU
KV_SPLITS = (1, 2, 4, 8, 16, 32)


#: the MoE load of a decode: each token's experts drawn uniformly at random
UNIFORM = "uniform"

#: the Gated DeltaNet tables' causal-convolution kernel per phase; the phase's other
#: kernel is the delta rule's (its name differs by framework: ``chunk_gated_delta_rule``,
#: ``fused_recurrent_gated_delta_rule_packed_decode``, ...)
GDN_CONV = {"context": "causal_conv1d_fn", "generation": "causal_conv1d_update"}


def busiest_rank_experts(tokens: float, experts: int, top_k: int, ep: int = 1) -> float:
    """The experts the busiest of `ep` expert-parallel ranks reads when `tokens` tokens
    are routed uniformly at random, each to `top_k` distinct experts of `experts`, the
    experts split evenly over the ranks (``docs/kernels.md``, "Expert load";
    ``docs/calibration.md`` section 7); at ``ep = 1`` the mean number read,
    ``D(T) = E (1 - (1 - k/E)^T)``.

    An expert is missed by one token with probability ``1 - k/E``, by all `T` with
    ``(1 - k/E)^T``, so it is read with ``p = 1 - (1 - k/E)^T``. Rank `g` holds
    ``n = ceil(E / ep)`` experts and reads the ``X_g`` of them the batch touched; taken
    as independent experts ``X_g`` is binomial ``(n, p)`` and the busiest rank reads
    ``E[max_g X_g] = sum_{j=1..n} (1 - F(j - 1)^ep)``, ``F`` its distribution function.
    Routing `k` distinct experts per token makes the ranks' counts slightly negatively
    dependent; against a brute-force draw of that routing this is within 2% at every
    batch (tests). The MoE layer ends when the busiest rank does (the all-reduce that
    follows waits for it)."""
    t = float(tokens)
    e, k = float(experts), float(top_k)
    p = -math.expm1(t * math.log1p(-k / e)) if k < e else 1.0
    if ep <= 1:
        return e * p
    n = math.ceil(e / ep)
    if p >= 1.0:
        return float(n)
    from scipy.stats import binom  # here: scipy.stats loads scipy.optimize (latency.py)

    cdf = binom.cdf(np.arange(n), n, p)
    return float(np.sum(1.0 - cdf**ep))


def at_experts_per_rank(eps: list[int], ep_x: float, layer: Callable[[int], float]) -> float:
    """A MoE layer's time at the EP ``ep_x`` of as many experts per rank as the instance
    holds, from `layer` (its time at a measured EP, each at the instance's rows per
    rank): `layer` at ``ep_x`` where `eps` (sorted) measure it, else interpolated in
    ``log ep`` between the measured neighbours (docs/kernels.md, "SGLang's experts
    behind DeepEP" and "Redundant experts")."""
    if ep_x in eps:
        return layer(int(ep_x))
    lo, hi = max(e for e in eps if e < ep_x), min(e for e in eps if e > ep_x)
    w = math.log(ep_x / lo) / math.log(hi / lo)
    return math.exp((1.0 - w) * math.log(layer(lo)) + w * math.log(layer(hi)))


def uniform_tokens(tokens: float, experts: int, top_k: int, ep: int = 1) -> float:
    """The token count at which the tables' ``balanced`` load makes each rank read as
    many experts as the busiest of `ep` expert-parallel ranks reads when `tokens`
    tokens are routed uniformly at random, each to `top_k` distinct experts of
    `experts` (``docs/kernels.md``, "Expert load").

    The balanced load spreads ``T k`` assignments evenly and reads ``min(E, T k)``
    experts, ``min(E, T k) / ep`` on each rank; a uniform load reads
    ``R = busiest_rank_experts(T, E, k, ep)`` on its busiest rank
    (:func:`busiest_rank_experts`), and every rank waits for it at the all-reduce that
    ends the layer. The fused kernel's time at small `T` is the reading of the experts'
    weights, so the balanced table is read at ``T ep R / min(E, T k)`` tokens:
    ``ep R / k`` while ``T k <= E`` (the experts read equal), ``T ep R / E`` beyond (every
    expert read, the work scaled by the share the busiest rank leaves unread, vanishing
    as ``T`` grows). At ``ep = 1`` this is ``T D(T) / min(E, T k)``, at most `T`. On
    several ranks it exceeds `T` at the smallest batches: one token's 8 experts of 128
    fall 2.4 on the busiest of eight ranks on average, where the balanced load puts one,
    so the table is read at 2.4 tokens. It is continuous and tends to `T`."""
    t = float(tokens)
    e, k = float(experts), float(top_k)
    if k >= e:
        return max(1.0, t)
    read = ep * busiest_rank_experts(tokens, experts, top_k, ep)
    return max(1.0, t * read / min(e, t * k))


def expert_intermediate_size(model: ModelArch) -> int:
    """One routed expert's intermediate width: the catalog's `moe_intermediate_size`,
    else from its parameters, a gated MLP's three ``hidden x inter`` matrices (Qwen3,
    DeepSeek, Mixtral, Llama 4)."""
    if model.moe_intermediate_size:
        return model.moe_intermediate_size
    hidden = model.hidden_size
    inter = model.expert_params / (3 * hidden) if hidden else 0.0
    if not inter or inter != int(inter):
        raise InputError(
            "expert_params",
            f"{model.name}: {model.expert_params:g} is not three hidden x inter matrices "
            f"(hidden_size {hidden}) and moe_intermediate_size is not set; the expert "
            "shape is unknown",
        )
    return int(inter)


@dataclass(frozen=True)
class _Attention:
    """The attention of one group of layers: `kind` ``full``, ``sliding`` (each token
    attends to the last `span` tokens) or ``chunked`` (within consecutive chunks of
    `span` tokens), in `layers` layers."""

    kind: str
    span: int
    layers: int


class KernelModel:
    """One forward pass of `model` under `setup`, composed from the tables of `db`."""

    def __init__(self, db: KernelDatabase, model: ModelArch, setup: KernelSetup) -> None:
        self.db = db
        self.model = model
        self.setup = setup
        m, tp = model, setup.tp
        for name in ("hidden_size", "vocab_size"):
            if not getattr(m, name):
                raise InputError(name, f"{m.name}: unknown, needed to compose its kernels")
        self.mla = bool(m.kv_latent)
        if self.mla:
            for name in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
                if not getattr(m, name):
                    raise InputError(
                        name, f"{m.name}: unknown, needed to compose its latent attention"
                    )
        self.dense_layers = m.layers - m.moe_layers if m.experts else m.layers
        if self.dense_layers and not m.intermediate_size:
            raise InputError("intermediate_size", f"{m.name}: unknown, needed for its MLP")
        if m.n_heads % tp:
            raise InputError("tp", f"must divide the {m.n_heads} attention heads, got {tp}")
        if m.n_kv_heads % tp and tp % m.n_kv_heads:
            raise InputError("tp", f"must divide or be a multiple of the {m.n_kv_heads} KV heads")
        if self.dense_layers and m.intermediate_size % tp:
            raise InputError("tp", f"must divide the MLP width {m.intermediate_size}, got {tp}")
        if m.experts and m.shared_intermediate_size % tp:
            raise InputError(
                "tp", f"must divide the shared experts' width {m.shared_intermediate_size}"
            )
        if setup.ep > 1 and not m.experts:
            raise InputError("ep", f"{m.name} is dense: expert parallelism needs experts")
        if setup.redundant_experts and not m.experts:
            raise InputError("redundant_experts", f"{m.name} is dense: it has no experts")
        slots = m.experts + setup.redundant_experts
        if m.experts and slots % setup.ep:
            plus = f" + {setup.redundant_experts} redundant" if setup.redundant_experts else ""
            raise InputError(
                "ep", f"{setup.ep} does not divide {m.name}'s {m.experts}{plus} experts"
            )
        for name in ("linear_key_heads", "linear_value_heads"):
            heads = getattr(m, name)
            if heads and heads % tp:
                raise InputError("tp", f"must divide the {heads} {name} of {m.name}, got {tp}")
        if setup.attention_dp > 1 and not m.experts:
            raise InputError(
                "attention_dp",
                f"{m.name} is dense: data-parallel attention is composed for a mixture of "
                "experts (its MoE layers gather the ranks' tokens); run dense replicas instead",
            )
        self.heads = m.n_heads // tp
        self.kv_heads = max(1, m.n_kv_heads // tp)
        self.expert_inter = expert_intermediate_size(m) if m.experts else 0
        self._dtypes = self._weight_dtypes()
        #: the tables read from another framework's tables of the GPU, each said
        self.substitutions: list[str] = []
        #: where each collective the setup's table does not measure is read from
        #: (:meth:`_collective_source`), by kind, graph and key
        self._sources: dict[tuple[Any, ...], tuple[KernelTable, dict[str, Any], float]] = {}
        #: the DeepEP tables, by kind, once found (:meth:`_deepep`)
        self._deepep_tables: dict[str, KernelTable] = {}
        #: SGLang's DeepEP expert table and its measured EP sizes, by kind and dtype,
        #: once chosen (:meth:`_deepep_experts`)
        self._deepep_experts_of: dict[tuple[str, str], tuple[KernelTable | None, list[int]]] = {}
        #: the EP sizes a MoE table measures, by table and key (:meth:`_measured_eps`)
        self._eps_of: dict[tuple[str, tuple[tuple[str, Any], ...]], list[int]] = {}
        #: the EP at which a rank holds as many experts as here, ``E / ep_x = (E + R) /
        #: ep`` (docs/kernels.md, "Redundant experts"); ``ep`` without replicas
        self.ep_x = (
            m.experts * setup.ep / (m.experts + setup.redundant_experts) if m.experts
            else float(setup.ep)
        )
        #: TensorRT-LLM's all-to-all as chosen once (:meth:`_alltoall_choice`; None
        #: before, ``()`` where it runs none)
        self._alltoall: tuple[KernelTable, list[dict[str, Any]]] | tuple[()] | None = None
        #: MLA composed from the framework's whole-module tables (True) or from the
        #: attention kernel, the absorbed BMMs and the projection GEMMs (False)
        self.mla_module = False
        kinds: tuple[str, ...] = ("gemm", "context_attention", "generation_attention")
        if self.mla:
            have = self.db.index().get((setup.gpu, "mla", setup.framework, setup.version), [])
            self.mla_module = {"mla_context_module", "mla_generation_module"} <= set(have)
            if self.mla_module and self._dtypes["attention"] != self._dtypes["attention_out"]:
                # a module row times every projection at one GEMM dtype
                self.mla_module = False
                self.substitutions.append(
                    f"mla module: {setup.gpu} {setup.framework} {setup.version}'s tables time "
                    "the attention block at one GEMM dtype, and its output projection's "
                    "differs from the other projections': composed from the MLA, BMM and "
                    "GEMM tables"
                )
            if self.mla_module:
                kinds = ("gemm", "mla_context_module", "mla_generation_module")
            else:
                kinds = ("gemm", "context_mla", "generation_mla", "mla_bmm")
        if m.linear_layers:
            kinds = (*kinds, "gdn")
        self._tables = {kind: self._table(kind) for kind in kinds}
        if m.experts:
            self._tables["moe"] = self._table("moe")
        if tp > 1:
            self._tables["custom_allreduce"] = self._table("custom_allreduce")
        if setup.gpus > 1:
            nccl = setup.nccl_version or self._newest_nccl()
            self._tables["nccl"] = db.table(setup.gpu, "nccl", "nccl", nccl)
        self._module_model = self._module_model_name() if self.mla_module else m.name
        self._screen_gemms()

    def _table(self, kind: str) -> KernelTable:
        """The setup's table of ``kind``; where its framework and version have none,
        the same kernel's table of another framework of the same GPU (the newest
        version of the first framework in name order that has one), recorded in
        :attr:`substitutions`; none anywhere: the setup's own refusal."""
        s = self.setup
        try:
            return self.db.table(s.gpu, kind, s.framework, s.version)
        except InputError:
            others = [(f, v) for f, v in self.db.versions(s.gpu, kind) if f != s.framework]
            if not others:
                raise
        framework = min(f for f, _ in others)
        version = max((v for f, v in others if f == framework), key=version_key)
        table = self.db.table(s.gpu, kind, framework, version)
        self.substitutions.append(
            f"{kind}: {s.gpu} {s.framework} {s.version} has no such table; "
            f"{framework} {version}'s is read"
        )
        return table

    def _screen_gemms(self) -> None:
        """The GEMM dtypes this composition reads whose table the screen
        (:data:`SCREEN_ROWS`) rejects, each read from the first other framework's table
        of the GPU (in name order, its newest version) that measures the dtype and
        passes, as ``gemm:<dtype>``, and said in :attr:`substitutions`; where none
        passes, the framework's own table is kept, and said."""
        s, own = self.setup, self._tables["gemm"]
        # the routed experts run in the MoE table; the LM head in bf16
        used = {d for g, parts in self._dtypes.items() if g != "experts" for _, d in parts}
        used.add("bfloat16")
        for dtype in sorted(used):
            growth, points = own.growth({"gemm_dtype": dtype}, "m", 1, SCREEN_ROWS,
                                        SCREEN_WEIGHTS)  # fmt: skip
            if not growth < 1.0:
                continue
            why = (
                f"gemm {dtype}: {own.name} takes less time at {SCREEN_ROWS} rows than at one "
                f"(median ratio {growth:.2f} over {points} weight shapes): a fixed cost, "
                "not the kernel"
            )
            others = sorted({f for f, _ in self.db.versions(s.gpu, "gemm")} - {s.framework})
            for framework in others:
                version = max((v for f, v in self.db.versions(s.gpu, "gemm") if f == framework),
                              key=version_key)  # fmt: skip
                table = self.db.table(s.gpu, "gemm", framework, version)
                g, _ = table.growth({"gemm_dtype": dtype}, "m", 1, SCREEN_ROWS, SCREEN_WEIGHTS)
                if g >= 1.0:
                    self._tables[f"gemm:{dtype}"] = table
                    self.substitutions.append(f"{why}; {framework} {version}'s is read")
                    break
            else:
                self.substitutions.append(f"{why}; no other framework's passes, it is kept")

    def _module_model_name(self) -> str:
        """The model as the MLA module tables name it: the one of its catalog name and
        aliases (its Hugging Face ids) they measure; else a measured model the catalog
        knows whose attention has the same shapes (:data:`MLA_MODULE_SHAPES`: the
        module's kernels at the same heads per GPU are the same work; Kimi-K2.5's MLA
        is DeepSeek-V3's with half the heads), recorded in :attr:`substitutions`; else
        its name (which the lookup refuses, listing the models measured)."""
        m = self.model
        names = (m.name, *m.aliases)
        measured = sorted({k["model"] for k in self._tables["mla_context_module"].measured_keys()})
        own = next((n for n in names if n in measured), None)
        if own is not None:
            return own
        for other in measured:
            try:
                arch = load_model(other)
            except NotFoundError:
                continue
            if all(getattr(arch, f) == getattr(m, f) for f in MLA_MODULE_SHAPES):
                shapes = ", ".join(f"{f} {getattr(m, f)}" for f in MLA_MODULE_SHAPES)
                self.substitutions.append(
                    f"mla module: {m.name}'s attention has {other}'s shapes ({shapes}): "
                    f"its rows read at {self.heads} heads per GPU"
                )
                return other
        return m.name

    def _newest_nccl(self) -> str:
        versions = [v for f, v in self.db.versions(self.setup.gpu, "nccl") if f == "nccl"]
        if not versions:
            raise InputError("kernels", f"no NCCL table for {self.setup.gpu}")
        return max(versions, key=version_key)

    # ---- weights' dtypes

    @property
    def weight_dtypes(self) -> dict[str, tuple[tuple[int, str], ...]]:
        """Per group of weights (``attention``: the projections into the attention,
        ``attention_out``: its output projection, ``mlp``: dense MLP, ``experts``: routed
        experts, ``shared``: shared experts), the layers holding them in each table
        dtype (the GEMM tables', the MoE table's for the routed experts)."""
        return {g: tuple(parts) for g, parts in self._dtypes.items()}

    def _weight_dtypes(self) -> dict[str, list[tuple[int, str]]]:
        """Per group of weights (:attr:`weight_dtypes`), the layers holding them in each
        table dtype. FP8 weights (``fp8``) follow the catalog's FP8 release: its scope
        (every linear layer, the dense MLPs or the routed experts) in FP8, block-scaled
        where the release is, but its `fp8_bf16_layers` and every weight out of scope
        in bf16. NVFP4 weights (``nvfp4``) of a model whose entry is an NVFP4 release
        with 4-bit experts follow it: its `fp4_weights` in NVFP4, every other weight
        bf16. Experts the catalog stores in MXFP4, NVFP4 or INT4 use the MoE table's
        4-bit dtype; an explicit `moe_dtype` wins for the routed experts."""
        m, s = self.model, self.setup
        layers = {
            "attention": m.layers,
            "attention_out": m.layers,
            "mlp": self.dense_layers,
            "experts": m.moe_layers if m.experts else 0,
            "shared": m.moe_layers if m.experts and m.shared_intermediate_size else 0,
        }
        wd = s.weight_dtype
        out: dict[str, list[tuple[int, str]]] = {}
        if wd == "nvfp4" and m.fp4_experts and m.precision == "nvfp4":
            out = {g: [(n, wd if g in m.fp4_weights else "bfloat16")] for g, n in layers.items()}
        elif wd in _FP8_WEIGHTS:
            fp8 = self._fp8_table_dtype(wd)
            scope = {"linear": set(layers), "mlp": {"mlp"}, "experts": {"experts"}}[m.fp8_scope]
            for group, n in layers.items():
                if group not in scope:
                    out[group] = [(n, "bfloat16")]
                    continue
                kept = min(n, m.fp8_bf16_layers)
                out[group] = [(n - kept, fp8), (kept, "bfloat16")]
        else:
            out = {group: [(n, wd)] for group, n in layers.items()}
        four_bit = _EXPERT_DTYPES.get(m.precision) if m.fp4_experts else None
        if m.precision == "mxfp4" and s.gpu in MXFP8_ACTIVATION_GPUS.get(s.framework, ()):
            four_bit = "w4a8_mxfp4_mxfp8"
        if s.moe_dtype or four_bit:
            out["experts"] = [(layers["experts"], s.moe_dtype or str(four_bit))]
        return {g: [(n, d) for n, d in parts if n] for g, parts in out.items()}

    def _fp8_table_dtype(self, name: str) -> str:
        """The GEMM and MoE tables' dtype of FP8 weights named `name`."""
        block = self.model.fp8_block
        if name == "fp8_tensor" or (name == "fp8" and not block):
            return "fp8"
        if name == "fp8" and block != 128:
            raise InputError(
                "weight_dtype",
                f"{self.model.name}: its FP8 release has {block} x {block} weight blocks; "
                "the tables' fp8_block measures 128 x 128 blocks",
            )
        return "fp8_block"

    # ---- kernels

    def _call(self, out: list[KernelCall], name: str, kind: str, count: int, **shape: Any) -> None:
        """`count` calls of the kernel of `kind` at `shape`, from the setup's table."""
        self._read(out, name, self._tables[kind], count, shape)

    def _read(
        self,
        out: list[KernelCall],
        name: str,
        table: KernelTable,
        count: int,
        shape: dict[str, Any],
        scale: float = 1.0,
    ) -> None:
        """`count` calls of the kernel `table` measures, at `shape`; its time times
        `scale` (a collective scaled to more GPUs, :meth:`_collective_scaled`)."""
        t = table.lookup(**shape)
        out.append(
            KernelCall(name, table.name, tuple(shape.items()), count, t.time_s * scale, t.power_w)
        )

    def _gemm(
        self, out: list[KernelCall], name: str, count: int, m: int, n: int, k: int, dtype: str
    ) -> None:
        """A GEMM; wider than the table's widest ``n``, the sum of column blocks of the
        widest measured width and the remainder (computing ``n`` columns is computing
        each block's; see the module docstring)."""
        kind = f"gemm:{dtype}" if f"gemm:{dtype}" in self._tables else "gemm"
        widths = self._tables[kind].axis_values(gemm_dtype=dtype).get("n", [])
        widest = int(widths[-1]) if widths else 0
        if not widest or n <= widest:
            self._call(out, name, kind, count, gemm_dtype=dtype, m=m, n=n, k=k)
            return
        blocks, rest = divmod(n, widest)
        self._call(out, name, kind, count * blocks, gemm_dtype=dtype, m=m, n=widest, k=k)
        if rest:
            self._call(out, name, kind, count, gemm_dtype=dtype, m=m, n=rest, k=k)

    def _gemms(
        self, out: list[KernelCall], name: str, group: str, m: int, n: int, k: int,
        layers: tuple[int, int] | None = None, narrow: bool = False,
    ) -> None:  # fmt: skip
        """The GEMM of one weight of `group` in every layer holding it, per dtype; with
        `layers` (first, count), in that many of the group's layers from the first (the
        group's layers taken in the order of its dtypes). `narrow`: a width below the
        table's narrowest measured ``n`` is read at that ``n`` (the same rows times more
        columns: a GEMM doing more work, an upper bound)."""
        parts = self._dtypes[group]
        if layers is not None:
            first, want = layers
            taken, start = [], 0
            for count, dtype in parts:
                lo, hi = max(start, first), min(start + count, first + want)
                if hi > lo:
                    taken.append((hi - lo, dtype))
                start += count
            parts = taken
        for count, dtype in parts:
            if narrow:
                kind = f"gemm:{dtype}" if f"gemm:{dtype}" in self._tables else "gemm"
                widths = self._tables[kind].axis_values(gemm_dtype=dtype).get("n", [])
                if widths and n < widths[0]:
                    self._call(out, name, kind, count, gemm_dtype=dtype, m=m,
                               n=int(widths[0]), k=k)  # fmt: skip
                    continue
            self._gemm(out, name, count, m, n, k, dtype)

    def _collective(
        self,
        out: list[KernelCall],
        name: str,
        kind: str,
        count: int,
        message: int,
        graph: bool | None = None,
        **key: Any,
    ) -> None:
        """A collective of `message` elements; above the table's largest measured message,
        equal pieces no larger than it (a collective of the whole moves each piece's
        elements: the same work, one call per piece). Where the setup's table does not
        measure the collective's exact key (its GPU count), the same collective from
        another table of the GPU that does (:meth:`_collective_source`), said in
        :attr:`substitutions`; none does: refused, naming the setup's table, the shape
        and the tables searched."""
        table, key, scale = self._collective_source(kind, key, graph, message)
        sizes = table.axis_values(**key).get("message_size", [])
        largest = int(sizes[-1]) if sizes else 0
        pieces = -(-message // largest) if largest and message > largest else 1
        size, bigger = divmod(message, pieces)
        if bigger:
            shape = {**key, "message_size": size + 1}
            self._read(out, name, table, count * bigger, shape, scale)
        if pieces > bigger:
            shape = {**key, "message_size": size}
            self._read(out, name, table, count * (pieces - bigger), shape, scale)

    def _collective_source(
        self, kind: str, key: dict[str, Any], graph: bool | None, message: int
    ) -> tuple[KernelTable, dict[str, Any], float]:
        """The table and exact key a collective is read from: the setup's table
        where it measures `key`; else the first other table of the same GPU measuring the
        same collective at that key (:meth:`_collective_candidates`), recorded in
        :attr:`substitutions`. A kernel measures the same work whichever engine's
        benchmark launched it, so this substitutes a measurement, not a model. No table
        measures it at its GPU count: the largest count one measures, scaled
        (:meth:`_collective_scaled`) where the setup gives the GPU's fabric; else
        :class:`OutsideTableError` naming the setup's table and the shape (`message`
        elements), and which other tables were searched. The third value is the factor on
        the read times (1 unless scaled)."""
        own = self._tables[kind]
        if own.axis_values(**key):
            return own, key, 1.0
        found = self._sources.get((kind, graph, *sorted(key.items())))
        if found is None:
            found = self._search_collective(kind, key, graph, message)
            self._sources[(kind, graph, *sorted(key.items()))] = found
        return found

    def _search_collective(
        self, kind: str, key: dict[str, Any], graph: bool | None, message: int
    ) -> tuple[KernelTable, dict[str, Any], float]:
        """:meth:`_collective_source` where the setup's table does not measure `key`: the
        search of the GPU's other tables, then the scaling (kept per key by the caller,
        the pass's collectives asking for the same key at every batch)."""
        own = self._tables[kind]
        op = "all-reduce" if kind == "custom_allreduce" else str(key["op_name"])
        searched: dict[str, list[str]] = {}
        for table, other_key, what in self._collective_candidates(kind, key, graph):
            of = "custom_allreduce" if table.kind == "custom_allreduce" else other_key["op_name"]
            searched.setdefault(str(of), []).append(_framework_version(table))
            if table.axis_values(**other_key):
                shown = ", ".join(f"{c}={key[c]!r}" for c in own.spec.keys if c != "backend")
                note = (
                    f"{kind} ({shown}): {self.setup.gpu} {_framework_version(own)} "
                    f"measures no such {op}; {what} is read"
                )
                if note not in self.substitutions:
                    self.substitutions.append(note)
                return table, other_key, 1.0
        scaled = self._collective_scaled(kind, key, graph)
        if scaled is not None:
            return scaled
        reason = own._no_key_reason(tuple(key[c] for c in own.spec.keys))
        tried = "; ".join(f"{of} of {', '.join(v)}" for of, v in searched.items()) or "none"
        raise OutsideTableError(
            own.name,
            {**key, "message_size": message},
            f"{reason}; nor does any other {op} table of {self.setup.gpu} (searched: {tried})",
        )

    def _collective_scaled(
        self, kind: str, key: dict[str, Any], graph: bool | None
    ) -> tuple[KernelTable, dict[str, Any], float] | None:
        """A collective over `n` = ``key["num_gpus"]`` GPUs that no table of the GPU
        measures, from the largest count `m` < `n` one measures at the same other key (the
        setup's table first, then :meth:`_collective_candidates`), its times scaled by
        ``ring(n) / ring(m) x B(m) / B(n)``: a ring collective moves ``(k - 1) / k`` of
        the message (twice, for an all-reduce) through each GPU's slowest link, whose
        bandwidth `B` the setup's fabric gives (:meth:`model.catalog.Fabric.bandwidth`:
        NVLink within the domain; beyond it the domain's NICs, one ring per NIC rail).
        Said in :attr:`substitutions`. None without a fabric or a smaller measured count
        (docs/kernels.md, "Collectives over more GPUs than measured")."""
        fabric, n = self.setup.fabric, int(key["num_gpus"])
        if fabric is None:
            return None
        own = self._tables[kind]
        tables = ((own, key, ""), *self._collective_candidates(kind, key, graph))
        for table, other_key, _what in tables:
            rest = {c: v for c, v in other_key.items() if c != "num_gpus"}
            counts = sorted(
                int(k["num_gpus"])
                for k in table.measured_keys()
                if int(k["num_gpus"]) < n and all(k.get(c) == v for c, v in rest.items())
            )
            if not counts:
                continue
            m = counts[-1]
            factor = (_ring(n) / _ring(m)) * (fabric.bandwidth(m) / fabric.bandwidth(n))
            of = "all-reduce" if kind == "custom_allreduce" else str(key["op_name"])
            where = "within its NVLink domain" if n <= fabric.domain_gpus else (
                f"beyond its NVLink domain of {fabric.domain_gpus}"
            )
            note = (
                f"{of} over {n} GPUs ({where}): no table of {self.setup.gpu} measures it; "
                f"{_framework_version(table)}'s {m}-GPU times scaled by {factor:.3f} "
                "(ring traffic and link bandwidth; docs/kernels.md, \"Collectives over more "
                "GPUs than measured\")"
            )
            if note not in self.substitutions:
                self.substitutions.append(note)
            return table, {**other_key, "num_gpus": m}, factor
        return None

    def _others(self, kind: str, first: str, exclude: str = "") -> list[tuple[str, str]]:
        """(framework, version) of the setup GPU's tables of `kind` other than `exclude`
        (a table's name): framework `first`, then the others by name, each newest
        version first."""
        pairs = [
            (f, v)
            for f, v in self.db.versions(self.setup.gpu, kind)
            if _table_name(self.setup.gpu, kind, f, v) != exclude
        ]
        pairs.sort(key=lambda fv: version_key(fv[1]), reverse=True)
        pairs.sort(key=lambda fv: (fv[0] != first, fv[0]))  # stable: versions stay newest first
        return pairs

    def _collective_candidates(
        self, kind: str, key: dict[str, Any], graph: bool | None
    ) -> Iterable[tuple[KernelTable, dict[str, Any], str]]:
        """The other tables of the setup's GPU that time the same collective as the
        setup's `kind` table, in the order they are tried, each with the collective's key
        in its columns and how it is named. For a custom all-reduce: the
        custom all-reduce tables of the framework's other versions, then of the other
        frameworks (:meth:`_others`), at a backend of the same kind (CUDA graph or eager,
        as `graph`; else the table's first), then NCCL's ``all_reduce`` in fp16 (``half``:
        two bytes an element, as bf16), the setup's NCCL table first. For an NCCL
        collective: the GPU's other NCCL tables."""
        s, db = self.setup, self.db
        if kind == "nccl":
            for f, v in self._others("nccl", "nccl", self._tables["nccl"].name):
                yield db.table(s.gpu, "nccl", f, v), key, f"{f} {v}'s {key['op_name']}"
            return
        suffix = "" if graph is None else ("_graph" if graph else "_eager")
        at = {"allreduce_dtype": key["allreduce_dtype"], "num_gpus": key["num_gpus"]}
        own = self._tables[kind].name
        for f, v in self._others("custom_allreduce", s.framework, own):
            table = db.table(s.gpu, "custom_allreduce", f, v)
            every = sorted(
                {
                    str(k["backend"])
                    for k in table.measured_keys()
                    if (k["allreduce_dtype"], k["num_gpus"]) == tuple(at.values())
                }
            )
            backends = [b for b in every if suffix and b.endswith(suffix)] or every
            if not backends:  # not measured at this GPU count: searched, never read
                yield table, {**at, "backend": key["backend"]}, ""
                continue
            yield (
                table,
                {**at, "backend": backends[0]},
                f"{f} {v}'s custom_allreduce ({backends[0]})",
            )
        mine = self._tables["nccl"].name if "nccl" in self._tables else ""
        nccl = self._others("nccl", "nccl")
        nccl.sort(key=lambda fv: _table_name(s.gpu, "nccl", *fv) != mine)
        for f, v in nccl:
            yield (
                db.table(s.gpu, "nccl", f, v),
                {"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": key["num_gpus"]},
                f"{f} {v}'s all_reduce (half)",
            )

    def _allreduce(
        self,
        out: list[KernelCall],
        name: str,
        count: int,
        tokens: int,
        graph: bool,
        gpus: int = 0,
    ) -> None:
        """An all-reduce of `tokens` rows of the residual stream over `gpus` GPUs (0:
        the tensor-parallel group), at the table's CUDA-graph backend (`graph`) or its
        eager one."""
        table = self._tables["custom_allreduce"]
        suffix = "_graph" if graph else "_eager"
        every = sorted({str(k["backend"]) for k in table.measured_keys()})
        backends = [b for b in every if b.endswith(suffix)] or every
        self._collective(
            out,
            name,
            "custom_allreduce",
            count,
            tokens * self.model.hidden_size,
            graph,
            allreduce_dtype="bfloat16",
            num_gpus=gpus or self.setup.tp,
            backend=backends[0],
        )

    def _generation_attention(
        self,
        out: list[KernelCall],
        count: int,
        shape: dict[str, Any],
        kind: str = "generation_attention",
    ) -> None:
        """Decode attention of ``batch_size`` requests; where the table lacks that batch at
        that context, equal sub-batches (see the module docstring)."""
        batch = int(shape["batch_size"])
        parts = 1
        first: OutsideTableError | None = None
        while True:
            size = -(-batch // parts)
            full, rest = divmod(batch, size)
            try:
                calls: list[KernelCall] = []
                self._call(
                    calls,
                    "attention",
                    kind,
                    count * full,
                    **{**shape, "batch_size": size},
                )
                if rest:
                    self._call(
                        calls,
                        "attention",
                        kind,
                        count,
                        **{**shape, "batch_size": rest},
                    )
            except OutsideTableError as error:
                first = first or error
                if size == 1:
                    raise first from None
                parts *= 2
                continue
            out.extend(calls)
            return

    def _attention_groups(self) -> list[_Attention]:
        m = self.model
        groups = [
            _Attention("full", 0, m.kv_layers - m.sliding_layers - m.chunked_layers),
            _Attention("sliding", m.sliding_window, m.sliding_layers),
            _Attention("chunked", m.attention_chunk, m.chunked_layers),
        ]
        return [g for g in groups if g.layers]

    def _windowed(
        self, out: list[KernelCall], kind: str, group: _Attention, shape: dict[str, Any]
    ) -> bool:
        """A sliding layer's attention from the table's rows of its window, where they
        measure `shape` (True), else nothing (False)."""
        try:
            self._call(out, "attention", kind, group.layers, **{**shape, "window_size": group.span})
        except OutsideTableError:
            return False
        return True

    def _decode_attention(
        self, out: list[KernelCall], group: _Attention, keys: dict[str, Any], b: int, c: float
    ) -> None:
        """Decode attention of one group of layers: full layers attend to the context;
        a sliding layer attends to the last ``min(c, window)`` tokens, which is full
        attention over that many (where the table does not measure its window); a
        chunked layer within its first chunk is full attention."""
        shape = {**keys, "batch_size": b, "step": c}
        if group.kind == "sliding":
            if self._windowed(out, "generation_attention", group, shape):
                return
            shape["step"] = min(c, group.span)
        elif group.kind == "chunked" and c > group.span:
            raise InputError(
                "context",
                f"{self.model.name}: {c:g} past tokens exceed its attention chunk of "
                f"{group.span} in {group.layers} layers, where a request attends only to "
                "its current chunk (its position modulo the chunk), which a mean context "
                "does not give; not composed",
            )
        self._split_generation_attention(out, group.layers, shape)

    def _split_generation_attention(
        self, out: list[KernelCall], count: int, shape: dict[str, Any]
    ) -> None:
        """Decode attention as the engines' split-KV kernels run it: each request's context
        of ``step`` tokens cut into ``s`` equal pieces, each attended as a request of its
        own (``batch_size x s`` requests of ``step / s`` past tokens: the same keys and
        values read, more blocks in flight when the batch and the KV heads per GPU are
        few), the partial results merged. The split is the one of
        :data:`KV_SPLITS` the tables time fastest; the merge, a few kilobytes per request,
        is not counted. The unsplit shape must compose (a context beyond the table is
        refused, not split to fit)."""
        best: list[KernelCall] = []
        self._generation_attention(best, count, shape)
        fastest = sum(c.total_s for c in best)
        for s in KV_SPLITS[1:]:
            step = float(shape["step"]) / s
            if step < 1.0:
                break
            trial: list[KernelCall] = []
            try:
                self._generation_attention(
                    trial,
                    count,
                    {**shape, "batch_size": int(shape["batch_size"]) * s, "step": step},
                )
            except OutsideTableError:
                continue
            t = sum(c.total_s for c in trial)
            if t < fastest:
                best, fastest = trial, t
        out.extend(best)

    def _prefill_attention(
        self, out: list[KernelCall], group: _Attention, keys: dict[str, Any], n: int
    ) -> None:
        """Prefill attention of one prompt of `n` tokens in one group of layers: a chunked
        layer attends within each chunk, so the prompt is one prompt per full chunk
        and one of the remainder (each causal, all independent: the same work); a
        sliding layer with a prompt no longer than its window masks nothing (full
        attention), and a longer prompt needs the table's rows of that window."""
        kind = "context_attention"
        shape = {**keys, "batch_size": 1, "isl": n}
        if group.kind == "sliding":
            if self._windowed(out, kind, group, shape):
                return
            if n > group.span:
                table = self._tables[kind]
                raise OutsideTableError(
                    table.name,
                    {**shape, "window_size": group.span},
                    f"a prompt of {n} tokens in a sliding layer of window {group.span}: the "
                    "table does not measure that window at this shape, and no full-attention "
                    f"kernel does the same work (at isl={n} it computes more, at "
                    f"isl={group.span} less); not composed",
                )
        elif group.kind == "chunked" and n > group.span:
            chunks, rest = divmod(n, group.span)
            self._call(
                out, "attention", kind, group.layers, **{**shape, "batch_size": chunks,
                                                          "isl": group.span}
            )  # fmt: skip
            if rest:
                self._call(out, "attention", kind, group.layers, **{**shape, "isl": rest})
            return
        self._call(out, "attention", kind, group.layers, **shape)

    def _pass(
        self, tokens: int, logits: int, attention: Any, graph: bool, decode: bool = False
    ) -> PhaseTime:
        """One forward pass over `tokens` tokens on each attention rank (logits of the
        last `logits`), the attention block of every layer (its projections included)
        composed by ``attention(calls)``. Under data-parallel attention every rank runs
        its own `tokens` and the MoE layers the ``tokens x attention_dp`` gathered."""
        m, s = self.model, self.setup
        L, hidden, tp, dp = m.layers, m.hidden_size, s.tp, s.attention_dp
        calls: list[KernelCall] = []
        if tp > 1:
            self._allreduce(calls, "embedding all-reduce", 1, tokens, graph)
        attention(calls)
        if dp == 1:
            if tp > 1:
                self._allreduce(calls, "attention all-reduce", L, tokens, graph)
        else:
            if tp > 1 and self.dense_layers:
                self._allreduce(calls, "attention all-reduce", self.dense_layers, tokens, graph)
            self._dispatch(calls, True, tokens, graph, decode)
        if self.dense_layers:
            inter = m.intermediate_size // tp
            self._gemms(calls, "mlp gate-up", "mlp", tokens, 2 * inter, hidden)
            self._gemms(calls, "mlp down", "mlp", tokens, hidden, inter)
        if m.experts:
            self._gemm(calls, "router", m.moe_layers, tokens, m.experts, hidden, "bfloat16")
            for count, dtype in self._dtypes["experts"]:
                self._moe(calls, count, dtype, tokens * dp, decode)
            if m.shared_intermediate_size:
                inter = m.shared_intermediate_size // tp
                self._gemms(calls, "shared expert gate-up", "shared", tokens, 2 * inter, hidden)
                self._gemms(calls, "shared expert down", "shared", tokens, hidden, inter)
        if dp == 1:
            if tp > 1:
                self._allreduce(calls, "mlp all-reduce", L, tokens, graph)
        else:
            if tp > 1 and self.dense_layers:
                self._allreduce(calls, "mlp all-reduce", self.dense_layers, tokens, graph)
            self._dispatch(calls, False, tokens, graph, decode)
        self._gemm(calls, "lm head", 1, logits, -(-m.vocab_size // tp), hidden, "bfloat16")
        if tp > 1:
            self._collective(
                calls,
                "logits all-gather",
                "nccl",
                1,
                logits * m.vocab_size,
                op_name="all_gather",
                nccl_dtype="half",
                num_gpus=tp,
            )
        return _phase(calls)

    def _moe(
        self, out: list[KernelCall], count: int, dtype: str, tokens: int, decode: bool = False
    ) -> None:
        """The fused routed experts of `count` layers over `tokens` tokens (all the
        attention ranks' under data-parallel attention), at ``moe_tp`` and ``ep``. More
        tokens than the table's largest measured count are equal pieces no larger (the
        kernel's work is per token; a piece re-reads the experts' weights, which at
        thousands of tokens per expert is a small share), as the engines chunk them.
        SGLang behind DeepEP: :meth:`_deepep_moe` where its tables measure the experts.
        With redundant experts, the rule of :meth:`_deepep_moe`: the EP of as many
        experts per rank, each neighbour at the same rows per rank."""
        s = self.setup
        if s.framework == "sglang" and s.moe_a2a and self._deepep_moe(
            out, count, dtype, tokens, decode
        ):
            return
        key = {
            **self._moe_key(dtype, s.moe_tp),
            "moe_ep_size": s.ep,
            "distribution": "balanced" if s.distribution == UNIFORM else s.distribution,
        }
        table = self._moe_source(key)
        if not s.redundant_experts:
            self._fused(out, table, key, count, tokens)
            return
        # redundant experts: read at the EP of as many experts per rank, each neighbour
        # at the same rows per rank (docs/kernels.md, "Redundant experts")
        ep_x = self.ep_x
        eps = self._measured_eps(table, {c: v for c, v in key.items() if c != "moe_ep_size"})
        if not eps or not eps[0] <= ep_x <= eps[-1]:
            raise OutsideTableError(
                table.name,
                key,
                f"no EP measured on both sides of {ep_x:.4g}, the EP of as many experts "
                f"per rank as ep {s.ep} with {s.redundant_experts} redundant experts",
            )

        def layer(ep: int) -> float:
            calls: list[KernelCall] = []
            self._fused(calls, table, {**key, "moe_ep_size": ep}, count, tokens * ep / s.ep)
            return sum(c.count * c.time_s for c in calls) / count

        t = at_experts_per_rank(eps, ep_x, layer)
        shape = (*key.items(), ("num_tokens", tokens))
        out.append(KernelCall("moe", table.name, shape, count, t, None))

    def _fused(
        self,
        out: list[KernelCall],
        table: KernelTable,
        key: dict[str, Any],
        count: int,
        tokens: float,
    ) -> None:
        """The fused experts of `count` layers over `tokens` tokens at `key`'s EP, in
        pieces no larger than the table's largest measured count (:meth:`_moe`)."""
        m, s = self.model, self.setup
        ep = int(key["moe_ep_size"])
        sizes = table.axis_values(**key).get("num_tokens", [])
        largest = int(sizes[-1]) if sizes else 0
        pieces = math.ceil(tokens / largest) if largest and tokens > largest else 1
        parts: list[tuple[int, float]] = [(pieces, tokens / pieces)]
        if float(tokens).is_integer():  # whole tokens: pieces of n and n + 1
            size, bigger = divmod(int(tokens), pieces)
            parts = [(pieces - bigger, size), (bigger, size + 1)]
        for n, part in parts:
            if not n:
                continue
            at = (
                uniform_tokens(part, m.experts, m.experts_per_token, ep)
                if s.distribution == UNIFORM
                else part
            )
            self._read(out, "moe", table, count * n, {**key, "num_tokens": at})

    def _moe_key(self, dtype: str, moe_tp: int) -> dict[str, Any]:
        """The MoE tables' key columns of this model's experts in `dtype` at `moe_tp`
        (the EP size and the load added by the caller)."""
        m = self.model
        return {
            "moe_dtype": dtype,
            "hidden_size": m.hidden_size,
            "inter_size": self.expert_inter,
            "topk": m.experts_per_token,
            "num_experts": m.experts,
            "moe_tp_size": moe_tp,
        }

    def _deepep_moe(
        self, out: list[KernelCall], count: int, dtype: str, tokens: int, decode: bool
    ) -> bool:
        """SGLang's experts behind DeepEP (``DeepEPMoE``, DeepGEMM's grouped GEMMs) for
        `count` layers over `tokens` tokens of every rank, from the newest
        ``wideep_generation_moe`` (decode) or ``wideep_context_moe`` (prefill) table of
        SGLang for the GPU, at the load the tables name (``uniform``: random routing,
        as measured); False, said in :attr:`substitutions`, where none measures the
        dtype, shape, EP or tokens (the fused table is read). An EP between two
        measured ones is read at equal expert rows per rank (``tokens x k / ep``): the
        time at each neighbour ``e`` at ``tokens e / ep`` tokens, interpolated in
        ``log ep`` (what differs between them is the experts a rank holds,
        ``E / ep``, whose weights it reads; docs/kernels.md, "SGLang's experts behind
        DeepEP"). With ``R`` redundant experts a rank holds ``(E + R) / ep`` experts and
        ``tokens x k / ep`` rows: read as above at the EP ``E ep / (E + R)`` of that many
        experts per rank, each neighbour at the same rows per rank."""
        s = self.setup
        kind = "wideep_generation_moe" if decode else "wideep_context_moe"
        key = {**self._moe_key(dtype, 1), "distribution": s.distribution}
        if (kind, dtype) not in self._deepep_experts_of:
            self._deepep_experts_of[kind, dtype] = self._deepep_experts(kind, key)
        table, eps = self._deepep_experts_of[kind, dtype]
        why = (f"no SGLang {kind} table of {s.gpu}" if table is None else
               f"{table.name} measures no {dtype} experts of this shape at ep {s.ep}")  # fmt: skip
        ep_x = self.ep_x
        if table is not None and eps and s.moe_tp == 1 and eps[0] <= ep_x <= eps[-1]:
            assert table is not None

            def layer(ep: int) -> float:
                at = {**key, "moe_ep_size": ep}
                n = tokens * ep / s.ep  # the same rows per rank
                sizes = table.axis_values(**at).get("num_tokens", [])
                pieces = max(1, math.ceil(n / sizes[-1])) if sizes else 1
                return pieces * table.lookup(**at, num_tokens=n / pieces).time_s

            try:
                t = at_experts_per_rank(eps, ep_x, layer)
            except OutsideTableError as error:
                why = str(error)
            else:
                shape = (*key.items(), ("moe_ep_size", s.ep), ("num_tokens", tokens))
                out.append(KernelCall("moe", table.name, shape, count, t, None))
                read = table.name.split("/")[3]
                note = f"{kind}: {s.gpu} sglang {s.version} has no such table; {read}'s is read"
                if read != s.version and note not in self.substitutions:
                    self.substitutions.append(note)
                return True
        note = f"moe behind DeepEP ({kind}): {why}; the fused MoE table is read"
        if note not in self.substitutions:
            self.substitutions.append(note)
        return False

    def _deepep_experts(
        self, kind: str, key: dict[str, Any]
    ) -> tuple[KernelTable | None, list[int]]:
        """The newest SGLang `kind` table of the GPU (None: none) and the EP sizes at
        which it measures `key`."""
        versions = [v for f, v in self.db.versions(self.setup.gpu, kind) if f == "sglang"]
        if not versions:
            return None, []
        table = self.db.table(self.setup.gpu, kind, "sglang", max(versions, key=version_key))
        return table, self._measured_eps(table, key)

    def _measured_eps(self, table: KernelTable, key: dict[str, Any]) -> list[int]:
        """The EP sizes at which `table` measures `key` (every MoE column but the EP),
        sorted; found once per table and key."""
        at = (table.name, tuple(sorted(key.items())))
        if at not in self._eps_of:
            self._eps_of[at] = sorted(
                int(k["moe_ep_size"]) for k in table.measured_keys()
                if all(k[c] == v for c, v in key.items())
            )  # fmt: skip
        return self._eps_of[at]

    def _moe_source(self, key: dict[str, Any]) -> KernelTable:
        """The fused-MoE table a layer is read from: the setup's where it measures the
        exact key (dtype, shape, ``moe_tp`` x ``ep``, load); else the first other MoE
        table of the GPU that does (the framework's other versions, then the other
        frameworks by name, newest first), said in :attr:`substitutions`; none: the
        setup's, whose lookup refuses naming the shape."""
        own = self._tables["moe"]
        ran = self._moe_kernel_source(key)
        if ran is not None:
            return ran
        if own.axis_values(**key):
            return own
        for f, v in self._others("moe", self.setup.framework, own.name):
            table = self.db.table(self.setup.gpu, "moe", f, v)
            if table.axis_values(**key):
                shown = ", ".join(f"{c}={key[c]!r}" for c in ("moe_dtype", "moe_tp_size",
                                                              "moe_ep_size"))  # fmt: skip
                note = (
                    f"moe ({shown}): {self.setup.gpu} {_framework_version(own)} measures "
                    f"no such shape; {f} {v}'s is read"
                )
                if note not in self.substitutions:
                    self.substitutions.append(note)
                return table
        return own

    def _moe_kernel_source(self, key: dict[str, Any]) -> KernelTable | None:
        """The table that measures the MoE kernel the framework runs where its own
        tables measure another (:data:`TRTLLM_GEN_MOE`; only where attention is not
        data-parallel): that framework's newest table of the GPU that measures the key,
        said in :attr:`substitutions`; None otherwise."""
        s = self.setup
        rule = TRTLLM_GEN_MOE.get((s.framework, str(key["moe_dtype"])))
        if rule is None or s.gpu not in rule[0] or s.attention_dp > 1 or s.moe_kernels == "own":
            return None
        for f, v in self._others("moe", rule[1]):
            if f != rule[1]:
                break
            table = self.db.table(s.gpu, "moe", f, v)
            if table.axis_values(**key):
                note = (
                    f"moe ({key['moe_dtype']}): {s.framework} runs its TRTLLM MoE backend "
                    f"(TensorRT-LLM-gen kernels) without data-parallel attention, which its "
                    f"tables do not measure; {f} {v}'s measurement of those kernels is read "
                    "(docs/kernels.md, \"MoE kernels\")"
                )
                if note not in self.substitutions:
                    self.substitutions.append(note)
                return table
        return None

    def _dispatch(
        self, out: list[KernelCall], pre: bool, tokens: int, graph: bool, decode: bool = False
    ) -> None:
        """Under data-parallel attention, the collectives around each MoE layer, as
        AIConfigurator's ``MoEDispatch`` charges them per framework (``docs/kernels.md``,
        "Data-parallel attention"): the ranks' ``tokens`` rows of the residual stream
        gathered over the instance's GPUs before the experts (`pre`) and reduce-scattered
        back after them; SGLang with ``tp > 1`` reduce-scatters over the attention group
        first (and all-gathers over it last); vLLM adds its attention all-reduce; TRT-LLM
        with ``tp > 1`` all-reduces instead."""
        m, s = self.model, self.setup
        if (decode and s.moe_a2a == "deepep_ll") or s.moe_a2a == "deepep_normal":
            if pre:
                self._deepep(out, tokens, s.moe_a2a)
            return
        alltoall = self._mnnvl_alltoall(tokens)
        if alltoall is not None:
            if pre:
                table, shapes = alltoall
                for shape in shapes:
                    name = f"{shape['kernel_source']} {shape['op_name'].removeprefix('alltoall_')}"
                    self._read(out, f"moe all-to-all ({name})", table, m.moe_layers, shape)
            return
        n, hidden, gpus, tp = m.moe_layers, m.hidden_size, s.gpus, s.tp
        gathered = tokens * s.attention_dp
        name = "moe dispatch" if pre else "moe combine"

        def nccl(op: str, group: int, rows: int) -> None:
            self._collective(
                out, name, "nccl", n, rows * hidden, op_name=op, nccl_dtype="half",
                num_gpus=group,
            )  # fmt: skip

        wide = "all_gather" if pre else "reduce_scatter"
        if s.framework == "trtllm" and tp > 1:
            self._allreduce(out, name, n, tokens, graph, gpus)
        elif s.framework == "vllm":
            if tp > 1:
                self._allreduce(out, name, n, tokens, graph, gpus)
            nccl(wide, gpus, gathered)
        elif tp > 1:
            if pre:
                nccl("reduce_scatter", tp, tokens)
                nccl("all_gather", gpus, gathered)
            else:
                nccl("reduce_scatter", gpus, gathered)
                nccl("all_gather", tp, tokens)
        else:
            nccl(wide, gpus, gathered)

    def _mnnvl_alltoall(self, tokens: int) -> tuple[KernelTable, list[dict[str, Any]]] | None:
        """TensorRT-LLM's all-to-all around each MoE layer at `tokens` per rank, where it
        runs one (:meth:`_alltoall_choice`): its table and the rows' shapes; None where
        TensorRT-LLM gathers instead, or, said in :attr:`substitutions`, where the table
        does not measure the tokens (the gather is composed)."""
        if self._alltoall is None:
            self._alltoall = self._alltoall_choice()
        choice = self._alltoall
        if not choice:
            return None
        table, shapes = choice
        for sh in shapes:
            sizes = table.axis_values(**sh)["num_tokens"]
            if not sizes[0] <= tokens <= sizes[-1]:
                note = (f"moe all-to-all over multi-node NVLink: {table.name} measures "
                        f"{tokens} tokens per rank for no {sh['kernel_source']} op; the ranks' "
                        "tokens are gathered")  # fmt: skip
                if note not in self.substitutions:
                    self.substitutions.append(note)
                return None
        return table, [{**sh, "num_tokens": tokens} for sh in shapes]

    def _alltoall_choice(self) -> tuple[KernelTable, list[dict[str, Any]]] | tuple[()]:
        """Whether TensorRT-LLM runs its all-to-all, once per model: attention
        data-parallel ranks (``tp`` 1), an EP larger than the experts per token, and a
        multi-node NVLink domain holding the instance (its ``select_alltoall_method_type``:
        ``moe_ep_size > top_k`` and ``MnnvlMemory.supports_mnnvl()``; elsewhere it gathers
        the ranks' tokens, :meth:`_dispatch`). The GPU's ``trtllm_alltoall`` table
        (:data:`ALLTOALL_FABRIC_TWIN`'s for a GPU without one) and its rows' keys:
        NVLinkOneSided's dispatch and combine (the CUTLASS MoE's) where it measures the
        experts' dtype, else NVLinkTwoSided's prepare, dispatch and combine (the wide
        EP's); FP8 experts move FP8. ``()`` where TensorRT-LLM runs none, or, said in
        :attr:`substitutions`, where the table does not measure it."""
        m, s = self.model, self.setup
        fabric = s.fabric
        if (s.framework != "trtllm" or s.tp != 1 or s.attention_dp < 2
                or s.ep <= m.experts_per_token or fabric is None
                or fabric.domain_gpus <= NODE_NVLINK_GPUS or s.gpus > fabric.domain_gpus):
            return ()  # fmt: skip
        gpu = s.gpu if self.db.versions(s.gpu, "trtllm_alltoall") else (
            ALLTOALL_FABRIC_TWIN.get(s.gpu, s.gpu))  # fmt: skip
        versions = [v for f, v in self.db.versions(gpu, "trtllm_alltoall") if f == "trtllm"]
        dtype = self._dtypes["experts"][0][1] if self._dtypes["experts"] else ""
        moved = {"fp8_block": "fp8"}.get(dtype, dtype)
        key = {
            "moe_dtype": moved,
            "hidden_size": m.hidden_size,
            "topk": m.experts_per_token,
            "num_experts": m.experts,
            "moe_ep_size": s.ep,
            "distribution": "balanced",
        }
        why = f"no trtllm_alltoall table of {s.gpu}"
        if versions:
            table = self.db.table(gpu, "trtllm_alltoall", "trtllm", max(versions, key=version_key))
            why = f"{table.name} measures no {moved} all-to-all of this shape at ep {s.ep}"
            sides = (("NVLinkOneSided", ("alltoall_dispatch", "alltoall_combine")),
                     ("NVLinkTwoSided", ("alltoall_prepare", "alltoall_dispatch",
                                         "alltoall_combine")))  # fmt: skip
            for kernel, ops in sides:
                shapes = [{**key, "op_name": op, "kernel_source": kernel} for op in ops]
                if not all(table.axis_values(**sh) for sh in shapes):
                    continue
                if gpu != s.gpu:
                    self.substitutions.append(
                        f"trtllm_alltoall: no table of {s.gpu}; {gpu}'s is read (the same "
                        "NVLink 5 switch fabric of 72 GPUs)"
                    )
                return table, shapes
        self.substitutions.append(
            f"moe all-to-all over multi-node NVLink: {why}; the ranks' tokens are gathered"
        )
        return ()

    def _deepep(self, out: list[KernelCall], tokens: int, mode: str) -> None:
        """DeepEP's dispatch and combine around each MoE layer (`mode` ``deepep_ll``:
        low-latency, ``deepep_normal``: normal, at :data:`DEEPEP_NORMAL_SMS` SMs), of
        `tokens` tokens per rank, from the newest ``wideep_<mode>`` table of the setup's
        framework for the GPU (each rank sends its tokens' ``topk`` copies to the
        experts' ranks and receives their outputs: the work per rank does not depend on
        the EP size). The instance's GPUs span one node of the table where they are
        within the fabric's NVLink domain (DeepEP runs over NVLink there), else
        ``ceil(gpus / domain)`` nodes, which the tables do not measure (refused)."""
        m, s = self.model, self.setup
        kind = f"wideep_{mode}"
        table = self._deepep_tables.get(kind) or self._deepep_table(kind)
        domain = s.fabric.domain_gpus if s.fabric is not None else 8
        key = {
            "kernel_source": "deepep",
            "node_num": -(-s.gpus // domain),
            "hidden_size": m.hidden_size,
            "num_topk": m.experts_per_token,
            "num_experts": m.experts,
            "num_token": tokens,
        }
        name = "moe all-to-all (deepep low latency)"
        if mode == "deepep_normal":
            key["dispatch_sms"] = DEEPEP_NORMAL_SMS
            name = "moe all-to-all (deepep normal)"
        self._read(out, name, table, m.moe_layers, key)

    def _deepep_table(self, kind: str) -> KernelTable:
        """The newest `kind` table (``wideep_deepep_ll`` or ``wideep_deepep_normal``) of
        the setup's framework for the GPU (another version than the setup's said in
        :attr:`substitutions`), kept."""
        s = self.setup
        versions = [v for f, v in self.db.versions(s.gpu, kind) if f == s.framework]
        if not versions:
            raise InputError(
                "moe_a2a",
                f"{kind.removeprefix('wideep_')}: no {kind} table of {s.framework} for {s.gpu}",
            )
        version = max(versions, key=version_key)
        self._deepep_tables[kind] = self.db.table(s.gpu, kind, s.framework, version)
        if version != s.version:
            self.substitutions.append(
                f"{kind}: {s.gpu} {s.framework} {s.version} has no such table; "
                f"{version}'s is read"
            )
        return self._deepep_tables[kind]

    def _gqa(
        self, out: list[KernelCall], tokens: int, attention: Any, linear: Any = None
    ) -> None:
        """Grouped-query attention's block: the QKV projection (with the output gate's
        share of the queries where the model has one), the attention of each group of
        layers (``attention(calls, group)``) and the output projection; in a hybrid
        model these in its full-attention layers, and the linear-attention block
        (:meth:`_linear_block`, its kernels by ``linear(calls)``) in the others."""
        m, hidden = self.model, self.model.hidden_size
        full = (0, m.kv_layers)
        queries = self.heads * (2 if m.attention_output_gate else 1)
        qkv_n = (queries + 2 * self.kv_heads) * m.head_dim
        self._gemms(out, "qkv projection", "attention", tokens, qkv_n, hidden, full)
        for group in self._attention_groups():
            attention(out, group)
        self._gemms(out, "o projection", "attention_out", tokens, hidden,
                    self.heads * m.head_dim, full)  # fmt: skip
        if m.linear_layers:
            self._linear_block(out, tokens, linear)

    def _linear_block(self, out: list[KernelCall], tokens: int, linear: Any) -> None:
        """A Gated DeltaNet layer's block in each linear-attention layer: the input
        projection to the queries, keys, values and output gate (``in_proj_qkvz``), the
        projection to the per-head decay and write gates (``in_proj_ba``, narrower than
        the GEMM tables at 8 GPUs: read at their narrowest width), the convolution and the
        delta rule (``linear(calls)``) and the output projection, heads split over the
        ranks."""
        m, hidden, tp = self.model, self.model.hidden_size, self.setup.tp
        lin = (m.kv_layers, m.linear_layers)
        keys = m.linear_key_heads * m.linear_key_head_dim
        values = m.linear_value_heads * m.linear_value_head_dim
        qkvz = (2 * keys + 2 * values) // tp
        self._gemms(out, "linear qkvz projection", "attention", tokens, qkvz, hidden, lin)
        ba = 2 * m.linear_value_heads // tp
        self._gemms(out, "linear ba projection", "attention", tokens, ba, hidden, lin,
                    narrow=True)  # fmt: skip
        linear(out)
        self._gemms(out, "linear out projection", "attention_out", tokens, hidden,
                    values // tp, lin)  # fmt: skip

    def _gdn(self, out: list[KernelCall], phase: str, batch: int, seq_len: int) -> None:
        """The Gated DeltaNet kernels of every linear-attention layer in `phase`
        (``context``: `batch` prompts of `seq_len` tokens; ``generation``: `batch`
        requests' one-token update, ``seq_len`` 1): the causal convolution
        (:data:`GDN_CONV`) and the delta rule, the table's other kernel of the phase at
        the model's shape and the heads per GPU."""
        m, tp = self.model, self.setup.tp
        table = self._tables["gdn"]
        key = {
            "phase": phase,
            "d_model": m.hidden_size,
            "d_conv": m.linear_conv_kernel,
            "num_k_heads": m.linear_key_heads // tp,
            "head_k_dim": m.linear_key_head_dim,
            "num_v_heads": m.linear_value_heads // tp,
            "head_v_dim": m.linear_value_head_dim,
        }
        conv = GDN_CONV[phase]
        rule = sorted(
            k["kernel_source"] for k in table.measured_keys()
            if k["kernel_source"] != conv and all(k[c] == v for c, v in key.items())
        )  # fmt: skip
        for source in (conv, rule[0] if rule else f"(a delta-rule kernel of {phase})"):
            self._call(out, "linear attention", "gdn", m.linear_layers, kernel_source=source,
                       **key, batch_size=batch, seq_len=seq_len)  # fmt: skip

    def _mla_down(self, out: list[KernelCall], tokens: int) -> None:
        """MLA's input projections: the fused down-projection of the hidden state to the
        query's and the latent's low-rank inputs and the key's rotary part (replicated
        on every GPU), and the query's up-projection (heads split over ranks)."""
        m = self.model
        down = m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim
        self._gemms(out, "q/kv down projection", "attention", tokens, down, m.hidden_size)
        q_up = self.heads * m.head_dim
        self._gemms(out, "q up projection", "attention", tokens, q_up, m.q_lora_rank)

    def _mla_out(self, out: list[KernelCall], tokens: int) -> None:
        m = self.model
        k = self.heads * m.v_head_dim
        self._gemms(out, "o projection", "attention_out", tokens, m.hidden_size, k)

    def _mla_prefill(self, out: list[KernelCall], n: int) -> None:
        """MLA's block of a prompt of `n` tokens in every layer: the framework's module
        table where it has one, else the projections, the latent's up-projection to
        each head's key and value (``kv_b``), the attention kernel and the output
        projection."""
        m, s = self.model, self.setup
        keys = {"mla_dtype": "bfloat16", "kv_cache_dtype": s.kv_dtype, "num_heads": self.heads}
        if self.mla_module:
            for count, dtype in self._dtypes["attention"]:
                self._call(
                    out, "attention", "mla_context_module", count, model=self._module_model,
                    gemm_type=dtype, **keys, batch_size=1, isl=n,
                )  # fmt: skip
            return
        self._mla_down(out, n)
        kv_up = self.heads * (m.head_dim - m.qk_rope_head_dim + m.v_head_dim)
        self._gemms(out, "kv up projection", "attention", n, kv_up, m.kv_lora_rank)
        self._call(out, "attention", "context_mla", m.layers, **keys, batch_size=1, isl=n)
        self._mla_out(out, n)

    def _mla_decode(self, out: list[KernelCall], b: int, c: float) -> None:
        """MLA's block of a decode of `b` requests of `c` past tokens in every layer: the
        framework's module table where it has one, else the projections, the absorbed
        up-projections as batched GEMMs per head around the attention over the latent
        (``mla_gen_pre``: each query into the latent space, ``mla_gen_post``: each
        head's output out of it) and the output projection. The new token is the
        table's ``isl = 1`` and its past the ``step``."""
        m, s = self.model, self.setup
        keys = {"mla_dtype": "bfloat16", "kv_cache_dtype": s.kv_dtype, "num_heads": self.heads}
        shape = {**keys, "isl": 1, "batch_size": b, "step": c}
        if self.mla_module:
            for count, dtype in self._dtypes["attention"]:
                self._generation_attention(
                    out,
                    count,
                    {"model": self._module_model, "gemm_type": dtype, **shape},
                    "mla_generation_module",
                )
            return
        self._mla_down(out, b)
        for op in ("mla_gen_pre", "mla_gen_post"):
            if op == "mla_gen_post":
                self._generation_attention(out, m.layers, shape, "generation_mla")
            for count, dtype in self._dtypes["attention"]:
                bmm = "fp8" if dtype in _FP8_WEIGHTS else "bfloat16"
                self._call(
                    out, "attention bmm", "mla_bmm", count, op_name=op, bmm_dtype=bmm,
                    num_heads=self.heads, num_tokens=b,
                )  # fmt: skip
        self._mla_out(out, b)

    def _attn_keys(self, attn_dtype: str) -> dict[str, Any]:
        return {
            "num_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.model.head_dim,
            "attn_dtype": attn_dtype,
            "kv_cache_dtype": self.setup.kv_dtype,
            "window_size": 0,
            "beam_width": 1,
        }

    def prefill(self, prompt_tokens: int) -> PhaseTime:
        """One prefill of a prompt of `prompt_tokens` tokens (no cached prefix)."""
        n = _count("prompt_tokens", prompt_tokens)
        if self.mla:
            return self._pass(n, 1, lambda calls: self._mla_prefill(calls, n), graph=False)
        # context attention runs in the KV cache's dtype (FP8 attention with an FP8 cache)
        keys = self._attn_keys(self.setup.kv_dtype)

        def attention(calls: list[KernelCall], group: _Attention) -> None:
            self._prefill_attention(calls, group, keys, n)

        def linear(calls: list[KernelCall]) -> None:
            self._gdn(calls, "context", 1, n)

        return self._pass(
            n, 1, lambda calls: self._gqa(calls, n, attention, linear), graph=False
        )

    def prefill_attention(self, prompt_tokens: int) -> PhaseTime:
        """The attention kernels alone of one prefill of `prompt_tokens` tokens (every
        layer group), as :meth:`prefill` composes them."""
        n = _count("prompt_tokens", prompt_tokens)
        calls: list[KernelCall] = []
        if self.mla:
            self._mla_prefill(calls, n)
            return _phase(c for c in calls if c.name == "attention")
        keys = self._attn_keys(self.setup.kv_dtype)
        for group in self._attention_groups():
            self._prefill_attention(calls, group, keys, n)
        if self.model.linear_layers:
            self._gdn(calls, "context", 1, n)
        return _phase(calls)

    def decode(self, batch: float, context: float) -> PhaseTime:
        """One decode iteration of `batch` requests, each attending `context` past tokens.
        A fractional batch (a measured mean, such as 31.4 running requests) is the linear
        interpolation between the iterations at its floor and ceiling: time, energy and
        calls weighted by ``ceil - batch`` and ``batch - floor``."""
        b = _real_batch(batch)
        if not context >= 1:
            raise InputError("context", f"must be >= 1 token, got {context!r}")
        lo = math.floor(b)
        if b == lo:
            return self._decode(int(lo), context)
        w = b - lo
        below, above = self._decode(int(lo), context), self._decode(int(lo) + 1, context)
        return _phase(
            [*(replace(c, weight=(1.0 - w) * c.weight) for c in below.calls),
             *(replace(c, weight=w * c.weight) for c in above.calls)]
        )  # fmt: skip

    def _decode(self, batch: int, context: float) -> PhaseTime:
        # each data-parallel attention rank runs its share, the busiest ceil(B / dp)
        b = -(-batch // self.setup.attention_dp)
        graph = decode_in_graph(self.setup.framework, b)
        if self.mla:
            return self._pass(
                b, b, lambda calls: self._mla_decode(calls, b, context), graph, decode=True
            )
        keys = self._attn_keys("bfloat16")

        def attention(calls: list[KernelCall], group: _Attention) -> None:
            self._decode_attention(calls, group, keys, b, context)

        def linear(calls: list[KernelCall]) -> None:
            self._gdn(calls, "generation", b, 1)

        return self._pass(
            b, b, lambda calls: self._gqa(calls, b, attention, linear), graph, decode=True
        )

    def t_decode_speculative(self, batch: float, context: float, draft: int) -> float:
        """Seconds of one decode iteration of `batch` requests under chained speculative
        decoding with the model's next-token-prediction module (DeepSeek's MTP, one
        module applied `draft` times; docs/kernels.md, "Speculative decoding"): the
        model verifies each request's token and its `draft` drafted ones, a pass at
        ``batch (1 + draft)`` tokens (AIConfigurator's reading, each verified token a
        decode query); then the module drafts the next ones, first over the verified
        positions, then `draft - 1` times over one token per request. A module pass is
        one layer of the model's decode pass at those tokens (its mean layer), the
        projection of the embedding and the hidden state (``2 h -> h``, bf16), and the
        shared LM head with its gather. `draft` 0 is :meth:`t_decode`."""
        if isinstance(draft, bool) or not isinstance(draft, int) or draft < 0:
            raise InputError("draft", f"must be an integer >= 0, got {draft!r}")
        if draft == 0:
            return self.t_decode(batch, context)
        verify = self.decode(_real_batch(batch) * (1 + draft), context)
        return self.speculative_s(verify, self.decode(batch, context), batch, draft)

    def speculative_s(self, verify: PhaseTime, one: PhaseTime, batch: float, draft: int) -> float:
        """:meth:`t_decode_speculative` from the decode passes it reads, at ``batch (1 +
        draft)`` (``verify``) and at ``batch`` (``one``), for a caller that keeps them."""
        first = self._draft_pass(verify, batch * (1 + draft))
        return verify.time_s + first + (draft - 1) * self._draft_pass(one, batch)

    def _draft_pass(self, decode: PhaseTime, tokens: float) -> float:
        """One pass of the next-token-prediction module over `tokens` tokens (all the
        ranks'), from the decode pass at those tokens: its mean layer, the ``2 h -> h``
        projection and the LM head with its collectives (:meth:`t_decode_speculative`)."""
        ends = ("lm head", "logits all-gather", "embedding all-reduce")
        head = sum(c.total_s for c in decode.calls if c.name in ends)
        layer = (decode.time_s - head) / self.model.layers
        per_rank = max(1, math.ceil(tokens / self.setup.attention_dp))
        hidden = self.model.hidden_size
        calls: list[KernelCall] = []
        self._gemm(calls, "mtp projection", 1, per_rank, hidden, 2 * hidden, "bfloat16")
        return layer + head + _phase(calls).time_s

    def t_prefill(self, prompt_tokens: int) -> float:
        """Seconds of one prefill of `prompt_tokens` tokens (kernels only)."""
        return self.prefill(prompt_tokens).time_s

    def t_decode(self, batch: float, context: float) -> float:
        """Seconds of one decode iteration at (`batch`, `context`) (kernels only); a
        fractional batch is the linear interpolation between its floor and ceiling."""
        return self.decode(batch, context).time_s


def _table_name(gpu: str, kind: str, framework: str, version: str) -> str:
    """A table's file name relative to its database."""
    spec = TABLE_SPECS[kind]
    return f"{gpu}/{spec.folder}/{framework}/{version}/{spec.filename}"


def _ring(gpus: int) -> float:
    """The share of a collective's message each GPU's link carries in a ring over
    `gpus` GPUs (per pass; an all-reduce makes two)."""
    return (gpus - 1) / gpus


def _framework_version(table: KernelTable) -> str:
    """``framework version`` of a table, from its name."""
    parts = table.name.split("/")
    return f"{parts[2]} {parts[3]}"


def _count(field_name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(field_name, f"must be a positive integer, got {value!r}")
    return value


def _real_batch(value: object) -> float:
    """A batch of requests: an integer, or a real number (a mean), at least 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError("batch", f"must be a number >= 1, got {value!r}")
    if not math.isfinite(value) or value < 1:
        raise InputError("batch", f"must be a finite number >= 1, got {value!r}")
    return float(value)


def _phase(calls: Iterable[KernelCall]) -> PhaseTime:
    calls = tuple(calls)
    total = sum(c.total_s for c in calls)
    powers = [c.power_w for c in calls]
    power = None
    if calls and all(p is not None for p in powers):
        power = sum(c.total_s * (c.power_w or 0.0) for c in calls) / total
    return PhaseTime(total, power, calls)
