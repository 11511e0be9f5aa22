"""Serving measurements read from files, for calibration (``pdwatt calibrate``) and
prediction checks (``pdwatt predict``); ``docs/calibration.md`` documents the formats.

One :class:`Measurement` is one steady-state operating point of one server: a model
on ``tp x ep`` GPUs of one type under one serving stack, running a mean batch of
``batch`` requests, with its median inter-token latency (one decode iteration) and,
where measured, its power per GPU. Readers, chosen by :func:`read_measurements` from
the file's content:

* the ML.ENERGY Leaderboard per-model JSON files, exactly as published (an object
  with ``model_id`` and ``configurations``);
* a generic CSV, one row per measurement (:data:`CSV_COLUMNS`);
* vLLM's and SGLang's ``bench_serving`` result JSON, with the GPUs' power from an
  ``nvidia-smi`` CSV log or from DCGM (dcgm-exporter's power through a Prometheus
  range query, as JSON).

Every error names the file, the row and the field. Nothing here imports the model's
equations: a measurement is what was measured, with the tokens it states.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from model.errors import InputError

#: GPU names of the files -> catalog names
GPU_NAMES = {
    "h100": "h100-sxm",
    "h100-sxm": "h100-sxm",
    "h100 80gb hbm3": "h100-sxm",
    "b200": "b200",
    "b300": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "h200": "h200",
    "a100": "a100-80gb",
    "a100-80gb": "a100-80gb",
}
PRECISIONS = {"bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "mxfp4": "mxfp4", "nvfp4": "nvfp4",
              "int4": "int4"}  # fmt: skip
ARCHITECTURES = {
    "dense transformer": "dense",
    "dense": "dense",
    "moe": "moe",
    "mamba-transformer hybrid": "hybrid",
    "hybrid": "hybrid",
}
#: the generic CSV's columns (``docs/calibration.md``); the first seven are required
CSV_COLUMNS = (
    "model",
    "gpu",
    "tp",
    "batch",
    "itl_ms",
    "prompt_tokens",
    "output_tokens",
    "ep",
    "dp",
    "precision",
    "context_tokens",
    "power_w",
    "prefill_tokens_per_s",
    "stack",
    "task",
)
CSV_REQUIRED = CSV_COLUMNS[:7]
#: largest file read (a published ML.ENERGY file is at most a few hundred kB)
MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Measurement:
    """One measured operating point; tokens are means over the requests served."""

    file: str  # file name (no directory)
    row: str  # where in the file, e.g. "configurations[3]" or "line 7"
    model: str  # as the file names it
    gpu: str  # catalog GPU name
    stack: str  # serving stack, e.g. "vllm"
    task: str  # workload or dataset ("" if not stated)
    tp: int  # tensor-parallel size of attention and the dense weights
    ep: int  # expert-parallel size, as the file states it
    precision: str  # bf16, fp8, mxfp4, nvfp4, int4
    architecture: str  # dense, moe, hybrid ("" if not stated)
    batch: float  # mean running batch (requests)
    output_tokens: float  # mean output length
    #: E[l_out^2] / E[l_out]: the output length a decode iteration sees on average
    #: (requests are in the batch in proportion to their length, :func:`length_weighted`),
    #: = output_tokens when no distribution is given
    output_weighted_tokens: float
    prompt_tokens: float | None  # mean prompt length; None: not in the file
    context_tokens: float | None  # mean context of a running request, if stated
    itl_s: float  # median inter-token latency
    power_w: float | None  # mean power per GPU
    prefill_tokens_per_s: float | None
    dp: int = 1  # attention replicas (data parallel), each serving 1/dp of the batch

    @property
    def where(self) -> str:
        return f"{self.file}: {self.row}"


def _err(file: str, row: str, field: str, reason: str) -> InputError:
    return InputError(f"{file}: {row}.{field}" if row else f"{file}: {field}", reason)


def _number(
    file: str, row: str, field: str, value: object, positive: bool = True, optional: bool = False
) -> float | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if optional:
            return None
        raise _err(file, row, field, "missing")
    if isinstance(value, bool):
        raise _err(file, row, field, f"must be a number, got {value!r}")
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _err(file, row, field, f"must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise _err(file, row, field, f"must be finite, got {value!r}")
    if positive and not x > 0:
        raise _err(file, row, field, f"must be > 0, got {value!r}")
    if not positive and x < 0:
        raise _err(file, row, field, f"must be >= 0, got {value!r}")
    return x


def _count(file: str, row: str, field: str, value: object) -> int:
    x = _number(file, row, field, value)
    assert x is not None
    if not float(x).is_integer():
        raise _err(file, row, field, f"must be a whole number, got {value!r}")
    return int(x)


def _named(file: str, row: str, field: str, value: object, names: dict[str, str]) -> str:
    """``names[value]`` (case and spaces ignored), or an error listing the known ones."""
    name = str(value).strip().lower() if value is not None else ""
    if name not in names:
        raise _err(file, row, field, f"unknown {value!r}; known: {', '.join(sorted(names))}")
    return names[name]


def _gpu(file: str, row: str, value: object) -> str:
    return _named(file, row, "gpu", value, GPU_NAMES)


def _precision(file: str, row: str, value: object) -> str:
    return _named(file, row, "precision", value, PRECISIONS)


def length_weighted(lengths: Iterable[float], counts: Iterable[float]) -> float | None:
    """``E[l^2] / E[l]`` of lengths seen ``counts`` times each: the mean length of the
    requests a decode iteration holds (a request stays for as many iterations as it
    has output tokens); None when there is nothing to weigh."""
    m1 = m2 = 0.0
    for x, c in zip(lengths, counts, strict=True):
        m1 += c * x
        m2 += c * x * x
    return m2 / m1 if m1 > 0 else None


def _histogram_weighted(file: str, hist: object) -> float | None:
    """:func:`length_weighted` of an ML.ENERGY output-length histogram
    ``{"bins": edges, "counts": n}`` (bin centres); None when there is none."""
    if not isinstance(hist, dict):
        return None
    bins, counts = hist.get("bins"), hist.get("counts")
    if not isinstance(bins, list) or not isinstance(counts, list) or len(bins) != len(counts) + 1:
        raise _err(file, "", "output_length_distribution", "bins must be one longer than counts")
    for name, values in (("bins", bins), ("counts", counts)):
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _err(file, "", f"output_length_distribution.{name}[{i}]", "not a number")
    centres = [(float(lo) + float(hi)) / 2.0 for lo, hi in zip(bins[:-1], bins[1:], strict=True)]
    return length_weighted(centres, counts)


def read_mlenergy(file: str, raw: dict[str, Any]) -> list[Measurement]:
    """Rows of one ML.ENERGY Leaderboard per-model file. Power is ``avg_power_watts``
    divided by ``num_gpus``; prompt lengths are not in these files (``None``)."""
    for key in ("model_id", "configurations"):
        if key not in raw:
            raise _err(file, "", key, "missing")
    if not isinstance(raw["configurations"], list) or not raw["configurations"]:
        raise _err(file, "", "configurations", "must be a non-empty list")
    model = str(raw["model_id"])
    precision = _precision(file, "", raw.get("weight_precision", "bfloat16"))
    arch = ARCHITECTURES.get(str(raw.get("architecture", "")).strip().lower(), "")
    task = str(raw.get("task", ""))
    # one histogram for the whole file
    weighted = _histogram_weighted(file, raw.get("output_length_distribution"))
    out = []
    for i, c in enumerate(raw["configurations"]):
        row = f"configurations[{i}]"
        if not isinstance(c, dict):
            raise _err(file, row, "", "must be an object")
        par = c.get("parallelization") or {}
        if not isinstance(par, dict):
            raise _err(file, row, "parallelization", "must be an object")
        _count(file, row, "parallelization.tensor_parallel", par.get("tensor_parallel", 1))
        ep = _count(file, row, "parallelization.expert_parallel", par.get("expert_parallel", 1))
        dp = _count(file, row, "parallelization.data_parallel", par.get("data_parallel", 1))
        n_gpus = _count(file, row, "num_gpus", c.get("num_gpus"))
        if n_gpus % dp:
            raise _err(file, row, "num_gpus", f"must be a multiple of data_parallel ({dp})")
        if n_gpus % ep:
            raise _err(
                file, row, "parallelization.expert_parallel", f"must divide num_gpus ({n_gpus})"
            )
        mean_out = _number(file, row, "avg_output_len", c.get("avg_output_len"))
        power = _number(file, row, "avg_power_watts", c.get("avg_power_watts"))
        itl = _number(file, row, "median_itl_ms", c.get("median_itl_ms"))
        batch = _number(file, row, "avg_batch_size", c.get("avg_batch_size"))
        assert mean_out is not None and power is not None and itl is not None
        assert batch is not None
        out.append(
            Measurement(
                file=file,
                row=row,
                model=model,
                gpu=_gpu(file, row, c.get("gpu_model")),
                stack="vllm",
                task=task,
                # vLLM with expert parallelism lists the MoE layers' TP (1); attention
                # and the dense weights are split over the GPUs of each replica
                tp=n_gpus // dp,
                ep=ep,
                dp=dp,
                precision=precision,
                architecture=arch,
                batch=batch,
                output_tokens=mean_out,
                output_weighted_tokens=weighted or mean_out,
                prompt_tokens=None,
                context_tokens=None,
                itl_s=itl / 1e3,
                power_w=power / n_gpus,
                prefill_tokens_per_s=None,
            )
        )
    return out


def read_csv(file: str, text: str) -> list[Measurement]:
    """Rows of the generic CSV (:data:`CSV_COLUMNS`; ``power_w`` per GPU)."""
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in CSV_REQUIRED if c not in header]
    if missing:
        raise _err(
            file, "header", missing[0], f"missing column; required: {', '.join(CSV_REQUIRED)}"
        )
    unknown = [c for c in header if c not in CSV_COLUMNS]
    if unknown:
        raise _err(file, "header", unknown[0], f"unknown column; known: {', '.join(CSV_COLUMNS)}")
    out = []
    for n, raw in enumerate(reader, start=2):
        r = {k.strip(): v for k, v in raw.items() if k is not None}
        row = f"line {n}"
        prompt = _number(file, row, "prompt_tokens", r.get("prompt_tokens"), positive=False)
        mean_out = _number(file, row, "output_tokens", r.get("output_tokens"))
        itl = _number(file, row, "itl_ms", r.get("itl_ms"))
        batch = _number(file, row, "batch", r.get("batch"))
        assert mean_out is not None and itl is not None and batch is not None
        model = (r.get("model") or "").strip()
        if not model:
            raise _err(file, row, "model", "missing")
        tp = _count(file, row, "tp", r.get("tp"))
        ep = _count(file, row, "ep", r.get("ep") or 1)
        dp = _count(file, row, "dp", r.get("dp") or 1)
        if (tp * dp) % ep:
            raise _err(file, row, "ep", f"must divide the instance's tp x dp = {tp * dp} GPUs")
        out.append(
            Measurement(
                file=file,
                row=row,
                model=model,
                gpu=_gpu(file, row, r.get("gpu")),
                stack=(r.get("stack") or "").strip().lower() or "unknown",
                task=(r.get("task") or "").strip(),
                tp=tp,
                ep=ep,
                dp=dp,
                precision=_precision(file, row, r.get("precision") or "bf16"),
                architecture="",
                batch=batch,
                output_tokens=mean_out,
                output_weighted_tokens=mean_out,
                prompt_tokens=prompt,
                context_tokens=_number(
                    file, row, "context_tokens", r.get("context_tokens"), optional=True
                ),
                itl_s=itl / 1e3,
                power_w=_number(file, row, "power_w", r.get("power_w"), optional=True),
                prefill_tokens_per_s=_number(
                    file, row, "prefill_tokens_per_s", r.get("prefill_tokens_per_s"), optional=True
                ),
            )
        )
    if not out:
        raise _err(file, "", "rows", "no measurement rows after the header")
    return out


#: GPU names as ``nvidia-smi`` reports them (``name`` column) -> catalog names
SMI_GPU_NAMES = {
    "nvidia h100 80gb hbm3": "h100-sxm",
    "nvidia h200": "h200",
    "nvidia b200": "b200",
    "nvidia a100-sxm4-80gb": "a100-80gb",
}
#: ``date`` of vLLM's benchmark result files, and ``timestamp`` of ``nvidia-smi`` logs
BENCH_DATE = "%Y%m%d-%H%M%S"
SMI_TIME = "%Y/%m/%d %H:%M:%S.%f"


@dataclass(frozen=True)
class PowerLog:
    """GPU power samples: an ``nvidia-smi --query-gpu=timestamp,index,power.draw
    --format=csv`` log (a ``name`` column is optional; times in the logging machine's
    local time) or a Prometheus range query of DCGM's power (:func:`read_dcgm_power`;
    times in UTC)."""

    file: str
    samples: list[tuple[datetime, int, float]]  # (time, GPU index, W)
    gpu: str | None  # catalog name, from the ``name`` column or the ``modelName`` label
    utc: bool = False  # sample times are UTC (else local time, as nvidia-smi writes them)

    def mean_per_gpu(
        self, start: datetime, end: datetime, utc_offset: timedelta | None = None
    ) -> tuple[float, int] | None:
        """Mean power per GPU over ``[start, end]`` (local time; a UTC log shifts it by
        ``utc_offset``, which it then needs) and the number of GPUs, or None when no
        sample falls in it."""
        if self.utc:
            if utc_offset is None:
                raise ValueError("a UTC log needs the local time's offset")
            start, end = start - utc_offset, end - utc_offset
        inside = [(i, w) for t, i, w in self.samples if start <= t <= end]
        if not inside:
            return None
        gpus = {i for i, _ in inside}
        return sum(w for _, w in inside) / len(inside), len(gpus)


def read_power_log(file: str, text: str) -> PowerLog:
    reader = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(reader, [])]
    cols = {h.split(" [")[0]: k for k, h in enumerate(header)}
    for need in ("timestamp", "index", "power.draw"):
        if need not in cols:
            raise _err(file, "header", need, "missing column (nvidia-smi --format=csv)")
    gpu = None
    samples = []
    for n, row in enumerate(reader, start=2):
        if not row or not any(c.strip() for c in row):
            continue
        at = f"line {n}"
        try:
            t = datetime.strptime(row[cols["timestamp"]].strip(), SMI_TIME)
        except (ValueError, IndexError):
            raise _err(file, at, "timestamp", f"expected {SMI_TIME!r}") from None
        cell = row[cols["power.draw"]] if len(row) > cols["power.draw"] else ""
        w = _number(file, at, "power.draw", cell.strip().removesuffix(" W"), positive=False)
        index = row[cols["index"]].strip() if len(row) > cols["index"] else ""
        if not index.isdigit():
            raise _err(file, at, "index", f"must be a GPU index, got {index!r}")
        assert w is not None
        samples.append((t, int(index), w))
        if "name" in cols and gpu is None:
            gpu = _named(file, at, "name", row[cols["name"]], SMI_GPU_NAMES)
    if not samples:
        raise _err(file, "", "rows", "no power samples after the header")
    return PowerLog(file, samples, gpu)


#: the DCGM field of a GPU's power draw in W, as dcgm-exporter names it in Prometheus
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"


def read_dcgm_power(file: str, raw: dict[str, Any]) -> PowerLog:
    """A Prometheus range query (``/api/v1/query_range``, ``resultType`` ``matrix``) of
    dcgm-exporter's ``DCGM_FI_DEV_POWER_USAGE``: one series per GPU (its ``gpu`` label,
    with ``Hostname`` where several machines answer), values ``[unix time, "W"]``. The
    GPU's name comes from the ``modelName`` label when the catalog knows it."""
    data = raw.get("data")
    if raw.get("status") != "success" or not isinstance(data, dict):
        raise _err(file, "", "status", "not a successful Prometheus query result")
    if data.get("resultType") != "matrix":
        raise _err(
            file, "data", "resultType", "must be 'matrix' (a range query: /api/v1/query_range)"
        )
    result = data.get("result")
    if not isinstance(result, list) or not result:
        raise _err(file, "data", "result", "no series")
    gpus: dict[tuple[str, str], int] = {}
    samples: list[tuple[datetime, int, float]] = []
    gpu = None
    for n, series in enumerate(result):
        at = f"data.result[{n}]"
        metric = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(metric, dict):
            raise _err(file, at, "metric", "missing")
        name = metric.get("__name__", DCGM_POWER)
        if name != DCGM_POWER:
            raise _err(file, at, "metric.__name__", f"{name!r} is not {DCGM_POWER}")
        index = str(metric.get("gpu", ""))
        if not index.isdigit():
            raise _err(file, at, "metric.gpu", f"must be a GPU index, got {index!r}")
        key = (str(metric.get("Hostname", "")), index)
        g = gpus.setdefault(key, len(gpus))
        if "modelName" in metric and gpu is None:
            gpu = _named(file, at, "metric.modelName", metric["modelName"], SMI_GPU_NAMES)
        values = series.get("values")
        if not isinstance(values, list) or not values:
            raise _err(file, at, "values", "no samples")
        for k, v in enumerate(values):
            where = f"{at}.values[{k}]"
            if not (isinstance(v, list) and len(v) == 2):
                raise _err(file, where, "value", "expected [unix time, value]")
            t = _number(file, where, "time", v[0])
            w = _number(file, where, "power", str(v[1]), positive=False)
            assert t is not None and w is not None
            samples.append((datetime.fromtimestamp(t, tz=UTC).replace(tzinfo=None), g, w))
    return PowerLog(file, samples, gpu, utc=True)


def _is_prometheus(raw: dict[str, Any]) -> bool:
    """A Prometheus HTTP API answer (``status``, ``data``): DCGM's power."""
    return "data" in raw and "status" in raw


def _offset(text: str) -> timedelta:
    """``+HH:MM`` or ``-HH:MM`` (``Z``: 0), the local time's offset from UTC."""
    t = text.strip()
    if t.upper() in ("Z", "UTC", "0"):
        return timedelta(0)
    sign = -1 if t.startswith("-") else 1
    hh, _, mm = t.lstrip("+-").partition(":")
    if not (hh.isdigit() and (mm.isdigit() or not mm) and int(hh) <= 14 and int(mm or 0) < 60):
        raise InputError("utc_offset", f"expected +HH:MM or -HH:MM, got {text!r}")
    return sign * timedelta(hours=int(hh), minutes=int(mm or 0))


def read_bench_serving(
    file: str,
    raw: dict[str, Any],
    logs: list[PowerLog],
    gpu: str | None,
    tp: int | None,
    utc_offset: str | None = None,
) -> Measurement:
    """One operating point from a vLLM or SGLang ``bench_serving`` result: the median
    ITL is the iteration time; the mean running batch is the output token rate times
    the mean ITL (each running request makes one token per iteration); prompt and
    output lengths are the totals over the completed requests; power per GPU is the
    mean of the power log over the run (``date`` minus ``duration`` to ``date``).
    ``date`` is the benchmark machine's local time: a log in UTC (DCGM through
    Prometheus) needs that machine's ``utc_offset`` (``+HH:MM``) to place the run."""
    row = "result"
    done = _number(file, row, "completed", raw.get("completed"))
    duration = _number(file, row, "duration", raw.get("duration"))
    itl_med = _number(file, row, "median_itl_ms", raw.get("median_itl_ms"))
    itl_mean = _number(file, row, "mean_itl_ms", raw.get("mean_itl_ms"))
    rate = _number(file, row, "output_throughput", raw.get("output_throughput"))
    tin = _number(file, row, "total_input_tokens", raw.get("total_input_tokens"), positive=False)
    tout = _number(file, row, "total_output_tokens", raw.get("total_output_tokens"))
    assert done and duration and itl_med and itl_mean and rate and tout and tin is not None
    power = None
    n_gpus = None
    log_gpu = None
    if logs:
        try:
            end = datetime.strptime(str(raw.get("date", "")), BENCH_DATE)
        except ValueError:
            raise _err(
                file, row, "date", f"expected {BENCH_DATE!r} to place the run in the power log"
            ) from None
        start = end - timedelta(seconds=duration)
        shift = None if utc_offset is None else _offset(utc_offset)
        if shift is None and any(log.utc for log in logs):
            utc_log = next(log for log in logs if log.utc)
            raise _err(
                file,
                row,
                "date",
                f"is the benchmark machine's local time but {utc_log.file} is in UTC: give "
                "that machine's offset from UTC (--utc-offset +HH:MM)",
            )
        hits = [(log, m) for log in logs if (m := log.mean_per_gpu(start, end, shift))]
        if not hits:
            names = ", ".join(log.file for log in logs)
            raise _err(file, row, "date", f"no power sample from {start} to {end} in {names}")
        log, (power, n_gpus) = hits[0]
        log_gpu = log.gpu
        if tp is not None and n_gpus != tp:
            raise _err(
                file,
                row,
                "tp",
                f"{log.file} has {n_gpus} GPUs during the run but the run used {tp}: log only "
                "the run's GPUs (nvidia-smi -i), so that idle ones do not lower the power",
            )
    name = gpu or log_gpu
    if name is None:
        raise _err(file, row, "gpu", "unknown: pass --gpu, or log nvidia-smi's name column")
    lens = raw.get("output_lens")
    weighted = None
    if isinstance(lens, list) and all(isinstance(x, (int, float)) for x in lens):
        weighted = length_weighted(lens, [1.0] * len(lens))
    backend = str(raw.get("backend", "")).lower()
    stack = "sglang" if "sglang" in backend else "vllm" if "vllm" in backend else backend
    stack = stack or "unknown"
    return Measurement(
        file=file,
        row=row,
        model=str(raw.get("model_id", "")),
        gpu=_gpu(file, row, name),
        stack=stack,
        task=str(raw.get("dataset_name", "")),
        tp=tp or n_gpus or 1,
        ep=1,
        precision="bf16",
        architecture="",
        batch=rate * itl_mean / 1e3,
        output_tokens=tout / done,
        output_weighted_tokens=weighted or tout / done,
        prompt_tokens=tin / done,
        context_tokens=None,
        itl_s=itl_med / 1e3,
        power_w=power,
        prefill_tokens_per_s=None,
    )


def _text(path: Path) -> str:
    name = path.name
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise _err(name, "", "size", f"larger than {MAX_FILE_BYTES // 2**20} MiB")
        return path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark too
    except OSError as e:
        raise InputError(name, f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(name, "not UTF-8 text") from None


def read_measurements(
    paths: Iterable[str | Path],
    gpu: str | None = None,
    tp: int | None = None,
    utc_offset: str | None = None,
) -> list[Measurement]:
    """Every measurement in the given files, each file's format recognised from its
    content: a JSON object with ``configurations`` (ML.ENERGY), a JSON object with
    ``median_itl_ms`` and ``duration`` (a ``bench_serving`` result), a CSV with a
    ``power.draw`` column (an ``nvidia-smi`` power log, for the ``bench_serving``
    results), a Prometheus query result JSON (``status``, ``data``: DCGM's power, for
    them too), or the generic CSV. ``gpu`` and ``tp`` describe the ``bench_serving``
    runs (default: the power log's GPU name and its number of GPUs); ``utc_offset``
    (``+HH:MM``) places their local ``date`` in a UTC log."""
    docs: list[tuple[str, dict[str, Any]]] = []
    logs: list[PowerLog] = []
    out: list[Measurement] = []
    for p in paths:
        path = Path(p)
        name = path.name
        text = _text(path)
        if text.lstrip().startswith("{"):
            try:
                raw = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(name, f"not valid JSON: {e}") from None
            docs.append((name, raw))
        elif "power.draw" in text.split("\n", 1)[0].lower():
            logs.append(read_power_log(name, text))
        else:
            out.extend(read_csv(name, text))
    benches = 0
    # power logs first: every bench_serving result is placed in all of them
    logs += [read_dcgm_power(name, raw) for name, raw in docs if _is_prometheus(raw)]
    for name, raw in docs:
        if _is_prometheus(raw):
            continue
        if "configurations" in raw:
            out.extend(read_mlenergy(name, raw))
        elif "median_itl_ms" in raw and "duration" in raw:
            out.append(read_bench_serving(name, raw, logs, gpu, tp, utc_offset))
            benches += 1
        else:
            raise InputError(
                name,
                "JSON that is neither an ML.ENERGY Leaderboard model file ('configurations') "
                "nor a bench_serving result ('median_itl_ms', 'duration')",
            )
    if logs and not benches:
        raise InputError(logs[0].file, "a power log needs bench_serving results to go with")
    return out
