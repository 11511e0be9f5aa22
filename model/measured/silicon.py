"""TTFT and TPOT of AIConfigurator's measured serving runs, predicted from kernel tables.

AIConfigurator ships, with its kernel tables, a file of measured serving benchmarks,
``silicon_sample.csv`` (:func:`installed_silicon`): one row per run of one model on
one GPU type under one framework (vLLM, SGLang, TensorRT-LLM), aggregated (``agg``: one
engine does prefill and decode) or disaggregated (``disagg``: prefill and decode
workers), at fixed prompt and output lengths (``isl``, ``osl``) and a number of
concurrent clients, with the measured mean time to first token and time per output
token. This module reads such a file (:func:`read_silicon`), maps each row to the
catalog and the kernel tables (:func:`resolve`), and predicts each row's TTFT and TPOT
from the composed kernel times (:class:`model.performance.kernels.KernelModel`) and the
benchmark's closed loop (:func:`solve`: staggered requests under a mixed scheduler
and disaggregated workers, synchronised waves under a prefill-first one), with the
serving engine's overheads either left out ("kernels alone") or fitted per (GPU,
framework) on the other models' rows (leave one model out, :func:`leave_one_model_out`).
``docs/validation-silicon.md`` derives the loop and reports the errors.

Concurrency. A row is a closed-loop benchmark: each of its clients sends a request,
waits for the whole answer and sends the next. AIConfigurator's estimator names the
number of concurrent requests of an aggregated worker its global batch,
``batch_size x attention_dp_size``; that is the concurrency of one aggregated worker
here. A disaggregated row states no batch of the deployment, only each phase's worker
count and batch; its concurrency is the benchmark's, ``silicon_concurrency=N`` in the
``silicon_data_source`` column, else the ``_cN_`` of its id. The disaggregated rows that
leave their worker counts empty (SemiAnalysis InferenceX runs) take the configuration
InferenceX published for their run where it is unambiguous (:func:`published_config`,
``model/data/silicon_disagg_workers.json``), else stay refused with the reason.

Nothing is silently dropped: every row is either a :class:`Case` (predicted) or an
:class:`Unpredicted` with its reason.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import importlib.util
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from model.catalog import ModelArch, find_release, load_gpu, load_model
from model.errors import InputError, NotFoundError
from model.performance.engine import GPU_FOLDERS, choose_version, engine_overhead_s, open_database
from model.performance.interconnect import INTERCONNECTS, kv_transfer_s
from model.performance.kernels import MOE_A2A, KernelModel, KernelSetup
from model.performance.speculative import (
    accepted_tokens,
    check_draft,
    model_accepted_tokens,
    speculative_record,
)

FloatArray = np.ndarray

#: the file's name in the installed aiconfigurator-core package (``systems/``)
SILICON_FILE = "silicon_sample.csv"
#: columns every silicon file has (the header is checked for all of them)
REQUIRED = (
    "id",
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)
#: per-phase columns of a disaggregated row (``prefill_<x>``, ``decode_<x>``)
PHASE_FIELDS = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size",
                "moe_tp_size", "moe_ep_size")  # fmt: skip
#: the columns that tell a silicon file from another CSV
MARKERS = ("silicon_ttft_ms", "silicon_tpot_ms")
MODES = ("agg", "disagg")
#: the systems of the file -> catalog GPUs (the inverse of the tables' folder names)
SYSTEM_GPUS = {folder: gpu for gpu, folder in GPU_FOLDERS.items()}
#: share of a GPU's memory the engines give to weights and the KV cache (vLLM's
#: ``gpu_memory_utilization`` default; SGLang's ``mem_fraction_static`` and
#: TensorRT-LLM's ``free_gpu_memory_fraction`` default near it)
MEMORY_FRACTION = 0.9
#: decode batches composed exactly (every integer up to it), then geometrically
EXACT_BATCHES = 16
#: ratio of consecutive composed decode batches above :data:`EXACT_BATCHES`
BATCH_RATIO = 2**0.25
#: iterations of the bisection on the arrival rate
BISECTIONS = 80
#: bytes per weight of the row's GEMM dtype (the table's name)
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_tensor": 1.0, "fp8_block": 1.0,
                "nvfp4": 4.5 / 8}  # fmt: skip
#: the fitted overheads, in order: per layer per iteration (s: the kernels no table
#: measures, norms, activations, rotary embedding, residual adds, which each layer runs
#: once an iteration), per running request per decode iteration (s), per request's
#: first token (s: latency outside the engine's iterations, the request's reception,
#: tokenising, scheduling, the answer's return), and the loop's bunching (the share of
#: a synchronised wave's prompt wait a request of a staggered loop meets: 0 staggered,
#: 1 one wave; docs/validation-silicon.md, section 4)
OVERHEADS = ("t_layer_s", "t_req_s", "t_first_s", "bunching")
#: bounds of each overhead in a fit
OVERHEAD_BOUNDS = {
    "t_layer_s": (0.0, 1e-3),
    "t_req_s": (0.0, 1e-3),
    "t_first_s": (0.0, 2.0),
    "bunching": (0.0, 1.0),
}
#: the fewest models whose rows fit a group's overheads: the rows of one model cannot
#: tell the engine's overheads from that model's own composition error, which a fit on
#: them alone hands to the model left out (docs/validation-silicon.md, section 4)
FIT_MODELS = 2
#: each overhead's scale in the fit (its parameters are the overheads over these) and
#: the fit's starting point
OVERHEAD_SCALE = (1e-5, 1e-5, 1e-2, 1.0)
OVERHEAD_START = (1e-5, 1e-5, 2e-2, 0.3)
#: AIConfigurator's deployment generator sets each engine's token budget from the
#: prompt length since its vLLM/SGLang rules (``generator/rule_plugin/*.rule``, first
#: release); rows measured before it (or undated) run the engines' defaults
GENERATOR_SINCE = "2025-12-04"
#: the generator turns on SGLang's mixed chunked prefill in aggregated deployments
#: (``agg enable_mixed_chunk = true``) since this date
SGLANG_MIXED_SINCE = "2026-01-19"
#: engine defaults of the tokens one iteration takes: vLLM's ``max_num_batched_tokens``
#: (V1 engine, OpenAI server on a GPU of >= 70 GiB) and TensorRT-LLM's
#: ``max_num_tokens`` (``BaseLlmArgs``)
ENGINE_BUDGET = {"vllm": 8192, "trtllm": 8192}
#: SGLang's default ``chunked_prefill_size`` by the GPU's memory (``server_args``:
#: 8192 up to 160 GB, 16384 above)
SGLANG_CHUNK = {"h100_sxm": 8192, "h200_sxm": 8192, "b200_sxm": 16384}
#: GPUs of one node of the systems whose rows are single-node runs (an HGX board of
#: eight; datasheets of HGX H100, H200, B200 and B300): an aggregated row of one of them
#: stating more GPUs records a single-node recipe (:func:`recipe_parallelism`)
NODE_GPUS = {"h100_sxm": 8, "h200_sxm": 8, "b200_sxm": 8, "b300_sxm": 8}
#: the systems on which SGLang's disaggregated decode workers with data-parallel
#: attention run DeepEP's low-latency all-to-all: every srt-slurm recipe of InferenceX's
#: Dynamo SGLang entries for such workers on them states ``moe-a2a-backend: deepep``,
#: ``deepep-mode: low_latency`` (15 of 15 published configurations,
#: ``model/data/silicon_disagg_workers.json``), and none on B200 or H200 does (6 of 6)
DEEPEP_DECODE_SYSTEMS = frozenset({"gb200", "gb300"})
#: the DeepEP mode every published recipe states for SGLang workers of a phase with
#: data-parallel attention on those systems, by phase: (mode, the precisions it holds
#: for (None: every one), what the note calls it and the workers). Decode: low-latency
#: (15 of 15); prefill in FP8: normal (8 of 8; the NVFP4 ones state no all-to-all
#: backend, 4 of 4)
DEEPEP_RECIPES = {
    "decode": ("deepep_ll", None, "low-latency", "decode workers"),
    "prefill": ("deepep_normal", "fp8", "normal", "FP8 prefill workers"),
}
#: bytes per second per GPU the KV cache crosses between disaggregated workers (one
#: 400 Gb/s NIC per GPU: model.performance.interconnect's InfiniBand)
KV_LINK_BYTES_PER_S = INTERCONNECTS["infiniband"][0]
#: the published worker configurations of the disaggregated rows that leave their worker
#: counts empty (SemiAnalysis InferenceX runs; ``model/data/``, derived by
#: ``scripts/derive_silicon_disagg_workers.py``, docs/validation-silicon.md section 3)
DISAGG_WORKERS_FILE = "silicon_disagg_workers.json"
#: the aggregated rows measured with speculative decoding, or with and without it, by
#: the public configurations of the image they name (derived by
#: ``scripts/derive_silicon_speculative.py``, docs/validation-silicon.md section 3)
SPECULATIVE_FILE = "silicon_speculative.json"


# --------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class Phase:
    """One kind of worker of a row: its count (None: not stated), its batch (None: not
    stated), its parallelism and, where a published configuration states it, its MoE
    all-to-all (``moe_a2a``: SGLang's DeepEP mode, ``deepep_ll`` or ``deepep_normal``;
    ``""``: the engine's collectives) and its redundant experts."""

    workers: int | None
    batch: int | None
    tp: int
    pp: int
    dp: int
    moe_tp: int
    moe_ep: int
    moe_a2a: str = ""
    #: replicas of busy experts the recipe's expert-parallel load balancer adds
    #: (SGLang), or the slots it holds for experts and replicas (TensorRT-LLM)
    redundant: int = 0
    expert_slots: int = 0


@dataclass(frozen=True)
class SiliconRow:
    """One measured run, as the file states it (times in ms)."""

    id: str
    line: int
    backend: str
    backend_version: str
    model_path: str
    system: str
    precision: str
    gemm_quant: str
    moe_quant: str
    mode: str
    isl: int
    osl: int
    concurrency: int | None
    agg: Phase | None
    prefill: Phase | None
    decode: Phase | None
    ttft_ms: float
    tpot_ms: float
    source: str = ""

    def config(self) -> dict[str, Any]:
        """The run's configuration, for reports."""
        out: dict[str, Any] = {
            "model": self.model_path,
            "system": self.system,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "precision": self.precision,
            "mode": self.mode,
            "isl": self.isl,
            "osl": self.osl,
            "concurrency": self.concurrency,
        }
        for name in ("agg", "prefill", "decode"):
            p = getattr(self, name)
            if p is not None:
                out[name] = {k: v for k, v in p.__dict__.items() if v is not None}
        return out


def installed_silicon() -> str | None:
    """The silicon file the installed aiconfigurator-core package ships, found without
    importing it; None when it is not installed."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "systems" / SILICON_FILE
        if path.is_file():
            return str(path)
    return None


def is_silicon_header(line: str) -> bool:
    """Whether a CSV's first line is a silicon file's header (it names the measured TTFT
    and TPOT columns)."""
    names = {c.strip().lower() for c in next(csv.reader([line]), [])}
    return all(m in names for m in MARKERS)


def is_silicon_file(path: str | Path) -> bool:
    """Whether the file at ``path`` is a silicon file (by its header)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return is_silicon_header(f.readline())
    except (OSError, UnicodeDecodeError):
        return False


def _where(file: str, line: int, rid: str, column: str) -> str:
    return f"{file}: line {line} ({rid or 'no id'}): {column}"


def _int(file: str, line: int, rid: str, row: Mapping[str, str], column: str) -> int | None:
    text = (row.get(column) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(
            _where(file, line, rid, column), f"must be an integer, got {text!r}"
        ) from None
    if not value.is_integer() or value < 0:
        raise InputError(
            _where(file, line, rid, column), f"must be a non-negative integer, got {text!r}"
        )
    return int(value)


def _positive_ms(file: str, line: int, rid: str, row: Mapping[str, str], column: str) -> float:
    text = (row.get(column) or "").strip()
    try:
        value = float(text)
    except ValueError:
        raise InputError(
            _where(file, line, rid, column), f"must be a time in ms, got {text!r}"
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise InputError(_where(file, line, rid, column), f"must be > 0 ms, got {text!r}")
    return value


def _phase(file: str, line: int, rid: str, row: Mapping[str, str], prefix: str) -> Phase | None:
    values = {f: _int(file, line, rid, row, prefix + f) for f in PHASE_FIELDS}
    if values["tp_size"] is None:
        return None
    return Phase(
        values["num_workers"],
        values["batch_size"],
        values["tp_size"] or 1,
        values["pp_size"] or 1,
        max(1, values["attention_dp_size"] or 1),
        values["moe_tp_size"] or 1,
        values["moe_ep_size"] or 1,
    )


def _stated_concurrency(row: Mapping[str, str]) -> int | None:
    """The benchmark's concurrency as the row's source or id states it."""
    m = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source") or "")
    if m is None:
        m = re.search(r"_c(\d+)(?:_|$)", row.get("id") or "")
    return int(m.group(1)) if m else None


def parse_silicon(file: str, text: str) -> list[SiliconRow]:
    """The rows of a silicon file's text; an :class:`InputError` naming the file, the
    line, the row's id and the column for a missing column or a malformed value."""
    reader = csv.DictReader(io.StringIO(text))
    header = [c.strip() for c in reader.fieldnames or []]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(
            f"{file}: header", f"missing the column(s) {', '.join(missing)} of a silicon file"
        )
    out: list[SiliconRow] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "") for k, v in raw.items()}
        rid = row["id"].strip()
        if not rid:
            raise InputError(_where(file, n, rid, "id"), "empty; every row needs its id")
        if rid in seen:
            raise InputError(_where(file, n, rid, "id"), f"repeats line {seen[rid]}'s id")
        seen[rid] = n
        mode = row["mode"].strip()
        if mode not in MODES:
            raise InputError(
                _where(file, n, rid, "mode"), f"must be one of {', '.join(MODES)}, got {mode!r}"
            )
        lengths = {}
        for column in ("isl", "osl"):
            v = _int(file, n, rid, row, column)
            if not v:
                raise InputError(_where(file, n, rid, column), "must be a positive integer")
            lengths[column] = v
        agg = prefill = decode = None
        concurrency: int | None
        if mode == "agg":
            batch = _int(file, n, rid, row, "batch_size")
            agg = Phase(
                1,
                batch,
                _int(file, n, rid, row, "tp_size") or 1,
                _int(file, n, rid, row, "pp_size") or 1,
                max(1, _int(file, n, rid, row, "attention_dp_size") or 1),
                _int(file, n, rid, row, "moe_tp_size") or 1,
                _int(file, n, rid, row, "moe_ep_size") or 1,
            )
            concurrency = batch * agg.dp if batch else _stated_concurrency(row)
        else:
            prefill = _phase(file, n, rid, row, "prefill_")
            decode = _phase(file, n, rid, row, "decode_")
            concurrency = _stated_concurrency(row)
        out.append(
            SiliconRow(
                rid,
                n,
                row["backend"].strip().lower(),
                row["backend_version"].strip(),
                row["model_path"].strip(),
                row["system"].strip().lower(),
                row["precision"].strip().lower(),
                row.get("gemm_quant_mode", "").strip().lower(),
                row.get("moe_quant_mode", "").strip().lower(),
                mode,
                lengths["isl"],
                lengths["osl"],
                concurrency or None,
                agg,
                prefill,
                decode,
                _positive_ms(file, n, rid, row, "silicon_ttft_ms"),
                _positive_ms(file, n, rid, row, "silicon_tpot_ms"),
                (row.get("silicon_data_source") or "").strip(),
            )
        )
    return out


def read_silicon(path: str | Path) -> list[SiliconRow]:
    """The rows of the silicon file at ``path`` (:func:`parse_silicon`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise InputError(p.name, f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(p.name, "not UTF-8 text") from None
    return parse_silicon(p.name, text)


# --------------------------------------------------------------------------
# Mapping a row to the catalog and the kernel tables


@dataclass(frozen=True)
class Unpredicted:
    """A row not predicted, and why."""

    row: SiliconRow
    reason: str


@dataclass(frozen=True)
class Instance:
    """The composed kernel times of one worker: its decode iteration's kernels at the
    row's mean decode context over a grid of batches (``batches``, ``decode_s``; the
    worker's batch, over its attention data-parallel ranks), one prefill of the row's
    prompt alone on each rank (``prefill_s``), the kernels' time per prompt token when
    the engine batches prompts into its chunks (``token_s``), its data-parallel
    attention ranks (``ranks``), the largest batch its KV cache holds at the mean
    context (``kv_batch``) and its batch limit (``batch_cap``, the KV cache's or the
    row's stated batch, the smaller)."""

    tp: int
    ep: int
    workers: int
    prefill_s: float
    batches: FloatArray
    decode_s: FloatArray
    kv_batch: float
    batch_cap: float
    token_s: float = 0.0
    ranks: int = 1


@dataclass(frozen=True)
class Schedule:
    """How the row's engine schedules an iteration: the prompt tokens one iteration
    takes (``budget``: after the running decodes' share where they count against it;
    whole prompts only where the engine does not chunk them), whether prefill chunks
    ride with the decodes (``mixed``; False: prefill first, the decodes waiting), and
    where the budget comes from (``source``)."""

    budget: int
    chunked: bool
    mixed: bool
    source: str


@dataclass(frozen=True)
class Case:
    """A row the kernel tables compose: its catalog model and GPU, the framework
    version read, the GEMM dtype, its workers (``agg``: one; ``disagg``: the prefill
    and the decode workers), its engine's schedule and the KV transfer of a prompt
    between disaggregated workers. `model` is the model the row measures (a model's
    rows are left out together, whatever their precision); `release`, the catalog
    entry of its quantised release where the row ran one (empty: `model`'s own entry);
    `expert_dtype`, the MoE tables' dtype of the routed experts (empty: dense);
    `draft_tokens`, the tokens MTP drafts per decode iteration (0: none), `accept` the
    model's published MTP acceptance (first draft, later drafts)."""

    row: SiliconRow
    model: str
    gpu: str
    framework: str
    version: str
    weight_dtype: str
    layers: int
    prefill: Instance
    decode: Instance
    notes: tuple[str, ...] = ()
    schedule: Schedule = Schedule(8192, True, True, "")
    kv_transfer_s: float = 0.0
    release: str = ""
    expert_dtype: str = ""
    draft_tokens: int = 0
    accept: tuple[float, float] = (0.0, 0.0)

    @property
    def gained(self) -> float:
        """Tokens a request gains per decode iteration: 1, or under MTP those of
        ``draft_tokens`` drafts at the model's published acceptance ``accept`` (first,
        later; :func:`model.performance.speculative.accepted_tokens`)."""
        return accepted_tokens(self.draft_tokens, *self.accept)

    @property
    def pair(self) -> tuple[str, str]:
        """The (GPU, framework) of the row's kernel tables and engine."""
        return (self.gpu, self.framework)

    @property
    def group(self) -> tuple[str, str, str]:
        """The (GPU, framework, mode) whose overheads the row takes: an aggregated engine
        and a disaggregated pair of workers run different loops (docs/validation-silicon.md,
        section 4)."""
        return (self.gpu, self.framework, self.row.mode)


def measured_date(row: SiliconRow) -> str:
    """The date the row was measured (``measured=YYYY-MM-DD`` in its source; empty when
    not stated)."""
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.source)
    return m.group(1) if m else ""


def schedule(row: SiliconRow, running: int) -> Schedule:
    """The aggregated engine's iteration schedule for the row, with ``running``
    requests decoding per rank (docs/validation-silicon.md, section 2): rows measured
    since :data:`GENERATOR_SINCE` run the budgets AIConfigurator's generator writes
    (vLLM ``max_num_tokens = max_batch_size + isl + 1500`` with ``max_batch_size`` 512
    or twice the batch; SGLang ``max_prefill_tokens = isl + 1500`` under its chunk size,
    mixed chunks since :data:`SGLANG_MIXED_SINCE`; TensorRT-LLM ``max_num_tokens =
    batch + isl + 500``, rounded up to 32), the others the engines' defaults. vLLM
    (V1) always chunks and puts the decodes first; TensorRT-LLM mixes whole prompts
    with the decodes (chunked prefill off by default); SGLang chunks and, unmixed, runs
    a waiting prefill before any decode."""
    date = measured_date(row)
    generated = bool(date) and date >= GENERATOR_SINCE
    isl = row.isl
    batch = (row.agg.batch if row.agg and row.agg.batch else 0) or running
    if row.backend == "sglang":
        chunk = SGLANG_CHUNK.get(row.system, 8192)
        total = min(isl + 1500, chunk) if generated else chunk
        mixed = generated and date >= SGLANG_MIXED_SINCE
        budget = total - running if mixed else total
        src = ("generator: max_prefill_tokens isl + 1500" if generated else
               f"SGLang default chunked_prefill_size {chunk}")  # fmt: skip
        src += ", mixed chunks" if mixed else ", prefill first (no mixed chunks)"
        return Schedule(max(1, budget), True, mixed, src)
    if row.backend == "trtllm":
        if generated:
            total = -(-(batch + isl + 500) // 32) * 32
            src = "generator: max_num_tokens batch + isl + 500"
        else:
            total, src = ENGINE_BUDGET["trtllm"], "TensorRT-LLM default max_num_tokens 8192"
        whole = max(1, (total - running) // isl)
        return Schedule(whole * isl, False, True, src + f", {whole} whole prompt(s)")
    if generated:
        total = max(512, 2 * batch) + isl + 1500
        src = "generator: max_num_tokens max_batch_size + isl + 1500"
    else:
        total, src = ENGINE_BUDGET["vllm"], "vLLM default max_num_batched_tokens 8192"
    return Schedule(max(1, total - running), True, True, src + ", decodes first")


def _weights(model: ModelArch, row: SiliconRow) -> tuple[str, list[str]] | str:
    """The GEMM tables' dtype of the row's weights and notes, or why there is none."""
    p, g = row.precision, row.gemm_quant
    if model.precision == "mxfp4":  # gpt-oss: the catalog's release is the only one
        if p in ("fp4", "mxfp4", ""):
            return "bfloat16", [f"{p or 'no precision'}: the catalog's release of "
                                f"{model.name} (MXFP4 experts, bf16 elsewhere)"]  # fmt: skip
        return f"precision {p}: the catalog has no such release of {model.name}"
    if model.fp4_experts:  # a release with 4-bit experts: rows in its own precision only
        return _no_release(model, row)
    if p in ("", "bf16", "fp16") and g in ("", "bf16", "float16", "bfloat16"):
        return "bfloat16", ([] if p else ["no precision stated: bf16 weights"])
    if p == "fp8":
        # "fp8": the model's FP8 release (block-scaled where the catalog says so)
        dtype = {"fp8": "fp8", "fp8_block": "fp8_block"}.get(g or "fp8")
        if dtype is None:
            return f"precision fp8 with GEMM quantisation {g!r}: not composed"
        if model.experts and row.moe_quant and row.moe_quant not in ("fp8", "fp8_block"):
            return f"fp8 weights with {row.moe_quant} experts: not composed"
        return dtype, []
    if p == "fp4" and g == "nvfp4" and not model.experts:
        return "nvfp4", ["NVFP4 weights in every linear layer (the row's GEMM quantisation), "
                         "the LM head bf16"]  # fmt: skip
    return _no_release(model, row)


def _no_release(model: ModelArch, row: SiliconRow) -> str:
    return (
        f"precision {row.precision or 'unstated'} (GEMM {row.gemm_quant or 'unstated'}, MoE "
        f"{row.moe_quant or 'unstated'}): the catalog has no such release of {model.name}"
    )


#: a row's precision and its GEMM and MoE quantisation modes -> the catalog precision of
#: the mixture of experts' release it ran (its routed experts' 4-bit format)
FOUR_BIT_RELEASES = {("fp4", "nvfp4", "nvfp4"): "nvfp4", ("int4", "int4_wo", "int4_wo"): "int4"}
#: what each 4-bit release's routed experts run in the MoE tables
FOUR_BIT_EXPERTS = {
    "nvfp4": "NVFP4 weights and activations (the nvfp4 MoE tables)",
    "int4": "INT4 weights, bf16 activations (the weight-only int4_wo MoE tables)",
}
#: the catalog's names of the weights a 4-bit release may store in its format
FOUR_BIT_WEIGHTS = {
    "shared": "shared experts",
    "mlp": "dense layers' MLPs",
    "attention_out": "attention output projection",
}


def _release(model: ModelArch, row: SiliconRow) -> tuple[ModelArch, str, list[str]] | None:
    """For a mixture of experts measured in a 4-bit release (:data:`FOUR_BIT_RELEASES`):
    the catalog entry of that release (the row's model's, :func:`model.catalog.
    find_release`), the GEMM tables' dtype of its weights (``nvfp4``: those its entry
    stores in NVFP4, the others bf16; ``bfloat16`` beside INT4 experts) and notes;
    None for any other row (its model's own entry, :func:`_weights`)."""
    precision = FOUR_BIT_RELEASES.get((row.precision, row.gemm_quant, row.moe_quant))
    if not model.experts or precision is None or model.precision == "mxfp4":
        return None
    release = find_release(model, precision)
    if release is None:
        return None
    four = [FOUR_BIT_WEIGHTS[w] for w in release.fp4_weights if w != "experts"]
    dtype = "nvfp4" if precision == "nvfp4" else "bfloat16"
    what = f"{precision.upper()} routed experts" + "".join(f", {w}" for w in four)
    named = (
        f"{row.model_path}, which names no checkpoint, read as" if release.name != model.name
        else f"{row.model_path}:"
    )  # fmt: skip
    notes = [
        f"{row.precision} (GEMM {row.gemm_quant}, MoE {row.moe_quant}): {named} "
        f"{release.name}, the catalog's {precision.upper()} release of "
        f"{release.base_model or release.name}: {what}, every other weight bf16, as its "
        f"quantisation config says (models.json); the experts in "
        f"{FOUR_BIT_EXPERTS[precision]}"
    ]
    if precision == "int4":
        notes.append(f"the row's GEMM mode {row.gemm_quant}: no GEMM of this release is "
                     "quantised, bf16 GEMMs read")  # fmt: skip
    return release, dtype, notes


def _batches(top: float) -> FloatArray:
    """Decode batches composed for a worker that may run up to ``top`` requests."""
    top = max(1.0, top)
    exact = np.arange(1.0, min(EXACT_BATCHES, math.floor(top)) + 1.0)
    out = list(exact)
    b = float(exact[-1])
    while b < top:
        b = min(top, math.ceil(b * BATCH_RATIO))
        out.append(b)
    if out[-1] < top:
        out.append(top)
    return np.array(sorted(set(out)))


def _kv_batch(
    model: ModelArch, gpu: str, tp: int, weight_bytes: float, context: float, kv_bytes: float
) -> float:
    """Requests a worker's KV cache holds at a context of ``context`` tokens each, in the
    share of the memory the driver reports (``engine_mem_bytes``) the weights leave:
    each request's KV in the layers that keep one (KV heads replicated over the ranks
    beyond them) and, in a hybrid model, its linear-attention layers' fixed recurrent state
    (heads split over the ranks: the worker holds one state per request)."""
    kv = model.kv_bytes_at(context) * kv_bytes / model.kv_bytes_per_elem
    if model.n_kv_heads < tp:  # KV heads replicated over the ranks
        kv *= tp / model.n_kv_heads
    kv += model.linear_state_bytes
    free = tp * load_gpu(gpu).engine_mem_bytes * MEMORY_FRACTION - weight_bytes
    return max(0.0, free / kv)


def kv_dtype(framework: str, weight_dtype: str) -> str:
    """The KV cache's dtype: FP8 under TensorRT-LLM with quantised weights (NVIDIA's
    quantised checkpoints quantise the KV cache too, and TensorRT-LLM follows the
    checkpoint), else bf16 (vLLM's and SGLang's default, ``auto``: the model's dtype)."""
    if framework == "trtllm" and weight_dtype not in ("bfloat16",):
        return "fp8"
    return "bfloat16"


def _weight_bytes(model: ModelArch, dtype: str) -> float:
    """Bytes of the weights: the catalog's where its entry describes the release (4-bit
    experts), else every parameter in the GEMM dtype."""
    if model.fp4_experts:
        return model.weight_bytes
    return model.params * WEIGHT_BYTES[dtype]


def _expert_bytes(model: ModelArch, dtype: str) -> float:
    """Bytes of one routed expert over all the MoE layers (a redundant replica's), as
    :func:`_weight_bytes` counts them."""
    if model.fp4_experts:
        return model.expert_weight_bytes / model.experts
    return model.expert_total_params / model.experts * WEIGHT_BYTES[dtype]


def _instance(
    folder: str,
    model: ModelArch,
    gpu: str,
    framework: str,
    version: str,
    dtype: str,
    experts: list[str],
    phase: Phase,
    row: SiliconRow,
    clients: float,
    need_decode: bool,
    chunk_tokens: int,
    substitutions: list[str],
    draft: int = 0,
) -> Instance | str:
    """One worker's composed times, or why it is not composed. ``chunk_tokens``: the
    prompt tokens the engine prefills in one iteration (0: no prefill on the worker);
    ``draft``: the tokens MTP drafts per decode iteration (its iterations composed by
    ``KernelModel.t_decode_speculative``). The MoE tables' dtype of the routed experts
    is added to ``experts`` (once)."""
    if phase.pp > 1:
        return f"pipeline parallelism (pp {phase.pp}) is not expressed"
    ep = 1
    if model.experts:
        if phase.moe_tp * phase.moe_ep != phase.tp * phase.dp:
            return (
                f"MoE tp {phase.moe_tp} x ep {phase.moe_ep} does not make the worker's "
                f"tp {phase.tp} x attention dp {phase.dp} GPUs: not expressed"
            )
        ep = phase.moe_ep
    try:
        setup = KernelSetup(
            GPU_FOLDERS[gpu],
            framework,
            version,
            tp=phase.tp,
            ep=ep,
            weight_dtype=dtype,
            kv_dtype=kv_dtype(framework, dtype),
            attention_dp=phase.dp,
            fabric=load_gpu(gpu).fabric,
            moe_a2a=phase.moe_a2a if phase.moe_a2a in MOE_A2A else "",
            redundant_experts=(
                max(phase.redundant, phase.expert_slots - model.experts) if model.experts else 0
            ),
        )
        km = KernelModel(open_database(folder), model, setup)
        context = row.isl + row.osl / 2.0
        weights = _weight_bytes(model, dtype)
        if setup.redundant_experts:  # each replica's weights, as its expert's
            weights += setup.redundant_experts * _expert_bytes(model, dtype)
        kv = phase.dp * _kv_batch(
            model,
            gpu,
            phase.tp,
            weights / phase.dp,
            context,
            1.0 if setup.kv_dtype == "fp8" else 2.0,
        )
        if need_decode and kv < 1.0:
            return f"the KV cache of tp {phase.tp} does not hold one request of {context:g} tokens"
        cap = min(kv, float(phase.batch * phase.dp)) if phase.batch else kv
        top = min(max(1.0, math.ceil(clients)), max(1.0, math.floor(cap)))
        batches = _batches(top) if need_decode else np.array([1.0])
        decode = (
            np.array([km.t_decode_speculative(float(b), context, draft) for b in batches])
            if need_decode
            else np.array([0.0])
        )
        prefill = token = 0.0
        if chunk_tokens:
            prefill = km.t_prefill(row.isl)
            token = prefill / row.isl
            if chunk_tokens > row.isl:
                # a chunk of several prompts: its GEMMs at the chunk's tokens, each
                # prompt's attention its own
                try:
                    whole = km.t_prefill(chunk_tokens) - km.prefill_attention(chunk_tokens).time_s
                    own = km.prefill_attention(row.isl).time_s / row.isl
                    token = min(token, whole / chunk_tokens + own)
                except InputError:
                    pass  # the tables stop short of the chunk: the prompt's own cost
    except InputError as error:
        return str(error)
    substitutions.extend(s for s in km.substitutions if s not in substitutions)
    if phase.moe_a2a and phase.moe_a2a not in MOE_A2A:
        note = (f"moe all-to-all {phase.moe_a2a} (the published recipe's): not composed; the "
                "engine's gather and scatter collectives are")  # fmt: skip
        if note not in substitutions:
            substitutions.append(note)
    moe = [d for _, d in km.weight_dtypes.get("experts", ())]
    experts.extend(d for d in moe if d not in experts)
    return Instance(phase.tp, ep, phase.workers or 1, prefill, batches, decode, kv, cap, token,
                    phase.dp)  # fmt: skip


@functools.cache
def published_workers() -> dict[str, Any]:
    """The published worker configurations (:data:`DISAGG_WORKERS_FILE`): ``records``
    (each a configuration and the rows it is for), ``rows`` (row id -> its record and
    the InferenceX commits of its run) and ``refused`` (row id -> why no configuration
    is taken)."""
    return _data_file(DISAGG_WORKERS_FILE)


def _data_file(name: str) -> dict[str, Any]:
    """A JSON file of the model package's ``data`` folder."""
    path = resources.files("model") / "data" / name
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _match(row: SiliconRow) -> dict[str, Any]:
    """What a derived file's entry states of the row it is for (an id may name another
    run in another file)."""
    return {"model_path": row.model_path, "system": row.system, "backend": row.backend,
            "precision": row.precision, "isl": row.isl, "osl": row.osl}  # fmt: skip


@functools.cache
def published_speculative() -> dict[str, Any]:
    """The aggregated rows the published configurations say ran speculative decoding
    (:data:`SPECULATIVE_FILE`): ``rows`` (row id -> ``kind``, ``entries``, ``image``,
    ``reason`` and the ``match`` of the row it is for)."""
    return _data_file(SPECULATIVE_FILE)


def speculative_reason(row: SiliconRow) -> str | None:
    """Why an aggregated row is not expressed for the speculative decoding its run used
    (or may have used), by :func:`published_speculative`; None when it is not listed
    (or is listed for another run of the same id)."""
    entry = published_speculative()["rows"].get(row.id)
    if entry is None or entry["match"] != _match(row) or "draft_tokens" in entry:
        return None
    return str(entry["reason"])


def draft_of(row: SiliconRow) -> tuple[int, str] | None:
    """The MTP draft depth the row's published configuration states, with a note naming
    where (``scripts/derive_silicon_draft_tokens.py``); None when it states none."""
    if row.mode == "agg":
        entry = published_speculative()["rows"].get(row.id)
        if entry is None or entry["match"] != _match(row) or "draft_tokens" not in entry:
            return None
        depth, source = int(entry["draft_tokens"]), str(entry["draft_source"])
    else:
        table = published_workers()
        ref = table["rows"].get(row.id)
        if ref is None:
            return None
        rec = table["records"][ref["record"]]
        if rec["match"] != _match(row) or "draft_tokens" not in rec:
            return None
        depth, source = int(rec["draft_tokens"]), str(rec["draft_source"])
    return depth, (
        f"MTP speculative decoding, {depth} drafted token(s) per decode iteration ({source})"
    )


def run_draft(row: SiliconRow, twins: Sequence[SiliconRow] = ()) -> tuple[int, str] | None:
    """The MTP draft depth of the row's run, with its note: its own record's
    (:func:`draft_of`), else that of the first of its ``twins`` (the same run recorded
    twice, :func:`twin_key`) whose record states one; None when none does."""
    own = draft_of(row)
    if own is not None:
        return own
    for twin in twins:
        if (told := draft_of(twin)) is not None:
            return told[0], (f"the same measurement as row {twin.id} (TTFT and TPOT to the "
                             f"last digit: one run recorded twice), whose record says: "
                             f"{told[1]}")  # fmt: skip
    return None


def _published_phase(p: Mapping[str, Any], isl: int, prefill: bool) -> Phase:
    """A published phase as the row's columns would state it: attention TP and DP of
    the worker's GPUs, MoE TP x EP over them, and the batch per attention rank (decode:
    TensorRT-LLM's ``max_batch_size``; prefill: the prompts of ``isl`` tokens one
    iteration holds, ``min(max_batch_size, max_num_tokens // isl)``, at least one)."""
    gpus, adp, ep = int(p["gpus"]), int(p["attention_dp"]), int(p["moe_ep"])
    batch, tokens = p.get("max_batch_size"), p.get("max_num_tokens")
    if prefill:
        batch = max(1, min(int(batch), int(tokens) // isl)) if batch and tokens else None
    return Phase(int(p["workers"]), int(batch) if batch else None, gpus // adp, 1, adp,
                 gpus // ep, ep, str(p.get("moe_a2a") or ""),
                 int(p.get("redundant_experts") or 0),
                 int(p.get("expert_slots") or 0))  # fmt: skip


def _phase_text(name: str, p: Phase) -> str:
    shape = f"attention dp {p.dp}" if p.dp > 1 else f"tp {p.tp}"
    batch = f", batch {p.batch} per rank" if p.batch else ""
    spare = (f" + {p.redundant} redundant experts" if p.redundant
             else f", {p.expert_slots} expert slots" if p.expert_slots else "")  # fmt: skip
    return (f"{name} {p.workers} x ({p.tp * p.dp} GPUs, {shape}, MoE tp {p.moe_tp} x ep "
            f"{p.moe_ep}{spare}{batch})")  # fmt: skip


def published_config(row: SiliconRow) -> tuple[SiliconRow, str] | str | None:
    """A disaggregated row without worker counts completed from the published
    configurations: the row with their workers, parallelism and batch limits and a note
    naming the source; or why the row stays refused (``str``); None when they have no
    entry for the row (or one for another run of the same id)."""
    table = published_workers()
    if row.id in table["refused"]:
        return str(table["refused"][row.id])
    entry = table["rows"].get(row.id)
    if entry is None:
        return None
    rec = table["records"][entry["record"]]
    if rec["match"] != _match(row):
        return None
    runs = ", ".join(entry["inferencex_commits"])
    source = f"InferenceX nvidia-master.yaml entry {rec['config']} at {runs}"
    if rec["recipe"]:
        source += f", srt-slurm recipe {rec['recipe']} ({', '.join(rec['recipe_commits'])})"
    if rec["speculative"] != "none" and "draft_tokens" not in rec:
        return (
            f"the run used {rec['speculative'].upper()} speculative decoding ({source}): "
            "not expressed"
        )
    prefill = _published_phase(rec["prefill"], row.isl, True)
    decode = _published_phase(rec["decode"], row.isl, False)
    note = (
        f"workers from {source} (docs/validation-silicon.md, section 3): "
        f"{_phase_text('prefill', prefill)}, {_phase_text('decode', decode)}"
    )
    replaced = [
        f"{name} tp {old.tp} attention dp {old.dp} MoE tp {old.moe_tp} x ep {old.moe_ep}"
        for name, old, new in (("prefill", row.prefill, prefill), ("decode", row.decode, decode))
        if old is not None
        and (old.tp, old.dp, old.moe_tp, old.moe_ep) != (new.tp, new.dp, new.moe_tp, new.moe_ep)
    ]
    if replaced:
        note += f"; the row's columns ({'; '.join(replaced)}) replaced"
    return dataclasses.replace(row, prefill=prefill, decode=decode), note


def recipe_deepep(row: SiliconRow) -> tuple[SiliconRow, list[str]]:
    """A disaggregated SGLang row on :data:`DEEPEP_DECODE_SYSTEMS` whose workers of a
    phase run data-parallel attention and state no all-to-all backend, read with the
    DeepEP mode every published recipe of such workers states
    (:data:`DEEPEP_RECIPES`), and the notes saying so (docs/validation-silicon.md,
    section 3)."""
    notes: list[str] = []
    if row.backend != "sglang" or row.system not in DEEPEP_DECODE_SYSTEMS:
        return row, notes
    for phase, (mode, precision, name, workers) in DEEPEP_RECIPES.items():
        p = getattr(row, phase)
        if p is None or p.dp <= 1 or p.moe_a2a or precision not in (None, row.precision):
            continue
        row = dataclasses.replace(row, **{phase: dataclasses.replace(p, moe_a2a=mode)})
        notes.append(
            f"{phase}: DeepEP's {name} all-to-all, as every published SGLang recipe of "
            f"{workers} with data-parallel attention on {row.system} states "
            "(docs/validation-silicon.md, section 3)"
        )
    return row, notes


def recipe_parallelism(row: SiliconRow) -> tuple[SiliconRow, str] | None:
    """An aggregated row of a single-node system (:data:`NODE_GPUS`) whose ``tp_size``
    is its MoE ``moe_tp_size x moe_ep_size`` and more than the node's GPUs records a
    single-node recipe's ``tp: T, ep: E`` as ``tp_size`` T x E, ``moe_tp_size`` T,
    ``moe_ep_size`` E (InferenceX's ``dsr1-fp4-b200-sglang``: ``multinode: false``,
    ``{ tp: 8, ep: 8 }``, recorded as tp 64 = 8 x 8; many such rows have a twin stating
    tp 8, MoE tp 1 x ep 8 with the same TTFT and TPOT to the last digit). Such a row
    is read as the recipe: attention TP T, the experts EP E with MoE TP T / E, on T
    GPUs; with the note saying so. None for any other row (docs/validation-silicon.md,
    section 3)."""
    p = row.agg
    node = NODE_GPUS.get(row.system)
    if row.mode != "agg" or p is None or node is None or p.dp != 1 or p.tp <= node:
        return None
    t, e = p.moe_tp, p.moe_ep
    if t * e != p.tp or t > node or e < 2 or t % e:
        return None
    read = dataclasses.replace(p, tp=t, moe_tp=t // e, moe_ep=e)
    note = (
        f"tp_size {p.tp} = MoE tp {t} x ep {e} on a single-node system "
        f"({node} GPUs): read as the recipe tp {t}, ep {e} (MoE tp {t // e} x ep {e} "
        f"on {t} GPUs; docs/validation-silicon.md, section 3)"
    )
    return dataclasses.replace(row, agg=read), note


def twin_key(row: SiliconRow) -> tuple[Any, ...]:
    """What two records of one run share: system, framework, lengths and the measured
    TTFT and TPOT to the last digit (two runs do not measure both alike)."""
    return (row.system, row.backend, row.isl, row.osl, row.ttft_ms, row.tpot_ms)


def records_by_run(rows: Iterable[SiliconRow]) -> dict[tuple[Any, ...], list[SiliconRow]]:
    """The rows grouped by run (:func:`twin_key`), each group in the rows' order."""
    runs: dict[tuple[Any, ...], list[SiliconRow]] = {}
    for row in rows:
        runs.setdefault(twin_key(row), []).append(row)
    return runs


def speculative_of(row: SiliconRow) -> str | None:
    """Why the row's own record says it ran, or may have run, speculative decoding that
    is not expressed (the published configurations: :func:`speculative_reason`,
    :func:`published_config`); None where it does not, or states its draft depth
    (:func:`draft_of`)."""
    if row.mode == "agg":
        return speculative_reason(row)
    if row.prefill is not None and row.prefill.workers is not None:
        return None
    published = published_config(row)
    return published if isinstance(published, str) and "MTP" in published else None


def resolve(
    row: SiliconRow, folder: str, twins: Sequence[SiliconRow] = ()
) -> Case | Unpredicted:
    """The row mapped to the catalog and composed from the kernel tables in ``folder``,
    or the reason it is not. ``twins``: the file's other records of the same run
    (:func:`twin_key`): a twin whose record says it ran speculative decoding refuses the
    row as well, and a disaggregated row without worker counts that no published
    configuration completes (and whose own record does not say it ran speculative
    decoding) takes a twin's stated workers."""
    gpu = SYSTEM_GPUS.get(row.system)
    try:
        model = load_model(row.model_path)
    except NotFoundError:
        return Unpredicted(row, f"model {row.model_path} not in the catalog")
    if gpu is None:
        return Unpredicted(row, f"gpu {row.system} not in the catalog (or without kernel tables)")
    if row.concurrency is None:
        return Unpredicted(row, "no concurrency: batch_size empty and none stated in the source")
    clients = row.concurrency
    if row.mode == "agg" and (spec := speculative_reason(row)) is not None:
        return Unpredicted(row, spec)
    for twin in twins:
        if (spec := speculative_of(twin)) is not None:
            return Unpredicted(
                row,
                f"the same measurement as row {twin.id} (TTFT and TPOT to the last digit: one "
                f"run recorded twice), whose record says: {spec}",
            )
    measured = model.base_model or model.name
    recipe = recipe_parallelism(row)
    if recipe is not None:
        row = recipe[0]
    released = _release(model, row)
    if released is not None:
        model, dtype, notes = released
    else:
        weights = _weights(model, row)
        if isinstance(weights, str):
            return Unpredicted(row, weights)
        dtype, notes = weights
    if recipe is not None:
        notes = [recipe[1], *notes]
    draft = run_draft(row, twins)
    depth = 0
    if draft is not None:
        depth = draft[0]
        try:
            check_draft(model, depth, "draft_tokens")
        except InputError as error:
            return Unpredicted(row, f"{draft[1]}: {error}")
        notes.append(
            f"{draft[1]}; {model_accepted_tokens(model, depth):.3f} tokens gained per "
            f"iteration at {model.name}'s published MTP acceptance (docs/validation-silicon.md, "
            "section 3)"
        )
    version, _ = choose_version(folder, gpu, row.backend, None, row.backend_version)
    if not version:
        return Unpredicted(row, f"no {row.backend} kernel tables for {row.system}")
    if version != row.backend_version:
        stated = row.backend_version or "(no version stated)"
        notes.append(f"{row.backend} {stated}: the {version} tables are read")
    subs: list[str] = []
    experts: list[str] = []
    c = float(clients)
    args = (folder, model, gpu, row.backend, version, dtype, experts)
    kv_s = 0.0
    if row.mode == "agg":
        assert row.agg is not None
        running = max(1, math.ceil(c / row.agg.dp))
        plan = schedule(row, running)
        chunk = min(plan.budget, row.isl * running) if plan.chunked else plan.budget
        one = _instance(*args, row.agg, row, c, True, max(chunk, row.isl), subs, depth)
        if isinstance(one, str):
            return Unpredicted(row, one)
        pre = dec = one
    else:
        for name, phase in (("prefill", row.prefill), ("decode", row.decode)):
            if phase is None or phase.workers is None:
                missing = f"disaggregated row without {name}_num_workers"
                published = published_config(row) if phase is not None else None
                told = next((t for t in twins if t.prefill is not None
                               and t.prefill.workers is not None and t.decode is not None
                               and t.decode.workers is not None), None)  # fmt: skip
                own = published if isinstance(published, str) else ""
                if told is not None and "MTP" not in own:  # its own record says no MTP
                    row = dataclasses.replace(row, prefill=told.prefill, decode=told.decode)
                    notes.append(
                        f"workers from row {told.id}, the same measurement (TTFT and TPOT "
                        "to the last digit: one run recorded twice), which states them"
                    )
                    break
                if published is None:
                    return Unpredicted(row, f"{missing}: not expressed")
                if isinstance(published, str):
                    return Unpredicted(row, f"{missing}; {published}")
                row, note = published
                notes.append(note)
                break
        assert row.prefill is not None and row.decode is not None
        row, deepep = recipe_deepep(row)
        notes.extend(deepep)
        assert row.prefill is not None and row.decode is not None
        per_batch = max(1, row.prefill.batch or 1)
        p = _instance(*args, row.prefill, row, c, False, per_batch * row.isl, subs)
        if isinstance(p, str):
            return Unpredicted(row, f"prefill workers: {p}")
        d = _instance(*args, row.decode, row, c / (row.decode.workers or 1), True, 0, subs,
                      depth)  # fmt: skip
        if isinstance(d, str):
            return Unpredicted(row, f"decode workers: {d}")
        pre, dec = p, d
        plan = Schedule(per_batch * row.isl, True, True,
                        f"disaggregated: prefill batch {per_batch} per rank")  # fmt: skip
        kv_bytes = model.kv_bytes_at(row.isl) * (
            (1.0 if kv_dtype(row.backend, dtype) == "fp8" else 2.0) / model.kv_bytes_per_elem
        )
        kv_s = kv_transfer_s(kv_bytes, row.prefill.tp, KV_LINK_BYTES_PER_S)
    return Case(
        row, measured, gpu, row.backend, version, dtype, model.layers, pre, dec,
        tuple(notes + subs), plan, kv_s, model.name if model.name != measured else "",
        experts[0] if experts else "", depth, (model.mtp_accept_first, model.mtp_accept_next),
    )  # fmt: skip


def resolve_all(
    rows: Sequence[SiliconRow], folder: str, progress: Callable[[str], None] | None = None
) -> tuple[list[Case], list[Unpredicted]]:
    """Every row resolved (:func:`resolve`, with its twins among `rows`), in the file's
    order."""
    say = progress or (lambda _m: None)
    cases: list[Case] = []
    skipped: list[Unpredicted] = []
    runs = records_by_run(rows)
    for i, row in enumerate(rows):
        if i and i % 500 == 0:
            say(f"composed {i}/{len(rows)} rows ({len(cases)} predictable)")
        r = resolve(row, folder, [t for t in runs[twin_key(row)] if t is not row])
        (cases if isinstance(r, Case) else skipped).append(r)  # type: ignore[arg-type]
    say(f"composed {len(rows)} rows: {len(cases)} predictable, {len(skipped)} not")
    return cases, skipped


# --------------------------------------------------------------------------
# The closed loop


@dataclass(frozen=True)
class Overheads:
    """The serving engine's overheads over the composed kernels (s): per iteration, per
    running request per decode iteration, per request's first token (its reception,
    tokenising, scheduling and the first token's return, outside the iterations); the
    closed loop's bunching, the share of a synchronised wave's prompt wait that a
    request of a staggered loop meets (0: arrivals evenly staggered; 1: every client
    arriving with one wave); and per layer per iteration. The fits (:data:`OVERHEADS`)
    leave ``t_iter_s`` at 0."""

    t_iter_s: float = 0.0
    t_req_s: float = 0.0
    t_first_s: float = 0.0
    bunching: float = 0.0
    t_layer_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {n: getattr(self, n) for n in OVERHEADS}


#: every field of :class:`Overheads`, in the order the loop's arrays hold them (the fits
#: leave ``t_iter_s``, a fixed time per iteration whatever the layers, at 0: section 4)
FIELDS = tuple(f.name for f in dataclasses.fields(Overheads))
#: each overhead's column in the loop's array of them
_AT = {n: i for i, n in enumerate(FIELDS)}


@dataclass
class Solved:
    """The closed loop's steady state per case (arrays over the cases, seconds):
    request rate ``rate`` (requests/s, whole deployment), decode batch per decode
    worker ``batch``, the prefill share of an aggregated worker's time or the
    utilisation of the prefill workers ``rho``, ``ttft`` and ``tpot`` (the benchmark's
    means), and ``capped``: whether a limit (KV cache, stated batch, token budget,
    prefill workers) holds the loop below its clients, who then wait for a place."""

    rate: FloatArray
    batch: FloatArray
    rho: FloatArray
    ttft: FloatArray
    tpot: FloatArray
    capped: FloatArray


def wave_schedule(clients: int, isl: int, budget: int) -> tuple[float, float, int]:
    """A synchronised wave of ``clients`` prompts of ``isl`` tokens arriving at once,
    prefilled ``budget`` tokens per iteration in arrival order: the mean over the
    requests of the iteration that completes its prompt (``k_i = ceil(i isl /
    budget)``), the mean prompt tokens processed up to and including it
    (``min(k_i budget, clients isl)``), and the iterations of the whole wave."""
    if clients < 1 or isl < 1 or budget < 1:
        raise InputError("wave", f"needs clients, isl and budget >= 1, got {clients}, "
                                 f"{isl}, {budget}")  # fmt: skip
    i = np.arange(1, clients + 1, dtype=float)
    k = np.ceil(i * isl / budget)
    tokens = np.minimum(k * budget, float(clients * isl))
    return float(k.mean()), float(tokens.mean()), int(k[-1])


def wave_times(
    clients: int, isl: int, osl: int, budget: int, prefill_token_s: float, step_s: float,
    t_iter_s: float = 0.0, t_first_s: float = 0.0,
) -> tuple[float, float]:  # fmt: skip
    """Mean TTFT and TPOT of a synchronised wave under a prefill-first scheduler that
    does not mix prefill chunks with decodes (SGLang without mixed chunking): the
    wave's prompts are prefilled ``budget`` tokens per iteration (``prefill_token_s``
    each, ``t_iter_s`` per iteration), the decodes wait until the last prompt is in, then
    every request decodes ``osl - 1`` tokens together at ``step_s`` per iteration.
    TPOT is the benchmark's, ``(e2e - TTFT) / (osl - 1)``. (docs/validation-silicon.md)"""
    mean_k, mean_tokens, n = wave_schedule(clients, isl, budget)
    mean_f = t_iter_s * mean_k + prefill_token_s * mean_tokens
    whole = t_iter_s * n + prefill_token_s * clients * isl
    tokens = max(1, osl - 1)
    return t_first_s + mean_f, step_s + (whole - mean_f) / tokens


@dataclass
class _Arrays:
    """The cases' inputs as arrays (one row per case; decode grids padded with their
    last point)."""

    clients: FloatArray
    osl: FloatArray
    isl: FloatArray
    disagg: FloatArray
    mixed: FloatArray
    budget: FloatArray
    prefill_s: FloatArray  # one prompt per rank, at the batched chunk's cost per token
    alone_s: FloatArray  # one prompt alone
    token_s: FloatArray  # per prompt token at the batched chunk
    kv_s: FloatArray
    prefill_ranks: FloatArray
    decode_ranks: FloatArray
    decode_workers: FloatArray
    cap: FloatArray
    gained: FloatArray  # tokens a request gains per decode iteration (MTP: above 1)
    b: FloatArray  # (cases, grid)
    k: FloatArray  # (cases, grid)
    wave: FloatArray  # (cases, 4): wave size per rank, mean k, mean tokens, iterations
    layers: FloatArray  # the model's layers, each run once per iteration

    @classmethod
    def of(cls, cases: Sequence[Case]) -> _Arrays:
        width = max(len(c.decode.batches) for c in cases)

        def pad(a: FloatArray) -> FloatArray:
            return np.concatenate([a, np.full(width - len(a), a[-1])])

        def col(f: Callable[[Case], float]) -> FloatArray:
            return np.array([float(f(c)) for c in cases])

        dis = col(lambda c: c.row.mode == "disagg")
        waves = []
        for c in cases:
            if c.schedule.mixed or c.row.mode == "disagg":
                waves.append((0.0, 0.0, 0.0, 0.0))
                continue
            ranks = c.prefill.ranks
            size = max(1, min(math.ceil((c.row.concurrency or 1) / ranks),
                              math.floor(c.decode.batch_cap / ranks) or 1))  # fmt: skip
            waves.append((float(size), *wave_schedule(size, c.row.isl, c.schedule.budget)))
        return cls(
            col(lambda c: c.row.concurrency or 1),
            col(lambda c: c.row.osl),
            col(lambda c: c.row.isl),
            dis,
            col(lambda c: c.schedule.mixed),
            col(lambda c: c.schedule.budget),
            col(lambda c: c.prefill.token_s * c.row.isl),
            col(lambda c: c.prefill.prefill_s),
            col(lambda c: c.prefill.token_s),
            col(lambda c: c.kv_transfer_s),
            col(lambda c: c.prefill.ranks * c.prefill.workers),
            col(lambda c: c.decode.ranks),
            col(lambda c: c.decode.workers),
            col(lambda c: c.decode.batch_cap),
            col(lambda c: c.gained),
            np.vstack([pad(c.decode.batches) for c in cases]),
            np.vstack([pad(c.decode.decode_s) for c in cases]),
            np.array(waves),
            col(lambda c: c.layers),
        )


def _o(o: FloatArray, name: str) -> FloatArray:
    """One overhead of every case, from the loop's array of them (:data:`FIELDS`)."""
    return o[:, _AT[name]]


def _step(a: _Arrays, o: FloatArray, batch: FloatArray) -> FloatArray:
    """One decode iteration at ``batch`` (per case): the composed kernels, linear
    between the composed batches (the batch-1 time below one), plus the overheads, the
    per-request one on each data-parallel attention rank's share of the batch (each
    rank schedules and samples its own requests, all at once; model/performance/engine.py)."""
    b, kk = a.b, a.k
    x = np.clip(batch, b[:, 0], b[:, -1])
    last = b.shape[1] - 1
    i = np.clip((b <= x[:, None]).sum(axis=1) - 1, 0, max(0, last - 1))
    rows = np.arange(len(b))
    j = np.minimum(i + 1, last)
    lo, hi = b[rows, i], b[rows, j]
    w = np.divide(x - lo, hi - lo, out=np.zeros_like(x), where=hi > lo)
    k = kk[rows, i] * (1.0 - w) + kk[rows, j] * w
    per_rank = batch / a.decode_ranks
    return k + engine_overhead_s(_o(o, "t_iter_s"), _o(o, "t_req_s"), _o(o, "t_layer_s"),
                                 per_rank, a.layers)  # fmt: skip


def _state(a: _Arrays, o: FloatArray, batch: FloatArray) -> tuple[FloatArray, ...]:
    """The staggered steady state (mixed scheduling, disaggregated workers) whose decode
    batch per decode worker is ``batch``: the request rate that keeps that batch
    decoding, the clients the loop then holds (inf where the rate cannot be served:
    prefill workers, token budget) and the state there. Aggregated, an iteration is a
    decode step plus its share of prompt tokens, ``tau = step(B) / (1 - rho)``, and
    ``B = (r / W) (osl - 1) tau`` with ``rho = (r / R) P``, so ``r = B / ((osl - 1)
    step(B) / W + B P / R)``; disaggregated, ``tau = step(B)`` and ``r = B W / ((osl - 1)
    step(B))``. Under MTP a request gains ``g`` tokens per iteration (``a.gained``): it
    decodes for ``(osl - 1) / g`` iterations, and TPOT is the iteration over ``g``."""
    agg = a.disagg == 0
    step = _step(a, o, batch)
    tokens = a.osl - 1.0
    per_worker = tokens / a.gained * step / a.decode_workers
    prompts = np.where(agg, batch * a.prefill_s / a.prefill_ranks, 0.0)
    rate = batch / (per_worker + prompts)
    p_rate = rate / a.prefill_ranks
    rho = p_rate * a.prefill_s
    served = rho < 1.0
    free = np.where(served, 1.0 - rho, 1.0)
    iteration = np.where(agg, step / free, step)
    tpot = iteration / a.gained
    # the token budget: the prompt tokens an iteration takes on average
    ok = served & (~agg | (p_rate * a.isl * iteration <= a.budget * (1.0 + 1e-9)))
    chunks = np.ceil(a.isl / a.budget)
    # the prompts a bunched arrival waits for: a share of a synchronised wave's mean
    # wait, (C / ranks - 1) / 2 prompts ahead on each prefill rank
    ahead = np.maximum(0.0, a.clients / a.prefill_ranks - 1.0) / 2.0
    wait = _o(o, "bunching") * ahead * a.prefill_s
    # aggregated: the iteration under way when it arrives, then its own chunks, each
    # riding with a decode step; disaggregated: its prefill alone and the KV transfer
    ttft = _o(o, "t_first_s") + wait + np.where(
        agg, iteration + chunks * step + a.prefill_s, a.alone_s + a.kv_s
    )
    clients = rate * (ttft + tokens * tpot)
    clients = np.where(ok, clients, np.inf)
    return clients, rate, rho, ttft, tpot


def _waves(a: _Arrays, o: FloatArray) -> tuple[FloatArray, ...]:
    """The synchronised waves of a prefill-first scheduler without mixing
    (:func:`wave_times`, per case); cases whose clients exceed the wave (the batch
    limit) run waves back to back, the rest waiting."""
    size, mean_k, mean_tokens, n = (a.wave[:, j] for j in range(4))
    ranks = a.prefill_ranks
    # a prefill iteration: the engine's time per iteration, no request decoding
    t_iter = engine_overhead_s(_o(o, "t_iter_s"), 0.0, _o(o, "t_layer_s"), 0.0, a.layers)
    t_first = _o(o, "t_first_s")
    mean_f = t_iter * mean_k + a.token_s * mean_tokens
    whole = t_iter * n + a.token_s * size * a.isl
    step = _step(a, o, size * ranks)
    tokens = np.maximum(1.0, a.osl - 1.0)
    ttft = t_first + mean_f
    tpot = step / a.gained + (whole - mean_f) / tokens
    cycle = t_first + whole + tokens / a.gained * step
    rate = size * ranks / np.maximum(cycle, 1e-30)
    capped = a.clients > size * ranks * (1.0 + 1e-9)
    with np.errstate(divide="ignore"):
        ttft = np.where(capped, a.clients / rate - tokens * tpot, ttft)
    return rate, size * ranks, whole / np.maximum(cycle, 1e-30), ttft, tpot, capped


def solve(cases: Sequence[Case], overheads: Sequence[Overheads] | Overheads) -> Solved:
    """Each case's steady state (:class:`Solved`) with the given overheads (one for all
    cases or one per case). Staggered (mixed scheduling, disaggregated): the decode batch
    ``B`` at which the clients the loop holds, ``r (TTFT + (osl - 1) TPOT)``, equal the
    row's concurrency, by bisection over ``B`` up to the worker's limit (the clients grow
    with the batch, and are continuous in it where the composed step is: a rate may
    have no decode batch where the step rises steeply, a batch always has its rate);
    where a limit stops the batch first, the clients beyond it wait for a place, ``TTFT
    = C / r - (osl - 1) TPOT``. Synchronised waves (prefill-first without mixing):
    :func:`_waves`."""
    if not cases:
        empty = np.zeros(0)
        return Solved(empty, empty, empty, empty, empty, empty)
    a = _Arrays.of(cases)
    each = [overheads] * len(cases) if isinstance(overheads, Overheads) else list(overheads)
    o = np.array([[getattr(x, n) for n in FIELDS] for x in each])
    lo = np.zeros(len(cases))
    hi = np.minimum(a.cap, a.b[:, -1])
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        clients = _state(a, o, mid)[0]
        below = clients <= a.clients
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    batch = lo
    clients, rate, rho, ttft, tpot = _state(a, o, batch)
    capped = clients < a.clients * (1.0 - 1e-6)
    # the clients the workers cannot hold wait: the loop's time per request is C / r
    with np.errstate(divide="ignore"):
        ttft = np.where(capped, a.clients / rate - (a.osl - 1.0) * tpot, ttft)
    wave = (a.disagg == 0) & (a.mixed == 0)
    if wave.any():
        w = _waves(a, o)
        old = (rate, batch, rho, ttft, tpot)
        rate, batch, rho, ttft, tpot = (
            np.where(wave, x, y) for x, y in zip(w[:5], old, strict=True)
        )
        capped = np.where(wave, w[5], capped)
    return Solved(rate, batch, rho, ttft, tpot, capped.astype(float))


# --------------------------------------------------------------------------
# Fitting the overheads


@dataclass
class Fit:
    """Overheads fitted to some cases: per (GPU, framework), or pooled over a framework
    or over everything (``scope``), with the models whose rows it saw."""

    overheads: Overheads
    scope: str
    rows: int
    models: tuple[str, ...]


def residuals(cases: Sequence[Case], solved: Solved) -> FloatArray:
    """Log errors of the predicted TTFT and TPOT against the measured, per case."""
    ttft = np.array([c.row.ttft_ms for c in cases]) * 1e-3
    tpot = np.array([c.row.tpot_ms for c in cases]) * 1e-3
    return np.concatenate([np.log(solved.ttft / ttft), np.log(solved.tpot / tpot)])


def overheads_of(values: Sequence[float]) -> Overheads:
    """The overheads whose fitted ones (:data:`OVERHEADS`, in order) are `values`."""
    return Overheads(**{n: float(v) for n, v in zip(OVERHEADS, values, strict=True)})


def fit_overheads(cases: Sequence[Case], scope: str = "") -> Fit:
    """The overheads (:data:`OVERHEADS`) that best predict the cases' TTFT and TPOT
    (robust least squares of the log errors)."""
    from scipy.optimize import least_squares

    if not cases:
        raise InputError("rows", "no rows to fit the overheads to")
    scale = np.array(OVERHEAD_SCALE)
    lo = np.array([OVERHEAD_BOUNDS[n][0] for n in OVERHEADS]) / scale
    hi = np.array([OVERHEAD_BOUNDS[n][1] for n in OVERHEADS]) / scale

    def res(x: FloatArray) -> FloatArray:
        r = residuals(cases, solve(cases, overheads_of(x * scale)))
        return np.where(np.isfinite(r), r, 10.0)

    x0 = np.array(OVERHEAD_START) / scale
    sol = least_squares(res, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, diff_step=1e-3)
    return Fit(
        overheads_of(sol.x * scale),
        scope,
        len(cases),
        tuple(sorted({c.model for c in cases})),
    )


def _training(
    cases: Sequence[Case],
    group: tuple[str, ...],
    left_out: str,
    key: Callable[[Case], tuple[str, ...]],
) -> tuple[list[Case], str]:
    """The rows a fit for ``group`` (``key`` of its rows: GPU, framework, then the rest,
    e.g. the mode) takes without model ``left_out``: the group's, where they hold at
    least :data:`FIT_MODELS` models; else its framework's with the same rest on every
    GPU; else every row with the same rest; else every row."""
    others = [c for c in cases if c.model != left_out and not c.draft_tokens]
    same = [c for c in others if key(c) == group]
    if len({c.model for c in same}) >= FIT_MODELS:
        return same, "/".join(group)
    rest = group[2:]
    tail = f" {' '.join(rest)}" if rest else ""
    frame = [c for c in others if c.framework == group[1] and key(c)[2:] == rest]
    if frame:
        return frame, f"{group[1]}{tail} on every GPU"
    if rest:
        alike = [c for c in others if key(c)[2:] == rest]
        if alike:
            return alike, f"every{tail} row"
    return others, "every row"


def leave_one_model_out(
    cases: Sequence[Case],
    progress: Callable[[str], None] | None = None,
    key: Callable[[Case], tuple[str, ...]] = lambda c: c.group,
) -> tuple[Solved, list[Fit | None]]:
    """Each case predicted with overheads fitted to other models' rows only: for each
    model and each group its rows fall in (``key``: by default :attr:`Case.group`, GPU,
    framework and mode), the group's rows of every other model (else :func:`_training`'s
    fallbacks). Cases of a model no other model's rows can train are left unpredicted
    (their fit is None)."""
    say = progress or (lambda _m: None)
    fits: dict[tuple[str, ...], Fit] = {}
    chosen: list[Fit | None] = [None] * len(cases)
    models = sorted({c.model for c in cases})
    for n, name in enumerate(models):
        say(f"leave-one-model-out {n + 1}/{len(models)}: {name}")
        for group in sorted({key(c) for c in cases if c.model == name}):
            train, scope = _training(cases, group, name, key)
            if not train:
                continue
            ids = tuple(sorted(c.row.id for c in train))
            if ids not in fits:
                fits[ids] = fit_overheads(train, scope)
            for i, c in enumerate(cases):
                if c.model == name and key(c) == group:
                    chosen[i] = fits[ids]
    o = [f.overheads if f else Overheads() for f in chosen]
    return solve(cases, o), chosen


def fit_groups(cases: Sequence[Case]) -> dict[tuple[str, str, str], Fit]:
    """Overheads fitted to every row of each (GPU, framework) (in-sample; reported, not
    used to judge)."""
    return {
        g: fit_overheads([c for c in cases if c.group == g and not c.draft_tokens], "/".join(g))
        for g in sorted({c.group for c in cases if not c.draft_tokens})
    }


# --------------------------------------------------------------------------
# Report


def _err(pred: float, meas: float) -> float:
    return pred / meas - 1.0


def report(
    cases: Sequence[Case],
    skipped: Sequence[Unpredicted],
    bare: Solved,
    lomo: Solved,
    fits: Sequence[Fit | None],
    in_sample: Mapping[tuple[str, str, str], Fit] | None = None,
) -> dict[str, Any]:
    """Rows and summary as JSON-ready data: each predicted row with its id, measured
    and predicted TTFT and TPOT (the leave-one-model-out prediction, and the kernels
    alone), configuration, fit and notes; each unpredicted row with its reason; and
    per (GPU, framework, mode) the counts and median and 90th-percentile |error|."""
    rows: list[dict[str, Any]] = []
    for i, c in enumerate(cases):
        f = fits[i]
        entry: dict[str, Any] = {
            "id": c.row.id,
            "ttft_ms": {
                "measured": c.row.ttft_ms,
                "predicted": float(lomo.ttft[i] * 1e3) if f else None,
                "kernels_alone": float(bare.ttft[i] * 1e3),
            },
            "tpot_ms": {
                "measured": c.row.tpot_ms,
                "predicted": float(lomo.tpot[i] * 1e3) if f else None,
                "kernels_alone": float(bare.tpot[i] * 1e3),
            },
            "config": c.row.config(),
            "catalog": {
                "model": c.model,
                "gpu": c.gpu,
                **({"release": c.release} if c.release else {}),
            },
            "kernels": f"{c.framework} {c.version}",
            "weights": c.weight_dtype,
            **({"experts": c.expert_dtype} if c.expert_dtype else {}),
            **({"speculative": speculative_record(c.draft_tokens, c.gained)}
               if c.draft_tokens else {}),  # fmt: skip
            "schedule": c.schedule.source,
            "steady_state": {
                "decode_batch": float(lomo.batch[i]),
                "requests_per_s": float(lomo.rate[i]),
                "prefill_share": float(lomo.rho[i]),
                "batch_limited": bool(lomo.capped[i]),
            },
        }
        if f:
            entry["fit"] = {"scope": f.scope, "models": list(f.models), "rows": f.rows,
                            "overheads": f.overheads.as_dict()}  # fmt: skip
        if c.notes:
            entry["notes"] = list(c.notes)
        rows.append(entry)
    unpredicted = [{"id": s.row.id, "reason": s.reason} for s in skipped]
    doc: dict[str, Any] = {
        "rows": rows,
        "unpredicted": unpredicted,
        "summary": summarise(rows, skipped),
        "reasons": reason_counts(skipped),
    }
    if in_sample is not None:
        doc["in_sample_overheads"] = [
            {"gpu": g, "framework": fw, "mode": mode, "rows": f.rows,
             "models": list(f.models), **f.overheads.as_dict()}
            for (g, fw, mode), f in sorted(in_sample.items())
        ]  # fmt: skip
    return doc


def reason_counts(skipped: Iterable[Unpredicted]) -> list[dict[str, Any]]:
    """The reasons rows were not predicted, with their counts (most first); a reason
    naming a model, GPU or shape is counted as written."""
    counts: dict[str, int] = {}
    for s in skipped:
        counts[s.reason] = counts.get(s.reason, 0) + 1
    return [{"reason": r, "rows": n} for r, n in sorted(counts.items(), key=lambda kv: -kv[1])]


def _stats(errors: list[float]) -> dict[str, float] | None:
    if not errors:
        return None
    a = np.abs(np.array(errors))
    return {"median_abs_error": float(np.median(a)), "p90_abs_error": float(np.quantile(a, 0.9))}


def summarise(rows: Sequence[Mapping[str, Any]], skipped: Sequence[Unpredicted]) -> dict[str, Any]:
    """Per (GPU, framework, mode) and overall: rows in the file, rows predicted, and
    the |error| statistics of TTFT and TPOT, leave-one-model-out and kernels alone."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    unpred: dict[str, int] = {}
    for r in rows:
        cfg = r["config"]
        key = f"{cfg['system']} {cfg['backend']} {cfg['mode']}"
        groups.setdefault(key, []).append(r)
    for s in skipped:
        key = f"{s.row.system} {s.row.backend} {s.row.mode}"
        unpred[key] = unpred.get(key, 0) + 1

    def stats(sel: Sequence[Mapping[str, Any]], unpredicted: int) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": len(sel) + unpredicted, "composed": len(sel)}
        judged = [r for r in sel if r["ttft_ms"]["predicted"] is not None]
        out["predicted"] = len(judged)
        for what in ("ttft_ms", "tpot_ms"):
            out[what] = {
                "leave_one_model_out": _stats(
                    [_err(r[what]["predicted"], r[what]["measured"]) for r in judged]
                ),
                "kernels_alone": _stats(
                    [_err(r[what]["kernels_alone"], r[what]["measured"]) for r in sel]
                ),
            }
        return out

    per = {k: stats(groups.get(k, []), unpred.get(k, 0)) for k in sorted({*groups, *unpred})}
    by_mode = {
        m: stats([r for r in rows if r["config"]["mode"] == m],
                 sum(1 for s in skipped if s.row.mode == m))
        for m in MODES
    }  # fmt: skip
    return {"all": stats(rows, len(skipped)), "per_mode": by_mode, "per_group": per}
