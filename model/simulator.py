"""Discrete-event simulator of PD-disaggregated serving, request by request.

An independent check on the analytical core (SPEC 2.2-2.5) and the source of
latency figures (TTFT, TPOT). It shares with the core only the catalog, the
workload loaders and the primitive timing formulas:

    t_P(l_in) = a_P l_in + b_P l_in^2                                  (SPEC 2.2)
    t_D(batch) = (weight_bytes + kappa * S) / (beta MBU) + t_iter + t_req * n

where ``n`` is the number of requests in the decode batch and ``S`` the sum of
their *actual* current contexts (SPEC 2.3 with the real batch instead of
``B * ctx``). Under ``performance: kernels`` (measured kernel tables, ``a_P`` and
``b_P`` from the capacity model's prefill curve) the decode iteration is the capacity
model's line split the same way, ``alpha + (g - g_c ctx) n + g_c S`` with ``g_c`` its
context share (:class:`SimTiming`). It never calls the memory balance, the batch solver, Kingman's
formula or the capacity code.

The system simulated (SGLang's PD mode, SPEC 2.1):

* Arrivals are Poisson at ``rate_rps`` (or a trace's own timestamps); each
  request draws ``(l_in, l_out)`` jointly from the samples, going through
  successive random permutations of them (sampling without replacement: any
  ``len(samples)`` consecutive requests have exactly the samples' length mix,
  which removes most of the sampling noise of heavy-tailed traces); trace
  replay uses the rows in order. The router sends request ``k`` to
  prefill instance ``k mod n_P`` and decode instance ``k mod n_D``
  (round-robin) or to uniformly random ones.
* Decode admission: each decode instance keeps a FIFO queue of the requests
  dispatched to it. The head is admitted when the pool can hold every running
  context, every admitted-but-not-decoding input, ``R`` more tokens per request
  in flight and the head's own ``l_in + R``:
  ``kv_active + kv_prefill + R * (in_flight + 1) + l_in <= C_tok - U``.
  Admission pre-allocates ``l_in`` tokens; only then may the request's prefill
  start. Strict FIFO: a head that does not fit blocks the requests behind it.
* Prefill: one FCFS server per instance, in order of admission, service time
  ``t_P(l_in)``. The first output token comes from prefill (TTFT); KV transfer
  to the decode instance takes no time.
* Decode: continuous batching. An iteration takes ``t_D`` of its batch; every
  active request allocates one token slot at the start of the iteration and
  gains one token. A request needs ``l_out - 1`` iterations and attends to
  ``l_in + k`` tokens in its ``k``-th (its mean over them is ``l_in + l_out/2``).
  The decode scheduler acts at iteration boundaries, as SGLang's event loop
  does: completed requests leave (freeing their tokens), requests whose prefill
  ended join, the pool is checked, the queue is admitted, then the next
  iteration starts. An idle decode instance acts at once. Requests with
  ``l_out = 1`` finish at the end of their prefill and release their
  pre-allocation.
* Retraction: if the next iteration's token slots do not fit (possible only
  when outputs outgrow the ``R`` reserve), requests are retracted, fewest
  generated tokens first (ties: longest prompt), as SGLang's
  ``retract_decode`` does. A retracted request's KV is parked off the GPU at no
  cost and it resumes, ahead of new admissions, when ``its context + R`` fits
  under the admission rule. Retractions are counted.

Statistics are time-weighted over a measurement window (the second half of
the horizon by default): throughput, mean decode batch, KV pool occupancy split
(active decode / pre-allocated for prefill / free), queue lengths, prefill
utilisation; TTFT and TPOT percentiles over the requests that arrive in the
window (the run continues past the window until they complete, arrivals
included, so that slow requests are not dropped).

Implementation: a plain-Python event loop on ``heapq``. A decode instance
advances whole runs of iterations at once ("steps"): between two events that
change its batch (a completion, a join, a pool limit, an admission
opportunity), iteration times form an arithmetic sequence, so a step's end
time and its time integrals have closed forms. An external event that needs
the next boundary (a prefill completion, an arrival to an empty queue)
shortens the running step to the boundary that follows it.

Capacity (:func:`find_capacity`). The decode admission queue sits in front of
a closed loop (the pool's tokens circulate through prefill and decode), so the
system is stable exactly when the arrival rate is below the loop's throughput
with the admission queue never empty. The capacity estimate is therefore the
**saturated throughput**: each decode instance is fed from an unbounded queue
(every request present at time 0), and the throughput is measured over the
last ``requests`` completions after ``requests * warmup_fraction /
(1 - warmup_fraction)`` warm-up completions, averaged over ``seeds`` seeds.
Its 95% confidence half-width comes from batch means (10 batches per seed,
Student t). The estimate is then checked against the open-loop definition of
stability with Poisson arrivals at ``(1 - margin)`` and ``(1 + margin)`` times
the estimate (default 5%): the **stability criterion** is that completions
over the second half of the horizon are at least 98% of the arrivals in it
(pooled over seeds); the check passes when the lower rate is stable and the
upper one is not. Latency at the lower rate is reported with the capacity.
Confidence obtained with the defaults (3 seeds, :func:`default_requests`
measured completions each) over the 384 configurations of the validation
report (docs/validation.md): 95% half-width median 0.6% of the capacity
(Mooncake 1.9%), at most 6.7% (fixed lengths, whose batch oscillates in
cohorts); the open-loop check passed for all 384.
"""

from __future__ import annotations

import csv
import functools
import heapq
import json
import logging
import math
import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from model.capacity import Coefficients, DeploymentSpec
from model.catalog import DISPATCH_MODES, ModelArch
from model.errors import DoesNotFitError, InputError
from model.pareto import CheckMap
from model.workload import Workload, load_trace, parse_workload, workload_kind

logger = logging.getLogger(__name__)

#: Environment variable naming the directory of the public request traces.
DATA_DIR_ENV = "PDWATT_DATA_DIR"

#: Stability criterion: completions >= this share of arrivals over the window.
STABLE_SHARE = 0.98

_PERCENTILES = (50, 90, 99)

_ARRIVAL, _PREFILL_DONE, _STEP_END, _MARK = 0, 1, 2, 3


# --------------------------------------------------------------------------------------
# Inputs


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
    :class:`model.capacity.Coefficients`; the decode terms from the catalog
    (``beta MBU`` scaled by tensor parallelism).
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

    def __post_init__(self) -> None:
        for name in ("a_p_s_per_token", "b_p_s_per_token2", "weight_bytes", "t_iter_s", "t_req_s"):
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
        mean context the iteration is the line's either way."""
        reason = not_simulated(spec.model)
        if reason is not None:
            raise InputError("model", reason)
        c = Coefficients.of(spec)
        tp = spec.serving.tensor_parallel
        t_req_s = spec.calibration.t_req_s
        iteration = token = None
        if spec.performance == "kernels":
            iteration, token, t_req_s = c.alpha_s, 0.0, 0.0
            if c.has_decode_work:
                token = c.g_context_s_per_token
                t_req_s = c.g_s_per_request - token * c.ctx_tokens
                if t_req_s < 0.0:
                    t_req_s, token = 0.0, c.g_s_per_request / c.ctx_tokens
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
        )

    @property
    def iteration_s(self) -> float:
        """A decode iteration's time at an empty batch (s)."""
        if self.kernel_iteration_s is not None:
            return self.kernel_iteration_s
        return self.weight_bytes / self.decode_bw_bytes_per_s + self.t_iter_s

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
        with the actual batch (with kernels, the line's parts: see :meth:`of`).
        """
        if self.kernel_iteration_s is not None and self.kernel_token_s is not None:
            return (
                self.kernel_iteration_s
                + self.kernel_token_s * context_sum_tokens
                + self.t_req_s * batch
            )
        return (
            (self.weight_bytes + self.kv_bytes_per_token * context_sum_tokens)
            / self.decode_bw_bytes_per_s
            + self.t_iter_s
            + self.t_req_s * batch
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
    from model.workload import file_sha256

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
    if sha and file_sha256(path) != sha:
        raise InputError(
            "workload",
            f"{file_name} in the trace directory is not the file the {name!r} preset was "
            f"derived from (sha256 differs); pass it as trace:PATH to simulate it anyway",
        )
    return _samples_from_file(path, name)


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


# --------------------------------------------------------------------------------------
# Results


def percentiles(values: ArrayLike) -> dict[str, float | None]:
    """``{"p50", "p90", "p99", "mean"}`` of `values` (None when empty)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    q = np.percentile(v, _PERCENTILES)
    out: dict[str, float | None] = {f"p{p}": float(x) for p, x in zip(_PERCENTILES, q, strict=True)}
    out["mean"] = float(v.mean())
    return out


@dataclass(frozen=True)
class SimResult:
    """One simulation run. Rates in req/s, times in s, tokens per decode instance.

    Time averages are over the window ``[window_start_s, window_end_s]``; the
    ``*_frac`` fields are shares of the pool ``C_tok`` averaged over decode
    instances (``kv_free_frac = 1 - active - prefill``; ``kv_headroom_frac`` is
    the ``R`` per request in flight the admission rule holds back, part of the free
    share). Queue lengths are per instance. Latencies are for the requests that
    arrived in the window and completed (``incomplete`` did not).
    """

    n_p: int
    n_d: int
    rate_rps: float  # offered rate (inf: saturated)
    seed: int
    dispatch: str
    window_start_s: float
    window_end_s: float
    arrived: int
    admitted: int
    completed: int
    throughput_rps: float
    backlog_start: int  # requests in the system (arrived, not completed) at the window start
    backlog_end: int
    ttft_s: NDArray[np.float64]
    tpot_s: NDArray[np.float64]
    completion_times_s: NDArray[np.float64]  # sorted, of the completions in the window
    incomplete: int
    mean_batch: float  # time average (idle time counts as 0)
    mean_active_ctx_tokens: float  # time-weighted mean context of an active request
    iteration_mean_batch: float  # mean batch size per decode iteration
    iteration_mean_ctx_tokens: float  # mean attended tokens per request-iteration
    iteration_mean_s: float  # mean decode iteration time
    decode_busy_frac: float  # share of time a decode instance runs iterations
    kv_active_frac: float
    kv_prefill_frac: float
    kv_free_frac: float
    kv_headroom_frac: float
    kv_peak_tokens: int  # max of allocated tokens (a step counts at its last iteration)
    admission_queue_mean: float | None  # None when saturated (unbounded)
    prefill_queue_mean: float
    prefill_utilisation: float
    admission_wait_s: float
    prefill_wait_s: float
    join_wait_s: float
    retractions: int
    total_arrived: int  # over the whole run (not only the window)
    total_admitted: int
    total_completed: int
    end_s: float  # simulated time at the end of the run
    events: int
    log: list[tuple[Any, ...]] | None = field(default=None, repr=False)

    @property
    def saturated(self) -> bool:
        return math.isinf(self.rate_rps)

    @property
    def window_s(self) -> float:
        return self.window_end_s - self.window_start_s

    @property
    def completed_share(self) -> float:
        """Completions over arrivals in the window (1 when nothing arrived)."""
        return self.completed / self.arrived if self.arrived else 1.0

    @property
    def stable(self) -> bool:
        """The stability criterion: completions >= 98% of arrivals over the window."""
        return self.completed_share >= STABLE_SHARE


# --------------------------------------------------------------------------------------
# The engine


class _Decode:
    """State of one decode instance (tokens are counted in whole tokens)."""

    __slots__ = (
        "queue",
        "retracted",
        "joins",
        "fin",
        "n",
        "kv",
        "prealloc",
        "inflight",
        "it",
        "busy",
        "t0",
        "kv0",
        "pre0",
        "a1",
        "cn",
        "k",
        "ver",
        "area_n",
        "area_kv",
        "area_pre",
        "area_q",
        "area_infl",
        "area_busy",
        "iters",
        "tokens",
        "ctx_sum",
        "t_last",
        "created",
    )

    def __init__(self) -> None:
        self.queue: deque[int] = deque()  # dispatched, waiting for admission (FIFO)
        self.retracted: deque[int] = deque()  # retracted, waiting to resume (ahead of queue)
        self.joins: list[int] = []  # prefill done, waiting for the next iteration boundary
        self.fin: list[tuple[int, int]] = []  # heap of (finishing iteration, request id)
        self.n = 0  # active decode requests
        self.kv = 0  # tokens allocated to active requests (at the last boundary)
        self.prealloc = 0  # tokens pre-allocated to admitted, not yet decoding requests
        self.inflight = 0  # admitted and not completed (retracted excluded)
        self.it = 0  # iterations run so far
        self.busy = False  # a step is running
        self.t0 = 0.0  # running step: start time
        self.kv0 = 0  # running step: kv at its start
        self.pre0 = 0  # running step: prealloc at its start (it can only fall during a step)
        self.a1 = 0.0  # running step: t_k = a1 + cn * k
        self.cn = 0.0
        self.k = 0  # running step: planned iterations
        self.ver = 0  # running step: version (stale end events are skipped)
        self.area_n = 0.0  # integrals up to the last boundary (n, kv) or t_last (others)
        self.area_kv = 0.0
        self.area_pre = 0.0
        self.area_q = 0.0
        self.area_infl = 0.0
        self.area_busy = 0.0  # time with a step running
        self.iters = 0  # iterations completed
        self.tokens = 0  # sum over iterations of the batch size (decode tokens)
        self.ctx_sum = 0  # sum over iterations of the attended tokens S
        self.t_last = 0.0
        self.created = 0  # saturated mode: requests created for this instance


def _step_time(a1: float, cn: float, j: int) -> float:
    """Time of the first ``j`` iterations of a step: sum of ``a1 + cn k``, k = 1..j."""
    return j * a1 + cn * (j * (j + 1) // 2)


def _iterations_done(a1: float, cn: float, dt: float, kmax: int) -> int:
    """Largest ``j <= kmax`` with ``_step_time(j) <= dt``."""
    if dt <= 0:
        return 0
    if cn > 0:
        b = a1 + 0.5 * cn
        j = int(2.0 * dt / (b + math.sqrt(b * b + 2.0 * cn * dt)))
    else:
        j = int(dt / a1)
    j = min(j, kmax)
    while j < kmax and _step_time(a1, cn, j + 1) <= dt:
        j += 1
    while j > 0 and _step_time(a1, cn, j) > dt:
        j -= 1
    return j


def _kv_area(a1: float, cn: float, n: int, kv0: int, j: int) -> float:
    """Integral of allocated tokens over the first ``j`` iterations of a step:
    sum over k = 1..j of ``(kv0 + k n)(a1 + cn k)``."""
    s1 = j * (j + 1) / 2.0
    s2 = j * (j + 1) * (2 * j + 1) / 6.0
    return j * kv0 * a1 + (kv0 * cn + n * a1) * s1 + n * cn * s2


def simulate(
    timing: SimTiming,
    samples: Samples,
    n_p: int,
    n_d: int,
    rate_rps: float | None,
    *,
    requests: int = 4000,
    duration_s: float | None = None,
    warmup_fraction: float = 0.5,
    seed: int = 0,
    dispatch: str = "round_robin",
    replay: bool = False,
    drain: bool = False,
    tail: bool = True,
    log: bool = False,
) -> SimResult:
    """Simulate ``n_p`` prefill and ``n_d`` decode instances (see the module docstring).

    Modes:

    * open loop, Poisson arrivals at ``rate_rps``: the horizon is ``duration_s``, or
      by default long enough for ``requests`` arrivals after the warm-up; the window
      is the horizon after ``warmup_fraction`` of it. With ``tail`` (default) the run
      goes on, arrivals included, until the window's requests complete (at most one
      more horizon); with ``drain`` arrivals stop at the horizon and the run ends
      when the system is empty.
    * saturated, ``rate_rps = math.inf``: every decode queue is unbounded; the run
      stops after ``requests`` completions measured after
      ``requests * warmup_fraction / (1 - warmup_fraction)`` warm-up completions.
    * trace replay (``replay=True``): the samples' own arrival times, in order,
      time-scaled to mean rate ``rate_rps`` if given; window from the first to the
      last arrival (after ``warmup_fraction`` of it), then the run drains.

    The same arguments and seed give identical results. ``log=True`` records, in
    order, tuples ``(kind, t, ...)``: ``("admit" | "refuse", t, rid, d, kv_active,
    kv_prefill, in_flight, size)`` before the decision, ``("prefill", t, rid, p)``,
    ``("join", t, rid, d)``, ``("step", t, d, batch, kv_active, iterations,
    kv_prefill)`` at a step's start (iterations planned), ``("step_end", t, d,
    iterations)`` (iterations run), ``("retract", t, rid, d)`` and ``("done", t,
    rid, d)``.
    """
    _check_config(n_p, n_d, dispatch)
    if not (0.0 <= warmup_fraction < 1.0):
        raise InputError("warmup_fraction", "must be in [0, 1)")
    if requests < 1:
        raise InputError("requests", "must be >= 1")
    longest = samples.max_tokens + timing.reserved_tokens
    if longest > timing.kv_usable_tokens:
        raise DoesNotFitError(
            "workload",
            f"the longest request needs {longest:,} tokens (l_in + l_out + R) but the "
            f"usable KV pool holds {timing.kv_usable_tokens:,}",
        )
    arrivals: list[float] | None = None
    if replay:
        if samples.arrival_s is None:
            raise InputError("workload", f"{samples.name} has no arrival times to replay")
        arr = samples.arrival_s - samples.arrival_s[0]
        if rate_rps is not None:
            if not (math.isfinite(rate_rps) and rate_rps > 0):
                raise InputError("rate", "must be finite and > 0 to rescale a replay")
            span = arr[-1]
            if span <= 0:
                raise InputError("workload", "the trace's arrivals span no time")
            arr = arr * ((len(arr) - 1) / rate_rps / span)
        arrivals = arr.tolist()
        horizon = float(arrivals[-1])
        drain = True
    else:
        if rate_rps is None or not (rate_rps > 0):
            raise InputError("rate", f"must be > 0 (or inf for saturation), got {rate_rps!r}")
        if math.isinf(rate_rps):
            horizon = math.inf
        elif duration_s is not None:
            if not (math.isfinite(duration_s) and duration_s > 0):
                raise InputError("duration", "must be finite and > 0")
            horizon = float(duration_s)
        else:
            horizon = requests / rate_rps / (1.0 - warmup_fraction)
    engine = _Engine(
        timing,
        samples,
        n_p,
        n_d,
        rate_rps=0.0 if rate_rps is None else float(rate_rps),
        horizon=horizon,
        warmup_fraction=warmup_fraction,
        requests=requests,
        seed=seed,
        dispatch=dispatch,
        arrivals=arrivals,
        drain=drain,
        tail=tail,
        log=log,
    )
    return engine.run()


def _check_config(n_p: int, n_d: int, dispatch: str) -> None:
    for name, v in (("n_p", n_p), ("n_d", n_d)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise InputError(name, f"must be an integer >= 1, got {v!r}")
    if dispatch not in DISPATCH_MODES:
        raise InputError("dispatch", f"must be one of {', '.join(DISPATCH_MODES)}")


class _Engine:
    """One run of the event loop (built and run by :func:`simulate`)."""

    def __init__(
        self,
        timing: SimTiming,
        samples: Samples,
        n_p: int,
        n_d: int,
        *,
        rate_rps: float,
        horizon: float,
        warmup_fraction: float,
        requests: int,
        seed: int,
        dispatch: str,
        arrivals: list[float] | None,
        drain: bool,
        tail: bool,
        log: bool,
    ) -> None:
        self.tm = timing
        self.samples = samples
        self.n_p, self.n_d = int(n_p), int(n_d)
        self.rate = rate_rps
        self.saturated = arrivals is None and math.isinf(rate_rps)
        self.horizon = horizon
        self.warmup_fraction = warmup_fraction
        self.requests = requests
        self.seed = seed
        self.dispatch = dispatch
        self.arrivals = arrivals
        self.drain = drain
        self.tail = tail
        self.log: list[tuple[Any, ...]] | None = [] if log else None

    # The run is one long method on purpose: the event loop binds everything it
    # touches to locals, which is what makes pure-Python simulation fast enough.
    def run(self) -> SimResult:  # noqa: C901 (event loop)
        tm = self.tm
        n_p, n_d = self.n_p, self.n_d
        usable = tm.kv_usable_tokens
        res = tm.reserved_tokens
        c_kv = tm.attended_token_s  # s per attended token
        w_s = tm.iteration_s  # s per iteration at zero batch
        t_req = tm.t_req_s
        a_p, b_p = tm.a_p_s_per_token, tm.b_p_s_per_token2
        log = self.log
        saturated = self.saturated
        round_robin = self.dispatch == "round_robin"

        s_in = self.samples.l_in.tolist()
        s_out = self.samples.l_out.tolist()
        n_samples = len(s_in)
        ss = np.random.SeedSequence(self.seed)
        rng_gap, rng_len, rng_disp = (np.random.default_rng(s) for s in ss.spawn(3))
        block = 4096

        # per request (index = request id)
        r_arr: list[float] = []
        r_in: list[int] = []
        r_out: list[int] = []
        r_p: list[int] = []
        r_d: list[int] = []
        r_adm: list[float] = []
        r_pstart: list[float] = []
        r_first: list[float] = []
        r_join: list[float] = []
        r_done: list[float] = []
        r_iters: list[int] = []  # decode iterations done before the current join
        r_jit: list[int] = []  # instance iteration count at the current join

        decs = [_Decode() for _ in range(n_d)]
        pq: list[deque[int]] = [deque() for _ in range(n_p)]  # admitted, waiting for prefill
        p_busy = [-1] * n_p
        p_area_busy = [0.0] * n_p
        p_area_q = [0.0] * n_p
        p_last = [0.0] * n_p

        heap: list[tuple[float, int, int, int, int]] = []
        seq = 0
        counters = {"arrived": 0, "admitted": 0, "completed": 0, "retractions": 0}
        peak = 0
        events = 0

        # length and dispatch draws, in blocks
        len_buf: list[int] = []
        disp_buf: list[tuple[int, int]] = []

        def draw_index() -> int:
            # successive random permutations of the samples: without replacement, so any
            # n_samples consecutive requests have exactly the samples' length mix
            if n_samples == 1:
                return 0
            if not len_buf:
                len_buf.extend(rng_len.permutation(n_samples).tolist())
            return len_buf.pop()

        def draw_dispatch() -> tuple[int, int]:
            if not disp_buf:
                ps = rng_disp.integers(0, n_p, block).tolist()
                ds = rng_disp.integers(0, n_d, block).tolist()
                disp_buf.extend(list(zip(ps, ds, strict=True))[::-1])
            return disp_buf.pop()

        def new_request(t: float, i: int, p: int, d: int) -> int:
            rid = len(r_in)
            r_arr.append(t)
            r_in.append(s_in[i])
            r_out.append(s_out[i])
            r_p.append(p)
            r_d.append(d)
            r_adm.append(math.nan)
            r_pstart.append(math.nan)
            r_first.append(math.nan)
            r_join.append(math.nan)
            r_done.append(math.nan)
            r_iters.append(0)
            r_jit.append(0)
            return rid

        def touch(dec: _Decode, t: float) -> None:
            dt = t - dec.t_last
            if dt > 0:
                dec.area_pre += dec.prealloc * dt
                dec.area_q += (len(dec.queue) + len(dec.retracted)) * dt
                dec.area_infl += dec.inflight * dt
                dec.t_last = t

        def p_touch(p: int, t: float) -> None:
            dt = t - p_last[p]
            if dt > 0:
                if p_busy[p] >= 0:
                    p_area_busy[p] += dt
                p_area_q[p] += len(pq[p]) * dt
                p_last[p] = t

        def push(t: float, kind: int, idx: int, ver: int) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(heap, (t, seq, kind, idx, ver))

        def start_prefill(p: int, t: float) -> None:
            rid = pq[p].popleft()
            p_busy[p] = rid
            r_pstart[rid] = t
            if log is not None:
                log.append(("prefill", t, rid, p))
            li = r_in[rid]
            push(t + (a_p * li + b_p * li * li), _PREFILL_DONE, p, 0)

        def admit(dec: _Decode, d: int, t: float) -> None:
            """FIFO admission at time t (retracted requests first)."""
            nonlocal peak
            while True:
                if dec.retracted:
                    rid = dec.retracted[0]
                    size = r_in[rid] + r_iters[rid]
                    resumed = True
                else:
                    if not dec.queue:
                        if not saturated:
                            return
                        k = d + dec.created * n_d
                        dec.created += 1
                        p = k % n_p if round_robin else draw_dispatch()[0]
                        dec.queue.append(new_request(0.0, draw_index(), p, d))
                        counters["arrived"] += 1
                    rid = dec.queue[0]
                    size = r_in[rid]
                    resumed = False
                # R per request in flight (and at least the next iteration's slots, R = 0)
                need = dec.kv + dec.prealloc + size + max(res * (dec.inflight + 1), dec.n + 1)
                if need > usable:
                    if log is not None:
                        log.append(("refuse", t, rid, d, dec.kv, dec.prealloc, dec.inflight, size))
                    return
                if log is not None:
                    log.append(("admit", t, rid, d, dec.kv, dec.prealloc, dec.inflight, size))
                touch(dec, t)
                dec.inflight += 1
                if resumed:
                    dec.retracted.popleft()
                    # resumes straight into the batch: the caller is at a boundary
                    dec.n += 1
                    dec.kv += size
                    r_jit[rid] = dec.it
                    heapq.heappush(dec.fin, (dec.it + r_out[rid] - 1 - r_iters[rid], rid))
                else:
                    dec.queue.popleft()
                    counters["admitted"] += 1
                    dec.prealloc += size
                    r_adm[rid] = t
                    p = r_p[rid]
                    p_touch(p, t)
                    pq[p].append(rid)
                    if p_busy[p] < 0:
                        start_prefill(p, t)
                alloc = dec.kv + dec.prealloc
                if alloc > peak:
                    peak = alloc

        def truncate(dec: _Decode, d: int, t: float) -> None:
            """End the running step at the first iteration boundary after t."""
            m = _iterations_done(dec.a1, dec.cn, t - dec.t0, dec.k) + 1
            if m < dec.k:
                dec.k = m
                dec.ver += 1
                push(dec.t0 + _step_time(dec.a1, dec.cn, m), _STEP_END, d, dec.ver)

        def boundary(dec: _Decode, d: int, t: float) -> None:
            """The decode scheduler at an iteration boundary (or an idle instance)."""
            nonlocal peak
            if dec.busy:
                k, n = dec.k, dec.n
                top = dec.kv0 + k * n + dec.pre0
                if top > peak:
                    peak = top
                if log is not None:
                    log.append(("step_end", t, d, k))
                t_step = _step_time(dec.a1, dec.cn, k)
                dec.area_busy += t_step
                dec.area_n += n * t_step
                dec.area_kv += _kv_area(dec.a1, dec.cn, n, dec.kv0, k)
                dec.iters += k
                dec.tokens += k * n
                dec.ctx_sum += k * dec.kv0 + n * (k * (k + 1) // 2)
                dec.it += k
                dec.kv = dec.kv0 + k * n
                dec.busy = False
            touch(dec, t)
            fin = dec.fin
            it = dec.it
            while fin and fin[0][0] <= it:
                _, rid = heapq.heappop(fin)
                dec.n -= 1
                dec.kv -= r_in[rid] + r_out[rid] - 1
                dec.inflight -= 1
                complete(rid, t)
            if dec.joins:
                for rid in dec.joins:
                    li = r_in[rid]
                    dec.prealloc -= li
                    dec.kv += li
                    dec.n += 1
                    r_jit[rid] = it
                    r_join[rid] = t
                    heapq.heappush(fin, (it + r_out[rid] - 1, rid))
                    if log is not None:
                        log.append(("join", t, rid, d))
                dec.joins.clear()
            if dec.n and dec.kv + dec.n + dec.prealloc > usable:
                retract(dec, d, t)
            admit(dec, d, t)
            n = dec.n
            if n:
                kv0 = dec.kv
                room = (usable - dec.prealloc - kv0) // n
                k = min(fin[0][0] - it, room)
                a1 = w_s + t_req * n + c_kv * kv0
                cn = c_kv * n
                dec.busy = True
                dec.t0, dec.kv0, dec.a1, dec.cn, dec.k = t, kv0, a1, cn, k
                dec.pre0 = dec.prealloc
                dec.ver += 1
                if log is not None:
                    log.append(("step", t, d, n, kv0, k, dec.prealloc))
                push(t + _step_time(a1, cn, k), _STEP_END, d, dec.ver)

        def retract(dec: _Decode, d: int, t: float) -> None:
            it = dec.it
            while dec.n and dec.kv + dec.n + dec.prealloc > usable:
                victim = max(
                    dec.fin,
                    key=lambda e: (-(r_iters[e[1]] + it - r_jit[e[1]]), r_in[e[1]], e[1]),
                )
                dec.fin.remove(victim)
                heapq.heapify(dec.fin)
                rid = victim[1]
                r_iters[rid] += it - r_jit[rid]
                dec.n -= 1
                dec.kv -= r_in[rid] + r_iters[rid]
                dec.inflight -= 1
                dec.retracted.append(rid)
                counters["retractions"] += 1
                if log is not None:
                    log.append(("retract", t, rid, d))

        # window bookkeeping
        sat_warm = (
            max(1, round(self.requests * self.warmup_fraction / (1.0 - self.warmup_fraction)))
            if self.warmup_fraction > 0
            else 0
        )
        snaps: list[dict[str, Any]] = []
        t_w = self.horizon * self.warmup_fraction if not saturated else math.nan
        window_left = 0  # window requests not yet completed (open loop)
        stop = False

        def snapshot(t: float) -> None:
            s = {"t": t, **counters, "n": 0.0, "kv": 0.0, "pre": 0.0, "q": 0.0, "infl": 0.0}
            s.update({"dbusy": 0.0, "iters": 0, "tokens": 0, "ctx": 0})
            for dec in decs:
                touch(dec, t)
                s["pre"] += dec.area_pre
                s["q"] += dec.area_q
                s["infl"] += dec.area_infl
                an, akv = dec.area_n, dec.area_kv
                s["dbusy"] += dec.area_busy
                s["iters"] += dec.iters
                s["tokens"] += dec.tokens
                s["ctx"] += dec.ctx_sum
                if dec.busy:
                    dt = t - dec.t0
                    j = _iterations_done(dec.a1, dec.cn, dt, dec.k)
                    s["dbusy"] += dt
                    s["iters"] += j
                    s["tokens"] += j * dec.n
                    s["ctx"] += j * dec.kv0 + dec.n * (j * (j + 1) // 2)
                    an += dec.n * dt
                    akv += _kv_area(dec.a1, dec.cn, dec.n, dec.kv0, j)
                    akv += (dt - _step_time(dec.a1, dec.cn, j)) * (dec.kv0 + (j + 1) * dec.n)
                s["n"] += an
                s["kv"] += akv
            for p in range(n_p):
                p_touch(p, t)
            s["busy"] = sum(p_area_busy)
            s["pq"] = sum(p_area_q)
            s["backlog"] = counters["arrived"] - counters["completed"]
            snaps.append(s)

        def complete(rid: int, t: float) -> None:
            nonlocal window_left, stop
            r_done[rid] = t
            counters["completed"] += 1
            if log is not None:
                log.append(("done", t, rid, r_d[rid]))
            if saturated:
                done = counters["completed"]
                if done == sat_warm:
                    snapshot(t)
                if done == sat_warm + self.requests:
                    snapshot(t)
                    stop = True
            elif t_w <= r_arr[rid] <= self.horizon:
                window_left -= 1

        # ---- initial events
        arrivals = self.arrivals
        gaps: list[float] = []
        next_arrival_index = 0
        if saturated:
            if sat_warm == 0:
                snapshot(0.0)
            for d, dec in enumerate(decs):
                boundary(dec, d, 0.0)
        else:
            push(t_w, _MARK, 0, 0)
            # just after the horizon, so that arrivals at the horizon are inside the window
            push(math.nextafter(self.horizon, math.inf), _MARK, 1, 0)
            if arrivals is not None:
                push(arrivals[0], _ARRIVAL, 0, 0)
            else:
                gaps = rng_gap.exponential(1.0 / self.rate, block).tolist()[::-1]
                t_first_arrival = gaps.pop()
                if not self.drain or t_first_arrival <= self.horizon:
                    push(t_first_arrival, _ARRIVAL, 0, 0)
        t_cap = self.horizon * 2.0 if math.isfinite(self.horizon) else math.inf
        if arrivals is not None:
            t_cap = math.inf

        t = 0.0
        heappop = heapq.heappop
        while heap and not stop:
            t, _, kind, idx, ver = heappop(heap)
            events += 1
            if kind == _STEP_END:
                dec = decs[idx]
                if ver != dec.ver or not dec.busy:
                    continue
                boundary(dec, idx, t)
            elif kind == _PREFILL_DONE:
                p = idx
                p_touch(p, t)
                rid = p_busy[p]
                p_busy[p] = -1
                r_first[rid] = t
                if pq[p]:
                    start_prefill(p, t)
                d = r_d[rid]
                dec = decs[d]
                if r_out[rid] == 1:
                    touch(dec, t)
                    dec.prealloc -= r_in[rid]
                    dec.inflight -= 1
                    complete(rid, t)
                    if dec.busy:
                        if dec.queue or dec.retracted or saturated:
                            truncate(dec, d, t)
                    else:
                        boundary(dec, d, t)
                else:
                    dec.joins.append(rid)
                    if dec.busy:
                        truncate(dec, d, t)
                    else:
                        boundary(dec, d, t)
            elif kind == _ARRIVAL:
                if arrivals is not None:
                    i = next_arrival_index
                    next_arrival_index += 1
                    if next_arrival_index < len(arrivals):
                        push(arrivals[next_arrival_index], _ARRIVAL, 0, 0)
                else:
                    i = draw_index()
                    if not gaps:
                        gaps = rng_gap.exponential(1.0 / self.rate, block).tolist()[::-1]
                    t_next = t + gaps.pop()
                    if not self.drain or t_next <= self.horizon:
                        push(t_next, _ARRIVAL, 0, 0)
                k = counters["arrived"]
                if round_robin:
                    p, d = k % n_p, k % n_d
                else:
                    p, d = draw_dispatch()
                rid = new_request(t, i, p, d)
                counters["arrived"] += 1
                if t_w <= t <= self.horizon:
                    window_left += 1
                dec = decs[d]
                touch(dec, t)
                dec.queue.append(rid)
                if dec.busy:
                    if len(dec.queue) == 1 and not dec.retracted:
                        truncate(dec, d, t)
                else:
                    boundary(dec, d, t)
            else:  # _MARK: window start (0) or end (1)
                snapshot(t)
                if idx == 1 and not self.drain and not self.tail:
                    stop = True
            if (
                not saturated
                and not self.drain
                and t >= self.horizon
                and (window_left == 0 or t >= t_cap)
                and len(snaps) >= 2
            ):
                stop = True
        if len(snaps) < 2:  # pragma: no cover (the loop always reaches the window's end)
            raise RuntimeError("the run ended before its measurement window")
        return self._result(
            snaps,
            t,
            peak,
            events,
            counters,
            (r_arr, r_in, r_out, r_adm, r_pstart, r_first, r_join, r_done),
        )

    def _result(
        self,
        snaps: list[dict[str, Any]],
        t_end: float,
        peak: int,
        events: int,
        totals: Mapping[str, int],
        req: tuple[list[Any], ...],
    ) -> SimResult:
        a, b = snaps[0], snaps[1]
        window = b["t"] - a["t"]
        r_arr, r_in, r_out, r_adm, r_pstart, r_first, r_join, r_done = (np.asarray(x) for x in req)
        n_d, n_p = self.n_d, self.n_p
        pool = float(self.tm.kv_pool_tokens)
        if self.saturated:
            sel = (r_done > a["t"]) & (r_done <= b["t"])
        else:
            sel = (r_arr >= a["t"]) & (r_arr <= b["t"])
        done = sel & np.isfinite(r_done)
        ttft = (r_first - r_arr)[done]
        multi = done & (r_out > 1)
        tpot = ((r_done - r_first) / np.maximum(r_out - 1, 1))[multi]
        joined = done & np.isfinite(r_join)

        def avg(key: str, per: float) -> float:
            return (b[key] - a[key]) / window / per if window > 0 else math.nan

        def mean_or_nan(x: NDArray[Any]) -> float:
            return float(x.mean()) if x.size else math.nan

        area_n = b["n"] - a["n"]
        iters = b["iters"] - a["iters"]
        tokens = b["tokens"] - a["tokens"]
        completed = b["completed"] - a["completed"]
        arrived = int(b["arrived"] - a["arrived"]) if not self.saturated else int(completed)
        return SimResult(
            n_p=n_p,
            n_d=n_d,
            rate_rps=float(self.rate) if not self.saturated else math.inf,
            seed=self.seed,
            dispatch=self.dispatch,
            window_start_s=float(a["t"]),
            window_end_s=float(b["t"]),
            arrived=arrived,
            admitted=int(b["admitted"] - a["admitted"]),
            completed=int(completed),
            throughput_rps=completed / window if window > 0 else math.nan,
            backlog_start=int(a["backlog"]),
            backlog_end=int(b["backlog"]),
            ttft_s=ttft.astype(float),
            tpot_s=tpot.astype(float),
            completion_times_s=np.sort(r_done[(r_done > a["t"]) & (r_done <= b["t"])]),
            incomplete=int((sel & ~np.isfinite(r_done)).sum()) if not self.saturated else 0,
            mean_batch=avg("n", n_d),
            mean_active_ctx_tokens=(b["kv"] - a["kv"]) / area_n if area_n > 0 else math.nan,
            iteration_mean_batch=tokens / iters if iters else math.nan,
            iteration_mean_ctx_tokens=(b["ctx"] - a["ctx"]) / tokens if tokens else math.nan,
            iteration_mean_s=(b["dbusy"] - a["dbusy"]) / iters if iters else math.nan,
            decode_busy_frac=avg("dbusy", n_d),
            kv_active_frac=avg("kv", n_d * pool),
            kv_prefill_frac=avg("pre", n_d * pool),
            kv_free_frac=1.0 - avg("kv", n_d * pool) - avg("pre", n_d * pool),
            kv_headroom_frac=avg("infl", n_d * pool) * self.tm.reserved_tokens,
            kv_peak_tokens=int(peak),
            admission_queue_mean=None if self.saturated else avg("q", n_d),
            prefill_queue_mean=avg("pq", n_p),
            prefill_utilisation=avg("busy", n_p),
            admission_wait_s=mean_or_nan((r_adm - r_arr)[done]) if not self.saturated else math.nan,
            prefill_wait_s=mean_or_nan((r_pstart - r_adm)[done]),
            join_wait_s=mean_or_nan((r_join - r_first)[joined]),
            retractions=int(totals["retractions"]),
            total_arrived=int(totals["arrived"]),
            total_admitted=int(totals["admitted"]),
            total_completed=int(totals["completed"]),
            end_s=float(t_end),
            events=events,
            log=self.log,
        )


# --------------------------------------------------------------------------------------
# Capacity search


@dataclass(frozen=True)
class CapacityEstimate:
    """Result of :func:`find_capacity` (rates in req/s)."""

    n_p: int
    n_d: int
    capacity_rps: float
    ci95_rps: float  # half-width of the 95% confidence interval
    seeds: int
    requests: int  # measured completions per seed
    runs: tuple[SimResult, ...]  # the saturated runs, one per seed
    check_margin: float | None = None
    lower: tuple[SimResult, ...] = ()  # open-loop runs at (1 - margin) * capacity
    upper: tuple[SimResult, ...] = ()  # open-loop runs at (1 + margin) * capacity

    @property
    def lower_stable(self) -> bool | None:
        return _pooled_stable(self.lower) if self.lower else None

    @property
    def upper_stable(self) -> bool | None:
        return _pooled_stable(self.upper) if self.upper else None

    @property
    def check_passed(self) -> bool | None:
        """True when stable at the lower rate and unstable at the upper one."""
        if not self.lower or not self.upper:
            return None
        return bool(self.lower_stable) and not self.upper_stable


def _pooled_stable(runs: Sequence[SimResult]) -> bool:
    arrived = sum(r.arrived for r in runs)
    completed = sum(r.completed for r in runs)
    return completed >= STABLE_SHARE * arrived


def _t975(dof: int) -> float:
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.975, dof))


def find_capacity(
    timing: SimTiming,
    samples: Samples,
    n_p: int,
    n_d: int,
    *,
    seeds: int = 3,
    requests: int | None = None,
    warmup_fraction: float = 0.25,
    dispatch: str = "round_robin",
    check_margin: float | None = 0.05,
    check_requests: int | None = None,
    check_duration_s: float | None = None,
    first_seed: int = 0,
) -> CapacityEstimate:
    """Largest stable arrival rate of ``(n_p, n_d)``: the saturated throughput, checked.

    See the module docstring for the criterion and its confidence. ``seeds`` runs
    (seeds ``first_seed ...``), each measuring ``requests`` completions (default
    :func:`default_requests`) after ``requests * warmup_fraction / (1 -
    warmup_fraction)`` warm-up completions. A saturated run of one fixed request
    length with round-robin dispatch has no randomness, so it is run once whatever
    ``seeds`` says. ``check_margin=None`` skips the open-loop check; its runs measure
    ``check_requests`` arrivals per seed (default ``max(4000, requests // 2)``) or
    last ``check_duration_s``.
    """
    if seeds < 1:
        raise InputError("seeds", "must be >= 1")
    n_req = requests or default_requests(samples)
    deterministic = len(samples) == 1 and dispatch == "round_robin"
    runs = tuple(
        simulate(
            timing,
            samples,
            n_p,
            n_d,
            math.inf,
            requests=n_req,
            warmup_fraction=warmup_fraction,
            seed=first_seed + s,
            dispatch=dispatch,
        )
        for s in range(1 if deterministic else seeds)
    )
    capacity = sum(r.completed for r in runs) / sum(r.window_s for r in runs)
    ci = _batch_means_ci(runs)
    est = CapacityEstimate(n_p, n_d, capacity, ci, len(runs), n_req, runs)
    logger.debug("saturated throughput of %dP%dD: %.4g +- %.2g req/s", n_p, n_d, capacity, ci)
    if check_margin is None:
        return est
    return _check(
        est,
        timing,
        samples,
        dispatch,
        check_margin,
        check_requests or max(4000, n_req // 2),
        check_duration_s,
        seeds,
        first_seed,
    )


def _check(
    est: CapacityEstimate,
    timing: SimTiming,
    samples: Samples,
    dispatch: str,
    margin: float,
    requests: int,
    duration_s: float | None,
    seeds: int,
    first_seed: int,
) -> CapacityEstimate:
    """The open-loop check of :func:`find_capacity` (Poisson arrivals, ``seeds`` seeds)."""
    if not (0 < margin < 1):
        raise InputError("check_margin", "must be in (0, 1)")

    def open_loop(rate: float, tail: bool) -> tuple[SimResult, ...]:
        return tuple(
            simulate(
                timing,
                samples,
                est.n_p,
                est.n_d,
                rate,
                requests=requests,
                duration_s=duration_s,
                warmup_fraction=0.5,
                seed=first_seed + s,
                dispatch=dispatch,
                tail=tail,
            )
            for s in range(seeds)
        )

    lower = open_loop((1.0 - margin) * est.capacity_rps, tail=True)
    upper = open_loop((1.0 + margin) * est.capacity_rps, tail=False)
    return replace(est, check_margin=margin, lower=lower, upper=upper)


def _batch_means_ci(runs: Sequence[SimResult], batches: int = 10) -> float:
    """95% half-width of the throughput by batch means: each run's window is cut into
    ``batches`` runs of equal completion count; Student t over all batches."""
    rates: list[float] = []
    for r in runs:
        times = np.concatenate([[r.window_start_s], r.completion_times_s])
        if times.size <= batches:
            continue
        cuts = np.linspace(0, times.size - 1, batches + 1).round().astype(int)
        counts = np.diff(cuts)
        spans = np.diff(times[cuts])
        ok = spans > 0
        rates.extend((counts[ok] / spans[ok]).tolist())
    if len(rates) < 2:
        return math.nan
    sd = float(np.std(rates, ddof=1))
    return _t975(len(rates) - 1) * sd / math.sqrt(len(rates))


def default_requests(samples: Samples) -> int:
    """Measured requests per seed for a capacity search: twice the samples (so that the
    window holds their length mix twice over), at least 10,000 (fixed lengths make
    cohorts whose batch oscillates) and at most 40,000."""
    return int(min(40_000, max(10_000, 2 * len(samples))))


# --------------------------------------------------------------------------------------
# JSON-able reports (the CLI and the service print these)


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(vals)) if vals else None


def _latency(runs: Sequence[SimResult]) -> dict[str, Any]:
    ttft = np.concatenate([r.ttft_s for r in runs]) if runs else np.zeros(0)
    tpot = np.concatenate([r.tpot_s for r in runs]) if runs else np.zeros(0)
    return {"ttft_s": percentiles(ttft), "tpot_s": percentiles(tpot)}


def _run_stats(runs: Sequence[SimResult]) -> dict[str, Any]:
    """Statistics of runs at one rate, averaged over seeds (latencies pooled)."""
    arrived = sum(r.arrived for r in runs)
    completed = sum(r.completed for r in runs)
    window = sum(r.window_s for r in runs)
    out: dict[str, Any] = {
        "throughput_rps": _num(completed / window) if window > 0 else None,
        **_latency(runs),
        "mean_batch": _mean(r.mean_batch for r in runs),
        "mean_active_ctx_tokens": _mean(r.mean_active_ctx_tokens for r in runs),
        "kv_pool": {
            "active_frac": _mean(r.kv_active_frac for r in runs),
            "prefill_reserved_frac": _mean(r.kv_prefill_frac for r in runs),
            "free_frac": _mean(r.kv_free_frac for r in runs),
            "headroom_frac": _mean(r.kv_headroom_frac for r in runs),
            "peak_tokens": max(r.kv_peak_tokens for r in runs),
        },
        "queues": {
            "admission_mean": _mean(r.admission_queue_mean for r in runs),
            "prefill_mean": _mean(r.prefill_queue_mean for r in runs),
        },
        "prefill_utilisation": _mean(r.prefill_utilisation for r in runs),
        "waits_s": {
            "admission": _mean(r.admission_wait_s for r in runs),
            "prefill": _mean(r.prefill_wait_s for r in runs),
            "join": _mean(r.join_wait_s for r in runs),
        },
        "retractions": sum(r.retractions for r in runs),
        "requests_measured": int(arrived),
        "incomplete": sum(r.incomplete for r in runs),
        "completed_share": _num(completed / arrived) if arrived else None,
        "stable": _pooled_stable(runs),
    }
    return out


def _context(spec: DeploymentSpec, samples: Samples, timing: SimTiming) -> dict[str, Any]:
    cal = spec.calibration
    return {
        "model": spec.model.name,
        "gpu": spec.gpu.name,
        "workload": spec.workload.name,
        "samples": {"name": samples.name, "count": len(samples), "source": samples.source},
        "calibration": {"measured": bool(cal.measured), "source": cal.source},
        "performance": spec.performance,
        "kv_pool_tokens": int(timing.kv_pool_tokens),
        "dispatch": spec.serving.dispatch,
    }


def simulate_report(
    spec: DeploymentSpec,
    samples: Samples,
    n_p: int,
    n_d: int,
    rate_rps: float | None,
    *,
    seeds: int = 3,
    first_seed: int = 0,
    requests: int = 4000,
    duration_s: float | None = None,
    replay: bool = False,
) -> dict[str, Any]:
    """``pdwatt simulate --rate``: statistics at one offered rate, over ``seeds`` seeds.

    With ``replay`` the trace's own arrival times are used (rescaled to ``rate_rps``
    if given) and every request is measured (no warm-up).
    """
    if seeds < 1:
        raise InputError("seeds", "must be >= 1")
    if rate_rps is not None and not (math.isfinite(rate_rps) and rate_rps > 0):
        raise InputError("rate", "must be finite and > 0")
    timing = SimTiming.of(spec)
    runs = [
        simulate(
            timing,
            samples,
            n_p,
            n_d,
            rate_rps,
            requests=requests,
            duration_s=duration_s,
            warmup_fraction=0.0 if replay else 0.5,
            seed=first_seed + s,
            dispatch=spec.serving.dispatch,
            replay=replay,
        )
        for s in range(1 if replay else seeds)
    ]
    out = _context(spec, samples, timing)
    out.update(
        {
            "n_p": int(n_p),
            "n_d": int(n_d),
            "mode": "replay" if replay else "rate",
            "rate_rps": _num(rate_rps) if not replay else _num(runs[0].arrived / runs[0].window_s),
            "seeds": len(runs),
            "duration_s": _num(runs[0].window_end_s),
            "window_s": [_num(runs[0].window_start_s), _num(runs[0].window_end_s)],
            "stability_criterion": f"completions >= {STABLE_SHARE:g} x arrivals over the window",
        }
    )
    out.update(_run_stats(runs))
    return out


def capacity_search_report(
    spec: DeploymentSpec,
    samples: Samples,
    n_p: int,
    n_d: int,
    *,
    seeds: int = 3,
    first_seed: int = 0,
    requests: int | None = None,
    check_margin: float | None = 0.05,
    check_duration_s: float | None = None,
) -> dict[str, Any]:
    """``pdwatt simulate --find-capacity``: the simulated capacity with its confidence,
    the open-loop check and the latency at the check's lower rate."""
    timing = SimTiming.of(spec)
    n_req = requests or default_requests(samples)
    est = find_capacity(
        timing,
        samples,
        n_p,
        n_d,
        seeds=seeds,
        requests=n_req,
        dispatch=spec.serving.dispatch,
        check_margin=check_margin,
        check_duration_s=check_duration_s,
        first_seed=first_seed,
    )
    out = _context(spec, samples, timing)
    out.update(
        {
            "n_p": int(n_p),
            "n_d": int(n_d),
            "mode": "find_capacity",
            "capacity_rps": _num(est.capacity_rps),
            "capacity_ci95_rps": _num(est.ci95_rps),
            "seeds": est.seeds,
            "requests_per_seed": n_req,
            "per_seed_rps": [_num(r.throughput_rps) for r in est.runs],
            "criterion": (
                "capacity = saturated throughput (every decode queue unbounded), measured over "
                f"{n_req} completions per seed after "
                f"{round(n_req / 3)} warm-up completions; 95% CI by batch means; "
                f"checked open-loop: stable means completions >= {STABLE_SHARE:g} x arrivals "
                "over the second half of the horizon"
            ),
            "at_capacity": {
                k: v
                for k, v in _run_stats(est.runs).items()
                if k in ("mean_batch", "mean_active_ctx_tokens", "kv_pool", "prefill_utilisation")
            },
        }
    )
    if est.check_margin is not None:
        lower_rps = (1.0 - est.check_margin) * est.capacity_rps
        out["check"] = {
            "margin": est.check_margin,
            "lower_rps": _num(lower_rps),
            "lower_stable": est.lower_stable,
            "lower_completed_share": _run_stats(est.lower)["completed_share"],
            "upper_rps": _num((1.0 + est.check_margin) * est.capacity_rps),
            "upper_stable": est.upper_stable,
            "upper_completed_share": _run_stats(est.upper)["completed_share"],
            "passed": est.check_passed,
        }
        out["latency_at_rps"] = _num(lower_rps)
        out.update(_latency(est.lower))
    return out


def simulated_slo(
    timing: SimTiming,
    samples: Samples,
    n_p: int,
    n_d: int,
    load_rps: float,
    targets: tuple[float | None, float | None],
    *,
    seeds: int = 2,
    requests: int = 4000,
    dispatch: str = "round_robin",
) -> dict[str, Any]:
    """Whether ``(n_p, n_d)`` meets p99 latency ``targets`` (TTFT, TPOT; None: no
    target) when simulated with Poisson arrivals at ``load_rps``: stable (completions
    >= 98% of arrivals) and its p99s (pooled over ``seeds`` seeds) within them."""
    from model.pareto import within_targets

    runs = [
        simulate(timing, samples, n_p, n_d, load_rps, requests=requests, seed=s, dispatch=dispatch)
        for s in range(seeds)
    ]
    lat = _latency(runs)
    ttft, tpot = lat["ttft_s"]["p99"], lat["tpot_s"]["p99"]
    stable = _pooled_stable(runs)
    return {
        "simulated": True,
        "load_rps": float(load_rps),
        "ttft_p99_s": ttft,
        "tpot_p99_s": tpot,
        "stable": stable,
        "meets": stable and within_targets((ttft, tpot), targets),
    }


def simulated_slo_check(
    cfg: Mapping[str, Any],
    timing: SimTiming,
    samples: Samples,
    targets: tuple[float | None, float | None],
    at_load: float,
    *,
    seeds: int = 2,
    requests: int = 4000,
    dispatch: str = "round_robin",
) -> dict[str, Any]:
    """:func:`simulated_slo` for one configuration of a front report, at ``at_load``
    times its capacity (a module-level function, so that a process pool can run it)."""
    return simulated_slo(
        timing,
        samples,
        int(cfg["n_p"]),
        int(cfg["n_d"]),
        at_load * float(cfg["capacity_rps"]),
        targets,
        seeds=seeds,
        requests=requests,
        dispatch=dispatch,
    )


def slo_front(
    report: Mapping[str, Any],
    timing: SimTiming,
    samples: Samples,
    *,
    ttft_p99_s: float | None,
    tpot_p99_s: float | None,
    at_load: float,
    seeds: int = 2,
    requests: int = 4000,
    dispatch: str = "round_robin",
    map_checks: CheckMap = map,
) -> dict[str, Any]:
    """A front report (``pdwatt front``) restricted to configurations meeting latency SLOs.

    A configuration meets the SLOs when, simulated with Poisson arrivals at
    ``at_load`` times its capacity in the report, it is stable (completions >= 98% of
    arrivals) and its p99 TTFT and p99 TPOT (pooled over ``seeds`` seeds, requests of
    the measurement window) are within the targets given. The new front is the
    capacity-power front of the configurations that meet them. Only configurations
    that reach the front of the remaining candidates are simulated: a candidate
    dominated by one that meets the SLOs can never be on the new front, so the result
    is the same as filtering every configuration first. The selections
    (``min_power_for_rate``, ``max_capacity_under_budget``) are redone on the new front.
    ``map_checks`` runs each round's simulations (:func:`model.pareto.restrict_front`).
    """
    from model.pareto import check_slo_targets, restrict_front

    check_slo_targets(ttft_p99_s, tpot_p99_s, at_load)
    check = functools.partial(
        simulated_slo_check,
        timing=timing,
        samples=samples,
        targets=(ttft_p99_s, tpot_p99_s),
        at_load=at_load,
        seeds=seeds,
        requests=requests,
        dispatch=dispatch,
    )

    out, checked = restrict_front(dict(report), check, map_checks)
    verdict = [c["slo"] for c in out["configs"] if c["slo"]["checked"]]
    failing = sum(1 for v in verdict if not v["meets"])
    out["slo"] = {
        "ttft_p99_s": ttft_p99_s,
        "tpot_p99_s": tpot_p99_s,
        "at_load": at_load,
        "seeds": seeds,
        "requests_per_seed": requests,
        "simulated": checked,
        "meeting": checked - failing,
        "failing": failing,
        "rule": (
            "simulated at at_load x capacity with Poisson arrivals; meets = stable "
            f"(completions >= {STABLE_SHARE:g} x arrivals) and p99 within the targets; "
            "configurations never simulated are dominated by ones that meet the targets"
        ),
    }
    return out
