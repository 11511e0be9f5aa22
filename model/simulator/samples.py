"""Inputs of the simulator (:mod:`model.simulator`): the timing it simulates and the
request lengths (and arrival times) it draws from: fixed lengths, the public traces'
presets, or a trace file.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from model.capacity import Coefficients
from model.catalog import ModelArch
from model.errors import InputError
from model.spec import DeploymentSpec
from model.workload import Workload, load_trace, parse_workload, workload_kind

#: Environment variable naming the directory of the public request traces.
DATA_DIR_ENV = "PDWATT_DATA_DIR"


def not_simulated(model: ModelArch) -> str | None:
    """Why the simulator cannot describe ``model``, or None when it can."""
    if model.sliding_layers:
        return (
            f"{model.name} has sliding-window attention layers, which the simulator does "
            "not model (it keeps every token of every layer in the KV pool); the analytic "
            "model describes them (docs/sliding_window.md)"
        )
    return None


@dataclass(frozen=True)
class SimTiming:
    """Primitive timing and pool sizes of one instance, in SI units.

    Built from a deployment by :meth:`of`: ``a_P``, ``b_P``, the pool ``C_tok``,
    the usable pool ``C_tok - U`` (floored to whole tokens) and ``R`` come from
    :class:`model.capacity.Coefficients` (so ``a_P`` and ``b_P`` at the prefill
    setting's clock); the decode terms from the catalog (``beta MBU`` scaled by tensor
    parallelism), plus the decode setting's clock term per request
    (``clock_extra_s_per_request``, docs/clocks.md).
    """

    a_p_s_per_token: float
    b_p_s_per_token2: float
    weight_bytes: float
    kv_bytes_per_token: float
    decode_bw_bytes_per_s: float  # beta * MBU (per instance)
    t_iter_s: float
    t_req_s: float
    kv_pool_tokens: int  # C_tok
    kv_usable_tokens: int  # floor(C_tok - U)
    reserved_tokens: int  # R
    # performance "kernels": the decode iteration is ``kernel_iteration_s + t_req_s n +
    # kernel_token_s S`` (the capacity model's line, split into its parts per request
    # and per attended token) instead of the rooflines above (None: the rooflines)
    kernel_iteration_s: float | None = None
    kernel_token_s: float | None = None
    #: what the decode setting's clock adds to an iteration per request in the batch
    #: (``Coefficients.clock_extra_g_s_per_request``: the weight GEMMs' compute outgrowing
    #: their weight read); 0 at the full clock
    clock_extra_s_per_request: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "a_p_s_per_token",
            "b_p_s_per_token2",
            "weight_bytes",
            "t_iter_s",
            "t_req_s",
            "clock_extra_s_per_request",
        ):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(name, f"must be finite and >= 0, got {value!r}")
        if (self.kernel_iteration_s is None) != (self.kernel_token_s is None):
            raise InputError("kernel_token_s", "give both kernel terms or neither")
        for name in ("kernel_iteration_s", "kernel_token_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise InputError(name, f"must be finite and >= 0, got {value!r}")
        for name in ("kv_bytes_per_token", "decode_bw_bytes_per_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InputError(name, f"must be finite and > 0, got {value!r}")
        if self.kv_usable_tokens < 1 or self.kv_usable_tokens > self.kv_pool_tokens:
            raise InputError("kv_usable_tokens", "must be in [1, kv_pool_tokens]")
        if self.reserved_tokens < 0:
            raise InputError("reserved_tokens", "must be >= 0")

    @classmethod
    def of(cls, spec: DeploymentSpec) -> SimTiming:
        """The timing of a deployment (its workload only serves the fit check).

        Under ``performance: kernels`` the decode iteration is the capacity model's line
        ``alpha + g n`` at the deployment's context ``ctx``, split into what one more
        request costs whatever its context, ``g - g_c ctx``, and what each attended
        token costs, ``g_c`` (``Coefficients.g_context_s_per_token``); where that split
        would make the first part negative it is 0 and ``g_c = g / ctx``, so that at the
        mean context the iteration is the line's either way.

        Under GPU settings (``prefill_setting``, ``decode_setting``; docs/clocks.md)
        ``a_P`` and ``b_P`` are the clocked coefficients, and the decode setting's clock
        adds ``Coefficients.clock_extra_g_s_per_request`` per request in the batch (kept
        apart as ``clock_extra_s_per_request``; the kernel line above is split without
        it), as the capacity model's ``g`` has it; at the full clock it is 0 and the
        timing is the one without settings."""
        reason = not_simulated(spec.model)
        if reason is not None:
            raise InputError("model", reason)
        c = Coefficients.of(spec)
        tp = spec.serving.tensor_parallel
        t_req_s = spec.calibration.t_req_s
        iteration = token = None
        extra = c.clock_extra_g_s_per_request
        if spec.performance == "kernels":
            iteration, token, t_req_s = c.alpha_s, 0.0, 0.0
            if c.has_decode_work:
                g = c.g_s_per_request - extra  # the line at the full clock
                token = c.g_context_s_per_token
                t_req_s = g - token * c.ctx_tokens
                if t_req_s < 0.0:
                    t_req_s, token = 0.0, g / c.ctx_tokens
        return cls(
            a_p_s_per_token=c.a_p_s_per_token,
            b_p_s_per_token2=c.b_p_s_per_token2,
            weight_bytes=spec.model.weight_bytes,
            kv_bytes_per_token=spec.model.kv_bytes_per_token,
            decode_bw_bytes_per_s=spec.gpu.mem_bw_bytes_per_s * tp * spec.calibration.mbu,
            t_iter_s=spec.calibration.t_iter_s,
            t_req_s=t_req_s,
            kv_pool_tokens=c.kv_pool_tokens,
            kv_usable_tokens=math.floor(c.kv_usable_tokens),
            reserved_tokens=c.reserved_tokens,
            kernel_iteration_s=iteration,
            kernel_token_s=token,
            clock_extra_s_per_request=extra,
        )

    @property
    def iteration_s(self) -> float:
        """A decode iteration's time at an empty batch (s)."""
        if self.kernel_iteration_s is not None:
            return self.kernel_iteration_s
        return self.weight_bytes / self.decode_bw_bytes_per_s + self.t_iter_s

    @property
    def request_s(self) -> float:
        """What each request in the batch adds to a decode iteration, whatever its
        context (s): ``t_req_s`` plus the decode clock's term."""
        return self.t_req_s + self.clock_extra_s_per_request

    @property
    def attended_token_s(self) -> float:
        """What each token a decode iteration attends to adds to it (s)."""
        if self.kernel_token_s is not None:
            return self.kernel_token_s
        return self.kv_bytes_per_token / self.decode_bw_bytes_per_s

    def t_prefill_s(self, l_in: ArrayLike) -> NDArray[np.float64]:
        """``t_P(l_in) = a_P l_in + b_P l_in^2`` (s), SPEC 2.2."""
        x = np.asarray(l_in, dtype=float)
        return self.a_p_s_per_token * x + self.b_p_s_per_token2 * x * x

    def t_decode_s(self, batch: int, context_sum_tokens: float) -> float:
        """One decode iteration (s) of ``batch`` requests attending to ``context_sum_tokens``.

        ``(weight_bytes + kappa * S) / (beta MBU) + t_iter + t_req * batch``, SPEC 2.3
        with the actual batch (with kernels, the line's parts: see :meth:`of`), ``t_req``
        with the decode clock's term (:attr:`request_s`).
        """
        if self.kernel_iteration_s is not None and self.kernel_token_s is not None:
            return (
                self.kernel_iteration_s
                + self.kernel_token_s * context_sum_tokens
                + self.request_s * batch
            )
        return (
            (self.weight_bytes + self.kv_bytes_per_token * context_sum_tokens)
            / self.decode_bw_bytes_per_s
            + self.t_iter_s
            + self.request_s * batch
        )


@dataclass(frozen=True)
class Samples:
    """Per-request lengths ``(l_in, l_out)`` (and, for a trace, its arrival times, s)."""

    l_in: NDArray[np.int64]
    l_out: NDArray[np.int64]
    name: str
    source: str = ""
    arrival_s: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        l_in = np.asarray(self.l_in)
        l_out = np.asarray(self.l_out)
        if l_in.ndim != 1 or l_in.size == 0 or l_in.shape != l_out.shape:
            raise InputError("samples", "l_in and l_out must be non-empty 1-D arrays of one length")
        for name, arr in (("l_in", l_in), ("l_out", l_out)):
            if not np.issubdtype(arr.dtype, np.integer) and not np.all(arr == np.floor(arr)):
                raise InputError(name, "must hold integers")
            if arr.min() < 1:
                raise InputError(name, "every sample must be >= 1 (SPEC 2.5)")
        object.__setattr__(self, "l_in", l_in.astype(np.int64))
        object.__setattr__(self, "l_out", l_out.astype(np.int64))
        if self.arrival_s is not None:
            arr_s = np.asarray(self.arrival_s, dtype=float)
            if arr_s.shape != l_in.shape or not np.all(np.isfinite(arr_s)):
                raise InputError("arrival_s", "must be finite, one per request")
            if np.any(np.diff(arr_s) < 0):
                raise InputError("arrival_s", "must be non-decreasing")
            object.__setattr__(self, "arrival_s", arr_s)

    @classmethod
    def fixed(cls, l_in: int, l_out: int) -> Samples:
        return cls(np.array([l_in]), np.array([l_out]), name=f"fixed:{l_in}:{l_out}")

    def __len__(self) -> int:
        return int(self.l_in.shape[0])

    @property
    def max_tokens(self) -> int:
        return int((self.l_in + self.l_out).max())


def data_dir() -> Path | None:
    """Directory of the public request traces: ``$PDWATT_DATA_DIR``, else ``shared/data``
    beside the repository root; None if neither exists."""
    env = os.environ.get(DATA_DIR_ENV)
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return path if path.is_dir() else None


@functools.cache
def _trace_preset_files() -> dict[str, tuple[str, str]]:
    """Preset name -> (trace file name, sha256), from the presets' provenance."""
    from importlib import resources

    text = resources.files("model").joinpath("data", "workloads.json").read_text("utf-8")
    out: dict[str, tuple[str, str]] = {}
    for name, entry in json.loads(text)["presets"].items():
        prov = entry.get("provenance", {})
        if prov.get("kind") == "trace":
            out[name] = (prov["source_file"], prov.get("source_sha256", ""))
    return out


def _fixed_lengths(w: Workload) -> tuple[int, int] | None:
    """``(l_in, l_out)`` if every request of `w` has the same integer lengths."""
    if w.var_in > 0 or w.var_out > 0:
        return None
    if not (float(w.mean_in).is_integer() and float(w.mean_out).is_integer()):
        return None
    return int(w.mean_in), int(w.mean_out)


def _load_arrivals(path: Path) -> NDArray[np.float64] | None:
    """The arrival times (s) of a trace file, if it has them: CSV column ``arrival_s`` or
    Mooncake JSONL ``timestamp`` (ms). Rows as :func:`model.workload.load_trace` reads them."""
    times: list[float] = []
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix.lower() == ".csv":
        rows = csv.reader(text.splitlines())
        header = [c.strip() for c in next(rows, [])]
        if "arrival_s" not in header:
            return None
        k = header.index("arrival_s")
        for cells in rows:
            if any(c.strip() for c in cells):
                try:
                    times.append(float(cells[k]))
                except (IndexError, ValueError):
                    return None
    else:
        for line in text.splitlines():
            if line.strip():
                obj = json.loads(line)
                if "timestamp" not in obj:
                    return None
                times.append(float(obj["timestamp"]) / 1000.0)
    arr = np.asarray(times, dtype=float)
    if arr.size and (np.any(np.diff(arr) < 0) or not np.all(np.isfinite(arr))):
        return None
    return arr - arr[0] if arr.size else None


def _samples_from_file(path: Path, name: str) -> Samples:
    l_in, l_out = load_trace(path)
    arrivals = _load_arrivals(path)
    if arrivals is not None and arrivals.shape != l_in.shape:
        arrivals = None
    return Samples(l_in, l_out, name=name, source=f"trace file {path.name}", arrival_s=arrivals)


def preset_samples(name: str, directory: Path | None = None) -> Samples:
    """The request samples of a trace preset, read from the trace data directory.

    InputError if the directory or the file is missing (a trace is required to
    simulate a preset: its shipped moments are not enough), or if the file found
    is not the one the preset's moments were derived from (sha256 mismatch).
    """

    files = _trace_preset_files()
    if name not in files:
        raise InputError("workload", f"{name!r} is not a trace preset")
    file_name, sha = files[name]
    directory = directory or data_dir()
    path = None if directory is None else directory / file_name
    if path is None or not path.is_file():
        raise InputError(
            "workload",
            f"simulating {name!r} needs its request trace {file_name} (the preset ships "
            f"moments only): put it in the directory named by {DATA_DIR_ENV}, or pass "
            f"the file as trace:PATH",
        )
    stat = path.stat()
    return _checked_preset(str(path), stat.st_mtime_ns, stat.st_size, name, sha)


@functools.lru_cache(maxsize=8)
def _checked_preset(path: str, _mtime_ns: int, _size: int, name: str, sha: str) -> Samples:
    """A preset's trace, hashed and read once per file version (its path, modification
    time and size): a schedule's tables, a front's checks and a request's validation
    each ask for it."""
    from model.workload import file_sha256

    if sha and file_sha256(Path(path)) != sha:
        raise InputError(
            "workload",
            f"{Path(path).name} in the trace directory is not the file the {name!r} preset "
            "was derived from (sha256 differs); pass it as trace:PATH to simulate it anyway",
        )
    return _samples_from_file(Path(path), name)


def resolve_samples(workload: str | Workload, directory: Path | None = None) -> Samples:
    """Per-request samples for a workload string (SPEC 6.1) or a :class:`Workload`.

    ``fixed:IN:OUT`` and the ``fixed-IN-OUT`` presets give one fixed pair;
    ``trace:PATH`` reads the file; a trace preset reads its trace from the data
    directory (:func:`preset_samples`). Moments alone cannot be simulated:
    InputError saying that a trace is required.
    """
    if isinstance(workload, str):
        # the simulator reads the user's files (command line and scripts; no route)
        text = workload.strip()
        if workload_kind(text) == "trace":
            path = Path(text.partition(":")[2].strip())
            return _samples_from_file(path, f"trace:{path.name}")
        if text.lower() in _trace_preset_files():
            return preset_samples(text.lower(), directory)
        w = parse_workload(text, read_files=True)
    else:
        w = workload
        if w.name in _trace_preset_files():
            return preset_samples(w.name, directory)
    fixed = _fixed_lengths(w)
    if fixed is None:
        raise InputError(
            "workload",
            f"{w.name!r} is given by moments only; the simulator needs per-request "
            f"lengths: pass a trace (trace:PATH)",
        )
    return Samples.fixed(*fixed)
