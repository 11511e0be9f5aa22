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
the shape: nothing is extrapolated. Two decompositions are applied, each computing
the same work as a sum of measured kernels, so never faster than the one kernel (by
one launch per extra block at most): a GEMM wider (``n``) than the table's widest
measured ``n`` (the LM head over a 152k vocabulary) is the sum of column blocks of
measured widths; and decode attention over a batch the generation table does not
measure at that context (it measures ``batch x context`` up to about 130k tokens) is
the sum of equal sub-batches (halving until measured), each request's attention being
independent of the others'. Every call of a pass, with its shape and count, is in
:attr:`PhaseTime.calls`.

Duplicates. Where a table measures the same shape more than once, the rows of the
kernel that the table measures most (its ``kernel_source`` with the most rows) are
kept and their latencies (and powers) averaged.

Composition (:class:`KernelModel`), per layer and per rank under tensor parallelism
``tp``: QKV and O projection GEMMs (heads split over ranks; KV heads replicated when
``tp`` exceeds them), context attention (a batch of one prompt of ``L`` tokens) or
generation attention (batch ``B``, past length ``c``), the dense MLP (gate-up and
down GEMMs, intermediate width split over ranks) or the MoE layer (router GEMM, then
the fused-MoE table at the rank's tokens with ``moe_tp = tp / ep`` and ``moe_ep = ep``,
the load ``distribution`` the tables measure, ``balanced`` by default), and two
all-reduces of the residual stream when ``tp > 1`` (custom all-reduce table; its
graph-captured backend for decode, eager for prefill, as the engines run them). Once
per pass: the embedding's all-reduce under TP (the lookup itself has no kernel
table and is not counted), the LM head GEMM on the tokens whose logits are computed
(the prompt's last for a prefill, every request's for decode) and the all-gather of
the logits under TP (NCCL table). Not counted, because no table measures them:
norms, activation, rotary embedding, sampling, scheduling and launch gaps (the
serving engine's overheads, fitted elsewhere).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model.catalog import ModelArch
from model.errors import InputError, OutsideTableError

MS = 1e-3


@dataclass(frozen=True)
class TableSpec:
    """How to read one kind of table: its op folder, file name, exact-key columns,
    size-axis columns (interpolated, in this order) and defaults for key columns that
    older files lack."""

    kind: str
    folder: str
    keys: tuple[str, ...]
    axes: tuple[str, ...]
    defaults: tuple[tuple[str, object], ...] = ()

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
        ),
        TableSpec("nccl", "comm", ("op_name", "nccl_dtype", "num_gpus"), ("message_size",)),
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
        n = len(columns.get("latency", []))
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
        name = f"{gpu}/{spec.folder}/{framework}/{version}/{spec.filename}"
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


@dataclass(frozen=True)
class KernelSetup:
    """What a composition reads: the GPU, the serving stack (framework and version of
    its tables), tensor- and expert-parallel sizes, and the tables' dtype names of the
    weights' GEMMs (``bfloat16``, ``fp8``, ``fp8_block``, ``nvfp4``), the MoE experts
    (default: the weights'), the KV cache (``bfloat16``, ``fp8``), the MoE load
    `distribution` (``balanced``, or a measured skew such as ``power_law_1.2``) and the
    NCCL version (default: the newest the database has for the GPU)."""

    gpu: str
    framework: str
    version: str
    tp: int = 1
    ep: int = 1
    weight_dtype: str = "bfloat16"
    kv_dtype: str = "bfloat16"
    moe_dtype: str = ""
    distribution: str = "balanced"
    nccl_version: str = ""

    def __post_init__(self) -> None:
        for name in ("tp", "ep"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(name, f"must be a positive integer, got {v!r}")
        if self.tp % self.ep:
            raise InputError("ep", f"must divide tp ({self.tp}), got {self.ep}")
        for name in ("weight_dtype", "kv_dtype", "moe_dtype"):
            v = getattr(self, name)
            object.__setattr__(self, name, _DTYPE_NAMES.get(v, v))


@dataclass(frozen=True)
class KernelCall:
    """One kernel of a forward pass: `count` calls of `table` at `shape`, each taking
    `time_s` (s) at `power_w` (W, None where unmeasured)."""

    name: str
    table: str
    shape: tuple[tuple[str, Any], ...]
    count: int
    time_s: float
    power_w: float | None


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
            out[c.name] += c.count * c.time_s
        return dict(out)


def expert_intermediate_size(model: ModelArch) -> int:
    """One routed expert's intermediate width: its parameters are a gated MLP's three
    ``hidden x inter`` matrices (Qwen3, DeepSeek, Mixtral, Llama 4)."""
    hidden = model.hidden_size
    inter = model.expert_params / (3 * hidden) if hidden else 0.0
    if not inter or inter != int(inter):
        raise InputError(
            "expert_params",
            f"{model.name}: {model.expert_params:g} is not three hidden x inter matrices "
            f"(hidden_size {hidden}); the expert shape is unknown",
        )
    return int(inter)


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
        if not m.experts and not m.intermediate_size:
            raise InputError("intermediate_size", f"{m.name}: unknown, needed for its MLP")
        if m.experts and m.moe_layers != m.layers:
            raise InputError("moe_layers", f"{m.name}: mixed dense and MoE layers not composed yet")
        if m.kv_latent or m.sliding_layers:
            raise InputError(
                "model", f"{m.name}: MLA and sliding-window attention not composed yet"
            )
        if m.n_heads % tp:
            raise InputError("tp", f"must divide the {m.n_heads} attention heads, got {tp}")
        if m.n_kv_heads % tp and tp % m.n_kv_heads:
            raise InputError("tp", f"must divide or be a multiple of the {m.n_kv_heads} KV heads")
        if not m.experts and m.intermediate_size % tp:
            raise InputError("tp", f"must divide the MLP width {m.intermediate_size}, got {tp}")
        if setup.ep > 1 and not m.experts:
            raise InputError("ep", f"{m.name} is dense: expert parallelism needs experts")
        self.heads = m.n_heads // tp
        self.kv_heads = max(1, m.n_kv_heads // tp)
        self.expert_inter = expert_intermediate_size(m) if m.experts else 0
        self._tables = {
            kind: db.table(setup.gpu, kind, setup.framework, setup.version)
            for kind in ("gemm", "context_attention", "generation_attention")
        }
        if m.experts:
            self._tables["moe"] = db.table(setup.gpu, "moe", setup.framework, setup.version)
        if tp > 1:
            self._tables["custom_allreduce"] = db.table(
                setup.gpu, "custom_allreduce", setup.framework, setup.version
            )
            nccl = setup.nccl_version or self._newest_nccl()
            self._tables["nccl"] = db.table(setup.gpu, "nccl", "nccl", nccl)

    def _newest_nccl(self) -> str:
        versions = [v for f, v in self.db.versions(self.setup.gpu, "nccl") if f == "nccl"]
        if not versions:
            raise InputError("kernels", f"no NCCL table for {self.setup.gpu}")
        return max(versions, key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))

    # ---- kernels

    def _call(self, out: list[KernelCall], name: str, kind: str, count: int, **shape: Any) -> None:
        table = self._tables[kind]
        t = table.lookup(**shape)
        out.append(KernelCall(name, table.name, tuple(shape.items()), count, t.time_s, t.power_w))

    def _gemm(
        self, out: list[KernelCall], name: str, count: int, m: int, n: int, k: int, dtype: str
    ) -> None:
        """A GEMM; wider than the table's widest ``n``, the sum of column blocks of the
        widest measured width and the remainder (computing ``n`` columns is computing
        each block's; see the module docstring)."""
        widths = self._tables["gemm"].axis_values(gemm_dtype=dtype).get("n", [])
        widest = int(widths[-1]) if widths else 0
        if not widest or n <= widest:
            self._call(out, name, "gemm", count, gemm_dtype=dtype, m=m, n=n, k=k)
            return
        blocks, rest = divmod(n, widest)
        self._call(out, name, "gemm", count * blocks, gemm_dtype=dtype, m=m, n=widest, k=k)
        if rest:
            self._call(out, name, "gemm", count, gemm_dtype=dtype, m=m, n=rest, k=k)

    def _allreduce(
        self, out: list[KernelCall], name: str, count: int, tokens: int, graph: bool
    ) -> None:
        table = self._tables["custom_allreduce"]
        suffix = "_graph" if graph else "_eager"
        every = sorted({str(k["backend"]) for k in table.measured_keys()})
        backends = [b for b in every if b.endswith(suffix)] or every
        self._call(
            out,
            name,
            "custom_allreduce",
            count,
            allreduce_dtype="bfloat16",
            num_gpus=self.setup.tp,
            backend=backends[0],
            message_size=tokens * self.model.hidden_size,
        )

    def _generation_attention(
        self, out: list[KernelCall], count: int, shape: dict[str, Any]
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
                    "generation_attention",
                    count * full,
                    **{**shape, "batch_size": size},
                )
                if rest:
                    self._call(
                        calls,
                        "attention",
                        "generation_attention",
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

    def _pass(
        self, tokens: int, logits: int, attention: tuple[str, dict[str, Any]], graph: bool
    ) -> PhaseTime:
        m, s = self.model, self.setup
        L, hidden, tp = m.layers, m.hidden_size, s.tp
        wd = s.weight_dtype
        calls: list[KernelCall] = []
        if tp > 1:
            self._allreduce(calls, "embedding all-reduce", 1, tokens, graph)
        qkv_n = (self.heads + 2 * self.kv_heads) * m.head_dim
        self._gemm(calls, "qkv projection", L, tokens, qkv_n, hidden, wd)
        kind, shape = attention
        if kind == "generation_attention":
            self._generation_attention(calls, L, shape)
        else:
            self._call(calls, "attention", kind, L, **shape)
        self._gemm(calls, "o projection", L, tokens, hidden, self.heads * m.head_dim, wd)
        if tp > 1:
            self._allreduce(calls, "attention all-reduce", L, tokens, graph)
        if m.experts:
            self._gemm(calls, "router", L, tokens, m.experts, hidden, "bfloat16")
            self._call(
                calls,
                "moe",
                "moe",
                L,
                moe_dtype=s.moe_dtype or wd,
                hidden_size=hidden,
                inter_size=self.expert_inter,
                topk=m.experts_per_token,
                num_experts=m.experts,
                moe_tp_size=tp // s.ep,
                moe_ep_size=s.ep,
                distribution=s.distribution,
                num_tokens=tokens,
            )
        else:
            inter = m.intermediate_size // tp
            self._gemm(calls, "mlp gate-up", L, tokens, 2 * inter, hidden, wd)
            self._gemm(calls, "mlp down", L, tokens, hidden, inter, wd)
        if tp > 1:
            self._allreduce(calls, "mlp all-reduce", L, tokens, graph)
        self._gemm(calls, "lm head", 1, logits, -(-m.vocab_size // tp), hidden, "bfloat16")
        if tp > 1:
            self._call(
                calls,
                "logits all-gather",
                "nccl",
                1,
                op_name="all_gather",
                nccl_dtype="half",
                num_gpus=tp,
                message_size=logits * m.vocab_size,
            )
        return _phase(calls)

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
        # context attention runs in the KV cache's dtype (FP8 attention with an FP8 cache)
        shape = {**self._attn_keys(self.setup.kv_dtype), "batch_size": 1, "isl": n}
        return self._pass(n, 1, ("context_attention", shape), graph=False)

    def decode(self, batch: int, context: float) -> PhaseTime:
        """One decode iteration of `batch` requests, each attending `context` past tokens."""
        b = _count("batch", batch)
        if not context >= 1:
            raise InputError("context", f"must be >= 1 token, got {context!r}")
        shape = {**self._attn_keys("bfloat16"), "batch_size": b, "step": context}
        return self._pass(b, b, ("generation_attention", shape), graph=True)

    def t_prefill(self, prompt_tokens: int) -> float:
        """Seconds of one prefill of `prompt_tokens` tokens (kernels only)."""
        return self.prefill(prompt_tokens).time_s

    def t_decode(self, batch: int, context: float) -> float:
        """Seconds of one decode iteration at (`batch`, `context`) (kernels only)."""
        return self.decode(batch, context).time_s


def _count(field_name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(field_name, f"must be a positive integer, got {value!r}")
    return value


def _phase(calls: Iterable[KernelCall]) -> PhaseTime:
    calls = tuple(calls)
    total = sum(c.count * c.time_s for c in calls)
    powers = [c.power_w for c in calls]
    power = None
    if calls and all(p is not None for p in powers):
        power = sum(c.count * c.time_s * (c.power_w or 0.0) for c in calls) / total
    return PhaseTime(total, power, calls)
